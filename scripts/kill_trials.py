#!/usr/bin/env python
"""Kill a replica of a real multi-replica job at random steps; check that it survives.

    python scripts/kill_trials.py --trials 5 [--steps 40] [--every-steps 5] [--seed 0]
                                  [--signal KILL|TERM] [--target chief|worker|ps|random]
                                  [--strategy multi_worker|parameter_server] [--loss-band 0.15]

``--strategy multi_worker`` (default): chief + 1 worker under MultiWorkerMirroredStrategy, compared BITWISE.
``--strategy parameter_server``: the ``parameter-server`` preset scaled down (chief + 2 workers + 1 parameter
server + the evaluator). Asynchronous training is not bitwise reproducible, so a trial survives when the job
completes, the coordinator's step in the last checkpoint is ``--steps``, and the evaluator's final validation
loss is within ``--loss-band`` of the uninterrupted reference's; a killed worker must not restart the job (it
is tolerated), a killed chief or parameter server must cost at most one checkpoint interval. Only the chief
prints steps there, so the signal is sent when the CHIEF prints ``step K/`` (K a multiple of the log interval).

1. Makes a small prepared data set once (3 classes x 40 images, 32x32, 4 TFRecord shards; the tests' set).
2. Runs one uninterrupted reference job (multi_worker: chief + 1 worker on 127.0.0.1,
   ``training.deterministic=true``).
3. Each trial runs the same job with restarts allowed, and when the chosen replica prints ``step K/`` (K
   random in 1..steps-1) sends it the signal. The launcher restarts the whole job (parameter_server: not
   for a worker, which is tolerated), which resumes from the last complete checkpoint. multi_worker: the
   final checkpoint (model, optimizer, step) and the exported SavedModel are then compared BITWISE with the
   reference's (every variable but ``save_counter``); parameter_server: see above.

Per trial it prints: the replica killed, the kill step (the last step the job completed before the signal
took effect, read from the replicas' logs; the step whose log line triggered the signal in brackets), the
step the restart resumed from, the steps redone (kill step - resumed step), the restarts, the tolerated
worker deaths, the result (ok/no) and the wall time. Then a summary: how many trials survived (completed AND
bitwise equal, or within the loss band), the most steps redone and the mean wall time. Exit status: 0 when every trial survived, 1 otherwise, 130 on Ctrl-C.

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

from jobs.local.process.faults import KillOnLine, attempt_lines, checkpoint_variables, kill_leftovers  # noqa: E402

# Replicas must import this repository even without `pip install -e`.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEP_RE = re.compile(r"^\[(chief|worker)-0\] step (\d+)/\d+ ")
POOLS = {"chief": "workerpool0", "worker": "workerpool1", "ps": "workerpool2"}
TARGETS = {"multi_worker": ("chief", "worker"), "parameter_server": ("chief", "worker", "ps")}
PS_LOG_EVERY = 5  # parameter-server steps run in chunks up to each log line: 1 would make them synchronous


def trigger(marker: str, target: str, step: int, sig: int, verbose: bool, strategy: str) -> KillOnLine:
    """Launcher log callback: signals ``target``'s replica when it (under parameter_server: the chief, the only
    one that prints steps) prints ``step K/``; keeps every line."""
    echo = (lambda line: print(f"    {line}", flush=True)) if verbose else None
    who = target if strategy == "multi_worker" else "chief"
    return KillOnLine(marker, POOLS[target], f"[{who}-0] step {step}/", sig, echo)


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
    from jobfile import config as config_lib

    common = [f"output.base_dir={base}", "data.source=tfrecord", f"data.path={data}",
              f"training.steps={args.steps}", f"checkpoint.every_steps={args.every_steps}", "checkpoint.keep=3",
              f"scheduling.max_restarts={max_restarts}"]
    if args.strategy == "parameter_server":
        return config_lib.load("parameter-server", common + [
            "topology.worker.replica_count=2",
            "training.per_replica_batch_size=8", f"training.log_every_steps={PS_LOG_EVERY}"])
    return config_lib.load("local", common + ["training.log_every_steps=1", "training.deterministic=true"])


def within_band(base: Path, reference: Path, args, result) -> tuple[bool, str]:
    """parameter_server: final validation loss near the reference's, the coordinator's step complete, a killed
    worker tolerated (no restart), a restart costing at most one checkpoint interval."""
    import json

    import tensorflow as tf

    try:
        got, want = (json.loads((b / "evaluation.json").read_text()) for b in (base, reference))
        reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(base / "checkpoints")))
        step = int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
    except Exception as exc:  # missing or unreadable: simply "not within the band"
        return False, f"cannot read the result: {type(exc).__name__}: {exc}"
    if step != args.steps or not got.get("final"):
        return False, f"checkpoint step {step}, evaluation of step {got.get('step')}"
    if abs(got["loss"] - want["loss"]) > args.loss_band:
        return False, f"validation loss {got['loss']:.4f} vs reference {want['loss']:.4f}"
    return True, f"loss {got['loss']:.3f} (ref {want['loss']:.3f})"


def run_trial(i: int, work: Path, data: str, reference: Path, args, rng: random.Random, sig: int) -> dict:
    from jobs.steps import calls as steps
    from jobs.local.launch.outcome import JobFailed

    target = rng.choice(TARGETS[args.strategy]) if args.target == "random" else args.target
    trigger_step = rng.randint(1, args.steps - 1)
    if args.strategy == "parameter_server":  # the chief prints every PS_LOG_EVERY steps
        trigger_step = max(PS_LOG_EVERY, trigger_step // PS_LOG_EVERY * PS_LOG_EVERY)
    base = work / f"trial-{i}"
    shutil.rmtree(base, ignore_errors=True)
    trig = trigger(str(base), target, trigger_step, sig, args.verbose, args.strategy)
    t0 = time.monotonic()
    row = {"trial": i, "target": target, "trigger": trigger_step, "kill_step": None, "resumed": None,
           "redone": None, "restarts": 0, "tolerated": 0, "ok": False, "equal": False, "note": ""}
    try:
        try:
            result = steps.run_local(job(base, data, args, args.max_restarts), log=trig,
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
        row["tolerated"] = len(result.tolerated)
        if row["ok"] and args.strategy == "parameter_server":
            row["equal"], why = within_band(base, reference, args, result)
            if target == "worker" and sig == signal.SIGKILL and (result.restarts or not result.tolerated):
                row["equal"], why = False, "a killed worker must be tolerated without a restart"
            elif row["redone"] is not None and row["redone"] > args.every_steps:
                row["equal"], why = False, f"{row['redone']} steps redone (> one interval of {args.every_steps})"
            row["note"] = why
        elif row["ok"]:
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
          f"{'tolerated':>9}  {'result':>7}  {'wall s':>6}  note")


def fmt(row: dict) -> str:
    def val(v):
        return "-" if v is None else str(v)

    kill = f"{val(row['kill_step'])} (line {row['trigger']})"
    equal = "ok" if row["equal"] else "no"
    return (f"{row['trial']:>5}  {row['target']:<7} {kill:>14}  {val(row['resumed']):>7}  {val(row['redone']):>6}  "
            f"{row['restarts']:>8}  {row['tolerated']:>9}  {equal:>7}  {row['wall']:>6.1f}  {row['note']}")


def summary(rows: list[dict], planned: int, check: str = "bitwise equal") -> str:
    survived = sum(1 for r in rows if r["ok"] and r["equal"])
    redone = [r["redone"] for r in rows if r["redone"] is not None]
    walls = [r["wall"] for r in rows]
    text = f"summary: {survived}/{len(rows)} trials survived (completed and {check})"
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
    p.add_argument("--target", choices=["chief", "worker", "ps", "random"], default="random")
    p.add_argument("--strategy", choices=list(TARGETS), default="multi_worker",
                   help="multi_worker: compared bitwise; parameter_server: asynchronous, compared by final "
                        "validation loss (--loss-band)")
    p.add_argument("--loss-band", type=float, default=0.15,
                   help="parameter_server: largest |final validation loss - the reference's| that survives")
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--trial-timeout", type=float, default=300.0, help="seconds per job, restarts included")
    p.add_argument("--workdir", help="where data, reference and trials go (default: a new temp dir, removed)")
    p.add_argument("--keep", action="store_true", help="keep every trial's output folder")
    p.add_argument("--verbose", action="store_true", help="print every replica log line")
    args = p.parse_args(argv)
    if args.trials < 1 or args.steps < 2 or args.every_steps < 0:
        p.error("need --trials >= 1, --steps >= 2, --every-steps >= 0")
    if args.target not in TARGETS[args.strategy] + ("random",):
        p.error(f"--target {args.target} needs --strategy parameter_server (multi_worker has no parameter server)")
    if args.strategy == "parameter_server" and args.steps <= PS_LOG_EVERY:
        p.error(f"--strategy parameter_server needs --steps > {PS_LOG_EVERY} (the chief logs every {PS_LOG_EVERY})")

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
        from jobs.steps import calls as steps

        print(f"work folder: {work}", flush=True)
        data = make_data(work)
        reference = work / f"reference-{args.strategy}"
        if not (reference / "checkpoints" / f"ckpt-{args.steps}.index").exists():
            shutil.rmtree(reference, ignore_errors=True)
            t0 = time.monotonic()
            res = steps.run_local(job(reference, data, args, 0), log=(lambda line: print(f"    {line}", flush=True))
                                 if args.verbose else (lambda line: None), timeout_s=args.trial_timeout)
            print(f"reference: {args.steps} steps, {args.strategy}, uninterrupted, {time.monotonic() - t0:.1f} s "
                  f"(exit {res.returncode})", flush=True)
        kill_leftovers(str(reference))
        print(f"{args.trials} trials ({args.strategy}): SIG{args.signal} to {args.target} at a random step, "
              f"checkpoint every {args.every_steps} steps, up to {args.max_restarts} restarts, seed {args.seed}",
              flush=True)
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
            check = "bitwise equal" if args.strategy == "multi_worker" else \
                f"final validation loss within {args.loss_band:g} of the reference's"
            print(summary(rows, args.trials, check), flush=True)
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
