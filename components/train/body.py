"""train's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the job's pools on
this machine through the local launcher (``jobs.local.launch``, via ``jobs.steps.calls.train_local``); the
SavedModel found by THE rule (``jobs.rules.saved_model``); a failure's cause recorded for the run's end message."""
from __future__ import annotations

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from jobs.local.launch.outcome import JobFailed
from jobs.steps import calls as steps
from jobfile import config as config_lib


def train(config_json: str, model: Output[Model], metrics: Output[Metrics], checkpoints: Output[Artifact],
          tensorboard: Output[Artifact], dataset: Input[Dataset] = None, run_id: str = ""):
    """Fills ``model``, ``metrics``, ``checkpoints`` and ``tensorboard``; a failed job: one ``error:`` line, exit 1."""
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
