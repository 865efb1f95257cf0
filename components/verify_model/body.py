"""verify_model's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the
SavedModel found by THE rule (``jobs.rules.saved_model``), loaded, run and timed by ``jobs.steps.verify`` (TensorFlow
imported by ``jobs.steps.tensorflow_import``), the held-out verdict read by ``jobs.evaluation.verdict``; the
process ends once its outputs are written (``jobs.steps.step_exit``)."""
from __future__ import annotations

import json

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from jobs.evaluation.verdict import figures
from jobs.steps import calls as steps
from jobs.steps.step_exit import end_without_teardown
from jobs.steps.verify import VerifyError


def verify_model(model: Input[Model], verified_model: Output[Model], metrics: Output[Metrics],
                 verification: Output[Artifact], sample_request: str = "", dataset: Input[Dataset] = None,
                 record_dir: str = "", eval_data: str = "", eval_task: str = "auto", eval_output: str = ""):
    """Fills ``verified_model``, ``metrics`` and ``verification``; a model that does not verify: one line, exit 1."""
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

    end_without_teardown(verification.path)  # TensorFlow's teardown: 0.6 s after the outputs are written
