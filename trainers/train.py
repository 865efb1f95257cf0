"""``train_and_evaluate(cfg)``: one training run, the same code for every strategy and every place.

Why a custom loop and not ``model.fit``: Keras 3 ``fit`` fails under MultiWorkerMirroredStrategy at the
first step (keras-team/keras#20585, tensorflow#72388: ``Attempt to convert a value (PerReplica...)``,
then ``Invalid reduction dimension`` for scalar metrics), inside private trainer code we cannot patch.
A loop of ``strategy.run(train_step)`` over ``distribute_datasets_from_function`` works for
OneDevice, Mirrored, MultiWorkerMirrored and TPU strategies alike, and gives us exact control of what
resume needs: the step is ``optimizer.iterations``, the data position is ``ds.skip(step)``, and model +
optimizer live in a ``tf.train.Checkpoint``. Seeded with op determinism, a run killed at any step and
resumed ends bitwise equal to an uninterrupted one.

Per step, every replica shares two flags with one tiny all-reduce (SUM > 0): "a checkpoint is due" (the
time-based schedule runs on each replica's own clock, so the decision must be shared) and "SIGTERM
received" (Vertex sends it before maintenance events and Spot preemption). All replicas therefore save at
the same step, and on SIGTERM all save and exit with ``EXIT_PREEMPTED``.

Log contract (read by ``jobs.local.launch``): ``resumed from step N`` when a checkpoint was restored.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any

from trainers import cluster as cluster_lib, data as data_lib, fileio, input_cache, precision as precision_lib, precision_auto, strategy as strategy_lib
from jobfile import config as config_lib
from trainers.precision_priors import POLICIES
from trainers.checkpoint import EXIT_PREEMPTED, Checkpointer, PreemptionFlag, SaveSchedule
from jobfile.errors import ConfigError, problem
from trainers.export import export_model
from trainers.models import build_model
from jobfile.paths import join
from trainers.training_plan import evaluator_mismatch, make_plan
from trainers.train_progress import Progress, Validation

log = logging.getLogger("trainers.train")


class Preempted(SystemExit):
    def __init__(self) -> None:
        super().__init__(EXIT_PREEMPTED)


def _num_replicas_hint(cfg: config_lib.JobConfig) -> int:
    return max(1, cfg.topology.chief.accelerator_count) if cfg.topology.strategy == "mirrored" else 1


def make_optimizer(cfg: config_lib.JobConfig, loss_scaling: bool):
    import keras

    # lazy: heavy: keras (via trainers.optim)
    from trainers.optim import FusedAdam, FusedSGD  # Keras's maths and state, one kernel per update

    if cfg.training.optimizer == "sgd":
        opt = FusedSGD(learning_rate=cfg.training.learning_rate, momentum=0.9)
    else:
        opt = FusedAdam(learning_rate=cfg.training.learning_rate)
    if loss_scaling:  # float16 only: its range underflows small gradients without dynamic loss scaling
        opt = keras.mixed_precision.LossScaleOptimizer(opt)
    return opt


def summary_writer(info: cluster_lib.ClusterInfo, logs_dir: str):
    import tensorflow as tf

    if info.is_chief:
        return tf.summary.create_file_writer(logs_dir)
    return tf.summary.create_noop_writer()


def _sum_over_replicas(strategy, values: list[float]) -> list[float]:
    """``values`` (this process's, the same on each of its replicas) summed over every replica of the job."""
    import tensorflow as tf

    @tf.function
    def total(value):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(value)), axis=None)

    return [float(x) for x in total(tf.constant(values)).numpy()]


def _agree_on_step(strategy, step: int) -> None:
    """Every replica must resume from the same step; otherwise they would diverge or hang in a collective.
    (Each replica restores on its own; a file visible to one and not to another would split them.)"""
    here = float(step)
    steps_sum, replicas = _sum_over_replicas(strategy, [here, 1.0])
    mean = steps_sum / replicas  # exact in float32 while replicas x step < 2**24
    spread = _sum_over_replicas(strategy, [abs(here - mean)])[0]
    if spread != 0.0:
        raise RuntimeError(f"replicas restored different checkpoints (this one: step {step}, mean {mean:.1f}); "
                           "refusing to train on diverged replicas. Check that every replica sees the same "
                           "checkpoint directory.")


def refuse_checkpoint_past_the_end(cfg: config_lib.JobConfig, plan, start_step: int, checkpoints: str) -> None:
    """A checkpoint past the steps the config asks for is refused with one line (``ConfigError``: exit 2, which
    the launcher never restarts), never trained on: "training" from it would do nothing and then export and
    report the longer run's model under the shorter config (a 200-step model shown as a 30-step run)."""
    if start_step <= plan.total_steps:
        return

    if cfg.training.steps:
        field, asked, way = "training.steps", f"{plan.total_steps} steps", f"training.steps >= {start_step}"
    else:
        epochs = -(-start_step // plan.steps_per_epoch)
        field = "training.epochs"
        asked = f"{cfg.training.epochs} epoch(s) = {plan.total_steps} steps"
        way = f"training.epochs >= {epochs}"
    raise ConfigError([problem(
        field, f"the checkpoints in {checkpoints} are at step {start_step}, past the {asked} this config asks for; "
               f"going on would report the {start_step}-step model as this config's",
        ["--fresh (run.py: keeps the earlier run aside and trains from step 0)", way])])


def train_and_evaluate(cfg: config_lib.JobConfig, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Train ``cfg`` in this process as the replica the environment describes; returns final metrics.

    The chief writes checkpoints, TensorBoard summaries, the exported model and ``metrics.json``.
    However it ends (done, nothing left to train, refused checkpoint, error), the start-up watchdog is
    disarmed and the caller's SIGTERM handler is put back, so calling it in a long-lived process (a test,
    a notebook, a KFP task) is safe."""
    return run_guarded(_train_and_evaluate, cfg, env)


def run_guarded(loop, cfg: config_lib.JobConfig, env: dict[str, str] | None) -> dict[str, Any]:
    """``loop(cfg, env, watchdogs)`` with every start-up watchdog it armed cancelled and the caller's SIGTERM
    handler restored however it ends (``trainers.train_ps`` runs its loop through this too)."""
    import signal

    watchdogs: list[Any] = []
    previous_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        return loop(cfg, env, watchdogs)
    finally:
        for watchdog in watchdogs:  # armed until the first step: a run with no step must not leave it armed
            watchdog.cancel()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def replica_step(model, optimizer, global_batch: int):
    """One replica's share of a training step: forward, loss averaged over the global batch, backward, update.
    Returns ``[loss_sum, correct, examples]`` of the replica's batch (summed over replicas by the caller)."""
    import keras
    import tensorflow as tf

    def step(images, labels):
        with tf.GradientTape() as tape:
            probs = model(images, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(labels, probs)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled = optimizer.scale_loss(loss) if hasattr(optimizer, "scale_loss") else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        correct = tf.cast(tf.equal(tf.argmax(probs, -1, output_type=tf.int32), tf.cast(labels, tf.int32)), tf.float32)
        return tf.stack([tf.reduce_sum(per_example), tf.reduce_sum(correct), tf.cast(tf.size(labels), tf.float32)])

    return step


def measure_precision(cfg: config_lib.JobConfig, plan, policy: str) -> float:
    """Examples/s of the job's own train step (its model, optimizer and per-replica batch, one real batch of its
    data) under ``policy``, on this process's default device, outside any distribution strategy: what
    ``precision: auto`` compares (``trainers.precision_auto.decide_auto``). Warm-up steps first (tracing, oneDNN's
    kernel choice), then timed ones, each waited for."""
    import tensorflow as tf

    batch = plan.per_replica_batch
    dataset = data_lib.train_dataset_fn(plan.data_dir, plan.manifest, batch, seed=cfg.training.seed,
                                        shuffle_buffer=0, cache=False)(None)
    images, labels = next(iter(dataset.take(1)))
    precision_lib.apply(precision_lib.choice_of(policy, "measuring"))
    model = build_model(cfg.model.name, plan.image_size, len(plan.classes))
    optimizer = make_optimizer(cfg, loss_scaling=policy == "mixed_float16")
    optimizer.build(model.trainable_variables)
    step = tf.function(replica_step(model, optimizer, batch))
    return precision_auto.time_steps(lambda: step(images, labels).numpy(), batch)


def decide_precision(cfg: config_lib.JobConfig, info: cluster_lib.ClusterInfo, strategy, plan, device,
                     base: str, measure=None):
    """``training.precision: auto`` for this job (``trainers.precision_auto.decide_auto``): a decision cached on
    this machine (``trainers.precision.cache_dirs``), a measurement of the job's own step where the run repays it
    (``measure(cfg, plan, policy)``, default :func:`measure_precision`), else what is known of the device's kind.
    Under multi-worker training only the chief decides and every replica takes the chief's decision through one
    all-reduce: replicas that trained in different precisions would all-reduce gradients of different models.
    With ``training.deterministic`` the seed is set again afterwards, so the model's initial weights do not
    depend on whether a measurement ran (a cached decision and a measured one train bitwise alike)."""
    import keras

    multi_worker = cfg.topology.strategy == "multi_worker" and info.tf_config is not None
    fields = {"tensorflow": _tf_version(), "keras": keras.__version__, "model": cfg.model.name,
              "input": [plan.image_size, plan.image_size, 3], "classes": len(plan.classes),
              "per_replica_batch": plan.per_replica_batch, "optimizer": cfg.training.optimizer,
              "strategy": cfg.topology.strategy, "replicas": strategy.num_replicas_in_sync,
              "threads": [cfg.training.intra_op_threads, cfg.training.inter_op_threads]}
    choice = None
    if info.is_chief or not multi_worker:
        measure = measure or measure_precision
        choice = precision_auto.decide_auto(device, plan.total_steps, lambda policy: measure(cfg, plan, policy),
                                            fields, precision_lib.cache_dirs(base),
                                            setup=precision_auto.setup_steps(plan.image_size))
        if cfg.training.deterministic:
            keras.utils.set_random_seed(cfg.training.seed)
    if multi_worker:
        choice = _agree_on_precision(strategy, choice)
    return choice


def _tf_version() -> str:
    import tensorflow as tf

    return tf.__version__


def _agree_on_precision(strategy, choice):
    """The chief's ``choice`` on every replica (the others pass None): its index in ``POLICIES``, summed over the
    replicas with the others contributing 0, divided by the chief's replica count."""
    mine = [float(POLICIES.index(choice.policy)), 1.0] if choice is not None else [0.0, 0.0]
    index_sum, chief_replicas = _sum_over_replicas(strategy, mine)
    policy = POLICIES[int(round(index_sum / max(chief_replicas, 1.0)))]
    if choice is not None:
        return choice
    return precision_lib.choice_of(policy, f"auto: the chief's decision ({policy}), taken by every replica")


def _train_and_evaluate(cfg: config_lib.JobConfig, env: dict[str, str] | None, watchdogs: list[Any]) -> dict[str, Any]:
    info = cluster_lib.read_cluster(env)
    base = config_lib.resolved_base_dir(cfg)
    dirs = cluster_lib.output_dirs(info, base)
    data_lib.configure_threads(cfg.training.intra_op_threads, cfg.training.inter_op_threads)

    import keras
    import tensorflow as tf

    if cfg.training.deterministic:
        keras.utils.set_random_seed(cfg.training.seed)
        tf.config.experimental.enable_op_determinism()

    # Until the first step has run on every replica, a missing peer blocks forever: bound it.
    startup = strategy_lib.Watchdog(cfg.scheduling.startup_timeout_s, "multi-worker cluster start-up").start()
    watchdogs.append(startup)
    strategy = strategy_lib.make_strategy(cfg.topology.strategy, info, cpu_replicas=_num_replicas_hint(cfg),
                                         startup_timeout_s=cfg.scheduling.startup_timeout_s)
    # Right after the strategy: creating MultiWorkerMirroredStrategy installs TensorFlow's own C++ SIGTERM
    # handler (its preemption notifier), which swallows the signal; ours must replace it before anything else
    # (model, restore, input pipeline) takes time, or a SIGTERM in that window is lost.
    preempt = PreemptionFlag().install()
    replicas = strategy.num_replicas_in_sync
    plan = make_plan(cfg, replicas)

    def auto(device):
        # Measuring is not start-up: the watchdog (which bounds a peer that never comes) would count the chief's
        # measurement, and the other replicas' wait for its decision, against scheduling.startup_timeout_s.
        startup.cancel()
        try:
            return decide_precision(cfg, info, strategy, plan, device, base)
        finally:
            startup.start()

    choice = precision_lib.setup(cfg.training, precision_lib.detect(cfg.topology.strategy,
                                                                    cfg.topology.chief.accelerator_type), auto=auto)
    mismatch = evaluator_mismatch(cfg, plan) if info.is_chief else None
    if mismatch:
        print(f"warning: {mismatch}", flush=True)
    data_dir, manifest, classes = plan.data_dir, plan.manifest, plan.classes
    per_replica, global_batch = plan.per_replica_batch, plan.global_batch
    total_steps = plan.total_steps

    model, optimizer, checkpointer, restored = _restored_model(cfg, info, plan, strategy, choice, dirs["checkpoints"])
    start_step = int(optimizer.iterations.numpy())
    _agree_on_step(strategy, start_step)
    refuse_checkpoint_past_the_end(cfg, plan, start_step, dirs["checkpoints"])
    if restored:
        print(f"resumed from step {start_step} ({restored})", flush=True)

    dataset_fn = data_lib.train_dataset_fn(data_dir, manifest, per_replica, seed=cfg.training.seed,
                                           start_step=start_step, shuffle_buffer=cfg.data.shuffle_buffer,
                                           cache_budget_mb=cfg.data.cache_budget_mb, augment=cfg.data.augment,
                                           replicas_per_machine=input_cache.replicas_on_this_machine(
                                               info.cluster, info.task_type, info.task_index))
    dist_ds = strategy.distribute_datasets_from_function(dataset_fn)

    train_step = _distributed_step(strategy, model, optimizer, global_batch)
    schedule = SaveSchedule(cfg.checkpoint.every_steps, cfg.checkpoint.every_seconds)
    writer = summary_writer(info, dirs["logs"])
    iterator = iter(dist_ds)
    step = start_step
    last_saved = start_step if restored else -1
    shown_strategy = strategy_lib.strategy_name(strategy)
    print(f"strategy={shown_strategy} replicas={replicas} "
          f"global_batch={global_batch} steps={total_steps} (from {start_step}) classes={len(classes)}", flush=True)
    progress = Progress(cfg, plan, start_step)
    side_car = cfg.topology.evaluator.replica_count > 0
    validation = Validation(plan, model, dirs["logs"], write_series=not side_car) if info.is_chief else None
    with writer.as_default():
        while step < total_steps:
            local = [float(schedule.due(step + 1) or step + 1 == total_steps), float(preempt.signalled)]
            sums, flags = train_step(iterator, tf.constant(local))
            step += 1
            progress.add(sums.numpy())
            startup.cancel()
            want_save, stop = bool(flags[0] > 0), bool(flags[1] > 0)
            progress.done(step, force_log=stop)
            if want_save or stop:
                path = checkpointer.save(step)
                schedule.saved()
                last_saved = step
                if stop:
                    exit_preempted(path, step, writer)
                if validation is not None and not side_car:
                    progress.exclude(validation(step))
    writer.flush()
    if last_saved != step:
        checkpointer.save(step)
    checkpointer.cleanup_throwaway()
    if validation is not None and validation.result.get("val_step") != step:
        validation(step, write=not side_car)  # the final model's figures (a resumed finished job, an evaluator)

    result = {**progress.summary(step), "resumed_from_step": start_step if restored else None,
              "global_batch_size": global_batch, "replicas": replicas, "strategy": shown_strategy,
              "classes": classes, "precision": choice.policy, "precision_reason": choice.reason,
              **({"precision_auto": dict(choice.measured)} if choice.measured else {}),
              **(validation.result if validation is not None else {})}
    result = export_and_record(cfg, info, model, plan, choice, result)
    if info.is_chief:
        report_to_hypertune(result, info, config_lib.resolved_base_dir(cfg))
    return result


def _restored_model(cfg: config_lib.JobConfig, info: cluster_lib.ClusterInfo, plan, strategy, choice,
                    checkpoints: str):
    """The model and its optimizer built under ``strategy``, and restored from the job's last checkpoint when there
    is one: (model, optimizer, checkpointer, what was restored or None)."""
    import tensorflow as tf

    with strategy.scope():
        model = build_model(cfg.model.name, plan.image_size, len(plan.classes))
        optimizer = make_optimizer(cfg, choice.loss_scaling)
        optimizer.build(model.trainable_variables)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    checkpointer = Checkpointer(ckpt, checkpoints, cluster_lib.replica_dir(info, checkpoints),
                                cfg.checkpoint.keep, plan.fingerprint(cfg), info.is_chief)
    return model, optimizer, checkpointer, checkpointer.restore()


def _distributed_step(strategy, model, optimizer, global_batch: int):
    """``train_step(iterator, flags)``: one optimizer step on every replica, compiled; returns [loss_sum, correct,
    examples] and the flags, each summed over all replicas (a flag is set when any replica set it)."""
    import tensorflow as tf

    one_replica = replica_step(model, optimizer, global_batch)

    def step_fn(images, labels, flags):
        return one_replica(images, labels), tf.identity(flags)

    @tf.function
    def train_step(iterator, flags):
        images, labels = next(iterator)
        sums, shared = strategy.run(step_fn, args=(images, labels, flags))
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, shared, axis=None))

    return train_step


#: what the chief reports to Vertex hyperparameter tuning (``hyperparameter_metric_tag`` of a study's metric)
HYPERTUNE_METRICS = ("val_accuracy", "val_loss")


def report_to_hypertune(result: dict[str, Any], info: cluster_lib.ClusterInfo, base: str) -> None:
    """Report the final validation figures with ``cloudml-hypertune`` (the file Vertex reads in a tuning trial:
    ``CLOUD_ML_HP_METRIC_FILE``, default ``/tmp/hypertune/output.metrics``), so the built-in job can be tuned.
    A replica of the local launcher (which gives it no ``CLOUD_ML_*`` variable) writes
    ``<base>/hypertune/output.metrics`` instead: a local run keeps its records in its folder. A file that
    cannot be written is a warning, never a failed job: the model is already exported."""
    if result.get("val_accuracy") is None:
        return
    if "CLOUD_ML_HP_METRIC_FILE" not in os.environ and info.local_launcher and "://" not in base:
        os.environ["CLOUD_ML_HP_METRIC_FILE"] = join(base, "hypertune", "output.metrics")
    import hypertune

    try:
        reporter = hypertune.HyperTune()
        for tag in HYPERTUNE_METRICS:
            reporter.report_hyperparameter_tuning_metric(hyperparameter_metric_tag=tag, metric_value=result[tag],
                                                         global_step=result["steps"])
    except OSError as exc:
        print(f"warning: the hyperparameter-tuning metrics were not written ({exc}); the model is exported",
              flush=True)


def exit_preempted(path: str, step: int, writer) -> None:
    """After the SIGTERM checkpoint: say so and exit ``EXIT_PREEMPTED`` at once (TF's own threads must not keep
    a preempted replica alive)."""
    print(f"preempted: checkpoint {path} at step {step}; exiting {EXIT_PREEMPTED}", flush=True)
    writer.flush()
    sys.stdout.flush()
    os._exit(EXIT_PREEMPTED)


def export_and_record(cfg: config_lib.JobConfig, info: cluster_lib.ClusterInfo, model, plan, choice,
                      result: dict[str, Any]) -> dict[str, Any]:
    """The end of every training loop: the chief exports the model (atomically) and writes ``metrics.json``
    (atomically, naming the strategy that ran); every replica returns ``result`` with the weights' digest and
    the output folders added."""
    import numpy as np
    import tensorflow as tf

    base = config_lib.resolved_base_dir(cfg)
    dirs = cluster_lib.output_dirs(info, base)
    weights = model.get_weights()
    result = {**result, "weights_sum": float(np.sum([np.sum(np.asarray(w, dtype=np.float64)) for w in weights])),
              "model_dir": dirs["model"], "checkpoint_dir": dirs["checkpoints"], "tensorboard_dir": dirs["logs"]}
    if info.is_chief:
        # Rebuild outside the strategy from the trained weights: one export path for every strategy.
        # Under float32: variables are float32 under every mixed policy, and a float32 serving graph runs
        # on any serving device (a bf16 graph would be slow on CPUs without bf16 and on pre-Ampere GPUs).
        precision_lib.apply(precision_lib.Choice("float32", False, "export"))
        plain = build_model(cfg.model.name, plan.image_size, len(plan.classes))
        plain.set_weights(weights)
        export_model(plain, dirs["model"], plan.classes, plan.image_size,
                     metadata={"model": cfg.model.name, "steps": result["steps"], "job": cfg.name,
                               "trained_precision": choice.policy})
        tf.io.gfile.makedirs(base)
        fileio.write_json_atomic(join(cluster_lib.record_dir(info, base), "metrics.json"), result)
        print(f"exported model to {dirs['model']}", flush=True)
    return result
