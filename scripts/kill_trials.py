#!/usr/bin/env python
"""Kill a replica of a real 2-worker MultiWorkerMirroredStrategy job at random steps; check that it survives.

    python scripts/kill_trials.py --trials 5 [--steps 40] [--every-steps 5] [--seed 0]
                                  [--signal KILL|TERM] [--target chief|worker|random]

1. Makes a small prepared data set once (3 classes x 40 images, 32x32, 4 TFRecord shards; the tests' set).
2. Runs one uninterrupted reference job (chief + 1 worker on 127.0.0.1, ``training.deterministic=true``).
3. Each trial runs the same job with restarts allowed, and when the chosen replica prints ``step K/`` (K
   random in 1..steps-1) sends it the signal. The launcher restarts the whole job, which resumes from the
   last complete checkpoint. The final checkpoint (model, optimizer, step) and the exported SavedModel are
   then compared BITWISE with the reference's (every variable but ``save_counter``).

Per trial it prints: the replica killed, the kill step (the last step the job completed before the signal
took effect, read from the replicas' logs; the step whose log line triggered the signal in brackets), the
step the restart resumed from, the steps redone (kill step - resumed step), bitwise equal yes/no, and the
wall time. Then a summary: how many trials survived (completed AND bitwise equal), the most steps redone and
the mean wall time. Exit status: 0 when every trial survived, 1 otherwise, 130 on Ctrl-C.

Bounded and clean: every job runs under ``--trial-timeout``; the launcher kills and reaps every process it
started when a job ends, fails, times out or is interrupted (Ctrl-C, SIGTERM, SIGHUP), and any process
still carrying this run's work folder in its environment afterwards is SIGKILLed by pid.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobs.local.faults import KillOnLine, attempt_lines, checkpoint_variables, kill_leftovers  # noqa: E402

# Replicas must import this repository even without `pip install -e`.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEP_RE = re.compile(r"^\[(chief|worker)-0\] step (\d+)/\d+ ")
POOLS = {"chief": "workerpool0", "worker": "workerpool1"}


def trigger(marker: str, target: str, step: int, sig: int, verbose: bool) -> KillOnLine:
    """Launcher log callback: signals ``target``'s replica when it prints ``step K/``; keeps every line."""
    echo = (lambda line: print(f"    {line}", flush=True)) if verbose else None
    return KillOnLine(marker, POOLS[target], f"[{target}-0] step {step}/", sig, echo)


# -- comparison -----------------------------------------------------------------------------------------
def bitwise_equal(base: Path, reference: Path, steps: int) -> tuple[bool, str]:
    """Final checkpoint and exported SavedModel of ``base`` vs ``reference``: (equal, why not)."""
    import tensorflow as tf

    final = tf.train.latest_checkpoint(str(base / "checkpoints"))
    if not final or not final.endswith(f"ckpt-{steps}"):
        return False, f"final checkpoint is {final}"
    for got, want in ((final, str(reference / "checkpoints" / f"ckpt-{steps}")),
                      (str(base / "model" / "variables" / "variables"),
                       str(reference / "model" / "variables" / "variables"))):
        try:
            a, b = checkpoint_variables(got), checkpoint_variables(want)
        except Exception as exc:  # a missing or unreadable file is simply "not equal"
            return False, f"cannot read {got}: {type(exc).__name__}: {exc}"
        if sorted(a) != sorted(b) or not a:
            return False, f"different variables in {got}"
        differ = [n for n in a if a[n] != b[n]]
        if differ:
            return False, f"{len(differ)}/{len(a)} variables of {got} differ"
    return True, ""


# -- the run --------------------------------------------------------------------------------------------
def make_data(work: Path) -> str:
    from trainers import prepare

    out = work / "data" / "tfrecords"
    if not (out / "manifest.json").exists():
        images = str(work / "data" / "images")
        prepare.synthesize_image_folder(images, num_classes=3, images_per_class=40, image_size=32, seed=42)
        prepare.prepare_tfrecords(images, str(out), image_size=32, num_shards=4, validation_fraction=0.2, seed=42)
    return str(out)


def job(base: Path, data: str, args, max_restarts: int):
    from trainers import config as config_lib

    return config_lib.load("local", [
        f"output.base_dir={base}", "data.source=tfrecord", f"data.path={data}",
        f"training.steps={args.steps}", f"checkpoint.every_steps={args.every_steps}", "checkpoint.keep=3",
        "training.log_every_steps=1", "training.deterministic=true", f"scheduling.max_restarts={max_restarts}",
    ])


def run_trial(i: int, work: Path, data: str, reference: Path, args, rng: random.Random, sig: int) -> dict:
    from jobs import stages
    from jobs.local.launcher import JobFailed

    target = rng.choice(["chief", "worker"]) if args.target == "random" else args.target
    trigger_step = rng.randint(1, args.steps - 1)
    base = work / f"trial-{i}"
    shutil.rmtree(base, ignore_errors=True)
    trig = trigger(str(base), target, trigger_step, sig, args.verbose)
    t0 = time.monotonic()
    row = {"trial": i, "target": target, "trigger": trigger_step, "kill_step": None, "resumed": None,
           "redone": None, "restarts": 0, "ok": False, "equal": False, "note": ""}
    try:
        try:
            result = stages.run_local(job(base, data, args, args.max_restarts), log=trig,
                                    timeout_s=args.trial_timeout)
        except JobFailed as exc:
            result = exc.result
        row["restarts"] = len(result.restarts)
        row["ok"] = result.returncode == 0
        if not row["ok"]:
            row["note"] = result.message.splitlines()[0]
        if not trig.fired:
            row["note"] = (row["note"] + "; " if row["note"] else "") + "signal never sent"
        first = attempt_lines(trig.lines, 1)
        done = [int(m.group(2)) for m in map(STEP_RE.match, first) if m]
        row["kill_step"] = max(done) if done else 0
        if result.restarts:
            resumed = result.restarts[0].resumed_step
            row["resumed"] = 0 if resumed is None else resumed  # no "resumed from" line: started over
            row["redone"] = row["kill_step"] - row["resumed"]
        if row["ok"]:
            row["equal"], why = bitwise_equal(base, reference, args.steps)
            if why:
                row["note"] = why
    finally:
        row["wall"] = time.monotonic() - t0
        left = kill_leftovers(str(base))
        if left:
            row["note"] = (row["note"] + "; " if row["note"] else "") + f"killed leftover pids {left}"
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return row


HEADER = (f"{'trial':>5}  {'killed':<7} {'kill step':>14}  {'resumed':>7}  {'redone':>6}  {'restarts':>8}  "
          f"{'bitwise':>7}  {'wall s':>6}  note")


def fmt(row: dict) -> str:
    def val(v):
        return "-" if v is None else str(v)

    kill = f"{val(row['kill_step'])} (line {row['trigger']})"
    equal = "yes" if row["equal"] else "no"
    return (f"{row['trial']:>5}  {row['target']:<7} {kill:>14}  {val(row['resumed']):>7}  {val(row['redone']):>6}  "
            f"{row['restarts']:>8}  {equal:>7}  {row['wall']:>6.1f}  {row['note']}")


def summary(rows: list[dict], planned: int) -> str:
    survived = sum(1 for r in rows if r["ok"] and r["equal"])
    redone = [r["redone"] for r in rows if r["redone"] is not None]
    walls = [r["wall"] for r in rows]
    text = f"summary: {survived}/{len(rows)} trials survived (completed and bitwise equal)"
    if len(rows) != planned:
        text += f" ({planned} planned)"
    text += f"; max steps redone: {max(redone) if redone else '-'}"
    return text + f"; mean wall: {statistics.mean(walls):.1f} s per trial"


class _Stop(BaseException):
    pass


def _stop(signum, _frame):
    raise _Stop(signum)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every-steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--signal", choices=["KILL", "TERM"], default="KILL")
    p.add_argument("--target", choices=["chief", "worker", "random"], default="random")
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--trial-timeout", type=float, default=300.0, help="seconds per job, restarts included")
    p.add_argument("--workdir", help="where data, reference and trials go (default: a new temp dir, removed)")
    p.add_argument("--keep", action="store_true", help="keep every trial's output folder")
    p.add_argument("--verbose", action="store_true", help="print every replica log line")
    args = p.parse_args(argv)
    if args.trials < 1 or args.steps < 2 or args.every_steps < 0:
        p.error("need --trials >= 1, --steps >= 2, --every-steps >= 0")

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _stop)
    sig = signal.SIGKILL if args.signal == "KILL" else signal.SIGTERM
    own_work = args.workdir is None
    work = Path(tempfile.mkdtemp(prefix="kill-trials-") if own_work else args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    rows: list[dict] = []
    code = 0
    try:
        from jobs import stages

        print(f"work folder: {work}", flush=True)
        data = make_data(work)
        reference = work / "reference"
        if not (reference / "checkpoints" / f"ckpt-{args.steps}.index").exists():
            shutil.rmtree(reference, ignore_errors=True)
            t0 = time.monotonic()
            res = stages.run_local(job(reference, data, args, 0), log=(lambda line: print(f"    {line}", flush=True))
                                 if args.verbose else (lambda line: None), timeout_s=args.trial_timeout)
            print(f"reference: {args.steps} steps, 2 workers, uninterrupted, {time.monotonic() - t0:.1f} s "
                  f"(exit {res.returncode})", flush=True)
        kill_leftovers(str(reference))
        print(f"{args.trials} trials: SIG{args.signal} to {args.target} at a random step, checkpoint every "
              f"{args.every_steps} steps, up to {args.max_restarts} restarts, seed {args.seed}", flush=True)
        print(HEADER, flush=True)
        for i in range(1, args.trials + 1):
            row = run_trial(i, work, data, reference, args, rng, sig)
            rows.append(row)
            print(fmt(row), flush=True)
        code = 0 if all(r["ok"] and r["equal"] for r in rows) else 1
    except (KeyboardInterrupt, _Stop):
        print("interrupted: every process of this run stopped", file=sys.stderr, flush=True)
        code = 130
    finally:
        left = kill_leftovers(str(work), wait_s=2)
        if left:
            print(f"killed leftover processes {left}", file=sys.stderr, flush=True)
        if rows:
            print(summary(rows, args.trials), flush=True)
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
