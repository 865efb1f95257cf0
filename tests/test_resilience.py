"""Checkpoint-resume that survives anything (issue 4): kill -9 of any replica, SIGTERM preemption, damaged
and half-written checkpoints, a finished job run again, a checkpoint folder of another job.

Real 2-worker MultiWorkerMirroredStrategy jobs run through the local launcher (``steps.run_local``) on the
shared tiny data set. Every interrupted job is compared BITWISE with one uninterrupted reference run of the
same config (module-scoped, run once): every variable of the final checkpoint (model weights, Adam slots,
iteration count, learning rate) and every variable of the exported SavedModel. Only ``save_counter`` (how
many saves this run made, not training state) is left out.

``training.log_every_steps=1`` makes every replica print every step, so a replica's log says exactly which
step it had finished when it was killed. The launcher's ``[launcher] restart`` line comes after every
replica of the failed attempt has been killed and reaped, so what the chief's checkpoint folder holds at
that moment is exactly what the next attempt can restore.
"""
from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import Killer, assert_no_processes_left, job_config
from tests.tiers import tier
from jobs.steps import calls as steps
from jobs.local.process.faults import attempt_lines, checkpoint_variables
from trainers.checkpoint import EXIT_PREEMPTED, PreemptionFlag, SaveSchedule

STEPS, EVERY = 30, 5
REFERENCE = (f"training.steps={STEPS}", f"checkpoint.every_steps={EVERY}", "checkpoint.keep=3",
             "training.log_every_steps=1", "training.deterministic=true")
JOB_TIMEOUT_S = 180

# Kill steps: random, but the same on every run.
_rng = random.Random(20240404)
CHIEF_KILL_STEP = _rng.randint(6, 25)
WORKER_KILL_STEP = _rng.randint(6, 25)
SIGTERM_STEP = 11  # preemption then lands on 12 or 13: a step no schedule would save at

STEP_RE = re.compile(r"^\[(chief|worker)-0\] step (\d+)/(\d+) ")
PREEMPTED_RE = re.compile(r"^\[(chief|worker)-0\] preempted: checkpoint (\S+) at step (\d+); exiting (\d+)$")


# -- helpers -----------------------------------------------------------------------------------------
def _cfg(base, data, *extra):
    return job_config(base, data, *REFERENCE, *extra)


def _tf():
    import tensorflow as tf

    return tf


def assert_bitwise_equal(got, want) -> None:
    a, b = checkpoint_variables(got), checkpoint_variables(want)
    assert sorted(a) == sorted(b), f"different variables in {got} and {want}"
    assert len(a) >= 10, f"suspiciously few variables in {want}: {sorted(a)}"
    differ = [name for name in a if a[name] != b[name]]
    assert not differ, f"{len(differ)}/{len(a)} variables of {got} differ from {want}: {differ[:5]}"


def assert_same_final_model(base: Path, reference: Path) -> None:
    """Final checkpoint (model + optimizer + step) and exported SavedModel bitwise equal the reference."""
    final = _tf().train.latest_checkpoint(str(base / "checkpoints"))
    assert final and final.endswith(f"ckpt-{STEPS}"), final
    assert_bitwise_equal(final, reference / "checkpoints" / f"ckpt-{STEPS}")
    iterations = _tf().train.load_checkpoint(final).get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")
    assert int(iterations) == STEPS
    assert_bitwise_equal(base / "model" / "variables" / "variables",
                         reference / "model" / "variables" / "variables")


def latest_in_state_file(checkpoint_dir: Path) -> int | None:
    """What CheckpointManager's ``checkpoint`` state file calls the latest checkpoint (None: no file)."""
    state = checkpoint_dir / "checkpoint"
    if not state.exists():
        return None
    m = re.search(r'^model_checkpoint_path: "(?:.*/)?ckpt-(\d+)"$', state.read_text(), re.MULTILINE)
    return int(m.group(1)) if m else None


def steps_of(lines: list[str], role: str) -> list[int]:
    return [int(m.group(2)) for m in map(STEP_RE.match, lines) if m and m.group(1) == role]


def assert_resumed(lines: list[str], step: int, last: int, source: str = "") -> None:
    """Both replicas logged ``resumed from step <step> (<source>...`` and then trained exactly step+1..last."""
    for role in ("chief", "worker"):
        assert any(line.startswith(f"[{role}-0] resumed from step {step} ({source}") for line in lines), role
        assert steps_of(lines, role) == list(range(step + 1, last + 1)), role


class Recorder(Killer):
    """A :class:`Killer` that also records the chief's checkpoint folder when the launcher restarts the job
    (every replica of the failed attempt is dead and reaped by then): ``(latest step, file names)``."""

    def __init__(self, marker, pool, trigger, sig=signal.SIGKILL):
        super().__init__(marker, pool, trigger, sig)
        self.checkpoints_at_restart: list[tuple[int | None, list[str]]] = []

    def __call__(self, line: str) -> None:
        super().__call__(line)
        if line.startswith("[launcher] restart "):
            d = Path(self.marker) / "checkpoints"
            self.checkpoints_at_restart.append((latest_in_state_file(d), sorted(p.name for p in d.iterdir())))


def copy_checkpoints(reference: Path, base: Path) -> Path:
    """A new job folder whose checkpoint folder is a copy of the reference's (nothing else)."""
    base.mkdir(parents=True)
    shutil.copytree(reference / "checkpoints", base / "checkpoints")
    return base / "checkpoints"


def watchdog_children() -> list[int]:
    """Start-up watchdog processes started by THIS process (they SIGKILL it if left armed)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(rest[1]) == os.getpid() and rest[0] != "Z" and b"did not finish within" in cmd:
            found.append(int(entry))
    return found


def run_in_process(cfg):
    """``train_and_evaluate`` in this process as a plain single-replica job (no cluster environment)."""
    from trainers.train import train_and_evaluate

    before = signal.getsignal(signal.SIGTERM)
    try:
        return train_and_evaluate(cfg, env={})
    finally:
        assert signal.getsignal(signal.SIGTERM) == before, "train_and_evaluate left its SIGTERM handler installed"
        assert watchdog_children() == [], "train_and_evaluate left its start-up watchdog armed"


ONE_PROCESS = ("topology.strategy=one_device", "topology.worker.replica_count=0")


# -- the uninterrupted reference ------------------------------------------------------------------------
@pytest.fixture(scope="module")
@tier("integration")
def reference(tmp_path_factory, prepared_data) -> Path:
    base = tmp_path_factory.mktemp("reference")
    lines: list[str] = []
    result = steps.run_local(_cfg(base, prepared_data), timeout_s=JOB_TIMEOUT_S, log=lines.append)
    assert result.returncode == 0 and result.attempts == 1, "\n".join(lines[-40:])
    assert steps_of(lines, "chief") == list(range(1, STEPS + 1))
    assert_no_processes_left(str(base))
    return base


@pytest.mark.integration
def test_the_chief_validates_at_every_checkpoint_and_reports_the_last_to_hypertune(reference):
    """The reference run (chief + worker, checkpoint every 5 steps): ``validation/loss`` and
    ``validation/accuracy`` at every checkpoint step beside the ``train/`` series; the last point is
    metrics.json's ``val_*`` and what cloudml-hypertune's file holds (in the run folder: the local launcher
    gives a replica no CLOUD_ML_* variable). The bitwise resume tests below compare against this very run,
    so the validation passes cannot have changed the training."""
    from jobs.run_records.tensorboard import read_scalars

    scalars = read_scalars(str(reference / "logs"))
    steps = list(range(EVERY, STEPS + 1, EVERY))
    assert [s for s, _ in scalars["validation/loss"]] == steps and [s for s, _ in scalars["validation/accuracy"]] == steps
    assert "train/loss" in scalars
    metrics = json.loads((reference / "metrics.json").read_text())
    assert metrics["val_step"] == STEPS and metrics["val_examples"] > 0
    assert abs(scalars["validation/loss"][-1][1] - metrics["val_loss"]) < 1e-6
    assert metrics["examples_per_second"] == pytest.approx(scalars["train/examples_per_second"][-1][1], rel=1e-6)
    lines = [json.loads(line) for line in (reference / "hypertune" / "output.metrics").read_text().splitlines()]
    assert [sorted(set(x) - {"timestamp", "trial", "global_step", "checkpoint_path"}) for x in lines] == \
        [["val_accuracy"], ["val_loss"]]
    assert float(lines[0]["val_accuracy"]) == metrics["val_accuracy"] and lines[1]["global_step"] == str(STEPS)
    assert float(lines[1]["val_loss"]) == metrics["val_loss"]


# -- kill -9 at a random step -----------------------------------------------------------------------------
def _kill_and_resume(tmp_path, prepared_data, reference, victim: str, kill_step: int) -> None:
    base = tmp_path / f"kill-{victim}"
    pool = "workerpool0" if victim == "chief" else "workerpool1"
    rec = Recorder(str(base), pool, f"[{victim}-0] step {kill_step}/")
    try:
        result = steps.run_local(_cfg(base, prepared_data, "scheduling.max_restarts=2"), timeout_s=JOB_TIMEOUT_S,
                                log=rec)
        assert rec.fired, f"never saw the trigger line for step {kill_step}"
        assert result.returncode == 0 and result.attempts == 2 and len(result.restarts) == 1, result.message
        restart = result.restarts[0]
        assert restart.attempt == 2
        assert restart.failure.name == f"{victim}-0" and restart.failure.exit_status == -signal.SIGKILL, \
            restart.failure.describe()

        first = attempt_lines(rec.lines, 1)
        victim_last = max(steps_of(first, victim))
        chief_last = max(steps_of(first, "chief"))
        assert victim_last >= kill_step
        # What restore can pick up: the newest checkpoint in the state file once every replica was dead.
        latest, files = rec.checkpoints_at_restart[0]
        assert restart.resumed_step == latest, (restart.resumed_step, latest, files)
        assert f"ckpt-{latest}.index" in files and f"ckpt-{latest}.data-00000-of-00001" in files
        # ... is the last every-5-steps checkpoint the chief reached before it died (or, had the kill landed
        # in the middle of the save of the step it had just finished, the one before: never a half one).
        resumed = restart.resumed_step
        assert resumed % EVERY == 0 and resumed <= chief_last, (resumed, chief_last)
        assert resumed == chief_last // EVERY * EVERY or (chief_last % EVERY == 0 and resumed == chief_last - EVERY), \
            (resumed, chief_last)

        assert_resumed(attempt_lines(rec.lines, 2), resumed, STEPS)
        assert_same_final_model(base, reference)
    finally:
        assert_no_processes_left(str(base))


@pytest.mark.integration
@pytest.mark.timeout(360)
def test_kill_9_of_the_chief_at_a_random_step_resumes_exactly(tmp_path, prepared_data, reference):
    _kill_and_resume(tmp_path, prepared_data, reference, "chief", CHIEF_KILL_STEP)


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_kill_9_of_the_worker_at_a_random_step_resumes_exactly(tmp_path, prepared_data, reference):
    _kill_and_resume(tmp_path, prepared_data, reference, "worker", WORKER_KILL_STEP)


# -- SIGTERM preemption -----------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_sigterm_to_the_worker_saves_everywhere_at_the_next_step_exits_42_and_resumes_there(
        tmp_path, prepared_data, reference):
    base = tmp_path / "sigterm"
    rec = Recorder(str(base), "workerpool1", f"[worker-0] step {SIGTERM_STEP}/", signal.SIGTERM)
    try:
        result = steps.run_local(_cfg(base, prepared_data, "scheduling.max_restarts=1"), timeout_s=JOB_TIMEOUT_S,
                                log=rec)
        assert rec.fired
        assert result.returncode == 0 and result.attempts == 2 and len(result.restarts) == 1, result.message
        restart = result.restarts[0]
        assert restart.failure.exit_status == EXIT_PREEMPTED == 42, restart.failure.describe()

        first = attempt_lines(rec.lines, 1)
        preempted = {m.group(1): m for m in map(PREEMPTED_RE.match, first) if m}
        assert set(preempted) == {"chief", "worker"}, "both replicas must save and exit 42"
        n = int(preempted["chief"].group(3))
        assert int(preempted["worker"].group(3)) == n and {m.group(4) for m in preempted.values()} == {"42"}
        chief_dir = base / "checkpoints"
        assert preempted["chief"].group(2) == f"{chief_dir}/ckpt-{n}"
        assert preempted["worker"].group(2).startswith(f"{chief_dir}/workertemp_")  # the throwaway copy

        # "The next step boundary": the step that was running when the signal was handled, or the next one.
        worker = [line for line in first if line.startswith("[worker-0] ")]
        noticed = next(i for i, line in enumerate(worker) if "SIGTERM received" in line)
        before = max(steps_of(worker[:noticed], "worker"))
        assert before >= SIGTERM_STEP and n in (before + 1, before + 2), (before, n)
        for role in ("chief", "worker"):  # nobody trained past it
            assert max(steps_of(first, role)) == n, role

        latest, files = rec.checkpoints_at_restart[0]
        assert latest == n and f"ckpt-{n}.index" in files, (latest, files)
        assert restart.resumed_step == n
        assert_resumed(attempt_lines(rec.lines, 2), n, STEPS)
        assert_same_final_model(base, reference)
    finally:
        assert_no_processes_left(str(base))


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_sigterm_right_after_start_up_is_not_swallowed_by_tensorflow(tmp_path, prepared_data):
    """Creating MultiWorkerMirroredStrategy installs TensorFlow's own C++ SIGTERM handler, which only
    records the signal. A SIGTERM between strategy creation and the first step (model build, restore,
    input pipeline) must still reach the trainer: save at step 1, exit 42, resume from 1."""
    base = tmp_path / "early"
    cfg = job_config(base, prepared_data, "training.steps=4", "checkpoint.every_steps=0", "training.log_every_steps=1",
                     "scheduling.max_restarts=1")
    rec = Recorder(str(base), "workerpool1", "[worker-0] INFO trainers.data: input pipeline", signal.SIGTERM)
    try:
        result = steps.run_local(cfg, timeout_s=JOB_TIMEOUT_S, log=rec)
        assert rec.fired
        first = attempt_lines(rec.lines, 1)
        assert any(line.startswith("[worker-0] WARNING trainers.checkpoint: SIGTERM received") for line in first), \
            "the worker never saw the SIGTERM"
        assert result.attempts == 2 and result.restarts[0].failure.exit_status == EXIT_PREEMPTED, result.message
        preempted = {m.group(1): int(m.group(3)) for m in map(PREEMPTED_RE.match, first) if m}
        assert set(preempted) == {"chief", "worker"} and len(set(preempted.values())) == 1
        n = preempted["chief"]
        assert n <= 2 and result.restarts[0].resumed_step == n
        assert result.returncode == 0
    finally:
        assert_no_processes_left(str(base))


# -- damaged, half-written and foreign checkpoints ---------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_truncated_latest_checkpoint_is_skipped_with_a_warning_and_the_previous_one_used(
        tmp_path, prepared_data, reference):
    base = tmp_path / "truncated"
    ckdir = copy_checkpoints(reference, base)
    data = ckdir / f"ckpt-{STEPS}.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    lines: list[str] = []
    try:
        result = steps.run_local(_cfg(base, prepared_data, f"training.steps={STEPS + 5}", "scheduling.max_restarts=0"),
                                timeout_s=JOB_TIMEOUT_S, log=lines.append)
        assert result.returncode == 0 and result.attempts == 1, result.message
        for role in ("chief", "worker"):
            assert any(line.startswith(f"[{role}-0] WARNING trainers.checkpoint: checkpoint {ckdir}/ckpt-{STEPS} "
                                       "is damaged or incomplete") for line in lines), role
        assert_resumed(lines, STEPS - EVERY, STEPS + 5, source=f"{ckdir}/ckpt-{STEPS - EVERY})")
        assert latest_in_state_file(ckdir) == STEPS + 5
        # The damaged one was trained again from ckpt-25 and rewritten: bitwise the uninterrupted one (so the
        # variables the damaged file had already loaded before the error were all overwritten).
        assert data.stat().st_size == (reference / "checkpoints" / data.name).stat().st_size
        assert_bitwise_equal(ckdir / f"ckpt-{STEPS}", reference / "checkpoints" / f"ckpt-{STEPS}")
    finally:
        assert_no_processes_left(str(base))


DAMAGE = {
    "truncated data": lambda index, data: os.truncate(data, os.path.getsize(data) // 2),
    "empty data": lambda index, data: os.truncate(data, 0),
    "one flipped byte in the data": lambda index, data: _flip_byte(data),
    "garbage index": lambda index, data: Path(index).write_bytes(b"x" * os.path.getsize(index)),
    "missing data": lambda index, data: os.remove(data),
}


def _flip_byte(path) -> None:
    blob = bytearray(Path(path).read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    Path(path).write_bytes(bytes(blob))


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_restore_skips_any_kind_of_damage_to_the_latest_checkpoint(tmp_path, reference, damage, caplog):
    """Checkpointer.restore on its own: whatever is wrong with ckpt-30, it warns naming it and restores
    ckpt-25 completely (nothing of the damaged one left behind in any variable)."""
    import keras

    from trainers.checkpoint import Checkpointer
    from trainers.models import build_model

    ckdir = copy_checkpoints(reference, tmp_path / "job")
    DAMAGE[damage](f"{ckdir}/ckpt-{STEPS}.index", f"{ckdir}/ckpt-{STEPS}.data-00000-of-00001")
    fingerprint = json.loads((ckdir / "job.json").read_text())
    model = build_model(fingerprint["model"], fingerprint["image_size"], len(fingerprint["classes"]))
    optimizer = keras.optimizers.Adam(learning_rate=0.5)
    optimizer.build(model.trainable_variables)
    ckpt = _tf().train.Checkpoint(model=model, optimizer=optimizer)

    caplog.set_level(logging.WARNING, logger="trainers.checkpoint")
    restored = Checkpointer(ckpt, str(ckdir), str(ckdir), 3, fingerprint, is_chief=True).restore()
    assert restored == f"{ckdir}/ckpt-{STEPS - EVERY}"
    assert f"checkpoint {ckdir}/ckpt-{STEPS} is damaged or incomplete" in caplog.text
    assert int(optimizer.iterations.numpy()) == STEPS - EVERY
    ckpt.write(str(tmp_path / "restored" / "now"))
    assert_bitwise_equal(tmp_path / "restored" / "now", ckdir / f"ckpt-{STEPS - EVERY}")


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_half_written_newer_checkpoint_is_invisible_to_restore(tmp_path, prepared_data, reference, caplog, capsys):
    """A save killed half-way leaves files but no entry in the ``checkpoint`` state file (written last,
    atomically): restore must not see them. Single process, same checkpoint folder."""
    base = tmp_path / "halfwritten"
    ckdir = copy_checkpoints(reference, base)
    state_before = (ckdir / "checkpoint").read_text()
    src = ckdir / f"ckpt-{STEPS - EVERY}"
    shutil.copyfile(f"{src}.index", ckdir / "ckpt-999.index")  # newest on disk, by name and by time
    blob = Path(f"{src}.data-00000-of-00001").read_bytes()
    (ckdir / "ckpt-999.data-00000-of-00001").write_bytes(blob[: len(blob) // 2])

    caplog.set_level(logging.WARNING)
    result = run_in_process(_cfg(base, prepared_data, *ONE_PROCESS))
    out = capsys.readouterr().out
    assert f"resumed from step {STEPS} ({ckdir}/ckpt-{STEPS})" in out
    assert not re.search(r"^step \d+/", out, re.MULTILINE), "trained although nothing was left to train"
    assert result["resumed_from_step"] == STEPS and result["steps"] == STEPS
    assert "ckpt-999" not in caplog.text and "ckpt-999" not in out
    assert (ckdir / "checkpoint").read_text() == state_before
    assert_bitwise_equal(base / "model" / "variables" / "variables",
                         reference / "model" / "variables" / "variables")


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_resuming_a_finished_job_trains_nothing_and_changes_nothing(tmp_path, prepared_data, reference):
    base = tmp_path / "again"
    ckdir = copy_checkpoints(reference, base)
    before = {p.name: p.read_bytes() for p in ckdir.iterdir()}
    lines: list[str] = []
    try:
        result = steps.run_local(_cfg(base, prepared_data), timeout_s=JOB_TIMEOUT_S, log=lines.append)
        assert result.returncode == 0 and result.attempts == 1, result.message
        assert_resumed(lines, STEPS, STEPS)  # and no training step after it
        assert {p.name: p.read_bytes() for p in ckdir.iterdir()} == before, "a finished job saved again"
        assert json.loads((base / "metrics.json").read_text())["resumed_from_step"] == STEPS
        assert_same_final_model(base, reference)
    finally:
        assert_no_processes_left(str(base))


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_checkpoint_folder_of_another_job_is_refused_naming_output_base_dir(tmp_path, prepared_data, reference,
                                                                               monkeypatch, capsys):
    from trainers import task
    from jobfile.errors import ConfigError

    base = tmp_path / "foreign"
    ckdir = copy_checkpoints(reference, base)
    before = {p.name: p.read_bytes() for p in ckdir.iterdir()}

    # Another model in the same output.base_dir: ConfigError before anything is loaded.
    with pytest.raises(ConfigError) as exc:
        run_in_process(_cfg(base, prepared_data, *ONE_PROCESS, "model.name=mobilenet_v2"))
    [p] = exc.value.problems
    assert p.field == "output.base_dir"
    assert str(ckdir) in p.message and "'small_cnn'" in p.message and "'mobilenet_v2'" in p.message
    assert "will not be loaded" in p.message

    # Another optimizer, through the worker entry point: exit 2 and one line naming output.base_dir.
    for var in ("CLUSTER_SPEC", "TF_CONFIG", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        monkeypatch.delenv(var, raising=False)
    cfg = _cfg(base, prepared_data, *ONE_PROCESS, "training.optimizer=sgd")
    capsys.readouterr()
    before_handler = signal.getsignal(signal.SIGTERM)
    assert task.main(["--config-json", cfg.to_json()]) == 2
    assert signal.getsignal(signal.SIGTERM) == before_handler and watchdog_children() == []
    err = capsys.readouterr().err
    assert re.search(r"^error: output\.base_dir: .*holds checkpoints of a different job.*optimizer: checkpoint has "
                     r"'adam', this job 'sgd'", err, re.MULTILINE), err

    assert {p.name: p.read_bytes() for p in ckdir.iterdir()} == before, "the foreign checkpoints were touched"
    assert not (base / "model").exists() and not (base / "metrics.json").exists()


# -- time-based checkpoints --------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(240)
def test_time_based_checkpoints_without_a_step_schedule(tmp_path, prepared_data):
    base = tmp_path / "timed"
    total = 200  # enough steps that even a fast CPU spends several 0.05 s periods on them
    result = run_in_process(job_config(base, prepared_data, *ONE_PROCESS, f"training.steps={total}",
                                       "checkpoint.every_steps=0", "checkpoint.every_seconds=0.05",
                                       "checkpoint.keep=500", "training.log_every_steps=50"))
    assert result["steps"] == total
    saved = sorted(int(m.group(1)) for p in (base / "checkpoints").iterdir()
                   if (m := re.fullmatch(r"ckpt-(\d+)\.index", p.name)))
    assert saved[-1] == total  # the last step is always saved
    assert len(saved) >= 3, f"expected time-based checkpoints before step {total}, got {saved}"
    assert latest_in_state_file(base / "checkpoints") == total
    # in a test process, hypertune writes where CLOUD_ML_HP_METRIC_FILE says (tests/conftest.py), not /tmp
    reported = Path(os.environ["CLOUD_ML_HP_METRIC_FILE"]).read_text().splitlines()
    assert json.loads(reported[-1])["val_loss"] == str(result["val_loss"])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_save_schedule_every_n_steps_ignores_the_clock():
    clock = FakeClock()
    s = SaveSchedule(every_steps=5, every_seconds=0, clock=clock)
    due = []
    for step in range(1, 21):
        clock.now += 1e6
        due.append(s.due(step))
    assert [step for step, d in zip(range(1, 21), due) if d] == [5, 10, 15, 20]


def test_save_schedule_every_t_seconds_counts_from_start_and_from_the_last_save():
    clock = FakeClock()
    s = SaveSchedule(every_steps=0, every_seconds=10, clock=clock)
    clock.now += 9.999
    assert not s.due(1) and not s.due(5)
    clock.now += 0.001
    assert s.due(6)
    s.saved()
    assert not s.due(7)
    clock.now += 9.5
    assert not s.due(8)
    clock.now += 0.5
    assert s.due(9) and s.due(9)  # asking does not reset: only a save does
    s.saved()
    assert not s.due(10)


def test_save_schedule_steps_or_seconds_whichever_comes_first():
    clock = FakeClock()
    s = SaveSchedule(every_steps=4, every_seconds=30, clock=clock)
    assert not s.due(1) and s.due(4)
    s.saved()
    clock.now += 31
    assert s.due(5)
    s.saved()
    assert not s.due(6) and s.due(8)


def test_save_schedule_off_never_saves():
    clock = FakeClock()
    s = SaveSchedule(every_steps=0, every_seconds=0, clock=clock)
    clock.now += 1e9
    assert not any(s.due(step) for step in range(1, 1000))


def test_preemption_flag_is_set_by_sigterm_without_stopping_the_process():
    flag = PreemptionFlag()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        flag.install()
        assert not flag.signalled
        for _ in range(2):  # a second one is harmless too
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 5
            while not flag.signalled and time.monotonic() < deadline:
                time.sleep(0.01)  # the handler runs in this (main) thread at its next check
            assert flag.signalled
    finally:
        signal.signal(signal.SIGTERM, previous)


class _TwoReplicas:
    """A stand-in strategy whose other replica restored ``other_step``."""

    def __init__(self, mine, other_step):
        self.other, self.mean = float(other_step), (float(mine) + float(other_step)) / 2

    def run(self, fn):
        return fn()

    def reduce(self, op, value, axis=None):
        import tensorflow as tf

        if value.shape == (2,):  # [step, 1]
            return value + tf.constant([self.other, 1.0])
        return value + abs(self.other - self.mean)  # |step - mean| summed over both replicas


def test_replicas_must_agree_on_the_restored_step():
    import tensorflow as tf

    from trainers.train import _agree_on_step

    # the stand-in runs as the plain Python it is inside the trainer's tf.function: AutoGraph converting its methods
    # failed in some processes, after other tests' conversions ("tf____init__() missing ... 'other_step'")
    for name in ("run", "reduce"):
        method = getattr(_TwoReplicas, name)
        if not hasattr(method, "__wrapped__"):
            setattr(_TwoReplicas, name, tf.autograph.experimental.do_not_convert(method))

    _agree_on_step(_TwoReplicas(20, 20), 20)  # same step: fine
    with pytest.raises(RuntimeError, match="replicas restored different checkpoints .*step 20"):
        _agree_on_step(_TwoReplicas(20, 15), 20)
