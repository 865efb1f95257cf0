"""One run per output folder (jobs.local.run.folder and pipelines/run.py): lock, rerun, --fresh, Ctrl-C, kill -9."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from jobs.run_records import records
from jobs.local.run.folder import archive, last_checkpoint, read_record, write_record
from jobs.local.run.lock import EXIT_BUSY, FolderBusy, LOCK_NAME, RunLock
from jobs.local.run.summary import run_summary, summary_lines
from tests.conftest import assert_no_processes_left
from tests.snapshots import tree_bytes

ROOT = Path(__file__).resolve().parent.parent


# -- the lock ----------------------------------------------------------------------------------------
def _hold_lock(base: Path) -> subprocess.Popen:
    """Another process holding the folder's lock (as a live run would)."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from jobs.local.run.lock import RunLock

        RunLock({str(base)!r}).acquire()
        print("held", flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_named_and_refused_at_once(tmp_path, monkeypatch):
    holder = _hold_lock(tmp_path)
    try:
        waits = []  # at once: the lock never waits for the holder (what happened, not how long it took)
        monkeypatch.setattr(time, "sleep", waits.append)
        with pytest.raises(FolderBusy) as err:
            RunLock(str(tmp_path)).acquire()
        monkeypatch.undo()
        assert waits == []
        message = str(err.value)
        assert f"run pid {holder.pid} started " in message
        assert "output.base_dir" in message and "--wait" in message and "\n" not in message
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_left_by_kill_9_does_not_block_the_next_run(tmp_path):
    holder = _hold_lock(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (tmp_path / LOCK_NAME).exists()  # the file stays; the kernel dropped the lock
    lock = RunLock(str(tmp_path)).acquire()
    assert lock.holder()["pid"] == os.getpid()
    lock.release()


def test_wait_takes_the_folder_when_the_holder_finishes(tmp_path):
    holder = _hold_lock(tmp_path)
    lines = []
    try:
        with pytest.raises(FolderBusy):
            RunLock(str(tmp_path)).acquire(wait_s=0.3, poll_s=0.1, log=lines.append)
        assert lines and f"pid {holder.pid}" in lines[0]
        subprocess.Popen(["sh", "-c", f"sleep 1; kill {holder.pid}"])
        lock = RunLock(str(tmp_path)).acquire(wait_s=30, poll_s=0.1, log=lines.append)
        lock.release()
    finally:
        holder.kill()
        holder.wait()


# -- completion record, --fresh, last checkpoint -----------------------------------------------------
def test_fresh_keeps_the_old_folder_whole(tmp_path):
    base = tmp_path / "run"
    assert archive(str(base)) is None  # nothing there yet
    (base / "checkpoints").mkdir(parents=True)
    (base / "metrics.json").write_text("{}")
    kept = archive(str(base))
    assert kept and kept.startswith(str(base) + ".")
    assert (Path(kept) / "metrics.json").exists() and not base.exists()


def test_last_checkpoint_reads_the_state_file(tmp_path):
    assert last_checkpoint(str(tmp_path)) is None
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "ckpt-101"\nall_model_checkpoint_paths: "ckpt-90"\n')
    assert last_checkpoint(str(tmp_path)) == (str(tmp_path / "ckpt-101"), 101)


# -- the summary never crashes -------------------------------------------------------------------------
@pytest.mark.parametrize("training, expected", [
    ({}, "no training metrics were written"),
    ({"steps": 30, "resumed_from_step": 30, "train_loss": None, "train_accuracy": None},
     "0 steps this run: the checkpoint was already at step 30"),
    ({"steps": 30, "replicas": 2, "strategy": "S", "global_batch_size": 16},
     "30 steps, 2 replicas (S), global batch 16, final train loss n/a, train accuracy n/a"),
    ({"steps": 60, "resumed_from_step": 30, "train_loss": 0.5, "train_accuracy": 0.75},
     "60 steps (resumed from step 30)"),
])
def test_summary_handles_missing_and_null_fields(training, expected):
    text = "\n".join(summary_lines({"training": training, "verification": {"accuracy": None}}))
    assert expected in text
    assert "accuracy n/a" in text
    assert "\n".join(summary_lines({}))  # an empty record prints too


def test_summary_names_the_chiefs_validation_and_the_code_version():
    record = {"training": {"steps": 30, "train_loss": 0.5, "train_accuracy": 0.75, "val_accuracy": 0.9, "val_loss": 0.25,
                           "val_step": 30},
              "code_version": {"git_commit": "a" * 40, "git_dirty": False, "text": "git aaaaaaaaaaaa"}}
    lines = summary_lines(record)
    assert any(line.endswith("train accuracy 0.750; validation accuracy 0.900, loss 0.2500 at step 30") for line in lines)
    assert "  code                git aaaaaaaaaaaa" in lines


def test_summary_names_the_side_car_evaluation():
    record = {"evaluation": {"step": 80, "loss": 0.0123, "accuracy": 1.0, "examples": 27,
                             "history": [{"step": 40}, {"step": 80}]}}
    assert ("  evaluator           accuracy 1.000, loss 0.0123 at step 80 on 27 validation examples "
            "(2 checkpoint(s) evaluated; scalars in <logs>/validation)") in summary_lines(record)
    assert not any("evaluator" in line for line in summary_lines({"evaluation": ["garbage"]}))


# -- the study and the gate in the summary and run.json ------------------------------------------------
STUDY = {"metric": "val_rmse", "goal": "minimize", "seconds": 41.2, "trials": [
    {"id": "1", "parameters": {"learning_rate": 0.001, "optimizer": "sgd"}, "metric": 0.5, "state": "SUCCEEDED"},
    {"id": "2", "parameters": {"learning_rate": 0.01, "optimizer": "adam"}, "metric": 0.2, "state": "SUCCEEDED"},
    {"id": "3", "parameters": {"learning_rate": 0.05, "optimizer": "sgd"}, "metric": None, "state": "FAILED"},
    {"id": "4", "parameters": {"learning_rate": 0.0003, "optimizer": "adam"}, "metric": 0.3, "state": "SUCCEEDED"}],
         "best_trial": {"id": "2", "parameters": {"learning_rate": 0.01, "optimizer": "adam"}, "metric": 0.2}}
PASSED = {"passed": True, "lines": ["accuracy 0.85 >= 0.8: passed", "loss 0.3 < 0.5: passed"], "missed": "", "notes": []}
MISSED = {"passed": False, "lines": ["accuracy 0.75 >= 0.8: missed"], "notes": [], "missed":
          "serving.gate.thresholds[0]: accuracy 0.75 >= 0.8 missed, so the model is not registered; valid choices: "
          "accuracy >= 0.75 (what this model measured)"}


def test_summary_has_one_line_for_the_study_and_one_for_the_gate():
    lines = summary_lines({"tuning": STUDY, "verified_trial": "2", "gate": PASSED})
    assert ("  study               4 trial(s) in 41 s (3 succeeded, 1 failed); best trial 2: val_rmse 0.2 (minimize) "
            "with learning_rate=0.01 optimizer=adam") in lines
    assert "  gate                passed (2 bar(s)): accuracy 0.85 >= 0.8: passed; loss 0.3 < 0.5: passed" in lines
    missed = summary_lines({"tuning": STUDY, "verified_trial": "4", "gate": MISSED})
    assert any(line.endswith("; the verified model is trial 4's") for line in missed), missed
    assert ("  gate                missed: serving.gate.thresholds[0]: accuracy 0.75 >= 0.8 missed; the model is not "
            "registered") in missed
    for plain in ({}, {"tuning": {}, "gate": {}}, {"tuning": ["garbage"], "gate": "garbage"}):
        assert not any(line.startswith(("  study", "  gate")) for line in summary_lines(plain)), plain
    none_yet = summary_lines({"tuning": {**STUDY, "best_trial": None, "trials": STUDY["trials"][2:3]}})
    assert "  study               1 trial(s) in 41 s (0 succeeded, 1 failed); no trial succeeded" in none_yet


def _tuned_folder(base: Path) -> None:
    """A tuned run's folder as the pipeline leaves it: the study, trial 2's own metrics.json, the verified model
    (trial 2's), the gate's record; and a stale metrics.json at the top that no step of this run wrote."""
    trials = [{**t, "model_dir": str(base / t["id"] / "model")} for t in STUDY["trials"]]
    (base / "2").mkdir(parents=True)
    (base / "tuning.json").write_text(json.dumps({**STUDY, "trials": trials, "best_trial": {
        **STUDY["best_trial"], "model_dir": str(base / "2" / "model")}}))
    (base / "2" / "metrics.json").write_text(json.dumps({"steps": 6, "replicas": 1, "strategy": "S",
                                                         "global_batch_size": 8, "train_loss": 0.5}))
    (base / "metrics.json").write_text(json.dumps({"steps": 99}))
    (base / "verification.json").write_text(json.dumps({"model_dir": str(base / "2" / "model") + "/",
                                                        "gallery": ["big"], "signature": "serving_default"}))
    (base / "gate.json").write_text(json.dumps(PASSED))


def test_run_json_keeps_the_study_and_the_gate_and_a_tuned_runs_dirs_are_the_verified_trials(tmp_path):
    from jobfile import config as config_lib

    _tuned_folder(tmp_path)
    cfg = config_lib.load("tuning", [f"output.base_dir={tmp_path}", 'serving.gate.thresholds=["accuracy >= 0.8"]'])
    summary = run_summary(cfg, 12.0)
    assert summary["tuning"]["best_trial"]["id"] == "2" and summary["verified_trial"] == "2"
    assert summary["gate"] == PASSED and "gallery" not in summary["verification"]
    assert summary["dirs"] == {"model": str(tmp_path / "2" / "model"), "checkpoints": str(tmp_path / "2" / "checkpoints"),
                               "logs": str(tmp_path / "2" / "logs")}
    assert summary["training"]["steps"] == 6  # trial 2's, not the stale top-level metrics.json
    text = "\n".join(summary_lines(summary))
    assert f"model (SavedModel)  {tmp_path / '2' / 'model'}" in text
    assert "  training            trial 2: 6 steps, 1 replicas (S), global batch 8, final train loss 0.5000" in text
    write_record(str(tmp_path), cfg.to_json(), summary)
    record = json.loads((tmp_path / records.RUN_RECORD).read_text())
    assert record["tuning"]["trials"][2]["state"] == "FAILED" and record["tuning"]["metric"] == "val_rmse"
    assert record["gate"] == PASSED and record["summary"]["gate"] == PASSED

    # the same folder run by a job without tuning: or gate: the records there are not this run's
    plain = run_summary(config_lib.load("local", [f"output.base_dir={tmp_path}"]), 12.0)
    assert plain["tuning"] == {} and plain["gate"] == {} and plain["verified_trial"] is None
    assert plain["training"] == {"steps": 99} and plain["dirs"]["model"] == str(tmp_path / "model")
    write_record(str(tmp_path), "{}", plain)
    record = json.loads((tmp_path / records.RUN_RECORD).read_text())
    assert record["tuning"] == {} and record["gate"] == {}


def test_a_tuned_user_trainers_training_line_says_where_its_figures_are():
    line = summary_lines({"tuning": STUDY, "verified_trial": "2", "training": {}, "trainer": {}})
    assert ("  training            trial 2 (the verified model's; every trial under study below): no metrics.json (a user "
            "trainer's figures are its TensorBoard scalars and the metric it reported)") in line


# -- the real command --------------------------------------------------------------------------------
def _start(base: Path, data: str, marker: str, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, RUNS_TEST_MARKER=marker)
    cmd = [sys.executable, "pipelines/run.py", "--set", f"output.base_dir={base}", "--set", "data.source=tfrecord",
           "--set", f"data.path={data}", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, as a terminal's foreground job


def _read_until(proc: subprocess.Popen, needle: str, timeout_s: float = 180) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} not seen within {timeout_s} s; last lines:\n{''.join(lines[-30:])}")


def _finish(proc: subprocess.Popen, timeout_s: float = 240) -> str:
    out, _ = proc.communicate(timeout=timeout_s)
    return out


# -- a shorter config in a folder that holds a longer run ---------------------------------------------------
#: A user's trainer that keeps "checkpoints" as Keras' ModelCheckpoint would: one file per run in
#: AIP_CHECKPOINT_DIR, named by its --steps (no TensorFlow: the record is what is tested), and leaves a model
#: file in AIP_MODEL_DIR (a train step whose chief wrote no model fails).
USER_TRAINER = """
import argparse, json, os
parser = argparse.ArgumentParser()
parser.add_argument("--steps", required=True)
steps = parser.parse_args().steps
if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "chief":
    with open(os.path.join(os.environ["AIP_CHECKPOINT_DIR"], f"ckpt-{steps}"), "w") as f:
        f.write(steps)
    open(os.path.join(os.environ["AIP_MODEL_DIR"], "saved_model.pb"), "wb").close()
print(f"trained {steps} steps", flush=True)
"""


@pytest.mark.process
def test_a_users_trainer_resuming_an_earlier_runs_checkpoints_is_recorded_and_said(tmp_path):
    """A user's trainer is a black box: when the folder held checkpoints of an earlier finished run of another
    config before this run started, ``training.json`` records it (the differences, dotted, from that run's
    ``run.json``) and one ``warning:`` line says it. Checkpoints written after that record (an unfinished later
    run's, whose config is recorded nowhere) are recorded without differences and without a warning."""
    from jobs.steps import calls as steps
    from jobfile import config as config_lib

    (tmp_path / "project" / "trainer").mkdir(parents=True)
    (tmp_path / "project" / "trainer" / "task.py").write_text(USER_TRAINER)
    job = tmp_path / "project" / "job.yaml"
    job.write_text("name: user-steps\ntrainer: {module: trainer.task}\ntopology: {strategy: one_device}\n")
    base = tmp_path / "run"

    def load(steps_arg: str):
        return config_lib.load(str(job), [f"trainer.args=[--steps, '{steps_arg}']", f"output.base_dir={base}"])

    first, lines = load("200"), []
    record = steps.train_local(first, log=lines.append)
    assert "resumed_from_existing_checkpoints" not in record and not [x for x in lines if x.startswith("warning:")]
    write_record(str(base), first.to_json(), {})  # what run.py writes when the pipeline succeeded

    lines = []
    record = steps.train_local(load("30"), log=lines.append)
    earlier = record["resumed_from_existing_checkpoints"]
    assert earlier == {"checkpoints": str(base / "checkpoints"), "files": 1, "earlier_run": {
        "finished": read_record(str(base))["finished"],
        "config_differences": {"trainer.args": {"earlier": ["--steps", "200"], "now": ["--steps", "30"]}}}}
    assert json.loads((base / "training.json").read_text())["resumed_from_existing_checkpoints"] == earlier
    warnings = [x for x in lines if x.startswith("warning:")]
    assert len(warnings) == 1, lines
    assert (f'warning: {base / "checkpoints"} holds checkpoints of an earlier run with another config '
            f'(trainer.args: ["--steps", "200"] → ["--steps", "30"])') in warnings[0]
    assert "--fresh" in warnings[0] and "\n" not in warnings[0]

    lines = []  # the 30-step run never finished (no run.json of it): its checkpoints are newer than the record
    record = steps.train_local(load("30"), log=lines.append)
    assert record["resumed_from_existing_checkpoints"] == {"checkpoints": str(base / "checkpoints"), "files": 2,
                                                           "earlier_run": None}
    assert not [x for x in lines if x.startswith("warning:")]


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_shorter_config_stops_with_one_line_and_keeps_the_longer_run(tmp_path, prepared_data):
    """After a 20-step run, the same folder with ``training.steps=10``: refused before any step runs (exit 2), in
    one line naming what changed and the two ways on, and the 20-step run's folder stays byte for byte as it was
    (no new log, no step run). The trainer's own refusal of a checkpoint past its steps
    (``trainers.train.refuse_checkpoint_past_the_end``) stays for a trainer started on its own."""
    base = tmp_path / "job"
    marker = uuid.uuid4().hex
    one = ("--set", "topology.strategy=one_device", "--set", "topology.worker.replica_count=0",
           "--set", "checkpoint.every_steps=10")
    first = _start(base, prepared_data, marker, *one, "--set", "training.steps=20")
    out = _finish(first)
    assert first.returncode == 0, out
    before = tree_bytes(base)

    second = _start(base, prepared_data, marker, *one, "--set", "training.steps=10", "--set", "scheduling.max_restarts=2")
    out = _finish(second)
    assert second.returncode == 2, out
    assert out.strip().splitlines() == [
        f"error: output.base_dir: {base} holds a finished run of another job (training.steps 20 -> 10); nothing in "
        f"it was changed. Add --fresh to start from step 0 (that run is kept whole as job.<time>), or run elsewhere: "
        f"--set output.base_dir={base}-2"], out
    assert tree_bytes(base) == before  # scheduling.max_restarts is not what makes the model: not named above
    assert_no_processes_left(marker)


@pytest.mark.integration
def test_busy_folder_ctrl_c_kill_9_and_rerun(tmp_path, prepared_data):
    """The issue's sequence on one folder: a second run is refused while the first trains; Ctrl-C stops the
    first with exit 130 and the resume command; kill -9 of a later run leaves no process and no stale lock;
    the next run resumes from the saved step; running it again is not an error. One device, the smallest job that
    has a replica: what is tested is the folder, its lock and the signals (tests/test_resilience.py kills the
    replicas of a multi-worker job)."""
    base = tmp_path / "job"
    marker = uuid.uuid4().hex
    one = ("--set", "topology.strategy=one_device", "--set", "topology.worker.replica_count=0")
    long_run = ("--set", "training.steps=5000", *one)

    first = _start(base, prepared_data, marker, *long_run)
    try:
        _read_until(first, "/5000  loss")  # the console's progress line
        second = _start(base, prepared_data, marker, *long_run)
        out = _finish(second, 60)
        assert second.returncode == EXIT_BUSY, out
        assert f"is in use by run pid {first.pid} started " in out and "Traceback" not in out

        os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        out = _finish(first, 90)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 130, out
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    last_line = out.strip().splitlines()[-1]
    assert last_line.startswith("interrupted at step ") and "resume with: python pipelines/run.py" in last_line
    assert_no_processes_left(marker)
    saved = last_checkpoint(str(base / "checkpoints"))
    assert saved and f"last checkpoint {saved[0]};" in last_line and f"at step {saved[1]};" in last_line

    third = _start(base, prepared_data, marker, *long_run)
    try:
        _read_until(third, f"resumed from step {saved[1]}")
        _read_until(third, "/5000  loss")
    finally:
        os.killpg(third.pid, signal.SIGKILL)  # kill -9 of the whole run: replicas die with the launcher
        third.communicate(timeout=30)
    assert_no_processes_left(marker, wait_s=20)
    saved = last_checkpoint(str(base / "checkpoints"))

    target = saved[1] + 3
    fourth = _start(base, prepared_data, marker, "--set", f"training.steps={target}", *one)
    out = _finish(fourth)
    assert fourth.returncode == 0, out
    assert f"resumed from step {saved[1]}" in out and f"{target} steps (resumed from step {saved[1]})" in out

    again = _start(base, prepared_data, marker, "--set", f"training.steps={target}", *one)
    out = _finish(again, 120)
    assert again.returncode == 0, out
    assert "is already complete" in out and f"{target} steps (resumed from step {saved[1]})" in out
    assert "Traceback" not in out and "--fresh" in out
    assert_no_processes_left(marker)
