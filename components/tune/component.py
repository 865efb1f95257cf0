"""tune: the job's study on this machine (every trial the job's worker pools under the local launcher, with the
contract Vertex gives a trial, and the job as it stands beside them); the better of the best trial's and the
baseline's Model, the study's Metrics and its record out."""
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import component


@component
def tune(config_json: str, model: Output[Model], metrics: Output[Metrics], study: Output[Artifact],
         tensorboard: Output[Artifact], checkpoints: Output[Artifact], dataset: Input[Dataset] = None):
    """Run (or resume) the study of the config's ``tuning`` section here (``jobs.tuning.local``): up to
    ``parallel_trials`` trials at once, each the job's whole topology with its values as ``--NAME=VALUE`` flags,
    ``CLOUD_ML_TRIAL_ID``, its own ``<base>/<trial id>/`` folders and its own cloudml-hypertune file; the trial's
    last report of ``tuning.metric`` is its result. A trainer that never reports the metric stops the study after
    the first trials with one line naming the tag expected and the tags reported.

    ``dataset`` (optional): TFRecord shards as ``prepare_data`` writes them, read by the built-in trainer.
    With ``tuning.baseline`` (default true) the job as it stands (its own arguments, no tuning flags) runs beside
    the trials in ``<base>/baseline/``, measured the same way, and the model that goes on is the better of the best
    trial and the baseline by the study's metric (a tie: the baseline); the console says which and why.

    Outputs: ``model``, URI = the ``AIP_MODEL_DIR`` of the model that goes on (``<base>/<trial id>/model``, or
    ``<base>/baseline/model``), with its trial id (``baseline``), values and metric as metadata; ``metrics``: its
    metric, the baseline's, the trial counts; ``study``: URI = ``<base>/tuning.json``, every trial (parameters,
    metric, state, seconds), the best one, the baseline and the model handed on; ``tensorboard`` and
    ``checkpoints``: that model's folders. On Vertex the same section runs as a HyperparameterTuningJob
    (``hyperparameter_tuning_job``) beside a baseline CustomJob (``custom_training_job``), joined by ``pick_model``."""
    # lazy: KFP component body
    from jobs.spec import records, tuning_rules
    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobs.tuning.local import StudyFailed, run_local_study
    # lazy: KFP component body
    from jobfile import config as config_lib
    # lazy: KFP component body
    from jobfile.errors import ConfigError
    # lazy: KFP component body
    from jobfile.paths import join

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
