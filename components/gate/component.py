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
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("gate", arguments)
