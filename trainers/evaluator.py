"""The side-car evaluator (worker pool 3, TF_CONFIG task type ``evaluator``), for every strategy but ``tpu``.

Keras' ``SidecarEvaluator`` pattern, in the project's own loop: the evaluator never joins the training
cluster (no strategy: TensorFlow's multi-worker set-up has no ``evaluator`` task and fails with
``KeyError: 'evaluator'``); it watches the chief's checkpoint folder (``AIP_CHECKPOINT_DIR``) and, whenever a
new checkpoint is complete (``CheckpointManager`` names it in its state file last), restores the model's
weights from it, evaluates them on the whole validation split and records

* TensorBoard scalars under ``<AIP_TENSORBOARD_LOG_DIR>/validation/``: ``loss`` and ``accuracy``, step = the
  checkpoint's step (the training loop writes ``train/loss`` ... into the logs folder itself);
* ``<base>/evaluation.json`` (written atomically): the latest result plus the history of every evaluation.

When several checkpoints appeared since the last look only the newest is evaluated (as ``SidecarEvaluator``
does). It exits 0 after evaluating the checkpoint of the last step, which it computes from the config as the
chief does (``trainers.training_plan``: the known step count, like ``SidecarEvaluator``'s); the chief therefore spends
no time on evaluation. SIGTERM: exits 42 at once (nothing to save: a restart evaluates again).
A user's own trainer gets no such loop: the launcher (and Vertex) runs the user's command in pool 3 with the
evaluator's environment, and that command decides what to do.
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable

from trainers import cluster as cluster_lib, data as data_lib, fileio, precision as precision_lib, record_reader
from jobfile import config as config_lib
from trainers.checkpoint import EXIT_PREEMPTED
from trainers.models import build_model
from jobfile.paths import join
from trainers.training_plan import make_plan
from trainers.strategy import replicas_in_sync

EVALUATION_FILE = "evaluation.json"
VALIDATION_LOGS = "validation"
_STEP_RE = re.compile(r"-(\d+)$")


def latest_checkpoint(directory: str) -> tuple[str, int] | None:
    """(path, step) of the newest complete checkpoint in ``directory`` (its state file), or None."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    path = state.model_checkpoint_path if state else ""
    m = _STEP_RE.search(path or "")
    if not m:
        return None
    if "://" not in path and not path.startswith("/"):
        path = join(directory, path)
    return path, int(m.group(1))


def evaluate(model, dataset) -> dict[str, float]:
    """Mean sparse cross-entropy loss and accuracy of ``model`` over every batch of ``dataset``."""
    import keras
    import numpy as np
    import tensorflow as tf

    @tf.function
    def batch_sums(images, labels):
        probs = tf.cast(model(images, training=False), tf.float32)
        loss = keras.losses.sparse_categorical_crossentropy(labels, probs)
        correct = tf.equal(tf.argmax(probs, -1, output_type=tf.int32), tf.cast(labels, tf.int32))
        return tf.stack([tf.reduce_sum(loss), tf.reduce_sum(tf.cast(correct, tf.float32)),
                         tf.cast(tf.size(labels), tf.float32)])

    total = np.zeros(3)
    for images, labels in dataset:
        total += batch_sums(images, labels).numpy()
    if total[2] == 0:
        raise ValueError("the validation split is empty")
    return {"loss": float(total[0] / total[2]), "accuracy": float(total[1] / total[2]), "examples": int(total[2])}


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001
    """SIGTERM (maintenance, Spot, the launcher stopping the job): nothing to save, a restart evaluates again."""
    import os
    import sys

    print(f"evaluator: SIGTERM received; exiting {EXIT_PREEMPTED}", flush=True)
    sys.stdout.flush()
    os._exit(EXIT_PREEMPTED)


def run_evaluator(cfg: config_lib.JobConfig, env: dict[str, str] | None = None, poll_s: float = 1.0,
                  sleep: Callable[[float], None] = time.sleep, batch_size: int = 64) -> dict[str, Any]:
    """Evaluate each new checkpoint until the last step's; returns the last result (as in evaluation.json).
    SIGTERM ends the process (exit 42) while it runs; the caller's handler is put back when it returns."""
    import signal

    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _evaluate_checkpoints(cfg, env, poll_s, sleep, batch_size)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _evaluate_checkpoints(cfg: config_lib.JobConfig, env: dict[str, str] | None, poll_s: float,
                          sleep: Callable[[float], None], batch_size: int) -> dict[str, Any]:
    import tensorflow as tf

    info = cluster_lib.read_cluster(env)
    base = config_lib.resolved_base_dir(cfg)
    dirs = cluster_lib.output_dirs(info, base)
    plan = make_plan(cfg, replicas_in_sync(cfg))
    precision_lib.apply(precision_lib.Choice("float32", False, "evaluation"))  # variables are float32 anyway
    model = build_model(cfg.model.name, plan.image_size, len(plan.classes))
    dataset = data_lib.eval_dataset(plan.data_dir, plan.manifest, batch_size)
    checkpoint = tf.train.Checkpoint(model=model)
    writer = tf.summary.create_file_writer(join(dirs["logs"], VALIDATION_LOGS))
    print(f"evaluator: evaluating each new checkpoint in {dirs['checkpoints']} on the validation split until step "
          f"{plan.total_steps}", flush=True)
    earlier = record_reader.read_or_none(join(base, EVALUATION_FILE))  # a restarted evaluator keeps the history
    earlier = earlier if isinstance(earlier, dict) else {}
    history: list[dict[str, Any]] = [h for h in earlier.get("history") or []
                                     if isinstance(h, dict) and isinstance(h.get("step"), int)]
    done_step = None
    while True:
        found = latest_checkpoint(dirs["checkpoints"])
        if found and found[1] != done_step:
            path, step = found
            try:
                checkpoint.read(path).expect_partial().assert_existing_objects_matched()
            except tf.errors.NotFoundError:  # rotated away (checkpoint.keep) between listing and reading
                sleep(poll_s)
                continue
            result = {"step": step, "checkpoint": path, **evaluate(model, dataset), "split": "validation"}
            with writer.as_default():
                tf.summary.scalar("loss", result["loss"], step=step)
                tf.summary.scalar("accuracy", result["accuracy"], step=step)
            writer.flush()
            history = sorted([h for h in history if h.get("step") != step]
                             + [{k: result[k] for k in ("step", "loss", "accuracy")}], key=lambda h: h["step"])
            record = {**result, "final": step >= plan.total_steps, "total_steps": plan.total_steps,
                      "history": history}
            fileio.write_json_atomic(join(base, EVALUATION_FILE), record)
            print(f"evaluated {path} (step {step}/{plan.total_steps}): loss={result['loss']:.4f} "
                  f"accuracy={result['accuracy']:.4f} on {result['examples']} validation examples", flush=True)
            done_step = step
            if step >= plan.total_steps:
                print("evaluator: the last checkpoint is evaluated; done", flush=True)
                return record
        sleep(poll_s)
