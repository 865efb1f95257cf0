"""Parameter-server training (``topology.strategy: parameter_server``): the chief coordinates, workers compute,
parameter servers hold the variables.

Who runs what (``trainers.cluster.replica_role``, dispatched by ``trainers.task``):

* the **chief** (pool 0) runs :func:`train_ps`: it creates the model and optimizer under
  ``ParameterServerStrategy`` (their variables live on the parameter servers, each variable whole, placed
  round-robin: TF 2.21 + Keras 3 cannot take the gradient of a partitioned ``ShardedVariable``), gives every
  worker its own input pipeline (``ClusterCoordinator.create_per_worker_dataset``, sharded by the worker's
  index), schedules training steps that any free worker runs, and writes checkpoints, the ``train/``
  TensorBoard scalars, ``metrics.json`` and the exported model. It computes no step itself.
* every **worker** (pool 1) and **parameter server** (pool 2) runs :func:`serve`: a ``tf.distribute.Server``
  that never exits on its own; the job is done when the chief exits 0 (the launcher then stops them).
* the **evaluator** (pool 3) evaluates each checkpoint, as for every strategy (``trainers.evaluator``).

Asynchronous: a step is one worker's batch (global batch = per-replica batch x that worker's replicas), and
its update is applied to the parameter servers without waiting for the other workers. Even an uninterrupted
run is not bitwise reproducible (the order in which updates arrive varies), so the tests compare the final
validation loss within a band, never bits; the initial weights are seeded.

The step is counted by the coordinator: ``optimizer.iterations`` under-counts under asynchronous training
(concurrent increments on the parameter server are lost: 79 of 100 seen), and a step function that the
coordinator reschedules after a worker failure may run more than once. Steps are scheduled in chunks up to
the next boundary (log line, checkpoint, epoch end, last step); after ``join`` every scheduled step has
completed exactly once as far as the coordinator is concerned, and the count becomes ``step``, a variable on
the chief saved in every checkpoint. Resume restores it and positions each worker's input stream at
``step // workers`` batches: approximate (workers do not take equal shares of the steps), not exact.

Failures (TensorFlow's "Handling Task Failure" for ClusterCoordinator):

* a worker dies: its steps are rescheduled on the others and training goes on (the launcher logs and
  tolerates it; on Vertex the restarted worker rejoins, so ``restart_job_on_worker_restart`` stays false);
* a parameter server dies: the next step fails with ``UnavailableError``; the chief says so in one line and
  exits :data:`EXIT_PS_LOST` (5); the launcher's restart (or running the job again) resumes from the last
  checkpoint, at most one checkpoint interval redone. The chief dying (kill -9) ends the same way.
* SIGTERM (maintenance events, Spot): the chief saves at the next boundary and exits 42, as every strategy
  does; servers keep serving through SIGTERM (the chief needs the variables to save) until SIGKILL.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from trainers import cluster as cluster_lib, data as data_lib, input_cache, precision as precision_lib, strategy as strategy_lib
from jobfile import config as config_lib
from trainers.checkpoint import Checkpointer, PreemptionFlag, SaveSchedule
from trainers.models import build_model
from trainers.training_plan import evaluator_mismatch, make_plan
from trainers.train import (exit_preempted, export_and_record, make_optimizer, refuse_checkpoint_past_the_end,
                            replica_step, run_guarded, summary_writer)
from trainers.train_progress import Progress

#: Exit status of the chief when a parameter server was lost: restart the job (it resumes from a checkpoint).
EXIT_PS_LOST = 5


class ParameterServerLost(RuntimeError):
    """A step or a save failed because a parameter server (or every worker) stopped answering."""


def serve(info: cluster_lib.ClusterInfo) -> None:
    """Worker or parameter server of a ``parameter_server`` job: serve the chief until killed.

    SIGTERM does not stop a server (the chief may be saving a checkpoint of the variables it holds); it is
    logged, and the launcher (or Vertex) ends the server with SIGKILL."""
    import signal

    server = strategy_lib.make_server(info)  # serves from its own threads while this one sleeps

    def on_sigterm(signum, frame):  # noqa: ARG001
        print(f"{info.replica_id}: SIGTERM received; serving on while the chief saves (stopped by SIGKILL)",
              flush=True)

    signal.signal(signal.SIGTERM, on_sigterm)
    print(f"{info.replica_id}: serving the chief's parameter-server training at {server.target}", flush=True)
    while True:  # not server.join(): a Python loop lets the SIGTERM handler run
        time.sleep(3600)


def train_ps(cfg: config_lib.JobConfig, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The chief of a ``parameter_server`` job: coordinate training to ``plan.total_steps``; returns the metrics
    (also written to ``<base>/metrics.json``). Raises :class:`ParameterServerLost` when a server is lost."""
    return run_guarded(_train_ps, cfg, env)


def next_boundary(step: int, total: int, *every: int) -> int:
    """The first step after ``step`` that is a multiple of one of ``every`` (0 = none), or ``total``."""
    return min([total] + [(step // e + 1) * e for e in every if e > 0])


def _worker_device(cfg: config_lib.JobConfig):
    """The device the steps run on: the worker pool's GPU when it asks for one, else this CPU (the chief's,
    taken as the workers' kind: CPU pools of one job use one machine family)."""
    w = cfg.topology.worker
    if w.accelerator_type.startswith("NVIDIA") and w.accelerator_count > 0:
        return precision_lib.Device("gpu", accelerator_type=w.accelerator_type)
    return precision_lib.detect(cfg.topology.strategy)


def _train_ps(cfg: config_lib.JobConfig, env: dict[str, str] | None, watchdogs: list[Any]) -> dict[str, Any]:
    info = cluster_lib.read_cluster(env)
    dirs = cluster_lib.output_dirs(info, config_lib.resolved_base_dir(cfg))
    data_lib.configure_threads(cfg.training.intra_op_threads, cfg.training.inter_op_threads)

    import keras
    import tensorflow as tf

    _quiet_tensorflow_logs()
    keras.utils.set_random_seed(cfg.training.seed)  # the same initial weights; the rest is asynchronous
    # The strategy waits for every worker and parameter server to answer: a missing one would block forever.
    startup = strategy_lib.Watchdog(cfg.scheduling.startup_timeout_s, "parameter-server cluster start-up").start()
    watchdogs.append(startup)
    strategy = strategy_lib.make_strategy("parameter_server", info)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    preempt = PreemptionFlag().install()
    choice = precision_lib.setup(cfg.training, _worker_device(cfg))
    plan = make_plan(cfg, strategy.num_replicas_in_sync)
    mismatch = evaluator_mismatch(cfg, plan)
    if mismatch:
        print(f"warning: {mismatch}", flush=True)
    workers, servers = len(info.cluster["worker"]), len(info.cluster["ps"])

    with strategy.scope():
        model = build_model(cfg.model.name, plan.image_size, len(plan.classes))
        optimizer = make_optimizer(cfg, choice.loss_scaling)
        optimizer.build(model.trainable_variables)
    print(placement_line(model.trainable_variables + optimizer.variables), flush=True)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")  # on the chief: the coordinator's count
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    checkpointer = Checkpointer(ckpt, dirs["checkpoints"], dirs["checkpoints"], cfg.checkpoint.keep,
                                plan.fingerprint(cfg), is_chief=True)
    restored = checkpointer.restore()
    start_step = int(step_var.numpy())
    refuse_checkpoint_past_the_end(cfg, plan, start_step, dirs["checkpoints"])
    if restored:
        print(f"resumed from step {start_step} ({restored})", flush=True)

    iterator = _per_worker_iterator(cfg, plan, info, strategy, coordinator, start_step, workers)
    train_step = _train_step(strategy, replica_step(model, optimizer, plan.global_batch))
    writer = summary_writer(info, dirs["logs"])
    print(f"strategy={strategy_lib.strategy_name(strategy)} replicas={plan.replicas} global_batch={plan.global_batch} "  # console
          f"steps={plan.total_steps} (from {start_step}) classes={len(plan.classes)} workers={workers} "
          f"parameter_servers={servers}", flush=True)
    progress = Progress(cfg, plan, start_step)
    step = _train_loop(cfg, plan, coordinator, train_step, iterator, checkpointer, step_var, startup, preempt,
                       progress, writer, start_step, restored)
    result = {**progress.summary(step), "resumed_from_step": start_step if restored else None,
              "global_batch_size": plan.global_batch, "replicas": plan.replicas, "workers": workers,
              "parameter_servers": servers, "strategy": strategy_lib.strategy_name(strategy), "classes": plan.classes,
              "precision": choice.policy}
    return export_and_record(cfg, info, model, plan, choice, result)


def _quiet_tensorflow_logs() -> None:
    """Silence what TensorFlow says at every step of parameter-server training."""
    # "Waiting for all global closures to be finished" at every join, "Reduce to ... then broadcast" per trace,
    # and a retracing warning at every save (the saver's function is traced per checkpoint path)
    tf_log = logging.getLogger("tensorflow")
    tf_log.setLevel(logging.WARNING)
    tf_log.addFilter(lambda record: "MultiDeviceSaver" not in record.getMessage())
    logging.getLogger("absl").setLevel(logging.WARNING)  # the strategy logs its whole session config


def _per_worker_iterator(cfg: config_lib.JobConfig, plan, info: cluster_lib.ClusterInfo, strategy, coordinator,
                         start_step: int, workers: int):
    """Every worker's own input pipeline (sharded by the worker's index), positioned at ``start_step // workers``
    batches; an iterator over them for the coordinator's steps."""
    import tensorflow as tf

    dataset_fn = data_lib.train_dataset_fn(
        plan.data_dir, plan.manifest, plan.per_replica_batch, seed=cfg.training.seed,
        start_step=start_step // workers, shuffle_buffer=cfg.data.shuffle_buffer,
        cache_budget_mb=cfg.data.cache_budget_mb, augment=cfg.data.augment,
        replicas_per_machine=input_cache.replicas_on_this_machine(info.cluster, "worker", 0),
        worker_index=tf.distribute.coordinator.experimental_get_current_worker_index, num_workers=workers)
    per_worker = coordinator.create_per_worker_dataset(
        tf.function(lambda: strategy.distribute_datasets_from_function(dataset_fn)))
    return iter(per_worker)


def _train_step(strategy, one_replica):
    """One scheduled step: a worker's batch through every replica of that worker, the replicas' sums reduced."""
    import tensorflow as tf

    @tf.function
    def train_step(iterator):
        images, labels = next(iterator)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(one_replica, args=(images, labels)),
                               axis=None)

    return train_step


def _train_loop(cfg: config_lib.JobConfig, plan, coordinator, train_step, iterator, checkpointer: Checkpointer,
                step_var, startup, preempt: PreemptionFlag, progress: Progress, writer, start_step: int,
                restored: Any) -> int:
    """Schedule the steps in chunks up to each boundary (log, checkpoint, epoch end, last step), save on schedule
    and on SIGTERM (then exit 42), save the last step; returns it. Raises :class:`ParameterServerLost`."""
    import numpy as np

    lost = _lost_errors()

    def save(at: int) -> str:
        try:
            return checkpointer.save(at)
        except lost as exc:
            raise ParameterServerLost(_lost_message(exc, at, checkpointer)) from None

    schedule = SaveSchedule(cfg.checkpoint.every_steps, cfg.checkpoint.every_seconds)
    step, last_saved = start_step, start_step if restored else -1
    with writer.as_default():
        while step < plan.total_steps:
            end = next_boundary(step, plan.total_steps, cfg.training.log_every_steps, cfg.checkpoint.every_steps,
                                plan.steps_per_epoch)
            try:
                remote = [coordinator.schedule(train_step, args=(iterator,)) for _ in range(end - step)]
                coordinator.join()
                sums = np.sum([np.asarray(r.fetch()) for r in remote], axis=0)
            except lost as exc:
                raise ParameterServerLost(_lost_message(exc, step, checkpointer)) from None
            step = end  # chunks end at every log, checkpoint and epoch boundary: no inner step needs reporting
            step_var.assign(step)
            startup.cancel()
            progress.add(sums)
            progress.done(step, force_log=preempt.signalled)
            if schedule.due(step) or preempt.signalled:
                path = save(step)
                schedule.saved()
                last_saved = step
                if preempt.signalled:
                    exit_preempted(path, step, writer)
    writer.flush()
    if last_saved != step:
        save(step)
    return step


def _lost_errors() -> tuple[type[Exception], ...]:
    """The errors that say a parameter server (or every worker) stopped answering."""
    import tensorflow as tf

    return (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
            tf.errors.DeadlineExceededError)


def placement_line(variables) -> str:
    """Where the variables live: bytes per parameter server. Whole variables go round-robin in creation order,
    so a model with one large variable loads one parameter server (the SageMaker seed: check the balance)."""
    import math
    import re

    import tensorflow as tf

    per: dict[str, int] = {}
    for v in variables:
        device = getattr(getattr(v, "value", v), "device", "") or "?"
        m = re.search(r"/job:(\w+)/replica:\d+/task:(\d+)", device)
        where = f"{m.group(1)}-{m.group(2)}" if m else device
        per[where] = per.get(where, 0) + math.prod(v.shape) * tf.as_dtype(v.dtype).size
    return "variables per parameter server: " + ", ".join(f"{k} {b / 1e6:.2f} MB" for k, b in sorted(per.items()))


def _lost_message(exc: Exception, step: int, checkpointer: Checkpointer) -> str:
    import re

    found = re.search(r"(?:UNAVAILABLE|ABORTED|CANCELLED|DEADLINE_EXCEEDED):\s*([^\n\\]{1,120})", str(exc))
    detail = f"{type(exc).__name__}: {found.group(1).strip()}" if found else type(exc).__name__
    latest = next(iter(checkpointer.candidates()), None)
    return (f"a parameter server (or every worker) stopped answering after step {step} ({detail}); the job "
            f"must be restarted: it resumes from {latest or 'step 0 (no checkpoint yet)'}")
