"""A user's own Keras trainer with ``trainers.preemption``'s callbacks, sent SIGTERM mid-training (as Vertex stops a
Spot or maintained replica): it saves before exiting ``EXIT_PREEMPTED``, and started again it resumes from that
backup (the epoch in progress begun again, with the weights at the signal) and finishes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

TRAINER = textwrap.dedent('''
    import os, time
    import numpy as np
    from trainers.preemption import keras_module, preemption_callbacks

    keras = keras_module()
    keras.utils.set_random_seed(0)
    x = np.random.rand(256, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")

    class Progress(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            print(f"epoch-begin {epoch}", flush=True)

        def on_train_batch_end(self, batch, logs=None):
            print(f"batch {batch}", flush=True)
            time.sleep(float(os.environ.get("BATCH_SLEEP", "0")))

    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[*preemption_callbacks(), Progress()])
    print("done", flush=True)
''')


def _start(script: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3", "tf_keras"])
def test_a_user_trainer_saves_on_sigterm_and_resumes(tmp_path, legacy):
    script = tmp_path / "task.py"
    script.write_text(TRAINER)
    checkpoints = tmp_path / "checkpoints"
    env = {"AIP_CHECKPOINT_DIR": str(checkpoints) + "/", "BATCH_SLEEP": "0.1", "TF_CPP_MIN_LOG_LEVEL": "2",
           "TF_USE_LEGACY_KERAS": legacy}
    proc = _start(script, env)
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # mid-training: the second epoch's fourth batch
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.strip())
            if "epoch-begin 1" in seen and line.strip() == "batch 3":
                proc.send_signal(signal.SIGTERM)
                break
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "epoch-begin 1" in seen, seen[-5:]
    assert proc.returncode == 42, stderr[-2000:]
    assert "done" not in stdout  # fit did not return: nothing after it ran on half-trained weights
    assert "SIGTERM: saved a backup in" in stderr and "during epoch 2" in stderr
    if legacy == "0":
        metadata = json.loads((checkpoints / "backup" / "training_metadata.json").read_text())
        assert metadata["epoch"] == 1  # the epoch in progress, begun again on restart
    else:
        assert (checkpoints / "backup" / "chief" / "checkpoint").is_file()  # tf_keras' own layout

    again = _start(script, {**env, "BATCH_SLEEP": "0"})
    try:
        stdout, stderr = again.communicate(timeout=300)
    finally:
        if again.poll() is None:
            again.kill()
            again.wait()
    assert again.returncode == 0, stderr[-2000:]
    epochs = [ln for ln in stdout.splitlines() if ln.startswith("epoch-begin")]
    assert epochs == ["epoch-begin 1", "epoch-begin 2"]  # resumed: epoch 0 is not trained again
    assert stdout.strip().endswith("done")
    # a finished fit removes its backup (tf_keras leaves the empty folder)
    assert not [p for p in checkpoints.rglob("*") if p.is_file()]


def test_backup_dir_needs_a_place(monkeypatch, tmp_path):
    from trainers.preemption import backup_dir

    monkeypatch.delenv("AIP_CHECKPOINT_DIR", raising=False)
    with pytest.raises(ValueError, match="AIP_CHECKPOINT_DIR is not set"):
        backup_dir()
    monkeypatch.setenv("AIP_CHECKPOINT_DIR", str(tmp_path) + "/")
    assert backup_dir() == f"{tmp_path}/backup"
    assert backup_dir("/elsewhere") == "/elsewhere"
