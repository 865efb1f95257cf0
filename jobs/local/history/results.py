"""A run's figures as history shows them, from the records it left: its final metrics (the same keys for every
run), the study's outcome, the gate's verdict and the code that trained."""
from __future__ import annotations

import datetime as dt
import os
from typing import Any

from jobs.rules import gate_section as gate_spec, tuning_rules
from jobs.run_records import records
from jobs.evaluation.verdict import figures
from jobs.run_records.tensorboard import last_values, read_scalars


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None



def run_metrics(summary: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
    """The final figures, the same keys for every run: train_loss, train_accuracy, val_accuracy, val_loss
    (held out: the verify step's on the exported model, else the chief's or the evaluator's last pass),
    examples_per_second; a user trainer's last TensorBoard values under their series names."""
    training = summary.get("training") if isinstance(summary.get("training"), dict) else metrics
    verification = summary.get("verification") if isinstance(summary.get("verification"), dict) else {}
    evaluation = summary.get("evaluation") if isinstance(summary.get("evaluation"), dict) else {}
    out: dict[str, float | None] = {
        "train_loss": number(training.get("train_loss")), "train_accuracy": number(training.get("train_accuracy")),
        "val_accuracy": next((v for v in (number(verification.get("accuracy")), number(training.get("val_accuracy")),
                                          number(evaluation.get("accuracy"))) if v is not None), None),
        "val_loss": next((v for v in (number(verification.get("loss")), number(training.get("val_loss")),
                                      number(evaluation.get("loss"))) if v is not None), None),
        "examples_per_second": number(training.get("examples_per_second")),
    }
    trainer = summary.get("trainer") if isinstance(summary.get("trainer"), dict) else {}
    out.update(figures(verification.get("eval")))  # serving.eval_data's verdict on the model that went on
    out.update(study_metric(summary))
    scalars = summary.get("model_scalars") if isinstance(summary.get("model_scalars"), dict) else \
        trainer.get("scalars") if isinstance(trainer.get("scalars"), dict) else {}
    for name, value in scalars.items():
        if number(value) is not None:
            out[str(name)] = number(value)
    return {k: v for k, v in out.items() if v is not None}


def study_metric(summary: dict[str, Any]) -> dict[str, float]:
    """A tuned run's study metric (its tag: ``val_rmse``) of the trial whose model went on (verified)."""
    study = summary.get("tuning") if isinstance(summary.get("tuning"), dict) else {}
    if not study.get("metric") or not isinstance(study.get("trials"), list):
        return {}
    verification = summary.get("verification") if isinstance(summary.get("verification"), dict) else {}
    verified = summary.get("verified_trial")
    trial = next((t for t in tuning_rules.study_runs(study) if verified is not None
                  and str(t.get("id")) == str(verified)), None) \
        or tuning_rules.verified_trial(study, str(verification.get("model_dir") or ""))
    value = number((trial or {}).get("metric"))
    return {str(study["metric"]): value} if value is not None else {}


def tuned_scalars(summary: dict[str, Any]) -> dict[str, float]:
    """The last TensorBoard values of a tuned run's verified trial (its logs folder: the summary's ``dirs``), for
    a record written before ``model_scalars`` was kept."""
    dirs = summary.get("dirs") if isinstance(summary.get("dirs"), dict) else {}
    logs = dirs.get("logs")
    return last_values(read_scalars(logs)) if isinstance(logs, str) and logs and "://" not in logs else {}


def trainer_code(trainer: dict[str, Any]) -> str | None:
    """A user trainer's code in a few characters (``sha256 0a4a166fa39f``, with its git commit when in a repository),
    as ``jobs.images.user_code.trainer_version`` recorded it."""
    sha, commit = trainer.get("content_sha256"), trainer.get("git_commit")
    if not isinstance(sha, str) or not sha:
        return trainer.get("text") if isinstance(trainer.get("text"), str) else None
    text = f"sha256 {sha[:12]}"
    if isinstance(commit, str) and commit:
        text += f" (git {commit[:12]}{', changed' if trainer.get('git_dirty') else ''})"
    return text



def study_outcome(path: str, record: dict[str, Any], folder_study: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The study's outcome: run.json's ``tuning`` for a finished run, else the folder's ``tuning.json``
    (``folder_study`` when it was read already)."""
    study = record.get("tuning") if isinstance(record.get("tuning"), dict) else None
    if not study:
        study = folder_study if folder_study is not None else records.read_at(path, records.TUNING_RECORD)
    if not study.get("trials"):
        return None
    best = tuning_rules.best_trial(study)
    handed = study.get(tuning_rules.HANDED_ON) if isinstance(study.get(tuning_rules.HANDED_ON), dict) else None
    return {"metric": study.get("metric"), "goal": study.get("goal"), **tuning_rules.study_counts(study),
            "best_trial": {k: best.get(k) for k in ("id", "parameters", "metric")} if best else None,
            "baseline": tuning_rules.baseline_metric(tuning_rules.baseline_of(study)),
            "handed_on": str(handed.get("id")) if handed else None}


def gate_outcome(path: str, record: dict[str, Any], steps_record: dict[str, Any], log_started: dt.datetime | None,
          folder_gate: dict[str, Any]) -> dict[str, Any] | None:
    """The gate's verdict: run.json's ``gate`` for a finished run; else ``gate.json`` (``folder_gate``, as read)
    when this attempt's gate step wrote it (steps.json names the step; without steps.json, the file is newer than
    the attempt's log)."""
    gate = record.get("gate") if isinstance(record.get("gate"), dict) else None
    if not gate:
        where = os.path.join(path, records.GATE_RECORD)
        ran = any(isinstance(x, dict) and x.get("name") == "gate" for x in steps_record.get("steps") or [])
        try:
            newer = log_started is not None and os.path.getmtime(where) >= log_started.timestamp()
        except OSError:
            return None
        gate = folder_gate if ran or (not steps_record and newer) else None
    if not gate or "passed" not in gate:
        return None
    return {"passed": bool(gate["passed"]), "missed": gate_spec.gate_missed_bar(gate),
            "lines": [str(x) for x in gate.get("lines") or []]}
