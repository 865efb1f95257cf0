"""verify_model: a Model (a SavedModel, made by anything) in; loaded, run and timed; a verified Model,
Metrics and the full verification record out."""
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import component


@component
def verify_model(model: Input[Model], verified_model: Output[Model], metrics: Output[Metrics],
                 verification: Output[Artifact], sample_request: str = "", dataset: Input[Dataset] = None,
                 record_dir: str = "", eval_data: str = "", eval_task: str = "auto", eval_output: str = ""):
    """Load the SavedModel at ``model``'s URI in this task's own process (it never trained: the export must
    stand alone), run its ``serving_default`` signature on ``sample_request`` (JSON text
    ``{"instances": [...]}`` as Vertex online prediction takes it; empty: an input generated from the
    signature's specs) and time it. With ``eval_data`` (a JSON Lines file of ``{"instance": ..., "label": ...}``,
    local or ``gs://``), evaluate the model on those held-out examples, whoever made it: RMSE, MAE and the RMSE
    of predicting the labels' mean for a regressor; accuracy, per-class precision and recall and the
    most-common-class baseline for a classifier (``eval_task``: ``auto`` | ``regression`` | ``classification``;
    ``eval_output``: which output is the prediction, for a model with several). For the built-in classifier
    with its ``dataset``, also accuracy, loss, the confusion matrix and sample predictions on the held-out split.

    The SavedModel is the one in ``model``'s folder or one folder below it (``model/1``, TensorFlow Serving's layout;
    ``jobs.spec.saved_model``). Fails with one ``error:`` line for a folder without one (listing what it holds), a
    model without ``serving_default``, or a sample that does not fit (naming the signature's inputs). Outputs:
    ``verified_model`` (URI: the SavedModel's folder;
    metadata: framework and version, signatures, inputs and outputs, latency, accuracy for a classifier),
    ``metrics``, ``verification`` (a JSON file: the whole record, predictions included); with
    ``record_dir``, the record is also written to ``<record_dir>/verification.json``."""
    import json

    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobs.steps.verify import VerifyError

    data_dir = dataset.uri if dataset is not None else ""
    try:
        record = steps.verify_model(model.uri, sample_request, data_dir, record_dir, eval_data=eval_data,
                                    eval_task=eval_task, eval_output=eval_output)
    except VerifyError as exc:
        print(f"error: {exc}")
        raise SystemExit(1) from None
    with open(verification.path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    latency = record["latency_ms"]
    metrics.log_metric("latency_ms_median", float(latency["median"]))
    metrics.log_metric("latency_ms_first_call", float(latency["first_call"]))
    metrics.log_metric("instances", float(record["instances"]))
    summary = {k: record[k] for k in ("signature", "signatures", "inputs", "outputs", "framework",
                                      "framework_version", "latency_ms")}
    for key in ("accuracy", "loss", "examples"):
        if isinstance(record.get(key), (int, float)):
            metrics.log_metric(key, float(record[key]))
            summary[key] = record[key]
    if record.get("classes"):
        summary["classes"] = record["classes"]
    # lazy: KFP component body
    from jobs.spec.evaluation_verdict import figures

    held_out = figures(record.get("eval"))
    for key, value in held_out.items():  # eval_rmse, eval_accuracy, ...: the held-out verdict of eval_data
        if "/" not in key:  # per-class figures stay in the record
            metrics.log_metric(key, value)
    if held_out:
        summary["eval"] = {k: record["eval"].get(k) for k in ("task", "examples", "data")} | held_out
    verified_model.uri = record["model_dir"]  # the SavedModel folder: model.uri or the one folder below it holding it
    verified_model.metadata.update({**dict(model.metadata), **summary, "verified": True})
    shown = "; ".join([f"{k}={record[k]:.3f}" for k in ("accuracy", "loss") if isinstance(record.get(k), (int, float))]
                      + [f"{k}={v:.4g}" for k, v in held_out.items() if k in ("eval_rmse", "eval_mae", "eval_accuracy",
                                                                           "eval_baseline_rmse", "eval_baseline_accuracy")])
    print(f"verified {record['model_dir']}: {record['signature']}({', '.join(record['inputs'])}) on {record['instances']} "
          f"instances ({record['input_source']}), {latency['median']:.1f} ms median{'; ' + shown if shown else ''}; "
          f"first prediction: {json.dumps(record['predictions'][0])[:200]}")
    # lazy: KFP component body
    from jobs.steps.step_exit import end_without_teardown

    end_without_teardown()  # TensorFlow's teardown: 0.6 s after the outputs are written
