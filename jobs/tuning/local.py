"""A study on this machine, trial by trial under the contract Vertex gives each trial of a HyperparameterTuningJob.

Each trial is the job's whole topology (every worker pool, every replica) through the one local launch
(``jobs.local.custom_job``, as the train step runs the job), with:

* the trial's values as ``--NAME=VALUE`` flags after the job's own arguments, as Vertex passes them
  (``jobs.tuning_spec.trial_flags``), and ``CLOUD_ML_TRIAL_ID`` (``1``, ``2``, ... as Vertex numbers trials);
* its own output folders, laid out as Vertex lays out a trial's: the trial's CustomJob gets the study's base
  output directory's subfolder named by the trial id, so ``AIP_MODEL_DIR=<base>/<trial_id>/model/``,
  ``AIP_CHECKPOINT_DIR=<base>/<trial_id>/checkpoints/``, ``AIP_TENSORBOARD_LOG_DIR=<base>/<trial_id>/logs/``
  (``CustomJobSpec.baseOutputDirectory`` in the REST reference,
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec, and the same text in
  ``google.cloud.aiplatform_v1.types.CustomJobSpec``);
* its metric read the way Vertex reads it: the file cloudml-hypertune writes (``CLOUD_ML_HP_METRIC_FILE``,
  one JSON line per report, the value as a string under its tag). Every replica gets its own file,
  ``<base>/<trial_id>/hypertune/<role>-<index>.metrics`` (the trials' layout is ``jobs.records``'), so parallel trials (and the replicas of one trial)
  never write one file; the chief's (workerpool0) is the trial's. Of several reports the LAST counts:
  ``StudySpec.measurementSelectionType`` unset "will be treated as LAST_MEASUREMENT" (aiplatform_v1
  ``StudySpec.MeasurementSelectionType``), and ``jobs.cloud.tuning_job`` sends LAST_MEASUREMENT so both agree.

Up to ``tuning.parallel_trials`` trials run at once, each ``launch`` in its own thread; the main thread asks
the search (:mod:`jobs.tuning.search`) and records. Ctrl-C reaches the main thread only: it sets the
launcher's ``stop`` event, so every replica of every trial is stopped the preemption way (SIGTERM: checkpoint
at the next step; SIGKILL after the grace period), nothing is left running, and the trials are recorded
STOPPED. A rerun resumes the study: SUCCEEDED trials are kept (replayed into Optuna), every other trial
(stopped, failed, killed with the machine) runs again with its own values in its own folder, where the
trainer resumes from its checkpoints, and new trials follow up to ``max_trials``.

Trial states in the record: ACTIVE (running), SUCCEEDED (exit 0 and the metric), FAILED (the job failed:
non-zero exit after ``scheduling.max_restarts``, or timed out), INFEASIBLE (exit 0 without a finite metric
once another trial has reported it), STOPPED (Ctrl-C). Vertex marks failed and metric-less trials INFEASIBLE.

``tuning.max_failed_trials``: that many FAILED or INFEASIBLE trials stop the study (running trials are
stopped, recorded, and run again on a rerun) and fail it with one line. 0: the REST reference says only
"Vertex AI decides how many Trials must fail before the whole job fails"; here the first failed trial stops
the study (a failure that early is most often the trainer's, and locally it is the cheapest moment to say so).

The failure that costs hours, caught in minutes: a trial that exits 0 without reporting the study's metric
(another tag, no report, NaN) while no trial has reported it is a configuration error, not a failed trial:
no further trial starts, the running ones finish, and if none of them reports the metric either the study
stops with ONE ``error:`` line naming the tag the study expects and the tags the trainer did report
(:class:`trainers.errors.ConfigError`, field ``tuning.metric``).

The baseline (``tuning.baseline``, on by default): the job as it stands (its own arguments, no tuning flag, no
trial id) runs beside the trials in ``<base>/baseline/``, measured as a trial is (its chief's cloudml-hypertune
file), so the study can say whether it found anything better than what the job file already does. The model the
study hands on is the better of the best trial and the baseline (``jobs.tuning_rules.handed_on_run``: THE rule, a tie
to the baseline).

The study's record is ``<base>/tuning.json`` (``jobs.records``: its name, its reading and writing, and THE
best-trial rule the study, Vertex's study and every reader share), written atomically when a trial starts and ends:
``{"metric", "goal", "algorithm", "max_trials", "parallel_trials", "max_failed_trials", "study", "trials":
[{"id", "parameters", "metric", "state", "seconds", "reported_tags", "model_dir", "error"?}], "best_trial",
"baseline"?: {"id": "baseline", "state", "metric", "seconds", "reported_tags", "model_dir", "error"?},
"handed_on": {"run": "trial" | "baseline", "id", "parameters", "metric", "model_dir", "reason"}, "seconds"}``;
the study's ``seconds`` add up over every run of it (a resumed study keeps its earlier time).
"""
from __future__ import annotations

import concurrent.futures
import math
import os
import shutil
import threading
import time
from typing import Any, Callable, Mapping, Sequence

from jobs import records, trial_files, tuning_rules
from jobs import tuning_spec as spec_lib
from jobs.tuning_rules import ACTIVE, FAILED, INFEASIBLE, STOPPED, SUCCEEDED
from trainers import config as config_lib
from trainers.errors import ConfigError, problem
from trainers.paths import join


class StudyFailed(RuntimeError):
    """The study failed (too many failed trials, or none succeeded); the message is one line. The record is
    written first."""


# -- one trial ------------------------------------------------------------------------------------------
def measured_run(cfg: config_lib.JobConfig, base: str, run_id: str, *, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, job_id: str | None = None,
                 log: Callable[[str], None] = print, stop: threading.Event | None = None):
    """Run the job once as one of a study's runs (a trial, or a run beside the trials): its worker pools
    through the one local launch (``jobs.local.custom_job.launch``) in ``<base>/<run_id>/`` (Vertex's layout of
    a trial), ``args`` after the job's own arguments, ``env`` for every replica, and a cloudml-hypertune file
    per replica (``CLOUD_ML_HP_METRIC_FILE`` = ``jobs.trial_files.metric_file(base, run_id, role, index)``; the
    chief's is the run's, read with ``trial_files.read_reports``). Returns the launcher's ``JobResult``
    (``check=False``); raises ``jobs.local.launcher.Stopped`` when ``stop`` was set, ConfigError under the
    docker runner."""
    from jobs.local import containers, custom_job
    from jobs.local.pipeline_run import STUDY_UNDER_DOCKER

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


def trial_launch(cfg: config_lib.JobConfig, trial: dict[str, Any], base: str, *, log: Callable[[str], None] = print,
                 stop: threading.Event | None = None):
    """Run one trial (:func:`measured_run`): the trial's flags after the job's own arguments, as Vertex passes
    them, its ``CLOUD_ML_TRIAL_ID``, its folders under ``<base>/<id>/``. The one place a study starts a trial."""
    return measured_run(cfg, base, str(trial["id"]), args=spec_lib.trial_flags(cfg, trial["parameters"]),
                        env={"CLOUD_ML_TRIAL_ID": str(trial["id"])}, job_id=f"{cfg.name}-trial-{trial['id']}",
                        log=log, stop=stop)


def baseline_launch(cfg: config_lib.JobConfig, base: str, *, log: Callable[[str], None] = print,
                    stop: threading.Event | None = None):
    """Run the baseline (:func:`measured_run`): the job as it stands, beside the trials (``tuning.baseline``): the
    job's own arguments and no tuning flag, no ``CLOUD_ML_TRIAL_ID`` (Vertex gives a plain CustomJob none), its
    folders under ``<base>/baseline/`` and its figure read from its own cloudml-hypertune file, as a trial's."""
    return measured_run(cfg, base, tuning_rules.BASELINE, job_id=f"{cfg.name}-{tuning_rules.BASELINE}", log=log, stop=stop)


def as_it_stands(cfg: config_lib.JobConfig) -> str:
    """What the baseline runs, in words: the trainer's own arguments (or the built-in trainer's config values)."""
    if not cfg.user_trainer:
        return "the built-in trainer with the config's values, no tuning flags"
    args = spec_lib.trainer_args(cfg)
    return f"its own arguments{': ' + ' '.join(args) if args else ' (none)'}, no tuning flags"


def _run_trial(cfg, trial, base, log, stop) -> dict[str, Any]:
    """A run's outcome: state, metric, reported tags, seconds, error (run in a worker thread); the run is a
    trial, or the baseline (id ``baseline``)."""
    from jobs.local.launcher import Stopped

    shutil.rmtree(os.path.join(trial_files.trial_base(base, trial["id"]), trial_files.HYPERTUNE_DIR), ignore_errors=True)  # a rerun's own
    started = time.monotonic()
    try:
        if trial["id"] == tuning_rules.BASELINE:
            result = baseline_launch(cfg, base, log=log, stop=stop)
        else:
            result = trial_launch(cfg, trial, base, log=log, stop=stop)
    except Stopped:
        return {"state": STOPPED, "seconds": round(time.monotonic() - started, 1)}
    except ConfigError:
        raise
    except (OSError, ValueError) as exc:  # the command cannot start: the job's, so every trial's, problem
        return {"state": FAILED, "seconds": round(time.monotonic() - started, 1), "error": f"cannot start: {exc}"}
    reports = trial_files.read_reports(trial_files.metric_file(base, trial["id"]))
    out = {"seconds": round(time.monotonic() - started, 1), "reported_tags": trial_files.reported_tags(reports),
           "metric": trial_files.last_value(reports, cfg.tuning.metric)}
    if result.returncode != 0:
        return {**out, "state": FAILED, "exit_status": result.returncode, **_failure_fields(result.failure)}
    finite = out["metric"] is not None and math.isfinite(out["metric"])
    return {**out, "state": SUCCEEDED if finite else INFEASIBLE}


#: keys of a run's outcome that the study reads and never records: the failed run's own last lines and cause
_OWN = "own_failure"


def _failure_fields(failure) -> dict[str, Any]:
    """A failed run's ``error`` (the head line and the replica's own error line: ``chief-0 (...) exited with
    status 2: task.py: error: unrecognized arguments: --learning_rate=0.04``) and, under :data:`_OWN`, what the
    study says of it when it stops: that run's own last lines, its error line and hint (never another run's)."""
    if failure is None:
        return {"error": ""}
    head = " ".join(failure.describe().splitlines()[0].split()).rstrip(".")
    own = (failure.error_line or "").strip()
    own = own[len("error: "):] if own.startswith("error: ") else own
    error = f"{head}: {own[:300]}" if own else head + "."
    where = f" ({failure.log_file})" if failure.log_file else ""
    return {"error": error, _OWN: {"lines": [f"{failure.name}'s last lines{where}:",
                                            *(f"| {line}" for line in failure.last_lines[-8:])],
                                   "cause": failure.cause(), "error_line": failure.error_line or "",
                                   "last_lines": list(failure.last_lines)}}


def _flag_refused(cfg: config_lib.JobConfig, failed: list[dict[str, Any]]):
    """The problem when every trial ended so far failed on the same argparse error naming a tuning flag (the
    trainer does not take the flag as the study spells it: every trial would fail the same way), else None:
    at once for ``unrecognized arguments`` (the flag's name is the same in every trial), after two trials for
    an ``invalid ... value``."""
    from jobs.local.hints import UNRECOGNIZED, accepted_spelling, argparse_flag

    flags = [f"--{name}" for name in cfg.tuning.parameters]  # as spec_lib.trial_flags names them
    named = [argparse_flag((tr.get(_OWN) or {}).get("error_line"), flags) for tr in failed]
    if not failed or None in named or len(set(named)) != 1:
        return None
    flag, own = named[0], failed[0][_OWN]
    if not UNRECOGNIZED.search(own["error_line"]) and len(failed) < 2:
        return None
    name = next((n for n in cfg.tuning.parameters if f"--{n}" == flag), flag.lstrip("-"))
    spelled = accepted_spelling(own["last_lines"], flag)
    ids = ", ".join(tr["id"] for tr in failed)
    told = " ".join(own["error_line"].split())[:200]
    accepts = f"; it accepts {spelled}" if spelled else ""
    fix = (f"let the trainer take both spellings: parser.add_argument(\"{spelled}\", \"{flag}\", ...)" if spelled
           else f"let the trainer take {flag} (parser.add_argument(\"{flag}\", ...))")
    return problem(f"tuning.parameters.{name}", f"the trainer refuses {flag}, the flag the study passes for "
                   f"{name} as Vertex does (--NAME=VALUE): trial(s) {ids} failed with \"{told}\"{accepts}; {fix}, "
                   "or rename the parameter to the trainer's flag", [spelled.lstrip("-") if spelled else name])


# -- the record ---------------------------------------------------------------------------------------
def study_key(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What makes two runs one study: the metric, goal, search space, algorithm and seed. A rerun with another
    key cannot replay the trials (their values may lie outside the new space)."""
    t = cfg.tuning
    return {"metric": t.metric, "goal": t.goal, "algorithm": t.algorithm or "bayesian", "seed": cfg.training.seed,
            "parameters": {n: config_lib.dataclasses.asdict(p) for n, p in t.parameters.items()}}


def _new_record(cfg: config_lib.JobConfig) -> dict[str, Any]:
    t = cfg.tuning
    return {"metric": t.metric, "goal": t.goal, "algorithm": t.algorithm or "bayesian", "max_trials": t.max_trials,
            "parallel_trials": t.parallel_trials, "max_failed_trials": t.max_failed_trials, "study": study_key(cfg),
            "trials": [], "best_trial": None}


def best_trial(record: dict[str, Any]) -> dict[str, Any] | None:
    """The best trial by THE rule (``jobs.tuning_rules.best_of``), as the record names it: id, parameters, metric,
    model folder."""
    best = tuning_rules.best_of(record["trials"], record["goal"])
    return {k: best[k] for k in ("id", "parameters", "metric", "model_dir")} if best else None


def _public(record: dict[str, Any]) -> dict[str, Any]:
    """The record as written and returned: trials in id order without the search's handles, the best marked,
    and once no run is active, the model the study hands on (``jobs.tuning_rules.handed_on_run``)."""
    trials = sorted(({k: v for k, v in tr.items() if k not in ("handle", _OWN)} for tr in record["trials"]),
                    key=lambda tr: int(tr["id"]))
    public = {**record, "trials": trials}
    if isinstance(public.get(tuning_rules.BASELINE), dict):
        public[tuning_rules.BASELINE] = {k: v for k, v in public[tuning_rules.BASELINE].items() if k != _OWN}
    public.pop(tuning_rules.HANDED_ON, None)
    public["best_trial"] = best_trial(public)
    baseline = tuning_rules.baseline_of(public)
    if all(r.get("state") != ACTIVE for r in tuning_rules.study_runs(public)):
        handed = tuning_rules.handed_on_run(public["best_trial"], baseline, public["goal"], public["metric"])
        if handed is not None:
            public[tuning_rules.HANDED_ON] = handed
    return public


def _write(base: str, record: dict[str, Any]) -> dict[str, Any]:
    public = _public(record)
    records.write_at(base, records.TUNING_RECORD, public)
    return public


def _resumed(cfg: config_lib.JobConfig, base: str) -> dict[str, Any]:
    old = records.read_study(base)
    if not old:
        return _new_record(cfg)
    if old.get("study") != study_key(cfg):
        raise ConfigError([problem("output.base_dir", f"{join(base, records.TUNING_RECORD)} holds another study (its metric, goal, "
                                                      "parameters, algorithm or training.seed differ): its trials cannot "
                                                      "be resumed; start afresh or use another output.base_dir",
                                   ["--fresh", "another output.base_dir"])])
    prior = old.get("seconds") if isinstance(old.get("seconds"), (int, float)) else 0.0
    resumed = {**_new_record(cfg), "trials": old.get("trials", []), "seconds": prior}
    if cfg.tuning.baseline and tuning_rules.baseline_of(old):  # kept when it succeeded, else run again
        resumed[tuning_rules.BASELINE] = tuning_rules.baseline_of(old)
    return resumed


def _metric_problem(cfg: config_lib.JobConfig, trials: list[dict[str, Any]]):
    tag = cfg.tuning.metric
    ids = ", ".join(sorted((t["id"] for t in trials), key=int))
    tags = sorted({x for t in trials for x in t.get("reported_tags") or [] if x != tag})
    nan = [t["id"] for t in trials if t.get("metric") is not None]
    said = f"trial{'s' if len(trials) > 1 else ''} {ids} ended (exit 0)"
    if nan:
        what = f"{said} reporting {tag} = nan (not a number), so no trial has a result"
    else:
        what = f"{said} without reporting {tag!r}, the study's metric, with cloudml-hypertune"
    reported = f"the trainer reported {', '.join(tags)}" if tags else (
        "the trainer reported nothing (it never wrote CLOUD_ML_HP_METRIC_FILE)")
    fix = (f"report it: hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="
           f"'{tag}', metric_value=...)" + (", or set tuning.metric to a reported tag" if tags else ""))
    return problem("tuning.metric", f"{what}; {reported}; {fix}", tags)


# -- the study -------------------------------------------------------------------------------------------
def run_local_study(cfg: config_lib.JobConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the study of ``cfg.tuning`` on this machine; returns the record (also in
    ``<base>/tuning.json``). Raises ConfigError (the metric is never reported, or the record is another
    study's), StudyFailed, or KeyboardInterrupt after Ctrl-C (every trial stopped and recorded first).

    With ``tuning.baseline`` (the default) the job as it stands runs beside the trials (:func:`baseline_launch`),
    in a slot of its own (as on Vertex, where it is a CustomJob beside the HyperparameterTuningJob's
    ``parallel_trials``), started first; a finished baseline is kept on a rerun, any other runs again. It never
    counts as a trial (``max_trials``, ``max_failed_trials``); a study that fails stops it. The record's
    ``handed_on`` is the better of the best trial and the baseline (``jobs.tuning_rules.handed_on_run``).

    What the study says, one line each: a trial or the baseline starting; each one ending (``trial 3 SUCCEEDED
    in 8.1 s (2/4 done): val_rmse 0.41 with ...; best so far: trial 3 (0.41); baseline 0.166``); at the end the
    best trial, the baseline and which model goes on, and why."""
    from jobs.tuning.search import Search

    t = cfg.tuning
    if not t.enabled:
        raise ConfigError([problem("tuning.parameters", "the job has no tuning section to run", ["learning_rate: ..."])])
    base = config_lib.resolved_base_dir(cfg)
    os.makedirs(base, exist_ok=True)
    record = _resumed(cfg, base)
    search = Search(cfg)
    kept = {tr["id"] for tr in record["trials"] if tr["state"] == SUCCEEDED}
    handles = search.replay(record["trials"], kept)
    queue = [tr for tr in sorted(record["trials"], key=lambda x: int(x["id"])) if tr["id"] not in kept]
    limit = min(t.max_trials, spec_lib.grid_points(cfg)) if t.algorithm == "grid" else t.max_trials
    next_id = max([int(tr["id"]) for tr in record["trials"]] + [0]) + 1
    baseline = None  # the baseline to run (None: off, or kept from an earlier run of the study)
    if t.baseline:
        earlier = tuning_rules.baseline_of(record)
        if earlier is None or earlier.get("state") != SUCCEEDED:
            baseline = record[tuning_rules.BASELINE] = {"id": tuning_rules.BASELINE}
    if kept or queue:
        log(f"resuming the study in {join(base, records.TUNING_RECORD)}: {len(kept)} finished trial(s) kept"
            + (f", trial(s) {', '.join(tr['id'] for tr in queue)} run again" if queue else "")
            + ("" if not t.baseline else "; the baseline runs again" if baseline is not None
               else "; the baseline's result kept"))

    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            log(line)

    stop = threading.Event()
    baseline_stop = threading.Event()  # the baseline is stopped with the trials, and when the study fails
    failures: list[dict[str, Any]] = []
    refused: list = []  # the problem when the first trials all failed on argparse's refusal of one tuning flag
    suspects: list[dict[str, Any]] = []  # exit 0 without the metric while no trial has reported it
    seen_metric = bool(kept)
    hold = False  # no new trial starts: a suspected configuration error waits for the running trials
    running: dict[concurrent.futures.Future, dict[str, Any]] = {}
    allowed = t.max_failed_trials or 1
    started, prior = time.monotonic(), record.get("seconds") or 0.0  # a resumed study's time adds up

    def trials_running() -> int:
        return sum(1 for run in running.values() if run["id"] != tuning_rules.BASELINE)

    def start(pool, trial: dict[str, Any]) -> None:
        trial.update(state=ACTIVE, model_dir=join(trial_files.trial_base(base, trial["id"]), "model"))
        for key in ("metric", "seconds", "reported_tags", "error", "exit_status", _OWN):
            trial.pop(key, None)
        if trial["id"] == tuning_rules.BASELINE:
            say(f"baseline started: the job as it stands ({as_it_stands(cfg)})")
            running[pool.submit(_run_trial, cfg, trial, base, lambda line: say("[baseline] " + line),
                                baseline_stop)] = trial
        else:
            flags = " ".join(spec_lib.trial_flags(cfg, trial["parameters"]))
            say(f"trial {trial['id']} started: {flags}")
            prefix = f"[trial {trial['id']}] "
            running[pool.submit(_run_trial, cfg, trial, base, lambda line: say(prefix + line), stop)] = trial
        _write(base, record)

    def ended_line(trial: dict[str, Any]) -> str:
        """The trial's line (``jobs.tuning_rules.trial_line``: the same as a Vertex study's)."""
        ended = sum(1 for tr in record["trials"] if tr.get("state") in (SUCCEEDED, FAILED, INFEASIBLE))
        return tuning_rules.trial_line(trial, t.metric, ended, limit, best_trial(record),
                                  tuning_rules.baseline_metric(tuning_rules.baseline_of(record)))

    def finish(trial: dict[str, Any], outcome: dict[str, Any]) -> None:
        nonlocal seen_metric, hold
        trial.update(outcome)
        state, metric = trial["state"], trial.get("metric")
        if trial["id"] == tuning_rules.BASELINE:
            if state == SUCCEEDED:
                best = best_trial(record)
                say(f"baseline SUCCEEDED in {trial['seconds']:.1f} s: {t.metric} {tuning_rules.format_value(metric)} (the "
                    "job as it stands); " + (f"best trial so far: trial {best['id']} "
                                             f"({tuning_rules.format_value(best['metric'])})" if best else
                                             "no trial has succeeded yet"))
            elif state == STOPPED:
                say("baseline stopped")
            else:
                say(f"baseline {state} in {trial.get('seconds', 0):.1f} s: "
                    + (trial.get("error") or f"no finite {t.metric} reported")
                    + "; the best trial goes on without a comparison")
            return
        if state == SUCCEEDED:
            search.tell(trial["handle"], metric)
            seen_metric, hold = True, False
            say(ended_line(trial))
            for s in suspects:  # another trial reports the metric: theirs were failed trials, not the config
                s["state"] = INFEASIBLE
                failures.append(s)
            suspects.clear()
        elif state == INFEASIBLE and not seen_metric:
            search.tell(trial["handle"], None)
            suspects.append(trial)
            hold = True
            say(f"trial {trial['id']} ended without a finite {t.metric} (reported: "
                f"{', '.join(trial.get('reported_tags') or []) or 'nothing'}); no new trial starts until the running "
                "ones end")
        elif state in (FAILED, INFEASIBLE):
            search.tell(trial["handle"], None)
            failures.append(trial)
            say(ended_line(trial))
            ended = [tr for tr in record["trials"] if tr.get("state") in (SUCCEEDED, FAILED, INFEASIBLE)]
            flag = None if seen_metric or any(tr["state"] != FAILED for tr in ended) else _flag_refused(cfg, ended)
            if flag is not None and not refused:
                refused.append(flag)
                hold = True
                say(f"the study stops: every trial so far failed on the trainer's refusal of a tuning flag "
                    f"({flag.field}); stopping the running trials")
                stop.set()
                baseline_stop.set()
        elif state == STOPPED:
            say(f"trial {trial['id']} stopped")

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=t.parallel_trials + (baseline is not None),
                                                 thread_name_prefix="trial")
    interrupted = False
    try:
        for trial in queue:
            trial["handle"] = handles[trial["id"]]
        if baseline is not None:
            start(pool, baseline)
        while True:
            while (trials_running() < t.parallel_trials and not hold and not stop.is_set()
                   and len(failures) < allowed):
                if queue:
                    start(pool, queue.pop(0))
                elif len(record["trials"]) < limit:
                    handle, params = search.ask()
                    trial = {"id": str(next_id), "parameters": params, "handle": handle}
                    next_id += 1
                    record["trials"].append(trial)
                    start(pool, trial)
                else:
                    break
            if not trials_running() and (suspects or len(failures) >= allowed) and not baseline_stop.is_set() \
                    and running:
                say("the study stops: stopping the baseline")  # nothing left to compare it with
                baseline_stop.set()
            if not running:
                break
            done, _ = concurrent.futures.wait(list(running), timeout=0.2, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                trial = running.pop(future)
                finish(trial, future.result())
                _write(base, record)
                if len(failures) >= allowed and not stop.is_set() and trials_running():
                    say(f"{len(failures)} failed trial(s) reach tuning.max_failed_trials: stopping the running trials")
                    stop.set()
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        baseline_stop.set()
        say("interrupted: stopping every trial (SIGTERM, checkpoint, then SIGKILL)")
        _drain(running, finish, say)
    except BaseException:
        stop.set()
        baseline_stop.set()
        _drain(running, finish, say)
        raise
    finally:
        pool.shutdown(wait=True)
        record["seconds"] = round(prior + time.monotonic() - started, 1)
        public = _write(base, record)
    if interrupted:
        stopped = [tr["id"] for tr in record["trials"] if tr["state"] == STOPPED]
        also = " and the baseline" if (tuning_rules.baseline_of(record) or {}).get("state") == STOPPED else ""
        say(f"interrupted: trial(s) {', '.join(stopped) or 'none'}{also} stopped; run the same command again to resume "
            "the study (finished trials are kept)")
        raise KeyboardInterrupt
    if refused:
        _say_own_failure(failures[0], say)
        record["error"] = str(refused[0])
        _write(base, record)
        raise ConfigError(refused)
    if suspects:
        error = _metric_problem(cfg, suspects)
        record["error"] = str(error)
        _write(base, record)
        raise ConfigError([error])
    if len(failures) >= allowed:
        first = failures[0]
        rule = (f"tuning.max_failed_trials is {t.max_failed_trials}" if t.max_failed_trials else
                "tuning.max_failed_trials is 0: here the first failed trial stops the study")
        reason = first.get("error") or f"exit 0 without a finite {t.metric}"
        _say_own_failure(first, say)
        raise StudyFailed(f"the study stopped after {len(failures)} failed trial(s) ({rule}); trial {first['id']} "
                          f"{first['state']}: {reason}")
    if public["best_trial"] is None:
        if failures:
            _say_own_failure(failures[0], say)
        raise StudyFailed(f"no trial succeeded: {len(failures)} of {len(record['trials'])} failed")
    best = public["best_trial"]
    say(f"study done in {record['seconds']:.1f} s: {len(record['trials'])} trial(s); best trial {best['id']}: "
        f"{t.metric} = {best['metric']:g} with " + " ".join(spec_lib.trial_flags(cfg, best["parameters"])))
    say(public[tuning_rules.HANDED_ON]["reason"])
    return public


def _say_own_failure(trial: dict[str, Any], say) -> None:
    """The failed run's own last lines, then its error line and hint: what the console shows last when the study
    stops (a run beside it, the baseline above all, must not lend it its lines)."""
    own = trial.get(_OWN) or {}
    if not own:
        return
    say(f"trial {trial['id']} failed; " + own["lines"][0])
    for line in own["lines"][1:]:
        say(line)
    for line in own["cause"]:
        say(line)


def _drain(running, finish, say) -> None:
    """Wait for every running trial to stop (their launchers saw ``stop``: SIGTERM, grace, SIGKILL); a second
    Ctrl-C does not cut this short: the trials' processes must not be left behind."""
    while running:
        try:
            done, _ = concurrent.futures.wait(list(running), timeout=0.2,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
        except KeyboardInterrupt:
            say("still stopping the trials; they are killed after the grace period")
            continue
        for future in done:
            trial = running.pop(future)
            try:
                finish(trial, future.result())
            except Exception as exc:  # the trial's thread failed: record it, keep stopping the others
                trial.update(state=FAILED, error=" ".join(str(exc).split()))
