"""What a person sees: the short console (jobs.local.run.console) and the default run as a new user runs it."""
from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.local.run.console import Console

ROOT = Path(__file__).resolve().parent.parent
NOISE = ["executor_input", "I0000", "W0000", "oneDNN", "Warning", "warnings.warn", "_warn_", "absl::InitializeLog",
         '"config_json"', "Sharding callback", "outputs:", "Traceback"]

KFP_LINES = """\
08:35:13.714 - INFO - Running pipeline: \x1b[95m'flowers-local'\x1b[0m
08:35:13.719 - INFO - Executing task \x1b[96m'train'\x1b[0m
    I0000 00:00:1795336308.443507   20081 port.cc:153] oneDNN custom operations are on.
    [launcher] attempt 1: started chief-0 (pid 1), worker-0 (pid 2)
    [worker-0] WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    shard 1/16 written (74/900 images, 1360 images/s)
    shard 2/16 written (150/900 images, 1400 images/s)
    shard 16/16 written (900/900 images, 3924 images/s)
    [worker-0] precision: float32 (training.precision=auto; auto: the chief's decision (float32), taken by every replica)
    [chief-0] precision: float32 (training.precision=auto; auto: float32 247 ex/s vs bf16 191 ex/s on this CPU (measured))
    [chief-0] strategy=CollectiveAllReduceStrategy replicas=2 global_batch=16 steps=30 (from 0) classes=3
    [worker-0] step 10/30 loss=0.9288 accuracy=0.6438
    [chief-0] step 10/30 loss=0.9288 accuracy=0.6438
    [chief-0] resumed from step 10 (/x/ckpt-10)
    [launcher] restart 1/2: worker-0 exited with status -9 (SIGKILL); restarting all replicas
    [chief-0] step 30/30 loss=0.0109 accuracy=1.0000
    warnings: ''
    {"executor_input": {"inputs": {"parameterValues": {"config_json": "{...}"}}}}
08:36:07.341 - INFO - Task \x1b[96m'train'\x1b[0m finished with status \x1b[92mSUCCESS\x1b[0m
08:36:07.342 - INFO - Task \x1b[96m'train'\x1b[0m outputs:
    model_dir: '/x/model'
/site-packages/kfp/local/subprocess_task_handler.py:81: RuntimeWarning: You may be attemping to run a task
  warnings.warn(
  model (SavedModel)  /x/model
"""


def _feed(lines: str, **kw) -> list[str]:
    console = Console(tty=False, **kw)
    shown = io.StringIO()
    console.out = console._stream = shown
    for line in lines.splitlines():
        console._handle(line)
    return shown.getvalue().splitlines()


def test_steps_progress_resumes_and_restarts_are_shown_and_noise_is_not():
    shown = _feed(KFP_LINES)
    text = "\n".join(shown)
    assert shown[0] == "▸ train"
    assert re.search(r"^✓ train \(\d+\.\d s\)$", text, re.M)
    assert "training: 2 replicas (CollectiveAllReduceStrategy), global batch 16, steps 0 → 30" in text
    assert re.search(r"step 30/30  loss 0.0109  accuracy 1.0000  \d+ examples/s  ETA 0 s", text)
    assert "resumed from step 10" in text and "[launcher] restart 1/2" in text
    # the chief's precision line (what auto measured); the other replicas' copies are not repeated
    assert "  precision: float32 (training.precision=auto; auto: float32 247 ex/s vs bf16 191 ex/s on this CPU " \
           "(measured))" in shown
    assert sum("precision:" in s for s in shown) == 1
    assert "  model (SavedModel)  /x/model" in shown  # this process's own lines pass unchanged
    assert not [n for n in NOISE if n in text], text
    assert sum("step 10/30" in s for s in shown) <= 1  # the worker's copy of the chief's line is dropped
    assert "  shard 16/16 written (900/900 images, 3924 images/s)" in shown  # the last shard always
    assert sum(s.startswith("  shard ") for s in shown) == 2  # the rest at most every few seconds


def test_a_failed_step_shows_its_last_lines_and_the_log_file(tmp_path):
    console = Console(tty=False)
    shown = io.StringIO()
    console.out = console._stream = shown
    console.set_log_file(str(tmp_path / "run.log"))
    for line in ["08:00:00.000 - INFO - Executing task 'prepare-data'",
                 "    I0000 00:00:1795336308.443507   20081 port.cc:153] noise",
                 "    Traceback (most recent call last):",
                 "    jobfile.errors.ConfigError: data.path: no images",
                 "08:00:01.000 - ERROR - Task 'prepare-data' finished with status FAILURE"]:
        console._handle(line)
    text = shown.getvalue()
    assert "✗ prepare-data failure after" in text
    assert "    jobfile.errors.ConfigError: data.path: no images" in text and "noise" not in text
    assert f"full log: {tmp_path / 'run.log'}" in text


#: A train step whose worker died of Keras 3 ``fit`` under MultiWorkerMirroredStrategy, as kfp relays it: the
#: replicas' lines, the launcher's, then the train component's ``error: training failed: <describe()>``.
FAILED_TRAIN = """\
08:00:00.000 - INFO - Executing task 'train'
    [chief-0] error: training.steps: the same problem on every replica
    [worker-0] error: training.steps: the same problem on every replica
    [worker-0] Traceback (most recent call last):
    [worker-0] ValueError: Attempt to convert a value (PerReplica:{
""" + "".join(f"    [worker-0]        [{i}.0, {i}.5],\n" for i in range(20)) + """\
    [worker-0] }) with an unsupported type (<class 'PerReplica'>) to a Tensor.
    [launcher] job failed: worker-0 (workerpool1-0, attempt 1) exited with status 1.
    error: training failed: worker-0 (workerpool1-0, attempt 1) exited with status 1.
      last 20 lines of worker-0 (/x/worker-0.log):
""" + "".join(f"      |        [{i}.0, {i}.5],\n" for i in range(19)) + """\
      | I0000 00:00:1795557517.903389   29312 cudart_stub.cc:31] Could not find cuda drivers on your machine
      worker-0's error: ValueError: Attempt to convert a value (PerReplica:{ … }) with an unsupported type (<class 'PerReplica'>) to a Tensor.
      hint: this is Keras 3's Model.fit under a multi-worker strategy (keras-team/keras#20585)
08:00:09.000 - ERROR - Task 'train' finished with status FAILURE
"""


def test_a_failed_replicas_error_and_hint_are_kept_for_the_last_lines():
    console = Console(tty=False)
    shown = io.StringIO()
    console.out = console._stream = shown
    for line in FAILED_TRAIN.splitlines():
        console._handle(line)
    text = shown.getvalue()
    assert text.count("error: training.steps: the same problem on every replica") == 1  # once, not per replica
    assert "✗ train failure after" in text
    assert "worker-0's error" not in text and "hint:" not in text  # not buried in the middle: they come last
    assert len(text.split("its last lines:")[1].strip().splitlines()) <= 10  # a few lines, not the whole dump
    assert "I0000" not in text  # C++ noise, even quoted as a replica's last lines
    assert console.failure_lines() == [
        "error: the pipeline failed at step train: training failed: worker-0 (workerpool1-0, attempt 1) exited "
        "with status 1.",
        "  worker-0's error: ValueError: Attempt to convert a value (PerReplica:{ … }) with an unsupported type "
        "(<class 'PerReplica'>) to a Tensor.",
        "  hint: this is Keras 3's Model.fit under a multi-worker strategy (keras-team/keras#20585)"]
    assert Console(tty=False).failure_lines() == []  # nothing failed


def test_the_cause_is_the_last_thing_on_the_console_even_right_after_the_failure(tmp_path):
    """kfp.local logs a task's end (on stdout, where it relays the task's lines too) and raises at once; the run
    then prints the cause on stderr. ``drain`` waits for the readers to have seen the task's end, so the cause
    is there to print, and is printed last."""
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from jobs.local.run.console import Console

lines = {FAILED_TRAIN!r}.splitlines()
with Console(tty=False) as c:
    c.set_log_file({str(tmp_path / 'run.log')!r})
    for line in lines:
        print(line)
    assert c.drain(), "the readers did not catch up"
    print("\\n".join(c.failure_lines()), file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)  # one pipe: what a terminal shows, in its order
    assert proc.returncode == 0, proc.stdout
    err = proc.stdout.strip().splitlines()
    assert [line for line in err[:-4] if line == "✗ train failure after 9.0 s; its last lines:"]  # kfp's times, 08:00:00 to 08:00:09
    assert err[-4] == f"  full log: {tmp_path / 'run.log'}"
    assert err[-3].startswith("error: the pipeline failed at step train: training failed: worker-0")
    assert err[-2].startswith("  worker-0's error: ValueError: Attempt to convert a value (PerReplica:{ … })")
    assert err[-1].startswith("  hint: this is Keras 3's Model.fit")
    assert "vtp-console-drain" not in proc.stdout + (tmp_path / "run.log").read_text()


def test_a_steps_duration_is_the_one_run_json_keeps(tmp_path):
    """One source of truth for a step's wall time: the console's ``✓ step (N s)`` shows what the run's
    StepTimer recorded (from kfp's log records), not a time of its own; steps.json is written as steps go."""
    import json

    from jobs.local.run.step_timer import StepTimer, step_seconds
    from jobs.local.run.summary import summary_lines

    with StepTimer(str(tmp_path)) as timer:
        timer.seen("Executing task 'validate-config'", 100.0)
        assert json.loads((tmp_path / "steps.json").read_text())["running"] == ["validate-config"]
        timer.seen("Task 'validate-config' finished with status SUCCESS", 100.149)  # 0.15 s recorded
        shown = _feed("08:00:00.000 - INFO - Executing task 'validate-config'\n"
                      "08:00:00.300 - INFO - Task 'validate-config' finished with status SUCCESS")
    assert shown[-1] == "✓ validate-config (0.1 s)"  # the timer's 0.15 (as the summary prints it), not the lines' 0.3
    assert summary_lines({"steps": timer.steps})[-2] == "  steps               validate-config 0.1 s"
    assert json.loads((tmp_path / "steps.json").read_text()) == {
        "started": timer.started, "running": [], "steps": [{"name": "validate-config", "seconds": 0.15, "status": "SUCCESS"}]}
    assert step_seconds("validate-config") is None  # no run in progress: the console times it itself


def test_verbose_shows_everything():
    assert _feed(KFP_LINES, verbose=True) == KFP_LINES.splitlines()


def test_capture_keeps_every_line_in_the_log_file_and_stderr_on_stderr(tmp_path):
    code = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from jobs.local.run.console import Console

with Console(tty=False) as c:
    c.set_log_file({str(tmp_path / 'run.log')!r})
    print("08:00:00.000 - INFO - Executing task 'x'")
    os.write(2, b"I0000 00:00:1.0   1 port.cc:153] C++ noise\\n")
    print("error: something is wrong", file=sys.stderr)
    print("plain line")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["▸ x", "plain line"]
    assert proc.stderr.splitlines() == ["error: something is wrong"]
    log = (tmp_path / "run.log").read_text()
    assert "C++ noise" in log and "plain line" in log and "error: something is wrong" in log


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_the_readmes_first_command_twice(tmp_path):
    """`python pipelines/run.py` as a new user runs it, then again: a short console with no noise, and a
    rerun that says the job is complete (exit 0, no traceback)."""
    env = dict(os.environ)
    args = [sys.executable, "pipelines/run.py", "--set", f"output.base_dir={tmp_path / 'local'}"]
    first = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    console = first.stdout + first.stderr
    assert first.returncode == 0, console
    lines = console.strip().splitlines()
    assert len(lines) < 60, console
    assert not [n for n in NOISE if n in console], console
    for step in ("validate-config", "prepare-data", "train", "verify-model"):
        assert f"▸ {step}" in console and re.search(rf"✓ {step} \(\d+\.\d s\)", console)
    assert re.search(r"step 30/30  loss [\d.]+  accuracy [\d.]+  \d+ examples/s", console)
    log_file = re.search(r"full log +(\S+)", console).group(1)
    assert "executor_input" in Path(log_file).read_text()  # everything is kept, just not shown

    again = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "is already complete" in again.stdout and "Traceback" not in again.stdout + again.stderr
    assert "30 steps, 2 replicas" in again.stdout and "--fresh" in again.stdout
