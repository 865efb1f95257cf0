"""Step-level checkpoints that survive kill -9, SIGTERM preemption, Spot VMs and maintenance events.

* What is saved: model + optimizer (``tf.train.Checkpoint``). The step *is* ``optimizer.iterations``
  and the input pipeline is positioned with ``ds.skip(step)``, so a restore puts model, optimizer, step
  and data position back together, mid-epoch included.
* Who writes where: every replica saves at the same steps (saving may involve collectives), the chief to
  the real directory (``AIP_CHECKPOINT_DIR``), others to a throwaway ``workertemp_*`` sub-directory that
  only ever keeps one. Every replica restores from the chief's directory.
* Complete or invisible: ``CheckpointManager`` writes the data and index files first and updates its
  ``checkpoint`` state file last with an atomic rename, so a crash during a save leaves the previous
  state file pointing at the previous complete checkpoint. If the latest checkpoint is damaged anyway
  (truncated by a dying disk or copy), :meth:`Checkpointer.restore` skips it with a warning naming it and
  uses the one before.
* A checkpoint of another job is refused: ``job.json`` beside the checkpoints records what produced
  them (model, classes, image size, optimizer); a mismatch raises ``ConfigError`` before anything loads.
* When: every ``every_steps`` steps and/or ``every_seconds`` seconds, decided identically on all replicas
  (the chief's clock decides; the decision is shared through the per-step flag sync in the trainer).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import time
from typing import Any

from trainers import fileio
from jobfile.errors import ConfigError, problem

log = logging.getLogger(__name__)

#: Exit status of a replica that saved a checkpoint because it was asked to stop (SIGTERM: Vertex
#: maintenance events and Spot preemption). A restart continues from exactly that step.
EXIT_PREEMPTED = 42


class PreemptionFlag:
    """Set by SIGTERM; read at every step boundary."""

    def __init__(self) -> None:
        self.signalled = False
        self._previous: Any = None

    def install(self) -> "PreemptionFlag":
        def handler(signum, frame):  # noqa: ARG001
            if not self.signalled:
                log.warning("SIGTERM received: saving a checkpoint at the next step boundary, then exiting %d",
                            EXIT_PREEMPTED)
            self.signalled = True

        self._previous = signal.signal(signal.SIGTERM, handler)
        return self


class SaveSchedule:
    """Decides when a replica wants a checkpoint (steps and/or seconds)."""

    def __init__(self, every_steps: int, every_seconds: float, clock=time.monotonic):
        self.every_steps, self.every_seconds, self.clock = every_steps, every_seconds, clock
        self._last = clock()

    def due(self, step: int) -> bool:
        if self.every_steps > 0 and step % self.every_steps == 0:
            return True
        return self.every_seconds > 0 and self.clock() - self._last >= self.every_seconds

    def saved(self) -> None:
        self._last = self.clock()


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def TRANSIENT_ERRORS() -> tuple[type[Exception], ...]:
    """Errors of the storage, not of the checkpoint: restoring an older step because of them would
    silently throw work away, so they end the replica (and the launcher/Vertex restarts it)."""
    import tensorflow as tf

    return (tf.errors.UnavailableError, tf.errors.PermissionDeniedError, tf.errors.DeadlineExceededError,
            tf.errors.UnauthenticatedError, tf.errors.ResourceExhaustedError)


class Checkpointer:
    def __init__(self, checkpoint, directory: str, write_directory: str, keep: int, fingerprint: dict[str, Any],
                 is_chief: bool):
        import tensorflow as tf

        self.checkpoint, self.directory, self.is_chief = checkpoint, directory, is_chief
        self.fingerprint = fingerprint
        self.write_manager = tf.train.CheckpointManager(
            checkpoint, write_directory, max_to_keep=keep if is_chief else 1
        )

    # -- identity -----------------------------------------------------------------------------------
    def _job_file(self) -> str:
        return f"{self.directory.rstrip('/')}/job.json"

    def check_compatible(self) -> None:
        gfile = _gfile()
        path = self._job_file()
        if not gfile.exists(path):
            return
        with gfile.GFile(path) as f:
            stored = json.load(f)
        diffs = [f"{k}: checkpoint has {stored.get(k)!r}, this job {v!r}" for k, v in self.fingerprint.items()
                 if stored.get(k) != v]
        if diffs:
            raise ConfigError([problem(
                "output.base_dir",
                f"{self.directory} holds checkpoints of a different job ({'; '.join(diffs)}); they will not be "
                "loaded. Use a new output.base_dir, or delete that checkpoint folder to start over",
            )])

    def _write_job_file(self) -> None:
        gfile = _gfile()
        path = self._job_file()
        if self.is_chief and not gfile.exists(path):
            gfile.makedirs(self.directory)
            fileio.write_json_atomic(path, self.fingerprint)

    # -- restore / save -----------------------------------------------------------------------------
    def candidates(self) -> list[str]:
        """Complete checkpoints in the chief's directory, newest first."""
        import tensorflow as tf

        state = tf.train.get_checkpoint_state(self.directory)
        if not state:
            return []
        paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        return [p if os.path.isabs(p) or "://" in p else f"{self.directory.rstrip('/')}/{p}" for p in reversed(paths)]

    def restore(self) -> str | None:
        """Restore the newest loadable checkpoint; returns its path (None: fresh start)."""
        import tensorflow as tf

        self.check_compatible()
        for path in self.candidates():
            try:
                self.checkpoint.read(path).assert_existing_objects_matched()
                return path
            except TRANSIENT_ERRORS():
                raise  # storage trouble is not damage: never fall back to an older step because of it
            # A truncated data file raises IndexError ("Read less bytes than requested": the checkpoint
            # reader's OUT_OF_RANGE is not translated to a tf.errors class); flipped bytes DataLossError.
            except (tf.errors.OpError, ValueError, AssertionError, IndexError) as exc:
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
                log.warning("checkpoint %s is damaged or incomplete (%s: %s); trying the previous one",
                            path, type(exc).__name__, first)
        return None

    def save(self, step: int) -> str:
        self._write_job_file()
        return self.write_manager.save(checkpoint_number=step)

    def cleanup_throwaway(self) -> None:
        if not self.is_chief:
            gfile = _gfile()
            if gfile.exists(self.write_manager.directory):
                gfile.rmtree(self.write_manager.directory)
