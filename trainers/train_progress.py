"""What a training loop says and checks as it goes (the built-in trainer's ``trainers.train`` and parameter-server
``trainers.train_ps`` loops): :class:`Progress`, one line every ``training.log_every_steps`` steps with the rate
in examples per second (and the TensorBoard scalars), and :class:`Validation`, the pass over the validation
split at the end of an epoch or of training. No TensorFlow at import: it is imported where a step is taken.
"""
from __future__ import annotations

import time
from typing import Any

from trainers import data as data_lib
from jobfile import config as config_lib
from jobfile.errors import ConfigError
from trainers.evaluator import VALIDATION_LOGS
from jobfile.paths import join


class Progress:
    """What a training loop reports as steps complete: examples/s per epoch (the figure the benchmarks
    compare), and every ``log_every`` steps (and at the last) a ``step N/T loss=... accuracy=...`` line plus the
    ``train/`` TensorBoard scalars (into the default summary writer)."""

    def __init__(self, cfg: config_lib.JobConfig, plan, start_step: int):
        import numpy as np

        self.total, self.per_epoch, self.batch = plan.total_steps, plan.steps_per_epoch, plan.global_batch
        self.log_every = cfg.training.log_every_steps
        self.t0, self.seen0 = time.monotonic(), start_step
        self.epoch_start, self.epoch_rates = (self.t0, start_step), []
        self.window, self.final = np.zeros(3), {}

    def add(self, sums) -> None:
        self.window += sums

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (the chief's validation passes) out of every throughput figure: they measure
        training, the figure the benchmarks compare."""
        self.t0 += seconds
        self.epoch_start = (self.epoch_start[0] + seconds, self.epoch_start[1])

    def done(self, step: int, force_log: bool = False) -> None:
        import tensorflow as tf

        if step % self.per_epoch == 0 or step == self.total:
            now = time.monotonic()
            rate = (step - self.epoch_start[1]) * self.batch / max(1e-9, now - self.epoch_start[0])
            self.epoch_rates.append(rate)
            print(f"epoch {-(-step // self.per_epoch)}: {rate:.1f} examples/s ({step - self.epoch_start[1]} steps)",
                  flush=True)
            self.epoch_start = (now, step)
        if step % self.log_every == 0 or step == self.total or force_log:
            w = self.window
            loss, acc = float(w[0] / max(w[2], 1)), float(w[1] / max(w[2], 1))
            rate = (step - self.seen0) * self.batch / max(1e-9, time.monotonic() - self.t0)
            tf.summary.scalar("train/loss", loss, step=step)
            tf.summary.scalar("train/accuracy", acc, step=step)
            tf.summary.scalar("train/examples_per_second", rate, step=step)
            print(f"step {step}/{self.total} loss={loss:.4f} accuracy={acc:.4f}", flush=True)
            self.final = {"loss": loss, "accuracy": acc, "step": step, "examples_per_second": rate}
            w[:] = 0

    def summary(self, step: int) -> dict[str, Any]:
        """The loop's figures; ``examples_per_second`` is the very value logged as ``train/examples_per_second``
        at the last step (one throughput figure, wherever it is shown)."""
        elapsed = time.monotonic() - self.t0
        rate = self.final.get("examples_per_second") if self.final.get("step") == step else (
            (step - self.seen0) * self.batch / elapsed if elapsed > 0 and step > self.seen0 else None)
        return {"train_loss": self.final.get("loss"), "train_accuracy": self.final.get("accuracy"), "steps": step,
                "examples_per_second": rate if step > self.seen0 else None,
                "epoch_examples_per_second": self.epoch_rates}


class Validation:
    """The chief's validation pass: the whole validation split, evaluated at every checkpoint save and at the
    end, written as ``validation/loss`` and ``validation/accuracy`` beside the ``train/`` scalars (the report
    plots them together), the last one kept for ``metrics.json`` (``val_loss``, ``val_accuracy``) and for Vertex
    hyperparameter tuning.

    Why at checkpoint saves: a schedule the user already sized ("every so often"), and the very steps a
    side-car evaluator evaluates, so the curve is the same either way; with an evaluator replica in the job
    the chief writes no series of its own (the evaluator's are in the same folder) and evaluates only at the
    end. Why on the chief alone, outside ``strategy.run``: reading the model's variables in cross-replica
    context is no collective, so the other replicas just wait for the chief at the next step's all-reduce.
    It cannot change the training: it writes no variable, draws no random number, and reads its own
    unshuffled input pipeline. Its time is left out of the throughput figures (``Progress.exclude``)."""

    def __init__(self, plan, model, logs_dir: str, write_series: bool, batch_size: int = 64):
        import keras
        import tensorflow as tf


        self.result: dict[str, Any] = {}
        try:
            self.dataset = data_lib.eval_dataset(plan.data_dir, plan.manifest, batch_size)
        except ConfigError as exc:  # no validation split (data.validation_fraction 0)
            print(f"note: no validation during training ({exc})", flush=True)
            self.dataset = None
        self.writer = tf.summary.create_file_writer(join(logs_dir, VALIDATION_LOGS)) if write_series else None
        image = plan.image_size

        @tf.function(input_signature=[tf.TensorSpec([None, image, image, 3], tf.float32),
                                      tf.TensorSpec([None], tf.int32)])
        def batch_sums(images, labels):
            probs = tf.cast(model(images, training=False), tf.float32)
            loss = keras.losses.sparse_categorical_crossentropy(labels, probs)
            correct = tf.equal(tf.argmax(probs, -1, output_type=tf.int32), labels)
            return tf.stack([tf.reduce_sum(loss), tf.reduce_sum(tf.cast(correct, tf.float32)),
                             tf.cast(tf.size(labels), tf.float32)])

        self._batch_sums = batch_sums

    def __call__(self, step: int, write: bool = True) -> float:
        """Evaluate at ``step``; returns the seconds it took (0 when there is nothing to evaluate)."""
        import numpy as np
        import tensorflow as tf

        if self.dataset is None:
            return 0.0
        started = time.monotonic()
        total = np.zeros(3)
        for images, labels in self.dataset:
            total += self._batch_sums(images, labels).numpy()
        loss, accuracy = float(total[0] / max(total[2], 1)), float(total[1] / max(total[2], 1))
        self.result = {"val_loss": loss, "val_accuracy": accuracy, "val_examples": int(total[2]), "val_step": step}
        if self.writer is not None and write:
            with self.writer.as_default():
                tf.summary.scalar("loss", loss, step=step)
                tf.summary.scalar("accuracy", accuracy, step=step)
            self.writer.flush()
        seconds = time.monotonic() - started
        print(f"validation at step {step}: loss={loss:.4f} accuracy={accuracy:.4f} on {int(total[2])} examples "
              f"({seconds:.1f} s)", flush=True)
        return seconds
