"""A study on this machine, trial by trial under the contract Vertex gives each trial of a HyperparameterTuningJob.

Each trial is the job's whole topology (every worker pool, every replica) through the one local launch
(``jobs.local.launch.custom_job``, as the train step runs the job), with:

* the trial's values as ``--NAME=VALUE`` flags after the job's own arguments, as Vertex passes them
  (``jobs.rules.tuning_section.Study.flags``), and ``CLOUD_ML_TRIAL_ID`` (``1``, ``2``, ... as Vertex numbers trials);
* its own output folders, laid out as Vertex lays out a trial's: the trial's CustomJob gets the study's base
  output directory's subfolder named by the trial id, so ``AIP_MODEL_DIR=<base>/<trial_id>/model/``,
  ``AIP_CHECKPOINT_DIR=<base>/<trial_id>/checkpoints/``, ``AIP_TENSORBOARD_LOG_DIR=<base>/<trial_id>/logs/``
  (``CustomJobSpec.baseOutputDirectory`` in the REST reference,
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec, and the same text in
  ``google.cloud.aiplatform_v1.types.CustomJobSpec``);
* its metric read the way Vertex reads it: the file cloudml-hypertune writes (``CLOUD_ML_HP_METRIC_FILE``,
  one JSON line per report, the value as a string under its tag). Every replica gets its own file,
  ``<base>/<trial_id>/hypertune/<role>-<index>.metrics`` (the trials' layout is ``jobs.run_records.trial_files``'), so
  parallel trials (and the replicas of one trial) never write one file; the chief's (workerpool0) is the
  trial's. Of several reports the LAST counts: ``StudySpec.measurementSelectionType`` unset "will be treated as
  LAST_MEASUREMENT" (aiplatform_v1 ``StudySpec.MeasurementSelectionType``), and ``jobs.cloud.vertex_jobs.tuning_job``
  sends LAST_MEASUREMENT so both agree.

Up to ``tuning.parallel_trials`` trials run at once, each ``launch`` in its own thread (:mod:`jobs.tuning.trial`);
the main thread asks the search (:mod:`jobs.tuning.search`) and records (:mod:`jobs.tuning.loop`). Ctrl-C
reaches the main thread only: it sets the launcher's ``stop`` event, so every replica of every trial is stopped
the preemption way (SIGTERM: checkpoint at the next step; SIGKILL after the grace period), nothing is left
running, and the trials are recorded STOPPED. A rerun resumes the study: SUCCEEDED trials are kept (replayed
into Optuna), every other trial (stopped, failed, killed with the machine) runs again with its own values in
its own folder, where the trainer resumes from its checkpoints, and new trials follow up to ``max_trials``.

Trial states in the record: ACTIVE (running), SUCCEEDED (exit 0, the metric, and a model where the train step
requires one: ``jobs.rules.saved_model``), FAILED (the job failed: non-zero exit after ``scheduling.max_restarts``, or
timed out; or it ended without a model, with the train step's line, at the trial), INFEASIBLE (exit 0 without a finite metric
once another trial has reported it), STOPPED (Ctrl-C). Vertex marks failed and metric-less trials INFEASIBLE.

``tuning.max_failed_trials``: that many FAILED or INFEASIBLE trials stop the study (running trials are
stopped, recorded, and run again on a rerun) and fail it with one line. 0: the REST reference says only
"Vertex AI decides how many Trials must fail before the whole job fails"; here the first failed trial stops
the study (a failure that early is most often the trainer's, and locally it is the cheapest moment to say so).

The failure that costs hours, caught in minutes: a trial that exits 0 without reporting the study's metric
(another tag, no report, NaN) while no trial has reported it is a configuration error, not a failed trial:
no further trial starts, the running ones finish, and if none of them reports the metric either the study
stops with ONE ``error:`` line naming the tag the study expects and the tags the trainer did report
(:class:`jobfile.errors.ConfigError`, field ``tuning.metric``).

The baseline (``tuning.baseline``, on by default): the job as it stands (its own arguments, no tuning flag, no
trial id) runs beside the trials in ``<base>/baseline/``, measured as a trial is (its chief's cloudml-hypertune
file), so the study can say whether it found anything better than what the job file already does. The model the
study hands on is the better of the best trial and the baseline (``jobs.rules.tuning_rules.handed_on_run``: THE rule, a tie
to the baseline).

The study's record is ``<base>/tuning.json`` (``jobs.run_records.records``: its name, its reading and writing;
``jobs.rules.tuning_rules``: THE best-trial rule the study, Vertex's study and every reader share;
:mod:`jobs.tuning.record`), written atomically when a trial starts and ends:
``{"metric", "goal", "algorithm", "max_trials", "parallel_trials", "max_failed_trials", "study", "trials":
[{"id", "parameters", "metric", "state", "seconds", "reported_tags", "model_dir", "error"?}], "best_trial",
"baseline"?: {"id": "baseline", "state", "metric", "seconds", "reported_tags", "model_dir", "error"?},
"handed_on": {"run": "trial" | "baseline", "id", "parameters", "metric", "model_dir", "reason"}, "seconds"}``;
the study's ``seconds`` add up over every run of it (a resumed study keeps its earlier time).
"""
from __future__ import annotations

import os
from typing import Any, Callable

from jobs.rules import tuning_rules, tuning_section as spec_lib
from jobs.tuning.failures import metric_problem, say_own_failure
from jobs.tuning.loop import StudyLoop
from jobs.rules.tuning_rules import STOPPED
from jobfile import config as config_lib
from jobfile.errors import ConfigError


class StudyFailed(RuntimeError):
    """The study failed (too many failed trials, or none succeeded); the message is one line. The record is
    written first."""


def run_local_study(cfg: config_lib.JobConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the study of ``cfg.tuning`` on this machine; returns the record (also in
    ``<base>/tuning.json``). Raises ConfigError (no tuning section, the metric is never reported, or the record is
    another study's), StudyFailed, or KeyboardInterrupt after Ctrl-C (every trial stopped and recorded first).

    The section is parsed once here (``jobs.rules.tuning_section.parse``) and the typed study handed to every part. With
    ``tuning.baseline`` (the default) the job as it stands runs beside the trials
    (``jobs.tuning.trial.baseline_launch``), in a slot of its own (as on Vertex, where it is a CustomJob beside the
    HyperparameterTuningJob's ``parallel_trials``), started first; a finished baseline is kept on a rerun, any
    other runs again. It never counts as a trial (``max_trials``, ``max_failed_trials``); a study that fails stops
    it. The record's ``handed_on`` is the better of the best trial and the baseline
    (``jobs.rules.tuning_rules.handed_on_run``).

    What the study says, one line each: a trial or the baseline starting; each one ending (``trial 3 SUCCEEDED
    in 8.1 s (2/4 done): val_rmse 0.41 with ...; best so far: trial 3 (0.41); baseline 0.166``); at the end the
    best trial, the baseline and which model goes on, and why."""
    study = spec_lib.parse(cfg.tuning)
    base = config_lib.resolved_base_dir(cfg)
    os.makedirs(base, exist_ok=True)
    loop = StudyLoop(cfg, study, base, log)
    loop.say_resumed()
    interrupted = loop.run()
    return _concluded(loop, interrupted)


def _concluded(loop: StudyLoop, interrupted: bool) -> dict[str, Any]:
    """The study's end: the record when it succeeded (its best trial and the model handed on said), else the one
    error the study stops with (each written to the record first) or KeyboardInterrupt."""
    record, study, say = loop.record, loop.study, loop.say
    if interrupted:
        stopped = [tr["id"] for tr in record["trials"] if tr["state"] == STOPPED]
        also = " and the baseline" if (tuning_rules.baseline_of(record) or {}).get("state") == STOPPED else ""
        say(f"interrupted: trial(s) {', '.join(stopped) or 'none'}{also} stopped; run the same command again to resume "
            "the study (finished trials are kept)")
        raise KeyboardInterrupt
    if loop.refused or loop.suspects:
        if loop.refused:
            say_own_failure(loop.failures[0], say)
        problems = loop.refused or [metric_problem(study, loop.suspects)]
        record["error"] = str(problems[0])
        loop.write()
        raise ConfigError(problems)
    failures = loop.failures
    if len(failures) >= loop.allowed:
        first = failures[0]
        rule = (f"tuning.max_failed_trials is {study.max_failed_trials}" if study.max_failed_trials else
                "tuning.max_failed_trials is 0: here the first failed trial stops the study")
        reason = first.get("error") or f"exit 0 without a finite {study.metric}"
        say_own_failure(first, say)
        raise StudyFailed(f"the study stopped after {len(failures)} failed trial(s) ({rule}); trial {first['id']} "
                          f"{first['state']}: {reason}")
    public = loop.public
    if public["best_trial"] is None:
        if failures:
            say_own_failure(failures[0], say)
        raise StudyFailed(f"no trial succeeded: {len(failures)} of {len(record['trials'])} failed")
    best = public["best_trial"]
    say(f"study done in {record['seconds']:.1f} s: {len(record['trials'])} trial(s); best trial {best['id']}: "
        f"{study.metric} = {best['metric']:g} with " + " ".join(study.flags(best["parameters"])))
    say(public[tuning_rules.HANDED_ON]["reason"])
    return public
