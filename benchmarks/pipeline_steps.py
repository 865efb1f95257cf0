"""Wall time of every step of the default run (`python pipelines/run.py`), against the training step.

    python benchmarks/pipeline_steps.py                       # this checkout, 2 rounds
    python benchmarks/pipeline_steps.py --baseline ../old     # and another checkout, alternating (before/after)

Each round runs ``python pipelines/run.py --set output.base_dir=<tmp>`` in each checkout (alternating, so a
drift of the machine hits both alike) and reads every step's wall time from the console's ``✓ <step> (N s)``
lines (what both old and new versions print; new versions also keep them in ``<base>/run.json``).
Also measured, in fresh processes: the fixed cost of one pipeline task (a lightweight component that does
nothing, under the same kfp.local runner: what every step pays before its own work) and ``import
tensorflow`` (what a step that needs TensorFlow pays as part of its work).

Printed: per step, the median wall of each checkout; the run's wall and its ratio to the training step's.
Nothing is asserted (figures move with the machine; quote ratios measured in one run).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
STEP_LINE = re.compile(r"^✓ (\S+) \((\d+(?:\.\d+)?) s\)$")
# Steps of this checkout that never import TensorFlow (prepare-data: a local folder, trainers/tfrecord.py).
NO_TF_STEPS = ("build-image", "validate-config", "prepare-data", "upload-model", "model-upload-request", "report",
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


def run_once(repo: Path, base: Path) -> tuple[dict[str, float], float]:
    env = dict(os.environ, PYTHONPATH=str(repo))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(repo / "pipelines" / "run.py"), "--set", f"output.base_dir={base}"],
                          cwd=str(repo), env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"error: {repo}: run.py exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    steps = {m.group(1): float(m.group(2)) for m in map(STEP_LINE.match, proc.stdout.splitlines()) if m}
    return steps, wall


def noop_task_seconds(rounds: int = 3) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "noop_pipeline.py"  # kfp reads a component's source from its file
        script.write_text(NOOP)
        times = [float(subprocess.run([sys.executable, str(script), tmp], capture_output=True, text=True,
                                      check=True, timeout=300).stdout.strip().splitlines()[-1]) for _ in range(rounds)]
    return statistics.median(times)


def tf_import_seconds(rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", "import tensorflow"], check=True, capture_output=True, timeout=300)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", type=Path, default=HERE, help="the checkout to measure (default: this one)")
    p.add_argument("--baseline", type=Path, help="another checkout, measured alternately (e.g. before a change)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    repos = {"after": args.repo.resolve()}
    if args.baseline:
        repos = {"before": args.baseline.resolve(), **repos}
    samples: dict[str, list[tuple[dict[str, float], float]]] = {name: [] for name in repos}
    with tempfile.TemporaryDirectory(prefix="steps-bench-") as tmp:
        for r in range(args.rounds):
            for name, repo in repos.items():
                samples[name].append(run_once(repo, Path(tmp) / f"{name}-{r}"))
                steps, wall = samples[name][-1]
                print(f"round {r + 1} {name}: {wall:.1f} s " + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()),
                      flush=True)
    task_s, tf_s = noop_task_seconds(), tf_import_seconds()
    print()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.1f}; {args.rounds} rounds, medians")
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
        print(f"{name}: run {statistics.median(walls):.1f} s, training step {statistics.median(trains):.1f} s, "
              f"run / training step = {ratio:.2f}x")
    print(f"fixed cost of one pipeline task (a no-op lightweight component under kfp.local): {task_s:.2f} s")
    print(f"import tensorflow in a fresh process: {tf_s:.1f} s (part of verify-model's own work: it loads the SavedModel)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
