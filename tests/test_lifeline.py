"""No process of ours outlives the process that started it, whatever kills that one (``jobs.local.process.lifeline``), and a
rerun stops what a killed run recorded in its lock (``jobs.local.run.lock.RunLock``, ``stop_leftovers``).

Each test kills with SIGKILL (nothing can be handled) and then asserts the processes alive afterwards: none of
ours, within a bound far above what the kernel needs (a slow machine is slower, never wrong)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from jobs.local.process import lifeline
from jobs.local.run.lock import LOCK_NAME, RunLock
from tests.conftest import ROOT, assert_no_processes_left
from jobs.local.process.faults import pids_with_env

BOUND_S = 60


def wait_for(ready, what: str, bound_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound_s
    while not ready():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def pids_with_cmdline(needle: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle.encode() in f.read() and lifeline.start_time(int(entry)) is not None:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def kill9(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=BOUND_S)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("parent_dies_before_prctl", [False, True])
@pytest.mark.process
def test_a_kfp_step_dies_with_the_run_and_is_recorded_in_its_lock(tmp_path, parent_dies_before_prctl):
    """kfp.local's step processes (``run_local_subprocess``, what ``SubprocessRunner`` calls) get the parent-death
    signal and are recorded, with their start time, in the run's lock; kill -9 of the run: no step left."""
    marker = uuid.uuid4().hex
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from jobs.local.process import lifeline
        from jobs.local.run.lock import RunLock, record_child
        from kfp.local import subprocess_task_handler as handler
        lock = RunLock({str(tmp_path / 'run')!r}).acquire()
        lifeline.kfp_steps_die_with_this_process(on_start=record_child)
        step = [sys.executable, "-c", "import time; time.sleep(300)"]
        if {parent_dies_before_prctl!r}:  # the step's preexec runs after its parent is gone: it must end at once
            import os, signal
            real = lifeline.preexec
            def late():
                ready = real()
                def in_child():
                    time.sleep(1.0)
                    ready()
                return in_child
            lifeline.preexec = late
        handler.run_local_subprocess(step, env_vars={{"VTP_TEST_MARKER": {marker!r}}})
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if parent_dies_before_prctl:
            time.sleep(0.3)  # not a race of the test: the step, whenever it gets there, finds its parent gone
            wait_for(lambda: (tmp_path / "run" / LOCK_NAME).is_file(), "the lock")
            kill9(parent)
        else:
            wait_for(lambda: pids_with_env(marker), "the step process")
            (step,) = pids_with_env(marker)
            lock = tmp_path / "run" / LOCK_NAME
            # the step is recorded once it has started (on_start, after Popen returns): wait for the record
            def recorded():
                try:
                    return json.loads(lock.read_text()).get("children")
                except ValueError:  # caught between the lock's truncation and its write
                    return None
            wait_for(recorded, "the step in the lock")
            held = json.loads(lock.read_text())
            assert held["pid"] == parent.pid
            assert held["children"] == [{"pid": step, "start": lifeline.start_time(step)}]
            kill9(parent)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert_no_processes_left(marker, wait_s=BOUND_S)


@pytest.mark.process
def test_a_rerun_stops_what_a_killed_run_left_and_nothing_else(tmp_path):
    """The lock of a killed run names a step still running (no parent-death signal reached it, e.g. off Linux)
    and a pid that has since been reused: the rerun stops the first, never the second (its start time differs)."""
    marker = uuid.uuid4().hex
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                            env=dict(os.environ, VTP_TEST_MARKER=marker))
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        wait_for(lambda: lifeline.start_time(left.pid) is not None, "the leftover")
        base = tmp_path / "run"
        base.mkdir()
        (base / LOCK_NAME).write_text(json.dumps({"pid": 999999, "children": [
            {"pid": left.pid, "start": lifeline.start_time(left.pid)},
            {"pid": bystander.pid, "start": (lifeline.start_time(bystander.pid) or 0) - 1},  # a reused pid
            {"pid": 1, "start": lifeline.start_time(1)}, {"pid": "x"}, "garbage"]}))
        said = []
        lock = RunLock(str(base)).acquire(log=said.append)
        try:
            left.wait(timeout=BOUND_S)
            assert bystander.poll() is None  # untouched
            assert said == [f"stopping 1 process(es) a killed run left in this folder: pid {left.pid}"]
            assert json.loads((base / LOCK_NAME).read_text())["children"] == []
        finally:
            lock.release()
    finally:
        for p in (left, bystander):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert_no_processes_left(marker)


@pytest.mark.timeout(240)
@pytest.mark.process
def test_kill_9_of_ci_local_during_a_step_leaves_no_step_running(tmp_path):
    """A step whose bash script runs processes of its own (one in the background, one waited for): kill -9 of
    ``vtp ci-local`` stops the step's whole process group, through the supervisor's parent-death signal."""
    import yaml

    needle = f"{time.time_ns() % 10**6 + 100000}.5"  # a sleep duration no other process has
    src = tmp_path / "src"
    src.mkdir()
    (src / "cloudbuild.yaml").write_text(yaml.safe_dump({"steps": [
        {"id": "long", "name": "ubuntu", "script": f"#!/usr/bin/env bash\nsleep {needle} &\nsleep {needle}\n"}]}))
    proc = subprocess.Popen([sys.executable, str(ROOT / "pipelines" / "run.py"), "ci-local", "--config",
                             str(src / "cloudbuild.yaml"), "--as", "submit", "--workspace", str(tmp_path / "run")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=src)
    try:
        wait_for(lambda: len(pids_with_cmdline(f"sleep\0{needle}")) == 2, "the step's two processes")
        kill9(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + BOUND_S
    while pids_with_cmdline(needle) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pids_with_cmdline(needle) == [], "a step outlived ci-local"


@pytest.mark.timeout(240)
@pytest.mark.process
def test_kill_9_of_a_local_study_leaves_no_trial_running(tmp_path):
    """``python -m jobs.tuning`` killed with -9 while two trials' replicas train: none of them is left."""
    base = tmp_path / "study"
    job = ROOT / "tests" / "fakes" / "tuning_project" / "job.yaml"  # a fake trainer: seconds per epoch, no TF
    slow = 'trainer.args=["--epochs", "200", "--seconds_per_epoch", "0.25"]'
    proc = subprocess.Popen([sys.executable, "-m", "jobs.tuning", "--config", str(job), "--set",
                             f"output.base_dir={base}", "--set", slow], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=str(ROOT))
    try:
        wait_for(lambda: len(pids_with_env(str(base))) >= 2, "trial replicas running", bound_s=180)
        kill9(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert_no_processes_left(str(base), wait_s=BOUND_S)


@pytest.mark.process
def test_the_supervisor_passes_the_status_and_refuses_a_bad_command_line():
    assert subprocess.run(lifeline.supervised([sys.executable, "-c", "raise SystemExit(7)"]),
                          timeout=BOUND_S).returncode == 7
    bad = subprocess.run([sys.executable, "-I", lifeline.__file__, "x"], capture_output=True, text=True,
                         timeout=BOUND_S)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: ")
