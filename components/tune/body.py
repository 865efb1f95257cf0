"""tune's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the study on this
machine (``jobs.tuning.local.run_local_study``), the model handed on by the study's rules
(``jobs.rules.tuning_rules``)."""
from __future__ import annotations

from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from jobs.rules import tuning_rules
from jobs.run_records import records
from jobs.steps import calls as steps
from jobs.tuning.local import StudyFailed, run_local_study
from jobfile import config as config_lib
from jobfile.errors import ConfigError
from jobfile.paths import join


def tune(config_json: str, model: Output[Model], metrics: Output[Metrics], study: Output[Artifact],
         tensorboard: Output[Artifact], checkpoints: Output[Artifact], dataset: Input[Dataset] = None):
    """Fills ``model``, ``metrics``, ``study``, ``tensorboard`` and ``checkpoints``; a failed study: one line, exit 1 (2: a
    bad tuning section)."""
    cfg = config_lib.load_json(config_json)
    if dataset is not None:
        cfg = cfg.with_data(dataset.uri)
    try:
        record = run_local_study(cfg, log=steps.console_log)
    except KeyboardInterrupt:  # every trial already stopped and recorded; a rerun resumes the study
        raise SystemExit(130) from None
    except ConfigError as exc:
        for problem in exc.problems:
            steps.console_log(f"error: {problem}")
        raise SystemExit(2) from None
    except StudyFailed as exc:
        steps.console_log(f"error: {exc}")
        raise SystemExit(1) from None
    best, handed = record["best_trial"], record[tuning_rules.HANDED_ON]
    model.uri = handed["model_dir"]
    model.metadata.update({"framework": "tensorflow", "job": cfg.name, "trial_id": handed["id"],
                           "parameters": handed["parameters"], cfg.tuning.metric: handed["metric"],
                           "handed_on": handed["reason"]})
    metrics.log_metric(cfg.tuning.metric, float(handed["metric"]))
    states = [t["state"] for t in record["trials"]]
    metrics.log_metric("trials", float(len(states)))
    metrics.log_metric("trials_succeeded", float(states.count("SUCCEEDED")))
    metrics.log_metric("study_seconds", float(record["seconds"]))
    baseline = tuning_rules.baseline_metric(tuning_rules.baseline_of(record))
    if baseline is not None:
        metrics.log_metric(f"baseline_{cfg.tuning.metric}", baseline)
    study.uri = join(config_lib.resolved_base_dir(cfg), records.TUNING_RECORD)
    folder = handed["model_dir"].rstrip("/").rsplit("/", 1)[0]  # <base>/<trial id> or <base>/baseline, as Vertex
    tensorboard.uri, checkpoints.uri = join(folder, "logs"), join(folder, "checkpoints")
    study.metadata.update({"metric": record["metric"], "goal": record["goal"], "best_trial": best,
                           "baseline": tuning_rules.baseline_of(record), tuning_rules.HANDED_ON: handed, "trials": len(states)})
