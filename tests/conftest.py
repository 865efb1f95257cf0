"""Shared fixtures: one small prepared dataset per session, process helpers for kill tests."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from jobs.local.process.faults import KillOnLine, pids_with_env, stderr_echo
from tests.tiers import tier

ROOT = Path(__file__).resolve().parent.parent
# The tiers (unit, process, integration, docker, browser) and the xdist groups (tests/tiers.py), with the guard that
# fails a test starting what its marks do not allow (tests/tier_guard.py); real dockerd / registry fixtures
# (tests/docker_servers.py).
pytest_plugins = ["tests.tiers", "tests.docker_servers"]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Nothing in the tests may probe a metadata server: cloud clients talk to stand-ins on 127.0.0.1 only.
# google-auth honours only the lowercase value (`os.getenv("NO_GCE_CHECK") == "true"`): "True" still probes.
os.environ["NO_GCE_CHECK"] = "true"
# The client policy (jobs/cloud/apis/policy.py, one env reader) for the tests: backoff and polling shrunk (a retried call
# or a followed job takes milliseconds), the budgets not: a stand-in slowed by a busy machine (the suite runs in
# parallel, a test's processes beside another's) must still be answered (a 3 s budget was not, under load). A test
# of a fault sets its own short budget (tests/test_cloud_faults.py, test_project.py, ...) with monkeypatch.setenv;
# subprocesses inherit these.
TEST_POLICY = {"VTP_CLOUD_CONNECT_TIMEOUT_S": "2", "VTP_CLOUD_READ_TIMEOUT_S": "20", "VTP_CLOUD_RETRY_TOTAL_S": "20",
               "VTP_CLOUD_RETRY_FIRST_S": "0.05", "VTP_CLOUD_RETRY_MAX_S": "0.5", "VTP_CLOUD_POLL_S": "0.05"}
for _key, _value in TEST_POLICY.items():
    os.environ.setdefault(_key, _value)
# Worker processes (launcher, kfp.local tasks) must import this repository even without `pip install -e`.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def pytest_configure(config: pytest.Config) -> None:
    """This repository's modules compiled once, before any worker or test process starts (the controller, or the one
    process of ``-n 0``). Where ``PYTHONDONTWRITEBYTECODE=1`` is set (these machines set it) no process writes its
    bytecode, so each of the suite's thousands of Python processes (kfp.local steps, replicas, CLI runs) compiled
    every first-party module it imports from source: ~0.1 CPU s a process here (``import pipelines.run,
    jobs.steps.calls, trainers.task``: 0.42 s -> 0.31 s). A process still reads bytecode it may not write, and a
    source newer than its bytecode is compiled again as ever; the folders are ignored by git and by the image's
    build context (.gitignore, .dockerignore)."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    for package in ("jobfile", "trainers", "jobs", "components", "pipelines", "tests", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=2)  # a read-only checkout: nothing written, nothing lost


@pytest.fixture(scope="session", autouse=True)
def hypertune_metric_file(tmp_path_factory):
    """cloudml-hypertune writes ``/tmp/hypertune/output.metrics`` unless told otherwise: a trainer run in a
    test process writes into the session's tmp folder instead (the local launcher's replicas write
    ``<base>/hypertune/``; ``trainers.train.report_to_hypertune``)."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("hypertune") / "output.metrics"
        patch.setenv("CLOUD_ML_HP_METRIC_FILE", str(path))
        yield path


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory) -> str:
    """A tiny flowers-like image set (3 classes x 40 images, 32x32), prepared into TFRecord shards."""
    from trainers import prepare

    root = tmp_path_factory.mktemp("dataset")
    images = str(root / "images")
    prepare.synthesize_image_folder(images, num_classes=3, images_per_class=40, image_size=32, seed=42)
    out = str(root / "tfrecords")
    prepare.prepare_tfrecords(images, out, image_size=32, num_shards=4, validation_fraction=0.2, seed=42)
    return out


@pytest.fixture(scope="session")
@tier("integration")
def real_runs(tmp_path_factory, prepared_data) -> dict:
    """Real run folders, as ``python pipelines/run.py`` leaves them, under one output root: a run of the default
    preset (chief + worker, 10 steps) and then a ``--fresh`` run of another config in the same folder (one
    device, 16 steps), which keeps the first as ``local.<time>``. ``{"root", "current", "archive", "consoles"}``
    (each run's console output, for the step-time checks). About 40 s on 2 cores."""
    import subprocess
    import sys
    import uuid

    root = tmp_path_factory.mktemp("runs-root")
    base = root / "local"
    marker = uuid.uuid4().hex
    common = ["--set", f"output.base_dir={base}", "--set", "data.source=tfrecord", "--set", f"data.path={prepared_data}"]
    consoles = []
    for extra in (["--set", "training.steps=10", "--set", "checkpoint.every_steps=5"],
                  ["--fresh", "--set", "training.steps=16", "--set", "checkpoint.every_steps=8",
                   "--set", "topology.strategy=one_device", "--set", "topology.worker.replica_count=0"]):
        proc = subprocess.run([sys.executable, "pipelines/run.py", *common, *extra], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, RUNS_TEST_MARKER=marker))
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        consoles.append(proc.stdout + proc.stderr)
    assert_no_processes_left(marker)
    [archive] = [p for p in root.iterdir() if p.name.startswith("local.")]
    return {"root": root, "current": base, "archive": archive, "consoles": consoles}


def job_config(base_dir, data_dir: str, *overrides: str):
    """The `local` preset on the shared prepared data, writing under ``base_dir``."""
    from jobfile import config as config_lib

    return config_lib.load("local", [f"output.base_dir={base_dir}", "data.source=tfrecord",
                                     f"data.path={data_dir}", *overrides])


class Killer(KillOnLine):
    """Kills (or signals) a replica when a given log line appears, echoing the job's log to stderr."""

    def __init__(self, marker: str, pool: str, trigger: str, sig: int = signal.SIGKILL, echo: bool = True):
        super().__init__(marker, pool, trigger, sig, stderr_echo if echo else None)


def signal_when(proc, ready, sig: int, wait_s: float = 90, timeout: float = 30) -> tuple[str, str]:
    """Send ``sig`` to ``proc`` once ``ready()`` is true (or ``wait_s`` passed, or it died), then reap it:
    (stdout, stderr). Never leaves the process behind."""
    try:
        deadline = time.monotonic() + wait_s
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready(), f"never ready; exit {proc.poll()}"
        proc.send_signal(sig)
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def assert_no_processes_left(marker: str, wait_s: float = 10) -> None:
    deadline = time.monotonic() + wait_s
    while pids_with_env(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids_with_env(marker) == [], f"processes left behind: {pids_with_env(marker)}"


@pytest.fixture
def vertex():
    """A local stand-in of the Vertex AI REST API (pipeline jobs, model upload), on 127.0.0.1."""
    from tests.standins.vertex import VertexStandIn

    with VertexStandIn() as standin:
        yield standin


def without_plan(text: str) -> str:
    """A cloud command's stderr without the plan's own lines (``jobs.cloud.planning``: ``plan: <option> ...`` per option
    and ``warning: not checked: ...`` per project check it could not make), which submit and upload-template say
    before theirs; tests/test_plan.py asserts those."""
    return "\n".join(line for line in text.splitlines() if not line.startswith(("plan: ", "warning: not checked: ")))


def finished_run(job_file: Path, *overrides: str) -> Path:
    """The job's output folder as a finished local run of it leaves it (what made it, ``run.json``, a model), built
    by hand: what a rerun is checked against before its first step (``jobs.local.run.folder``). Returns the folder."""
    # lazy: only the tests of a run's folder need the job side
    from jobs.local.run.folder import making, write_making, write_record
    from jobfile import config as config_lib

    cfg = config_lib.load(str(job_file), list(overrides))
    base = Path(config_lib.resolved_base_dir(cfg))
    (base / "model").mkdir(parents=True)
    (base / "model" / "saved_model.pb").write_bytes(b"the finished model")
    write_making(str(base), making(cfg))
    write_record(str(base), cfg.to_json(), {"name": cfg.name})
    return base
