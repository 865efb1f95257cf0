"""tune: the job's study on this machine (every trial the job's worker pools under the local launcher, with the
contract Vertex gives a trial); the best trial's Model, the study's Metrics and its record out."""
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
    Outputs: ``model``, URI = the best trial's ``AIP_MODEL_DIR`` (``<base>/<trial id>/model``), with its trial id,
    values and metric as metadata; ``metrics``: the best metric and the trial counts; ``study``: URI =
    ``<base>/tuning.json``, every trial (parameters, metric, state, seconds) and the best one; ``tensorboard`` and
    ``checkpoints``: the best trial's folders. On Vertex the same section runs as a HyperparameterTuningJob
    (``hyperparameter_tuning_job``)."""
    from jobs import records, steps
    from jobs.tuning.local import StudyFailed, run_local_study
    from trainers import config as config_lib
    from trainers.errors import ConfigError
    from trainers.paths import join

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
    best = record["best_trial"]
    model.uri = best["model_dir"]
    model.metadata.update({"framework": "tensorflow", "job": cfg.name, "trial_id": best["id"],
                           "parameters": best["parameters"], cfg.tuning.metric: best["metric"]})
    metrics.log_metric(cfg.tuning.metric, float(best["metric"]))
    states = [t["state"] for t in record["trials"]]
    metrics.log_metric("trials", float(len(states)))
    metrics.log_metric("trials_succeeded", float(states.count("SUCCEEDED")))
    metrics.log_metric("study_seconds", float(record["seconds"]))
    study.uri = join(config_lib.resolved_base_dir(cfg), records.TUNING_RECORD)
    best_base = best["model_dir"].rstrip("/").rsplit("/", 1)[0]  # <base>/<trial id>, laid out as Vertex does
    tensorboard.uri, checkpoints.uri = join(best_base, "logs"), join(best_base, "checkpoints")
    study.metadata.update({"metric": record["metric"], "goal": record["goal"], "best_trial": best,
                           "trials": len(states)})
