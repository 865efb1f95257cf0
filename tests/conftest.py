"""Shared fixtures: one small prepared dataset per session, process helpers for kill tests."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Worker processes (launcher, kfp.local tasks) must import this repository even without `pip install -e`.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


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


def job_config(base_dir, data_dir: str, *overrides: str):
    """The `local` preset on the shared prepared data, writing under ``base_dir``."""
    from trainers import config as config_lib

    return config_lib.load("local", [f"output.base_dir={base_dir}", "data.source=tfrecord",
                                     f"data.path={data_dir}", *overrides])


def pids_with_env(marker: str) -> list[int]:
    """Live processes whose environment mentions ``marker`` (e.g. a test's unique output dir)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in env and state != "Z":
            found.append(int(entry))
    return found


def replica_pid(marker: str, pool: str) -> int | None:
    """The pid of the replica of worker pool ``pool`` (``workerpool1``) of the job writing to ``marker``."""
    for pid in pids_with_env(marker):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if f'"type": "{pool}"'.encode() in env.get(b"CLUSTER_SPEC", b""):
            return pid
    return None


class Killer:
    """A launcher ``log`` callback that SIGKILLs (or signals) a replica when a given line appears."""

    def __init__(self, marker: str, pool: str, trigger: str, sig: int = signal.SIGKILL, echo: bool = True):
        self.marker, self.pool, self.trigger, self.sig, self.echo = marker, pool, trigger, sig, echo
        self.fired = False
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if self.echo:
            print(line, file=sys.stderr)
        if not self.fired and self.trigger in line:
            pid = replica_pid(self.marker, self.pool)
            if pid:
                os.kill(pid, self.sig)
                self.fired = True


def assert_no_processes_left(marker: str, wait_s: float = 10) -> None:
    deadline = time.monotonic() + wait_s
    while pids_with_env(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids_with_env(marker) == [], f"processes left behind: {pids_with_env(marker)}"
