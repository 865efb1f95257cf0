"""The records a run leaves beside it, one JSON file per step (written atomically by the step that knows it),
read here by name: ``training.json`` (what the train step ran), ``metrics.json`` (the built-in trainer's
final figures), ``evaluation.json`` (the side-car evaluator), ``verification.json`` (the verify step),
``tuning.json`` (the hyperparameter study, ``jobs.tuning.local``; Vertex's study in the same shape) and
``gate.json`` (the gate's verdict, ``jobs.gate``). ``jobs.local.runs`` gathers them into ``<base>/run.json``;
the report and ``runs list`` read them too.

A tuned run trains in its trials' folders (``<base>/<trial id>/``, Vertex's layout), not in ``<base>``: the
model that goes on is the one the verify step loaded, and :func:`verified_trial` says which trial it is, so
the figures and folders shown for the run are that trial's (:func:`trial_dirs`, :func:`read_trial_metrics`).
"""
from __future__ import annotations

import math
from typing import Any

from trainers import config as config_lib
from trainers import fileio
from trainers.paths import join, readable

from jobs.gate import RECORD_NAME as GATE_RECORD
from jobs.tuning.local import RECORD as TUNING_RECORD
from jobs.tuning.local import trial_base


def read_at(base: str, name: str) -> dict[str, Any]:
    """The record ``name`` in the run folder ``base`` ({} when it is missing, unreadable or not an object):
    for readers that have a folder and no config (the report of a KFP user's run, ``runs list``). A ``gs://``
    folder is read through Vertex's ``/gcs`` mount where there is one."""
    found = fileio.read_json(readable(join(base, name)))
    return found if isinstance(found, dict) else {}


def _read_json(cfg: config_lib.JobConfig, name: str) -> dict[str, Any]:
    return read_at(config_lib.resolved_base_dir(cfg), name)


def read_training(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.train_local`` recorded (``<base>/training.json``)."""
    return _read_json(cfg, "training.json")


def read_metrics(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the chief wrote at the end of training (``<base>/metrics.json``)."""
    return _read_json(cfg, "metrics.json")


def read_evaluation(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the side-car evaluator wrote (``<base>/evaluation.json``; empty without an evaluator pool)."""
    return _read_json(cfg, "evaluation.json")


def read_verification(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.verify_model`` found (``<base>/verification.json``)."""
    return _read_json(cfg, "verification.json")


def is_gated(cfg: config_lib.JobConfig) -> bool:
    """Whether the job has a gate step (``serving.gate`` sets a bar)."""
    return bool(cfg.serving.gate.thresholds or cfg.serving.gate.better_than_parent)


def read_tuning(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The study's record (``<base>/tuning.json``: ``{"metric", "goal", "trials": [{"id", "parameters",
    "metric", "state", "seconds", ...}], "best_trial"}``); {} when the job has no ``tuning:`` section (a record
    left in the folder by an earlier tuned job is not this run's)."""
    return _read_json(cfg, TUNING_RECORD) if cfg.tuning.enabled else {}


def read_gate(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The gate's record (``<base>/gate.json``: ``passed, lines, missed, notes, bars, metrics, parent``); {}
    when the job sets no bar."""
    return _read_json(cfg, GATE_RECORD) if is_gated(cfg) else {}


# -- the study's record, as the run's readers need it ---------------------------------------------------
def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def trial_order(trial_id: Any) -> tuple[int, Any]:
    """Sort key of a trial id: numeric ids (``"2"`` < ``"10"``, Vertex's and ours) first, in number order."""
    text = str(trial_id)
    return (0, int(text)) if text.isdigit() else (1, text)


def best_trial(study: dict[str, Any]) -> dict[str, Any] | None:
    """The record's ``best_trial``; for a record without one, the SUCCEEDED trial with the best finite metric
    in the study's direction (the lowest id among equals), as the study itself picks it."""
    if isinstance(study.get("best_trial"), dict):
        return study["best_trial"]
    done = [t for t in study.get("trials") or [] if isinstance(t, dict) and t.get("state") == "SUCCEEDED"
            and _number(t.get("metric")) is not None]
    if not done:
        return None
    sign = -1 if study.get("goal") == "maximize" else 1
    return min(done, key=lambda t: (sign * t["metric"], trial_order(t.get("id"))))


def _same_folder(a: Any, b: Any) -> bool:
    return bool(a and b) and readable(str(a)).rstrip("/") == readable(str(b)).rstrip("/")


def verified_trial(study: dict[str, Any], model_dir: str = "") -> dict[str, Any] | None:
    """The trial whose model the verify step loaded (``model_dir``, verification.json's), matched on the
    trial's model folder (``gs://`` and its ``/gcs`` mount alike); without a ``model_dir``, the best trial
    (the model the study hands on). None when the study names no such trial."""
    trials = [t for t in study.get("trials") or [] if isinstance(t, dict)]
    best = best_trial(study)
    if not model_dir:
        return next((t for t in trials if best and t.get("id") == best.get("id")), best)
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
    return read_at(trial_folder(base, trial), "metrics.json")


def study_counts(study: dict[str, Any]) -> dict[str, int]:
    """``{"trials", "succeeded", "failed", "other"}``: failed counts FAILED and INFEASIBLE (Vertex's word for
    a trial without the metric); other: running or stopped trials."""
    states = [str(t.get("state", "")) for t in study.get("trials") or [] if isinstance(t, dict)]
    failed = sum(s in ("FAILED", "INFEASIBLE") for s in states)
    succeeded = states.count("SUCCEEDED")
    return {"trials": len(states), "succeeded": succeeded, "failed": failed,
            "other": len(states) - succeeded - failed}


def format_value(value: Any) -> str:
    """A hyperparameter's or metric's value as the run's readers show it (4 significant digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    return str(value) if isinstance(value, int) else format(value, ".4g")


def format_parameters(parameters: dict[str, Any]) -> str:
    return " ".join(f"{k}={format_value(v)}" for k, v in (parameters or {}).items())


def gate_missed_bar(gate: dict[str, Any]) -> str:
    """The first bar the gate missed, in one line (``serving.gate.thresholds[0]: accuracy 0.75 >= 0.8 missed``),
    without the consequence and the advice the step printed with it; "" when it passed or nothing says."""
    missed = str(gate.get("missed") or "")
    if missed:
        return missed.split(", so the model is not registered")[0].split("; valid choices:")[0]
    line = next((b.get("bar") for b in gate.get("bars") or [] if isinstance(b, dict) and not b.get("passed")), "")
    return f"{line} missed" if line else ""
