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
from jobs.rules.command_line import start_ticks

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
                    if needle.encode() in f.read() and start_ticks(int(entry)) is not None:
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
def test_a_kfp_step_dies_with_the_run_grandchildren_included(tmp_path, parent_dies_before_prctl):
    """kfp.local's step processes (``run_local_subprocess``, what ``SubprocessRunner`` calls) are kfp's real shape,
    ``sh -ec SCRIPT`` whose Python is the shell's *child* (dash does not exec the last command), and that Python
    starts a process of its own: kill -9 of the run leaves none of them (the tree supervisor,
    ``lifeline.guarded``)."""
    marker = uuid.uuid4().hex
    step_code = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from jobs.local.process import lifeline
        from kfp.local import subprocess_task_handler as handler
        lifeline.kfp_steps_die_with_this_process()
        step = ["sh", "-ec", "x=$(echo)\\n" + {sys.executable!r} + " -c " + {repr(step_code)!r} + "\\n"]
        if {parent_dies_before_prctl!r}:  # the step's preexec runs after its parent is gone: it must end at once
            real = lifeline.preexec
            def late(*args):
                ready = real(*args)
                def in_child():
                    time.sleep(1.0)
                    ready()
                return in_child
            lifeline.preexec = late
        print("started", flush=True)
        handler.run_local_subprocess(step, env_vars={{"VTP_TEST_MARKER": {marker!r}}})
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert parent.stdout.readline() == b"started\n"
        if parent_dies_before_prctl:
            time.sleep(0.3)  # not a race of the test: the step, whenever it gets there, finds its parent gone
        else:
            wait_for(lambda: len(pids_with_env(marker)) >= 4, "the supervisor, the shell, the step and its child")
        kill9(parent)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert_no_processes_left(marker, wait_s=BOUND_S)


def test_a_rerun_stops_what_carries_the_killed_runs_token_and_nothing_a_lock_names_by_pid(tmp_path):
    """The lock of a killed run names its token, and (a copy's stale lock, or one edited by hand) the pid and start
    time of a process of the user's: the rerun stops the process carrying the token, never the one named by pid."""
    marker, token = uuid.uuid4().hex, uuid.uuid4().hex
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                            env=dict(os.environ, VTP_TEST_MARKER=marker, **{lifeline.TOKEN_ENV: token}))
    users = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        wait_for(lambda: lifeline.carrying(token) == [left.pid], "the leftover")
        base = tmp_path / "run"
        base.mkdir()
        (base / LOCK_NAME).write_text(json.dumps({"pid": users.pid, "token": token, "children": [
            {"pid": users.pid, "start": start_ticks(users.pid)}, {"pid": 1, "start": start_ticks(1)}]}))
        said = []
        lock = RunLock(str(base)).acquire(log=said.append)
        try:
            left.wait(timeout=BOUND_S)
            assert users.poll() is None  # untouched
            assert said == [f"stopping 1 process(es) a killed run left in this folder: pid {left.pid}"]
            held = json.loads((base / LOCK_NAME).read_text())
            assert held["token"] == lock.token != token and "children" not in held
        finally:
            lock.release()
    finally:
        for p in (left, users):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert_no_processes_left(marker)


@pytest.mark.parametrize("text", ["[1, 2]", '{"children": 5}', '{"token": 5}', '{"token": "x; rm -rf ~"}',
                                  "[" * 100000 + "]" * 100000, '{"pid": 1, "started": "x"}'])
def test_a_damaged_lock_stops_nothing_and_is_no_traceback(tmp_path, text):
    base = tmp_path / "run"
    base.mkdir()
    (base / LOCK_NAME).write_text(text)
    said = []
    lock = RunLock(str(base)).acquire(log=said.append)
    lock.release()
    assert said == []


@pytest.mark.timeout(240)
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


def test_the_supervisor_passes_the_status_and_refuses_a_bad_command_line():
    assert subprocess.run(lifeline.supervised([sys.executable, "-c", "raise SystemExit(7)"]),
                          timeout=BOUND_S).returncode == 7
    assert subprocess.run(lifeline.guarded([sys.executable, "-c", "raise SystemExit(9)"]), timeout=BOUND_S).returncode == 9
    bad = subprocess.run([sys.executable, "-I", lifeline.__file__, "x"], capture_output=True, text=True,
                         timeout=BOUND_S)
    assert bad.returncode == 2 and bad.stderr.startswith("usage: ")


def test_a_guarded_steps_ctrl_c_is_its_own_and_the_supervisor_waits_for_it():
    """Ctrl-C reaches the whole foreground group: the step handles it (here: exits 130 after a last line) and the
    tree supervisor neither dies of it nor cuts the step short."""
    code = ("import signal, sys, time\n"
            "def bye(*a):\n    time.sleep(0.5); print('stopped cleanly', flush=True); sys.exit(130)\n"
            "signal.signal(signal.SIGINT, bye)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen(lifeline.guarded([sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and out == "stopped cleanly\n"


def _trial_chiefs(base: str) -> list[str]:
    """The trial ids of the chief replicas now running under ``base`` (one entry per process)."""
    found = []
    for pid in pids_with_env(base):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if b'"type": "workerpool0"' in env.get(b"CLUSTER_SPEC", b"") and b"CLOUD_ML_TRIAL_ID" in env:
            found.append(env[b"CLOUD_ML_TRIAL_ID"].decode())
    return found


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_kill_9_of_vtp_running_a_study_leaves_nothing_and_the_rerun_never_runs_a_trial_twice(tmp_path):
    """Issue 56: ``vtp --config <a study>`` killed with -9 as a user's terminal would (the top process only), on a
    loaded machine (a busy loop beside it): within a few seconds no process of the run is left (the tune step's
    process, kfp's ``sh -ec`` child, survived before: the tree supervisor ends it), and the rerun runs no trial twice
    at once. A fake trainer (NumPy, seconds per epoch): the smallest study that proves it."""
    base = tmp_path / "study"
    job = ROOT / "tests" / "fakes" / "tuning_project" / "job.yaml"
    command = [sys.executable, str(ROOT / "pipelines" / "run.py"), "--config", str(job), "--set",
               f"output.base_dir={base}", "--set", 'trainer.args=["--epochs", "400", "--seconds_per_epoch", "0.1"]']
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    procs = []
    try:
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
        procs.append(run)
        wait_for(lambda: len(_trial_chiefs(str(base))) >= 2, "two trials' chiefs running", bound_s=400)
        token = json.loads((base / LOCK_NAME).read_text())["token"]
        assert lifeline.carrying(token)  # the steps carry the run's token
        kill9(run)
        killed = time.monotonic()
        deadline = killed + 20
        while (lifeline.carrying(token) or pids_with_env(str(base))) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lifeline.carrying(token) == [] and pids_with_env(str(base)) == [], "a process of the killed run lived on"
        gone_s = time.monotonic() - killed
        rerun = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(tmp_path))
        procs.append(rerun)
        seen: set[str] = set()
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and rerun.poll() is None and len(seen) < 3:
            chiefs = _trial_chiefs(str(base))
            assert len(chiefs) == len(set(chiefs)), f"a trial runs twice at once: {sorted(chiefs)}"
            seen |= set(chiefs)
            time.sleep(0.1)
        assert len(seen) >= 3, f"the rerun did not get to a third trial (saw {sorted(seen)})"
        print(f"nothing of the killed run left {gone_s:.1f} s after kill -9")
    finally:
        for p in [*procs, busy]:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert_no_processes_left(str(base), wait_s=BOUND_S)
