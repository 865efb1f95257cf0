"""pick_model: a Vertex study's record and the baseline CustomJob beside it in; the better of the best trial's
and the baseline's Model out, with the study's record completed (the baseline, the model handed on)."""
from typing import NamedTuple

from kfp.dsl import Artifact, Input, Model, Output

from components.base import component


@component
def pick_model(model: Output[Model], study: Output[Artifact], config_json: str = "",
               tuning_study: Input[Artifact] = None, baseline_job: str = "", record_dir: str = "") -> NamedTuple(
        "Picked", [("handed_on", str)]):
    """After a HyperparameterTuningJob (``tuning_study``: ``hyperparameter_tuning_job``'s ``study``, every trial
    and the best) and, beside it, the baseline CustomJob (``custom_training_job`` with ``validate_config``'s
    ``baseline_worker_pool_specs``/``baseline_output_directory``: the job as it stands in ``<record_dir>/baseline``;
    ``baseline_job``: its ``gcp_resources``, empty when that step failed), hand on the better model by the study's
    metric and goal (``config_json``'s ``tuning``; a tie goes to the baseline, the job as it stands). The baseline's
    figure is the last report of the study's metric in its chief's cloudml-hypertune file,
    ``<record_dir>/baseline/hypertune/chief-0.metrics``, read through Vertex's ``/gcs`` mount
    (``jobs.tuning.pick``). A failed baseline: the best trial goes on, and the record says why.

    Outputs: ``model`` (URI: the model folder that goes on, ``<base>/<trial id>/model`` or
    ``<base>/baseline/model``; metadata: its id, values, metric and the reason); ``study``: the study's record
    with ``baseline`` and ``handed_on`` (also written to ``<record_dir>/tuning.json``); ``handed_on``: JSON
    ``{"run", "id", "parameters", "metric", "model_dir", "reason"}`` (``gate``'s ``tuning_metric``). Fails with one
    ``error:`` line when the study's record is missing or names no succeeded trial. The pipeline runs it with
    ``ignore_upstream_failure`` so a failed baseline does not stop the run."""
    import json
    from collections import namedtuple

    # lazy: KFP component body
    from jobs.spec import records, tuning_rules
    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobs.tuning import pick
    # lazy: KFP component body
    from jobfile import config as config_lib
    # lazy: KFP component body
    from jobfile.errors import ConfigError

    def fail(line: str):
        steps.console_log(f"error: {line}")
        raise SystemExit(1)

    try:
        cfg = config_lib.load_json(config_json)
    except ConfigError as exc:
        fail(str(exc.problems[0]))
    if tuning_study is None:
        fail("tuning_study: the HyperparameterTuningJob step gave no study record (it did not succeed); nothing "
             "to pick from; valid choices: hyperparameter_tuning_job's study output")
    try:
        found = records.artifact_json(tuning_study.path, "tuning_study", "a study's JSON record",
                                      "hyperparameter_tuning_job's study output")
    except ValueError as exc:
        fail(str(exc))
    metric = cfg.tuning.metric
    baseline = pick.baseline_run(record_dir, metric, baseline_job) if cfg.tuning.baseline and record_dir else None
    if baseline is not None:
        steps.console_log(pick.baseline_line(baseline, metric))
    try:
        record = pick.pick(found if isinstance(found, dict) else {}, baseline)
    except ValueError as exc:
        fail(f"tuning_study: {exc}")
    handed = record[tuning_rules.HANDED_ON]
    steps.console_log(handed["reason"])
    with open(study.path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    if record_dir:
        records.write_at(record_dir, records.TUNING_RECORD, record)
    model.uri = handed["model_dir"]
    model.metadata.update({"framework": "tensorflow", "job": cfg.name, "trial_id": handed["id"],
                           "parameters": handed["parameters"], metric: handed["metric"], "handed_on": handed["reason"]})
    study.metadata.update({"metric": record.get("metric"), "goal": record.get("goal"),
                           "best_trial": record.get("best_trial"), "baseline": baseline, tuning_rules.HANDED_ON: handed})
    return namedtuple("Picked", ["handed_on"])(json.dumps(handed, sort_keys=True))
