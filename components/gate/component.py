"""gate: a verified Model and what the run measured in; the same Model out only when it passes the job's bars
(``serving.gate``), so a model that misses one is never registered."""
from kfp.dsl import Artifact, Input, Metrics, Model, Output

from components.base import component


@component
def gate(model: Input[Model], gated_model: Output[Model], metrics: Output[Metrics], result: Output[Artifact],
         config_json: str, verification: Input[Artifact] = None, training_metrics: Input[Metrics] = None,
         tensorboard: Input[Artifact] = None, tuning_metric: str = "", parent_model: str = "",
         api_endpoint: str = "", dry_run: bool = False, record_dir: str = "", study: Input[Artifact] = None):
    """Check what the run measured against ``serving.gate`` in ``config_json``: its ``thresholds``
    (``accuracy >= 0.8``, ``val_rmse <= 0.3``) and, with ``better_than_parent``, the figures of
    ``parent_model``'s default version as the Vertex AI Model Registry's evaluation of it records them
    (``projects/P/locations/L/models/ID``; empty: ``serving.parent_model``).

    What was measured: ``verification`` (``verify_model``'s record: the held-out evaluation, latency),
    ``training_metrics`` (``train``'s Metrics), ``tensorboard`` (a TensorBoard logs folder: every scalar's last
    value, e.g. ``validation/epoch_accuracy``), ``tuning_metric`` (the tuning study's best trial as JSON,
    ``{"val_rmse": 0.21}``); each optional. ``dry_run`` (a local run): no Model Registry call, the parent
    comparison is skipped with a note. ``study`` (a tuned job: ``tune``'s or ``pick_model``'s record, with the
    baseline run beside the trials and the model handed on): what ``better_than_baseline`` checks, the model that
    goes on strictly better than the baseline (the job as it stands) on the study's metric.

    Passed: ``gated_model`` is ``model`` (same URI and metadata, plus the gate's lines), ``metrics`` logs
    ``gate_passed`` and each bar's figure, ``result`` is the record (JSON), also written to
    ``<record_dir>/gate.json``. Missed: the record is written, every bar's line printed, and the step fails
    with one ``error:`` line naming the bar missed, so nothing downstream (the upload) runs."""
    import json

    # lazy: KFP component body
    from jobs.steps import gate as gate_lib

    try:
        outcome = gate_lib.step(
            config_json, verification_path=verification.path if verification is not None else None,
            study_path=study.path if study is not None else None,
            tensorboard_path=tensorboard.path if tensorboard is not None else None,
            training=dict(training_metrics.metadata) if training_metrics is not None else None,
            tuning_metric=tuning_metric, parent_model=parent_model, dry_run=dry_run, api_endpoint=api_endpoint,
            record_dir=record_dir)
    except gate_lib.StepFailed as exc:
        print(f"error: {exc}", flush=True)
        raise SystemExit(1)
    with open(result.path, "w", encoding="utf-8") as f:
        json.dump(outcome.to_dict(), f, indent=1)
    for line in outcome.notes + outcome.lines:
        print(f"gate: {line}", flush=True)
    if not outcome.passed:
        print(f"error: {outcome.missed}", flush=True)
        raise SystemExit(1)
    for name, value in gate_lib.logged_metrics(outcome).items():
        metrics.log_metric(name, value)
    gated_model.uri = model.uri
    gated_model.metadata.update({**dict(model.metadata), "gate": {"passed": True, "bars": outcome.lines}})
    print(f"gate: passed{f' ({len(outcome.checks)} bars)' if outcome.checks else ''}: {model.uri} goes on to the "
          "Model Registry", flush=True)
