"""A hyperparameter study's record and its rules, one place for the local study (``jobs.tuning``), Vertex's study
(``jobs.cloud.vertex_jobs.tuning_job``, ``jobs.tuning.pick``) and every reader of either (the gate, the report, ``runs``):

* the trials' states (:data:`SUCCEEDED`, ...), as the local study records them and as Vertex names them;
* THE best-trial rule (:func:`best_of`: the study's goal, the lowest id among equals, only SUCCEEDED trials
  with a finite metric) and the record's answer (:func:`best_trial`);
* the baseline beside the trials and THE rule of which model goes on (:func:`handed_on_run`: a tie to the
  baseline), which run of the study a verified model is (:func:`verified_trial`), the study's counts;
* how a trial and its values are said (:func:`trial_line`, :func:`format_value`), the local study's lines and
  Vertex's alike.

The record's name and its reading and writing are ``jobs.run_records.records``'; the trials' folders and metric files
``jobs.run_records.trial_files``'; the ``tuning:`` section's own rules ``jobs.rules.tuning_section``'. Spec layer: the local runtime
(``jobs.local``) and the clients (``jobs.cloud``) read it too. Pure: no I/O.
"""
from __future__ import annotations

import math
from typing import Any

from jobs.rules import saved_model

#: A trial's state, as the local study records it and as Vertex names it (``Trial.State``): ACTIVE (running),
#: SUCCEEDED (exit 0, the metric and a model), FAILED (the job failed, or no model), INFEASIBLE (exit 0 without a finite metric;
#: Vertex's word for a trial without the metric), STOPPED (Ctrl-C, or the study stopped it).
SUCCEEDED, FAILED, INFEASIBLE, STOPPED, ACTIVE = "SUCCEEDED", "FAILED", "INFEASIBLE", "STOPPED", "ACTIVE"


def finite_number(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None: what counts as a trial's figure."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def trial_order(trial_id: Any) -> tuple[int, Any]:
    """Sort key of a trial id: numeric ids (``"2"`` < ``"10"``, Vertex's and ours) first, in number order."""
    text = str(trial_id)
    return (0, int(text)) if text.isdigit() else (1, text)


#: What a study's record says of its best trial (``best_trial``): the trial's id, values, figure and model folder
#: (a Vertex trial row has no model folder: ``jobs.cloud.vertex_jobs.tuning_job`` adds it from the base output directory).
BEST_FIELDS = ("id", "parameters", "metric", "model_dir")


def best_of(trials: list[dict[str, Any]], goal: str) -> dict[str, Any] | None:
    """THE best-trial rule, the local study's, Vertex's study's and every reader's: of the SUCCEEDED trials with a
    finite metric (FAILED, INFEASIBLE, STOPPED and running trials never count), the one best in the study's
    direction (``goal``: ``maximize``, else lowest first), the lowest id among equals; None when there is none.
    ``trials`` as the records hold them (``{"id", "state", "metric", ...}``); returns the winner as the record
    names its best trial (:data:`BEST_FIELDS` it has)."""
    done = [t for t in trials if isinstance(t, dict) and t.get("state") == SUCCEEDED
            and finite_number(t.get("metric")) is not None]
    if not done:
        return None
    sign = -1 if goal == "maximize" else 1
    best = min(done, key=lambda t: (sign * t["metric"], trial_order(t.get("id"))))
    return {k: best[k] for k in BEST_FIELDS if k in best}


def best_trial(study: dict[str, Any]) -> dict[str, Any] | None:
    """The study record's best trial: its ``best_trial`` (written by the study with :func:`best_of`); for a record
    without one, :func:`best_of` its trials, as the study itself picks it."""
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


def baseline_of(study: dict[str, Any]) -> dict[str, Any] | None:
    """The study record's baseline run, or None (``tuning.baseline: false``, or a record without one)."""
    found = study.get(BASELINE) if isinstance(study, dict) else None
    return found if isinstance(found, dict) else None


def baseline_metric(baseline: dict[str, Any] | None) -> float | None:
    """The baseline's figure when it SUCCEEDED with a finite metric, else None."""
    if not baseline or baseline.get("state") != SUCCEEDED:
        return None
    return finite_number(baseline.get("metric"))


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
    if finite_number(trial["metric"]) is not None and is_better(float(trial["metric"]), value, goal):
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


def verified_trial(study: dict[str, Any], model_dir: str = "") -> dict[str, Any] | None:
    """The run of the study whose model the verify step loaded (``model_dir``, verification.json's): a trial,
    or the baseline (id ``"baseline"``), matched on its model folder or the one below it that the verify step found
    (``jobs.rules.saved_model``; ``gs://`` and its ``/gcs`` mount alike);
    without a ``model_dir``, the one the study handed on (:func:`handed_on`). None when the study names no
    such run."""
    trials = study_runs(study)
    best = handed_on(study)
    if not model_dir:
        return next((t for t in trials if best and str(t.get("id")) == str(best.get("id"))), best)
    for trial in trials + ([best] if best else []):
        if trial.get("model_dir") and saved_model.same_or_below(model_dir, trial["model_dir"]):
            return next((t for t in trials if t.get("id") == trial.get("id")), trial)
    if best and not best.get("model_dir"):  # a record without model folders: the one it handed on
        return next((t for t in trials if t.get("id") == best.get("id")), best)
    return None


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
    seconds = finite_number(trial.get("seconds"))
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    head = f"trial {trial.get('id')} {trial.get('state')}{took} ({done}/{total} done): "
    value = finite_number(trial.get("metric"))
    if trial.get("state") != SUCCEEDED or value is None:
        return head + (str(trial.get("error") or "") or f"no finite {metric} reported")
    shown = (f"best so far: trial {best.get('id')} ({format_value(best.get('metric'))})" if best
             else "no trial has succeeded yet")
    figure = f"; baseline {format_value(baseline)}" if baseline is not None else ""
    values = format_parameters(dict(sorted((trial.get("parameters") or {}).items())))  # by name, as the flags
    return f"{head}{metric} {format_value(value)} with {values}; {shown}{figure}"
