"""One run of a local study, a trial or the baseline beside the trials: the job's whole topology through the one
local launch (``jobs.local.launch.custom_job``) under the contract Vertex gives a trial (its flags, ``CLOUD_ML_TRIAL_ID``,
its folders ``<base>/<id>/``, a cloudml-hypertune file per replica), and its outcome as the study records it:
state, the LAST report of the study's metric, the tags reported, seconds, and a failed run's own cause
(``jobs.tuning.failures.failure_fields``). :mod:`jobs.tuning.local` says why each rule is Vertex's.
"""
from __future__ import annotations

import math
import os
import shutil
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from jobs.rules import tuning_rules, tuning_section as spec_lib
from jobs.run_records import trial_files
from jobs.local.launch import containers, custom_job
from jobs.local.launch.outcome import Stopped
from jobs.local.run.pipeline_run import STUDY_UNDER_DOCKER
from jobs.steps.calls import NoModel, require_model
from jobs.tuning.failures import failure_fields
from jobs.rules.tuning_rules import FAILED, INFEASIBLE, STOPPED, SUCCEEDED
from jobs.rules.tuning_section import Study
from jobfile import config as config_lib
from jobfile.errors import ConfigError


def measured_run(cfg: config_lib.JobConfig, base: str, run_id: str, *, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, job_id: str | None = None,
                 log: Callable[[str], None] = print, stop: threading.Event | None = None):
    """Run the job once as one of a study's runs (a trial, or a run beside the trials): its worker pools
    through the one local launch (``jobs.local.launch.custom_job.launch``) in ``<base>/<run_id>/`` (Vertex's layout of
    a trial), ``args`` after the job's own arguments, ``env`` for every replica, and a cloudml-hypertune file
    per replica (``CLOUD_ML_HP_METRIC_FILE`` = ``jobs.run_records.trial_files.metric_file(base, run_id, role, index)``; the
    chief's is the run's, read with ``trial_files.read_reports``). Returns the launcher's ``JobResult``
    (``check=False``); raises ``jobs.local.launch.outcome.Stopped`` when ``stop`` was set, ConfigError under the
    docker runner."""
    if containers.Settings.from_env() is not None:
        raise ConfigError([STUDY_UNDER_DOCKER])
    folder = trial_files.trial_base(base, run_id)
    # made before any replica starts: cloudml-hypertune creates its file's folder check-then-create
    # (``if not exists: makedirs``), and two replicas starting together race there (FileExistsError, seen here)
    os.makedirs(os.path.join(folder, trial_files.HYPERTUNE_DIR), exist_ok=True)

    def replica_env(role: str, index: int) -> dict[str, str]:
        return {"CLOUD_ML_HP_METRIC_FILE": trial_files.metric_file(base, run_id, role, index)}

    return custom_job.launch(cfg, folder, args=args, env=env, replica_env=replica_env, job_id=job_id, check=False,
                             stop=stop, log=log)


def trial_launch(cfg: config_lib.JobConfig, study: Study, trial: dict[str, Any], base: str, *,
                 log: Callable[[str], None] = print, stop: threading.Event | None = None):
    """Run one trial (:func:`measured_run`): the trial's flags (``study.flags``) after the job's own arguments, as
    Vertex passes them, its ``CLOUD_ML_TRIAL_ID``, its folders under ``<base>/<id>/``. The one place a study starts
    a trial."""
    return measured_run(cfg, base, str(trial["id"]), args=study.flags(trial["parameters"]),
                        env={"CLOUD_ML_TRIAL_ID": str(trial["id"])}, job_id=f"{cfg.name}-trial-{trial['id']}",
                        log=log, stop=stop)


def baseline_launch(cfg: config_lib.JobConfig, base: str, *, log: Callable[[str], None] = print,
                    stop: threading.Event | None = None):
    """Run the baseline (:func:`measured_run`): the job as it stands, beside the trials (``tuning.baseline``): the
    job's own arguments and no tuning flag, no ``CLOUD_ML_TRIAL_ID`` (Vertex gives a plain CustomJob none), its
    folders under ``<base>/baseline/`` and its figure read from its own cloudml-hypertune file, as a trial's."""
    return measured_run(cfg, base, tuning_rules.BASELINE, job_id=f"{cfg.name}-{tuning_rules.BASELINE}", log=log,
                        stop=stop)


def as_it_stands(cfg: config_lib.JobConfig) -> str:
    """What the baseline runs, in words: the trainer's own arguments (or the built-in trainer's config values)."""
    if not cfg.user_trainer:
        return "the built-in trainer with the config's values, no tuning flags"
    args = spec_lib.trainer_args(cfg)
    return f"its own arguments{': ' + ' '.join(args) if args else ' (none)'}, no tuning flags"


def run_trial(cfg: config_lib.JobConfig, study: Study, trial: dict[str, Any], base: str,
              log: Callable[[str], None], stop: threading.Event) -> dict[str, Any]:
    """A run's outcome: state, metric, reported tags, seconds, error, the model's folder (run in a worker thread);
    the run is a trial, or the baseline (id ``baseline``). SUCCEEDED needs exit 0, a finite last report of the
    metric and a model where the train step requires one (``jobs.steps.calls.require_model``: in ``AIP_MODEL_DIR``
    or one folder below); exit 0 and the metric without a model is FAILED with the train step's missing-model line."""
    # a rerun's own reports, not the earlier run's
    folder = trial_files.trial_base(base, trial["id"])
    shutil.rmtree(os.path.join(folder, trial_files.HYPERTUNE_DIR), ignore_errors=True)
    started = time.monotonic()
    try:
        if trial["id"] == tuning_rules.BASELINE:
            result = baseline_launch(cfg, base, log=log, stop=stop)
        else:
            result = trial_launch(cfg, study, trial, base, log=log, stop=stop)
    except Stopped:
        return {"state": STOPPED, "seconds": round(time.monotonic() - started, 1)}
    except ConfigError:
        raise
    except (OSError, ValueError) as exc:  # the command cannot start: the job's, so every trial's, problem
        return {"state": FAILED, "seconds": round(time.monotonic() - started, 1), "error": f"cannot start: {exc}"}
    reports = trial_files.read_reports(trial_files.metric_file(base, trial["id"]))
    out = {"seconds": round(time.monotonic() - started, 1), "reported_tags": trial_files.reported_tags(reports),
           "metric": trial_files.last_value(reports, study.metric)}
    if result.returncode != 0:
        return {**out, "state": FAILED, "exit_status": result.returncode, **failure_fields(result.failure)}
    if out["metric"] is None or not math.isfinite(out["metric"]):
        return {**out, "state": INFEASIBLE}
    try:  # the train step's rule, at the trial: a model in AIP_MODEL_DIR or one folder below (jobs.rules.saved_model)
        found = require_model(cfg, os.path.join(folder, "model"))
    except NoModel as exc:
        return {**out, "state": FAILED, "error": str(exc)}
    return {**out, "state": SUCCEEDED, "model_dir": found.path}
