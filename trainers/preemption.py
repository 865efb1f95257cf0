"""Preemption for your own Keras trainer: save before the grace period ends, resume when the job restarts.

Vertex AI stops a replica with SIGTERM before Spot capacity is reclaimed or a VM goes into maintenance, and the
job restarts (``scheduling.restart_job_on_worker_restart``; the training step may also create it again in another
region: ``jobs.cloud.vertex_jobs.custom_job``). The built-in trainer already saves on SIGTERM at the next step and exits
``EXIT_PREEMPTED`` (``trainers.checkpoint``). A trainer of your own gets the same with two callbacks::

    from trainers.preemption import preemption_callbacks

    model.fit(train, epochs=10, callbacks=[*preemption_callbacks(), ...])

* ``BackupAndRestore`` (the Keras you use: ``tf_keras`` when ``TF_USE_LEGACY_KERAS=1``, else Keras 3) on
  ``$AIP_CHECKPOINT_DIR/backup`` (``gs://`` read and written through Vertex's ``/gcs`` mount), saved at the end of
  every epoch; a restarted job's ``fit`` starts from the saved epoch with the saved weights and optimizer;
* :class:`SaveOnPreemption`: on SIGTERM, at the end of the batch in progress, has that callback save now (the epoch
  in progress is begun again on restart, from the weights at the signal: the batches already seen in it are seen
  again, as Keras' own batch-level ``save_freq`` does) and exits with ``EXIT_PREEMPTED`` (42) before ``fit``
  returns, so your code after ``fit`` (an export) does not run on half-trained weights and the backup is not
  deleted (``BackupAndRestore`` deletes it when ``fit`` ends normally).

Why the helper calls the callback's save method (Keras 3 ``_save_model``, tf_keras ``_backup``), which are not
public (and tf_keras's saved-epoch variable): neither Keras has a public "save now" for ``BackupAndRestore``, and a second format of our own would not be
what a restarted ``BackupAndRestore`` reads. Keras 3's ``BackupAndRestore`` under MultiWorkerMirroredStrategy fails
(every worker writes the same file: FACTS.md); use ``tf_keras`` there. Nothing here imports TensorFlow before a
callback is made.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Any

from trainers.checkpoint import EXIT_PREEMPTED
from jobfile.paths import join, readable

BACKUP_LEAF = "backup"


def keras_module():
    """The Keras your trainer uses: ``tf_keras`` when ``TF_USE_LEGACY_KERAS`` is ``1``/``true``, else Keras 3."""
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true"):
        import tf_keras

        return tf_keras
    import keras

    return keras


def backup_dir(directory: str | None = None) -> str:
    """Where the backup goes: ``directory``, else ``$AIP_CHECKPOINT_DIR/backup`` (Vertex sets it from
    ``base_output_directory``; the local launcher too); a ``gs://`` folder through the ``/gcs`` mount."""
    chosen = directory or os.environ.get("AIP_CHECKPOINT_DIR")
    if not chosen:
        raise ValueError("no backup folder: AIP_CHECKPOINT_DIR is not set (Vertex and `vtp` set it); pass "
                         "preemption_callbacks(directory='/some/folder')")
    return readable(join(chosen, BACKUP_LEAF) if not directory else chosen)


def preemption_callbacks(directory: str | None = None, keras: Any = None) -> list[Any]:
    """``[SaveOnPreemption, BackupAndRestore]`` for ``model.fit`` (in this order: the first ends ``fit`` before
    the second could delete its backup)."""
    keras = keras or keras_module()
    backup = keras.callbacks.BackupAndRestore(backup_dir=backup_dir(directory), save_freq="epoch")
    return [save_on_preemption(backup, keras), backup]


def save_on_preemption(backup: Any, keras: Any = None):
    """A :class:`SaveOnPreemption` callback (made from ``keras``' own ``Callback``) saving through ``backup``."""
    keras = keras or keras_module()

    class SaveOnPreemption(keras.callbacks.Callback):
        """SIGTERM: save through ``backup`` at the end of the batch in progress, then exit ``EXIT_PREEMPTED``."""

        def __init__(self):
            super().__init__()
            self.backup, self.signalled, self._previous, self._epoch = backup, False, None, 0

        def on_train_begin(self, logs=None):
            def handler(signum, frame):  # noqa: ARG001
                self.signalled = True

            self._previous = signal.signal(signal.SIGTERM, handler)

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if not self.signalled:
                return
            if hasattr(self.backup, "_save_model"):  # Keras 3: weights + {"epoch": the one in progress, "batch"}
                # its epoch counter moves only at an epoch's end (0 in a resumed run's first epoch): set it to the
                # epoch in progress, the one a restarted fit begins again
                self.backup._current_epoch, self.backup._last_batch_seen = self._epoch, batch
                self.backup._save_model()
            else:  # tf_keras: its epoch-level backup is read back as "this epoch finished" (it resumes at the
                # next one), so the epoch before the one in progress is recorded: a restart begins this one again
                # (its saved epoch is the variable it set at the epoch's begin; -1 is its "none": start at 0)
                self.backup._training_state._ckpt_saved_epoch.assign(self._epoch - 1)
                self.backup._backup(epoch=self._epoch - 1)
            print(f"SIGTERM: saved a backup in {getattr(self.backup, 'backup_dir', '?')} during epoch {self._epoch + 1} "
                  f"(batch {batch + 1}); exiting {EXIT_PREEMPTED}", file=sys.stderr, flush=True)
            raise SystemExit(EXIT_PREEMPTED)

        def on_train_end(self, logs=None):
            if self._previous is not None:
                signal.signal(signal.SIGTERM, self._previous)

    return SaveOnPreemption()
