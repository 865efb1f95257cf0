"""pick_model's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the baseline's
figure read and the better model picked by ``jobs.tuning.pick``; the study's record written by ``jobs.run_records.records``."""
from __future__ import annotations

import json
from collections import namedtuple

from kfp.dsl import Artifact, Input, Model, Output

from jobs.rules import tuning_rules
from jobs.run_records import records
from jobs.steps import calls as steps
from jobs.tuning import pick
from jobfile import config as config_lib
from jobfile.errors import ConfigError


def pick_model(model: Output[Model], study: Output[Artifact], config_json: str = "",
               tuning_study: Input[Artifact] = None, baseline_job: str = "", record_dir: str = ""):
    """Fills ``model`` and ``study``; returns ``handed_on`` (the definition's NamedTuple field, read by name)."""
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
