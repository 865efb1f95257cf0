"""What a run leaves beside it, in one place: every record's name, how it is read and written, the folders of a
study's trials, and THE best-trial rule.

One JSON file per step, written atomically by the step that knows it (:func:`write_at`), read back by name
(:func:`read_at`): ``training.json`` (what the train step ran, ``jobs.steps``), ``metrics.json`` (the built-in
trainer's final figures, written by its chief), ``evaluation.json`` (the side-car evaluator),
``verification.json`` (the verify step), ``model_upload_request.json`` (the Model Registry request),
``tuning.json`` (the hyperparameter study, ``jobs.tuning.local``; Vertex's study in the same shape,
``jobs.cloud.tuning_job``), ``gate.json`` (the gate's verdict, ``jobs.gate``), ``steps.json`` (the pipeline
steps' wall times so far), ``provenance.json`` (what made the run: config, trainer code hash, image; written when a
local run starts) and ``run.json`` (a run that finished, ``jobs.local.runs``), beside the page
``report.html``. The report, ``runs list`` and the gate read them here.

A study's trials each train in a folder of their own, ``<base>/<trial id>/`` (:func:`trial_base`, Vertex's
layout for a trial's CustomJob), and report their metric to a cloudml-hypertune file per replica
(:func:`metric_file`, :func:`read_reports`). A tuned run's model is the one the verify step loaded, and
:func:`verified_trial` says which trial it is, so the figures and folders shown for the run are that trial's
(:func:`trial_dirs`, :func:`read_trial_metrics`). The best trial is chosen by one rule everywhere
(:func:`best_of`): the local study, Vertex's study and every reader of either. Which code ran
(:func:`code_version`) is recorded in ``run.json`` and shown by the report.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

from trainers import config as config_lib
from trainers import fileio
from trainers.fileio import NotARegularFile, open_regular
from trainers.paths import join, readable

# -- the records' names --------------------------------------------------------------------------------------
TRAINING_RECORD = "training.json"
#: written by the built-in trainer's chief (``trainers.train``), which cannot import this module
METRICS_RECORD = "metrics.json"
#: written by the side-car evaluator (``trainers.evaluator.EVALUATION_FILE``)
EVALUATION_RECORD = "evaluation.json"
VERIFICATION_RECORD = "verification.json"
UPLOAD_REQUEST_RECORD = "model_upload_request.json"
TUNING_RECORD = "tuning.json"
GATE_RECORD = "gate.json"
#: the pipeline steps' wall times so far, rewritten as each step starts and ends (``jobs.local.runs.StepTimer``):
#: what the report step (inside the pipeline, before run.json exists) and ``runs list`` of an unfinished run read
STEPS_RECORD = "steps.json"
#: written when a local run succeeds (``jobs.local.runs.write_record``): its config and summary
RUN_RECORD = "run.json"
#: written when a local run starts in its folder (``jobs.local.runs.making``): the resolved config, the user
#: trainer's code hash and the image; what a later run in that folder is compared with
PROVENANCE_RECORD = "provenance.json"
#: a Vertex run's CustomJob attempts (``jobs.cloud.custom_job``): ``{"attempts": [{"region", "strategy", "job",
#: "state", "error", "cause", "fell_over_to", "resumes_from"}]}``, the last the job that ran last
VERTEX_JOBS_RECORD = "vertex_jobs.json"
REPORT_PAGE = "report.html"


# -- reading and writing -----------------------------------------------------------------------------------------
def artifact_json(path: str, field: str, what: str, choices: str) -> Any:
    """The JSON record an upstream step's artifact holds (``verification``, ``study``...), for a component that
    takes one; ValueError with the one line to say (``FIELD: PATH is not WHAT (why); valid choices: CHOICES``)
    when it cannot be read or is not JSON."""
    try:
        with open_regular(path, field) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:  # NotARegularFile is a ValueError
        raise ValueError(f"{field}: {path} is not {what} ({' '.join(str(exc).split())[:200]}); valid choices: "
                         f"{choices}") from None


def read_at(base: str, name: str) -> dict[str, Any]:
    """The record ``name`` in the run folder ``base`` ({} when it is missing, unreadable or not an object):
    for readers that have a folder and no config (the report of a KFP user's run, ``runs list``). A ``gs://``
    folder is read through Vertex's ``/gcs`` mount where there is one."""
    found = fileio.read_json(readable(join(base, name)))
    return found if isinstance(found, dict) else {}


def write_at(base: str, name: str, record: Any) -> str:
    """Write the record ``name`` into the run folder ``base`` atomically (a ``gs://`` folder through Vertex's
    ``/gcs`` mount where there is one); returns the path written."""
    path = join(readable(base), name)
    fileio.write_json_atomic(path, record)
    return path


def _read_json(cfg: config_lib.JobConfig, name: str) -> dict[str, Any]:
    return read_at(config_lib.resolved_base_dir(cfg), name)


def read_training(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.train_local`` recorded (``<base>/training.json``)."""
    return _read_json(cfg, TRAINING_RECORD)


def read_metrics(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the chief wrote at the end of training (``<base>/metrics.json``)."""
    return _read_json(cfg, METRICS_RECORD)


def read_evaluation(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the side-car evaluator wrote (``<base>/evaluation.json``; empty without an evaluator pool)."""
    return _read_json(cfg, EVALUATION_RECORD)


def read_verification(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.verify_model`` found (``<base>/verification.json``)."""
    return _read_json(cfg, VERIFICATION_RECORD)


def is_gated(cfg: config_lib.JobConfig) -> bool:
    """Whether the job has a gate step (``serving.gate`` sets a bar)."""
    gate = cfg.serving.gate
    return bool(gate.thresholds or gate.better_than_parent or gate.better_than_baseline)


def read_tuning(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The study's record (``<base>/tuning.json``: ``{"metric", "goal", "trials": [{"id", "parameters",
    "metric", "state", "seconds", ...}], "best_trial"}``); {} when the job has no ``tuning:`` section (a record
    left in the folder by an earlier tuned job is not this run's)."""
    return _read_json(cfg, TUNING_RECORD) if cfg.tuning.enabled else {}


def read_gate(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The gate's record (``<base>/gate.json``: ``passed, lines, missed, notes, bars, metrics, parent``); {}
    when the job sets no bar."""
    return _read_json(cfg, GATE_RECORD) if is_gated(cfg) else {}


def read_study(base: str) -> dict[str, Any]:
    """The study's record in ``base`` (``tuning.json``; {} when there is none), whatever the job's config says."""
    return read_at(base, TUNING_RECORD)


def read_run(base: str) -> dict[str, Any]:
    """The record of the run that last finished in ``base`` (``run.json``; {} when none did)."""
    return read_at(base, RUN_RECORD)


# -- a study's trials: their states, their folders, what they report ------------------------------------------
#: A trial's state, as the local study records it and as Vertex names it (``Trial.State``): ACTIVE (running),
#: SUCCEEDED (exit 0 and the metric), FAILED (the job failed), INFEASIBLE (exit 0 without a finite metric;
#: Vertex's word for a trial without the metric), STOPPED (Ctrl-C, or the study stopped it).
SUCCEEDED, FAILED, INFEASIBLE, STOPPED, ACTIVE = "SUCCEEDED", "FAILED", "INFEASIBLE", "STOPPED", "ACTIVE"
HYPERTUNE_DIR = "hypertune"
#: What cloudml-hypertune writes beside the reported tag on every line.
REPORT_FIELDS = frozenset({"timestamp", "trial", "global_step", "checkpoint_path"})


def trial_base(base: str, trial_id: str) -> str:
    """A trial's base output directory: the study's base, then the trial id (Vertex's layout: the trial's
    CustomJob gets ``<baseOutputDirectory>/<trial id>``, so its ``AIP_MODEL_DIR`` is ``<base>/<id>/model/``)."""
    return join(base, str(trial_id))


def metric_file(base: str, trial_id: str, role: str = "chief", index: int = 0) -> str:
    """The cloudml-hypertune file of one replica of a trial (the chief's is the trial's)."""
    return os.path.join(trial_base(base, trial_id), HYPERTUNE_DIR, f"{role}-{index}.metrics")


def read_reports(path: str) -> list[dict[str, Any]]:
    """The reports in a cloudml-hypertune file, oldest first ([] when there is none). A line that is not a JSON
    object is skipped (the library rewrites the whole file on every report)."""
    try:
        with open_regular(path, "the hypertune metrics file") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, IsADirectoryError, NotARegularFile):
        return []
    reports = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            reports.append(doc)
    return reports


def reported_tags(reports: list[dict[str, Any]]) -> list[str]:
    return sorted({k for r in reports for k in r if k not in REPORT_FIELDS})


def last_value(reports: list[dict[str, Any]], tag: str) -> float | None:
    """The last reported value of ``tag`` (Vertex's LAST_MEASUREMENT); NaN when it is not a number; None when
    the tag was never reported."""
    for report in reversed(reports):
        if tag in report:
            try:
                return float(report[tag])
            except (TypeError, ValueError):
                return math.nan
    return None


# -- the best trial: one rule ------------------------------------------------------------------------------------
def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def trial_order(trial_id: Any) -> tuple[int, Any]:
    """Sort key of a trial id: numeric ids (``"2"`` < ``"10"``, Vertex's and ours) first, in number order."""
    text = str(trial_id)
    return (0, int(text)) if text.isdigit() else (1, text)


def best_of(trials: list[dict[str, Any]], goal: str) -> dict[str, Any] | None:
    """THE best-trial rule: of the SUCCEEDED trials with a finite metric, the one best in the study's
    direction (``goal``: ``maximize``, else lowest first), the lowest id among equals; None when there is none.
    ``trials`` as the records hold them (``{"id", "state", "metric", ...}``); the trial itself is returned."""
    done = [t for t in trials if isinstance(t, dict) and t.get("state") == SUCCEEDED
            and _number(t.get("metric")) is not None]
    if not done:
        return None
    sign = -1 if goal == "maximize" else 1
    return min(done, key=lambda t: (sign * t["metric"], trial_order(t.get("id"))))


def best_trial(study: dict[str, Any]) -> dict[str, Any] | None:
    """The record's ``best_trial``; for a record without one, :func:`best_of` its trials, as the study itself
    picks it."""
    if isinstance(study.get("best_trial"), dict):
        return study["best_trial"]
    return best_of(study.get("trials") or [], str(study.get("goal") or ""))


# -- the baseline beside a study, and which model goes on: one rule ----------------------------------------------
#: The run beside a study's trials: the job as it stands (``tuning.baseline``), in ``<base>/baseline/`` (a trial's
#: layout: ``model/``, ``checkpoints/``, ``logs/``, ``hypertune/``), recorded under ``"baseline"`` in the study's
#: record: ``{"id": "baseline", "state", "metric", "seconds", "reported_tags", "model_dir", "error"?}``.
BASELINE = "baseline"
#: The study record's entry for the model that goes on (:func:`handed_on_run`): ``{"run": "trial" | "baseline",
#: "id", "parameters", "metric", "model_dir", "reason"}``.
HANDED_ON = "handed_on"


def baseline_base(base: str) -> str:
    """The baseline's base output directory: ``<base>/baseline`` (its model ``<base>/baseline/model/``)."""
    return trial_base(base, BASELINE)


def baseline_of(study: dict[str, Any]) -> dict[str, Any] | None:
    """The study record's baseline run, or None (``tuning.baseline: false``, or a record without one)."""
    found = study.get(BASELINE) if isinstance(study, dict) else None
    return found if isinstance(found, dict) else None


def baseline_metric(baseline: dict[str, Any] | None) -> float | None:
    """The baseline's figure when it SUCCEEDED with a finite metric, else None."""
    if not baseline or baseline.get("state") != SUCCEEDED:
        return None
    return _number(baseline.get("metric"))


def is_better(a: float, b: float, goal: str) -> bool:
    """Whether ``a`` is strictly better than ``b`` in the study's direction (``maximize``, else lower)."""
    return a > b if goal == "maximize" else a < b


def handed_on_run(best: dict[str, Any] | None, baseline: dict[str, Any] | None, goal: str,
                  metric: str = "metric") -> dict[str, Any] | None:
    """THE rule of which model a study hands on (verified, gated, registered), here and on Vertex: the better of
    the best trial (``best``, :func:`best_of`'s) and the baseline (the job as it stands, run beside the trials),
    by the study's metric in the study's direction (``goal``). None when no trial succeeded (the study failed).

    A tie goes to the baseline: the job as it stands is what the job file already says (its command has no tuning
    flags, so it is reproduced by running the job file again), and a study that only matches it has shown nothing
    tuning gained; handing on the trial would trade a known setting for a search's pick of equal worth. A baseline
    without a figure (failed, stopped, no finite metric, or ``tuning.baseline: false``) cannot go on: the best
    trial does, and ``reason`` says why no comparison was made. Returns ``{"run", "id", "parameters", "metric",
    "model_dir", "reason"}``; ``metric`` names the study's metric in ``reason``."""
    if not best:
        return None
    trial = {"run": "trial", "id": str(best.get("id")), "parameters": dict(best.get("parameters") or {}),
             "metric": best.get("metric"), "model_dir": best.get("model_dir")}
    ours = f"trial {trial['id']}'s {metric} {format_value(trial['metric'])}"
    if baseline is None:
        return {**trial, "reason": f"no baseline ran (tuning.baseline is false): the best trial, {ours}, goes on"}
    value = baseline_metric(baseline)
    if value is None:
        state = str(baseline.get("state") or "not run")
        why = (f"the baseline {state}" + (f" ({baseline['error']})" if baseline.get("error") else "")
               if state != SUCCEEDED else f"the baseline reported no finite {metric}")
        return {**trial, "reason": f"{why}: nothing to compare with; the best trial, {ours}, goes on"}
    theirs = f"the baseline's {format_value(value)}"
    if _number(trial["metric"]) is not None and is_better(float(trial["metric"]), value, goal):
        return {**trial, "reason": f"the study beat the job as it stands: {ours} against {theirs}; "
                                   f"trial {trial['id']}'s model goes on"}
    return {"run": BASELINE, "id": BASELINE, "parameters": {}, "metric": value,
            "model_dir": baseline.get("model_dir"),
            "reason": f"the study found nothing better than the job as it stands: {ours} against {theirs}; "
                      "the baseline's model goes on"}


def handed_on(study: dict[str, Any]) -> dict[str, Any] | None:
    """The model the study handed on, as its record says (:data:`HANDED_ON`); for a record without one (written
    before the baseline existed, or Vertex's study before the pick step), the best trial."""
    if isinstance(study.get(HANDED_ON), dict):
        return study[HANDED_ON]
    best = best_trial(study)
    return {"run": "trial", **best} if best else None


def study_runs(study: dict[str, Any]) -> list[dict[str, Any]]:
    """Every run of the study: its trials, then the baseline when there is one."""
    runs = [t for t in study.get("trials") or [] if isinstance(t, dict)]
    baseline = baseline_of(study)
    return runs + ([baseline] if baseline else [])


def _same_folder(a: Any, b: Any) -> bool:
    return bool(a and b) and readable(str(a)).rstrip("/") == readable(str(b)).rstrip("/")


def verified_trial(study: dict[str, Any], model_dir: str = "") -> dict[str, Any] | None:
    """The run of the study whose model the verify step loaded (``model_dir``, verification.json's): a trial,
    or the baseline (id ``"baseline"``), matched on its model folder (``gs://`` and its ``/gcs`` mount alike);
    without a ``model_dir``, the one the study handed on (:func:`handed_on`). None when the study names no
    such run."""
    trials = study_runs(study)
    best = handed_on(study)
    if not model_dir:
        return next((t for t in trials if best and str(t.get("id")) == str(best.get("id"))), best)
    for trial in trials + ([best] if best else []):
        if _same_folder(trial.get("model_dir"), model_dir):
            return next((t for t in trials if t.get("id") == trial.get("id")), trial)
    if best and not best.get("model_dir"):  # a record without model folders: the one it handed on
        return next((t for t in trials if t.get("id") == best.get("id")), best)
    return None


def trial_folder(base: str, trial: dict[str, Any]) -> str:
    """A trial's base output directory (``<base>/<id>``, or the folder holding its recorded model)."""
    model_dir = str(trial.get("model_dir") or "").rstrip("/")
    return model_dir.rsplit("/", 1)[0] if model_dir else trial_base(base, str(trial.get("id")))


def trial_dirs(base: str, trial: dict[str, Any]) -> dict[str, str]:
    """The trial's model, checkpoints and TensorBoard logs folders, laid out as any job's
    (``trainers.cluster.output_dirs``)."""
    from trainers.cluster import output_dirs

    return output_dirs(None, trial_folder(base, trial))


def read_trial_metrics(base: str, trial: dict[str, Any]) -> dict[str, Any]:
    """What the built-in trainer wrote at the end of the trial (``<base>/<id>/metrics.json``; {} for a user
    trainer, which writes none)."""
    return read_at(trial_folder(base, trial), METRICS_RECORD)


def study_counts(study: dict[str, Any]) -> dict[str, int]:
    """``{"trials", "succeeded", "failed", "other"}``: failed counts FAILED and INFEASIBLE (Vertex's word for
    a trial without the metric); other: running or stopped trials."""
    states = [str(t.get("state", "")) for t in study.get("trials") or [] if isinstance(t, dict)]
    failed = sum(s in (FAILED, INFEASIBLE) for s in states)
    succeeded = states.count(SUCCEEDED)
    return {"trials": len(states), "succeeded": succeeded, "failed": failed,
            "other": len(states) - succeeded - failed}


def format_value(value: Any) -> str:
    """A hyperparameter's or metric's value as the run's readers show it (4 significant digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    return str(value) if isinstance(value, int) else format(value, ".4g")


def format_parameters(parameters: dict[str, Any]) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in (parameters or {}).items())


def trial_line(trial: dict[str, Any], metric: str, done: int, total: int, best: dict[str, Any] | None = None,
               baseline: float | None = None) -> str:
    """A finished trial in one console line, the local study's and Vertex's alike: ``trial 3 SUCCEEDED in 8.1 s
    (2/4 done): val_rmse 0.41 with batch_size=32 learning_rate=0.01; best so far: trial 3 (0.41); baseline
    0.166``. ``done``/``total``: trials ended of the study's; ``best``: the best trial so far; ``baseline``: the
    baseline's figure when known. A trial that did not succeed says why (its ``error``, or no finite metric)."""
    seconds = _number(trial.get("seconds"))
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    head = f"trial {trial.get('id')} {trial.get('state')}{took} ({done}/{total} done): "
    value = _number(trial.get("metric"))
    if trial.get("state") != SUCCEEDED or value is None:
        return head + (str(trial.get("error") or "") or f"no finite {metric} reported")
    shown = (f"best so far: trial {best.get('id')} ({format_value(best.get('metric'))})" if best
             else "no trial has succeeded yet")
    figure = f"; baseline {format_value(baseline)}" if baseline is not None else ""
    values = format_parameters(dict(sorted((trial.get("parameters") or {}).items())))  # by name, as the flags
    return f"{head}{metric} {format_value(value)} with {values}; {shown}{figure}"


def gate_missed_bar(gate: dict[str, Any]) -> str:
    """The first bar the gate missed, in one line (``serving.gate.thresholds[0]: accuracy 0.75 >= 0.8 missed``),
    without the consequence and the advice the step printed with it; "" when it passed or nothing says."""
    missed = str(gate.get("missed") or "")
    if missed:
        return missed.split(", so the model is not registered")[0].split("; valid choices:")[0]
    line = next((b.get("bar") for b in gate.get("bars") or [] if isinstance(b, dict) and not b.get("passed")), "")
    return f"{line} missed" if line else ""


# -- which code ran ----------------------------------------------------------------------------------------------
PACKAGE = "vertex-tf-pipelines"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def git_state(root: str, *, own_checkout: bool = False, paths: Sequence[str] = ()) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files, under ``paths`` when given, have uncommitted changes) of the git
    checkout holding ``root``; (None, None) outside one, or without git. ``own_checkout``: only when ``root`` is
    the checkout's top (a package installed inside some other repository must not report that repository's
    commit)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        top = git("rev-parse", "--show-toplevel")
        if own_checkout and not os.path.samefile(top, root):
            return None, None
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no", "--", *paths))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None, None


def commit_text(commit: str, dirty: bool | None) -> str:
    """``git 0123456789ab`` (+ `` + uncommitted changes``), as the report and the run summary show a commit."""
    return f"git {commit[:12]}" + (" + uncommitted changes" if dirty else "")


def code_version(root: str = ROOT) -> dict[str, Any]:
    """Which code ran: ``{"git_commit", "git_dirty", "package_version", "text"}``. The project's git commit
    (and whether tracked files had changes) when ``root`` is the top of a git checkout, else the installed
    package's version (an image, a wheel: no ``.git``). Why not only the version: it stays 0.1.0 across
    every commit, so two runs from different code would look the same."""
    from importlib import metadata

    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = None
    commit, dirty = git_state(root, own_checkout=True)
    out: dict[str, Any] = {"git_commit": commit, "git_dirty": dirty, "package_version": version}
    if commit:
        out["text"] = commit_text(commit, dirty)
    else:
        out["text"] = f"{PACKAGE} {version}" if version else "unknown (no git checkout, package not installed)"
    return out
