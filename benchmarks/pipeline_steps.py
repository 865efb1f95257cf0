"""Wall time of every part of the default run (`python pipelines/run.py`), against the training step.

    python benchmarks/pipeline_steps.py                       # this checkout, 2 rounds
    python benchmarks/pipeline_steps.py --baseline ../old     # and another checkout, alternating (before/after)
    python benchmarks/pipeline_steps.py --imports-only --rounds 5 --baseline ../old   # only the fresh-process imports

The parts: the run's start-up (process start, imports, validation, loading the components, kfp.local's set-up:
from launch to the first task's start, read from kfp's own timestamped lines in ``<base>/logs/run-*.log``),
every step (kfp.local per task: a process, its imports, its work), and the wrap-up (the last task's end to the
process's exit: the run's record and summary). The fixed cost is the run's wall minus the training step's.

Each round runs ``python pipelines/run.py --set output.base_dir=<tmp>`` in each checkout (alternating, so a
drift of the machine hits both alike) and reads every step's wall time from the console's ``✓ <step> (N s)``
lines (what both old and new versions print; new versions also keep them in ``<base>/run.json``).
Also measured, in fresh processes (medians): the fixed cost of one pipeline task (a lightweight component that does
nothing, under the same kfp.local runner: what every step pays before its own work), a bare interpreter, and the
imports the parts pay: kfp as ``run.py`` imports it (with and without its API client), the twelve component
YAMLs loaded as ``run.py`` loads them, ``jobs.steps.calls`` (every step), ``matplotlib.figure`` (the report, before) and
``tensorflow`` (what each replica pays; verify-model imports only the parts it uses, without Keras:
``jobs.steps.tensorflow_import``). Whether Python may cache bytecode is printed with the machine: under
``PYTHONDONTWRITEBYTECODE=1`` every process compiles the project's modules from source (~0.1 s a process here).

Printed: per step, the median wall of each checkout; the run's wall and its ratio to the training step's.
Nothing is asserted (figures move with the machine; quote ratios measured in one run).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP_LINE = re.compile(r"^✓ (\S+) \((\d+(?:\.\d+)?) s\)$")
# Steps of this checkout that never import TensorFlow (prepare-data: a local folder, trainers/tfrecord.py).
NO_TF_STEPS = ("(start-up)", "(wrap-up)", "(CPU s, every process)", "build-image", "validate-config", "prepare-data", "upload-model", "model-upload-request", "report",
               "run-report")

NOOP = """
import time
from kfp import dsl, local

@dsl.component(base_image="python:3.11", install_kfp_package=False)
def noop() -> str:
    return "ok"

@dsl.pipeline
def p():
    for _ in range(3):
        noop()

local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=__import__("sys").argv[1])
started = time.monotonic()
p()
print((time.monotonic() - started) / 3)
"""


KFP_TASK = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) - INFO - (Executing task|Task) ")


def _seconds_of_day(h: str, m: str, s: str) -> float:
    return int(h) * 3600 + int(m) * 60 + float(s)


def start_and_end(base: Path, launched: datetime.datetime, ended: datetime.datetime) -> tuple[float, float]:
    """(launch -> first task's start, last task's end -> exit) from kfp's timestamped lines in the run's log."""
    stamps = []
    for log in sorted((base / "logs").glob("run-*.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = KFP_TASK.match(ANSI.sub("", line))
            if m:
                stamps.append(_seconds_of_day(*m.groups()[:3]))
    if not stamps:
        return float("nan"), float("nan")
    day = lambda t: t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6  # noqa: E731
    return stamps[0] - day(launched), day(ended) - stamps[-1]


def run_once(repo: Path, base: Path) -> tuple[dict[str, float], float]:
    env = dict(os.environ, PYTHONPATH=str(repo))
    launched, started = datetime.datetime.now(), time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, str(repo / "pipelines" / "run.py"), "--set", f"output.base_dir={base}"],
                          cwd=str(repo), env=env, capture_output=True, text=True, timeout=1800)
    wall, ended = time.monotonic() - started, datetime.datetime.now()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"error: {repo}: run.py exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    steps = {m.group(1): float(m.group(2)) for m in map(STEP_LINE.match, proc.stdout.splitlines()) if m}
    start_up, wrap_up = start_and_end(base, launched, ended)
    # CPU seconds of every process of the run (replicas included): on a machine shared with other work the
    # wall times stretch with its load, the CPU time much less
    return {"(start-up)": start_up, **steps, "(wrap-up)": wrap_up, "(CPU s, every process)": cpu}, wall


#: what a part pays in a fresh process of this checkout: (label, code). Each is timed as a whole process.
IMPORTS = (
    ("bare interpreter (python -c pass)", "pass"),
    ("import kfp as before (with its API client: kubernetes, requests)", "import kfp.local, kfp.dsl"),
    ("import kfp as run.py does now (no client)",
     "import sys; sys.argv=['x']; from jobs.commands.run_command import import_kfp_without_its_client as f; f(); "
     "import kfp.local, kfp.dsl"),
    ("the 12 component YAMLs, kfp's loader", "import components as c; from kfp.components import "
     "load_component_from_file as l; [l(str(c.yaml_path(n))) for n in c.NAMES]"),
    ("the 12 component YAMLs, as run.py loads them now", "import components as c; c.published()"),
    ("import jobs.steps.calls (every step)", "import jobs.steps.calls"),
    ("import matplotlib.figure (what the report paid before its charts were SVG)", "import matplotlib.figure"),
    ("import tensorflow (each replica; verify-model before)", "import tensorflow"),
    ("import tensorflow as verify-model does now (lazily, without Keras)",
     "from jobs.steps.verify import import_tensorflow; import_tensorflow()"),
    ("verify-model's plain path: as written, without Keras (VTP_TENSORFLOW_IMPORT=plain; no effect before issue 54)",
     "import os; os.environ['VTP_TENSORFLOW_IMPORT'] = 'plain'; "
     "from jobs.steps.verify import import_tensorflow; import_tensorflow()"),
)


def process_seconds(code: str, repo: Path, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300, cwd=str(repo),
                       env=dict(os.environ, PYTHONPATH=str(repo)))
        times.append(time.monotonic() - started)
    return statistics.median(times)


def noop_task_seconds(rounds: int = 3) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "noop_pipeline.py"  # kfp reads a component's source from its file
        script.write_text(NOOP)
        times = [float(subprocess.run([sys.executable, str(script), tmp], capture_output=True, text=True,
                                      check=True, timeout=300).stdout.strip().splitlines()[-1]) for _ in range(rounds)]
    return statistics.median(times)



def imports_only(repos: dict[str, Path], rounds: int) -> int:
    """:data:`IMPORTS` in fresh processes of each checkout, alternating checkouts within each round (a drift of the
    machine hits both alike); medians printed side by side."""
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for label, code in IMPORTS:
            for name, repo in repos.items():
                seconds.setdefault((label, name), []).append(process_seconds(code, repo, rounds=1))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load "
          f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; {rounds} rounds, medians, whole fresh processes")
    print("| import | " + " | ".join(f"{n} s" for n in repos) + " |")
    print("|---|" + "---:|" * len(repos))
    for label, _ in IMPORTS:
        print(f"| {label} | " + " | ".join(f"{statistics.median(seconds[(label, n)]):.2f}" for n in repos) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", type=Path, default=HERE, help="the checkout to measure (default: this one)")
    p.add_argument("--baseline", type=Path, help="another checkout, measured alternately (e.g. before a change)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--imports-only", action="store_true",
                   help="only the fresh-process imports (no pipeline run), in every checkout alternately")
    args = p.parse_args(argv)
    repos = {"after": args.repo.resolve()}
    if args.baseline:
        repos = {"before": args.baseline.resolve(), **repos}
    if args.imports_only:
        return imports_only(repos, max(args.rounds, 1))
    samples: dict[str, list[tuple[dict[str, float], float]]] = {name: [] for name in repos}
    with tempfile.TemporaryDirectory(prefix="steps-bench-") as tmp:
        for r in range(args.rounds):
            for name, repo in repos.items():
                samples[name].append(run_once(repo, Path(tmp) / f"{name}-{r}"))
                steps, wall = samples[name][-1]
                print(f"round {r + 1} {name}: {wall:.1f} s " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()),
                      flush=True)
    task_s = noop_task_seconds()
    imports = [(label, process_seconds(code, repos["after"])) for label, code in IMPORTS]
    print()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}; {args.rounds} rounds, medians; bytecode "
          f"{'not cached (PYTHONDONTWRITEBYTECODE set)' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'cached'}")
    names = list(repos)
    order = list(dict.fromkeys(k for name in names for steps, _ in samples[name] for k in steps))
    print("| step | " + " | ".join(f"{n} s" for n in names) + " | imports TensorFlow (this checkout) |")
    print("|---|" + "---:|" * len(names) + "---|")
    for step in order:
        cells = []
        for name in names:
            values = [steps[step] for steps, _ in samples[name] if step in steps]
            cells.append(f"{statistics.median(values):.1f}" if values else "—")
        here = any(step in steps for steps, _ in samples["after"])
        print(f"| {step} | " + " | ".join(cells) + f" | {('no' if step in NO_TF_STEPS else 'yes') if here else '—'} |")
    for name in names:
        walls = [wall for _, wall in samples[name]]
        trains = [steps.get("train") or steps.get("train-local") or 0 for steps, _ in samples[name]]
        ratio = statistics.median(w / t for w, t in zip(walls, trains) if t)
        fixed = statistics.median(w - t for w, t in zip(walls, trains))
        print(f"{name}: run {statistics.median(walls):.1f} s, training step {statistics.median(trains):.1f} s, "
              f"fixed cost (run - training step) {fixed:.1f} s, run / training step = {ratio:.2f}x")
    print(f"fixed cost of one pipeline task (a no-op lightweight component under kfp.local): {task_s:.2f} s")
    print("fresh processes (this checkout, whole process, median of 3):")
    for label, seconds in imports:
        print(f"  {seconds:5.2f} s  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
