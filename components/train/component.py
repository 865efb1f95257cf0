"""train: the job's worker pools as processes on this machine, with the environment Vertex gives each
replica; a Model (the SavedModel the chief wrote to AIP_MODEL_DIR) and the training figures out."""
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import component


@component
def train(config_json: str, model: Output[Model], metrics: Output[Metrics], checkpoints: Output[Artifact],
          tensorboard: Output[Artifact], dataset: Input[Dataset] = None, run_id: str = ""):
    """Run every replica of the job's pools (chief, workers, parameter servers, evaluators) as a real process
    on loopback with Vertex's ``CLUSTER_SPEC``/``TF_CONFIG``/``AIP_*`` (``jobs.local.launch``): the built-in
    trainer, or a user's ``python -m <trainer.module>`` in its own copy of ``trainer.source_dir``. A replica that dies
    restarts the job (``scheduling.max_restarts``); the trainer resumes from its checkpoints.

    ``dataset`` (optional): TFRecord shards as ``prepare_data`` writes them, read by the built-in trainer
    (its URI replaces ``data.path``). Outputs: ``model``, URI = the SavedModel folder (``AIP_MODEL_DIR``, or the
    one folder below it that holds the SavedModel: ``model/1``, TensorFlow Serving's layout; ``jobs.spec.saved_model``);
    ``metrics``: the final training figures; ``checkpoints`` and ``tensorboard``: their folders. On Vertex
    the same pools run as a CustomJob instead (``custom_training_job``). A failed job's cause (the replica, its error
    line and hint, its last lines) is recorded for the run ``run_id`` (``<base>/failure.json``: the end message's)."""
    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobs.local.launch.outcome import JobFailed
    # lazy: KFP component body
    from jobfile import config as config_lib

    cfg = config_lib.load_json(config_json)
    if dataset is not None:
        cfg = cfg.with_data(dataset.uri)
    try:
        record = steps.train_local(cfg)
    except KeyboardInterrupt:  # replicas already stopped and checkpointed; run.py prints how to resume
        raise SystemExit(130) from None
    except (JobFailed, steps.NoModel) as exc:
        steps.console_log(f"error: training failed: {exc}")
        steps.record_train_failure(cfg, run_id, exc)
        raise SystemExit(1) from None
    for r in record["restarts"]:
        resumed = f"; resumed from step {r['resumed_from_step']}" if r["resumed_from_step"] is not None else ""
        steps.console_log(f"restart {r['attempt'] - 1}: {r['replica']} exited with {r['exit_status']}{resumed}")
    figures = record.get("metrics") or {}
    for key in ("train_loss", "train_accuracy", "steps", "examples_per_second"):
        if isinstance(figures.get(key), (int, float)):
            metrics.log_metric(key, float(figures[key]))
    for key, value in (record.get("scalars") or {}).items():
        metrics.log_metric(key.replace("/", "_"), float(value))
    metrics.log_metric("restarts", float(len(record["restarts"])))
    dirs = record["dirs"]
    model.uri, checkpoints.uri, tensorboard.uri = record["model"], dirs["checkpoints"], dirs["logs"]
    model.metadata.update({"framework": "tensorflow", "job": cfg.name, "trainer": record["trainer"],
                           "strategy": cfg.topology.strategy})
