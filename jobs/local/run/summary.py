"""The run's summary: what a run did, from its records (``jobs.run_records.records``), printed at its end, kept in ``run.json``
and printed again by a rerun of a finished run (:func:`run_summary` gathers it, :func:`summary_lines` shows it)."""
from __future__ import annotations

import datetime as dt
import os
from typing import Any

from jobs.rules import gate_section as gate_spec, tuning_rules
from jobs.run_records import provenance, records, run_cost, trial_files
from jobs.images.user_code import trainer_version
from jobs.run_records.tensorboard import CURVES_HOW, last_values, read_scalars
from trainers.cluster import output_dirs
from jobfile.config import resolved_base_dir
from jobfile.paths import join


def run_summary(cfg, elapsed_s: float, log_file: str | None = None, steps: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    """What the run did, from its records (``jobs.run_records.records``). A tuned run trained in its trials' folders: its
    ``dirs`` and ``training`` figures are those of the trial whose model was verified (the study's best)."""
    base = resolved_base_dir(cfg)
    started = dt.datetime.now().astimezone() - dt.timedelta(seconds=elapsed_s)
    verification = {k: v for k, v in records.read_verification(cfg).items() if k != "gallery"}
    tuning = records.read_tuning(cfg)
    trial = tuning_rules.verified_trial(tuning, verification.get("model_dir") or "") if tuning else None
    upload = join(base, records.UPLOAD_REQUEST_RECORD)
    extra: dict[str, Any] = {"upload_request": upload} if os.path.exists(upload) else {}
    trainer = trainer_version(cfg)
    if trainer:  # each file's hash is provenance.json's (what a rerun is compared with), not the summary's
        extra["trainer_version"] = {k: v for k, v in trainer.items() if k != "file_sha256"}
    if trial:  # the model that went on is a trial's: its TensorBoard scalars are the run's (runs list, compare)
        extra["model_scalars"] = last_values(read_scalars(trial_files.trial_dirs(base, trial)["logs"]))
    return {**extra, "name": cfg.name, "elapsed_s": round(elapsed_s, 1), "started": started.isoformat(timespec="seconds"),
            "code_version": provenance.code_version(),
            "dirs": trial_files.trial_dirs(base, trial) if trial else output_dirs(None, base),
            "pipeline_root": join(base, "pipeline_root"), "steps": list(steps or []),
            "training": trial_files.read_trial_metrics(base, trial) if trial else records.read_metrics(cfg),
            "trainer": records.read_training(cfg), "verification": verification,
            "evaluation": records.read_evaluation(cfg), "tuning": tuning,
            "verified_trial": str(trial.get("id")) if trial else None, "gate": records.read_gate(cfg),
            "log_file": log_file, "report": join(base, records.REPORT_PAGE),
            "cost": run_cost.local_estimate(cfg, run_cost.training_seconds(steps or []))}


def _num(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def _training_line(t: dict[str, Any], trainer: dict[str, Any]) -> str:
    steps = t.get("steps")
    if not isinstance(steps, int):
        if trainer:  # a user's trainer: what ran and the last value of every scalar it wrote
            scalars = trainer.get("scalars") or {}
            shown = ", ".join(f"{k} {_num(v, '.4g')}" for k, v in list(scalars.items())[:4])
            if not shown:  # what it can show, and how to get curves (one wording: jobs.run_records.tensorboard)
                shown = ("no figures: the trainer wrote no TensorBoard scalars to AIP_TENSORBOARD_LOG_DIR (its own lines "
                         f"are in the log); {CURVES_HOW}")
            else:
                shown = f"final {shown}"
            return (f"{trainer.get('trainer', '?')}: {sum(trainer.get('replica_counts') or [])} replicas, "
                    f"{trainer.get('attempts', '?')} attempt(s), {_num(trainer.get('seconds'), '.0f')} s; {shown}")
        return "no training metrics were written (metrics.json missing)"
    resumed = t.get("resumed_from_step") if isinstance(t.get("resumed_from_step"), int) else 0
    job = (f"{t.get('replicas', '?')} replicas ({t.get('strategy', '?')}), "
           f"global batch {t.get('global_batch_size', '?')}")
    if steps - resumed <= 0:
        return f"0 steps this run: the checkpoint was already at step {steps} (nothing left to train); {job}"
    since = f" (resumed from step {resumed})" if resumed else ""
    line = (f"{steps} steps{since}, {job}, final train loss {_num(t.get('train_loss'), '.4f')}, "
            f"train accuracy {_num(t.get('train_accuracy'), '.3f')}")
    if t.get("val_accuracy") is not None:  # the chief's last validation pass
        line += (f"; validation accuracy {_num(t.get('val_accuracy'), '.3f')}, loss {_num(t.get('val_loss'), '.4f')} "
                 f"at step {t.get('val_step', '?')}")
    return line


def _trained_line(s: dict[str, Any], t: dict[str, Any]) -> str:
    """The training line; a tuned run's is the verified trial's (its ``metrics.json``; a user trainer writes none)."""
    trainer = s.get("trainer") if isinstance(s.get("trainer"), dict) else {}
    trial = s.get("verified_trial")
    if trial is None:
        return _training_line(t, trainer)
    which = ("the baseline (the job as it stands, run beside the study)" if str(trial) == tuning_rules.BASELINE
             else f"trial {trial}")
    if not isinstance(t.get("steps"), int) and not trainer:
        return (f"{which} (the verified model's; every trial under study below): no metrics.json (a user "
                "trainer's figures are its TensorBoard scalars and the metric it reported)")
    return f"{which}: {_training_line(t, trainer)}"


def _verification_line(v: dict[str, Any]) -> str:
    if not v:
        return "none recorded"
    latency = v.get("latency_ms") or {}
    line = (f"{v.get('signature', '?')}({', '.join(v.get('inputs') or {})}) ran on {v.get('instances', '?')} "
            f"instances ({v.get('input_source', '?')}), {_num(latency.get('median'), '.1f')} ms median, in a process "
            "that never trained")
    if "accuracy" in v:  # a classifier's held-out figures (n/a when missing)
        line += (f"; accuracy {_num(v.get('accuracy'), '.3f')}, loss {_num(v.get('loss'), '.4f')} on "
                 f"{v.get('examples', '?')} {v.get('split', '')} examples")
    return line + eval_text(v.get("eval"))


def eval_text(e: Any) -> str:
    """The held-out verdict on ``serving.eval_data`` for the summary line ("" without one)."""
    if not isinstance(e, dict) or not e.get("task"):
        return ""
    if e["task"] == "regression":
        return (f"; on {e.get('examples', '?')} held-out examples (serving.eval_data): RMSE {_num(e.get('rmse'), '.4g')}, "
                f"MAE {_num(e.get('mae'), '.4g')} (predicting the mean: RMSE {_num(e.get('baseline_rmse'), '.4g')})")
    return (f"; on {e.get('examples', '?')} held-out examples (serving.eval_data): accuracy "
            f"{_num(e.get('accuracy'), '.3f')} (the most common class: {_num(e.get('baseline_accuracy'), '.3f')})")


def study_line(study: dict[str, Any], verified: Any = None) -> str:
    """The study in one line: trials run and how they ended, the best trial's id, values and metric, and the
    trial the verified model came from when it is not the best."""
    n = tuning_rules.study_counts(study)
    ended = f"{n['succeeded']} succeeded" + (f", {n['failed']} failed" if n["failed"] else "") + (
        f", {n['other']} stopped or running" if n["other"] else "")
    wall = f" in {_num(study.get('seconds'), '.0f')} s" if study.get("seconds") is not None else ""
    line = f"{n['trials']} trial(s){wall} ({ended})"
    best = tuning_rules.best_trial(study)
    if not best:
        return line + "; no trial succeeded"
    line += (f"; best trial {best.get('id')}: {study.get('metric', 'metric')} {tuning_rules.format_value(best.get('metric'))}"
             f" ({study.get('goal', '?')}) with {tuning_rules.format_parameters(best.get('parameters') or {})}")
    handed = study.get(tuning_rules.HANDED_ON) if isinstance(study.get(tuning_rules.HANDED_ON), dict) else None
    if tuning_rules.baseline_of(study) is not None and handed and handed.get("reason"):
        line += f"; {handed['reason']}"  # the baseline beside the study: which model went on, and why
    if verified is not None and str(verified) not in (str(best.get("id")), str((handed or {}).get("id"))):
        line += f"; the verified model is {'the baseline' if str(verified) == tuning_rules.BASELINE else 'trial ' + str(verified)}'s"
    return line


def gate_line(gate: dict[str, Any]) -> str:
    """The gate's verdict in one line: passed (with every bar's line) or the bar it missed."""
    if gate.get("passed"):
        lines = [str(x) for x in gate.get("lines") or []]
        return f"passed ({len(lines)} bar(s)): " + "; ".join(lines) if lines else "passed (no bar set)"
    return f"missed: {gate_spec.gate_missed_bar(gate) or 'see gate.json'}; the model is not registered"


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The console summary; every field may be missing or null (an old or partial record)."""
    dirs, t, v = s.get("dirs") or {}, s.get("training") or {}, s.get("verification") or {}
    lines = ["=" * 72, f"pipeline {s.get('name', '?')} finished in {_num(s.get('elapsed_s'), '.0f')} s",
             f"  model (SavedModel)  {v.get('model_dir') or dirs.get('model', 'n/a')}",
             f"  checkpoints         {dirs.get('checkpoints', 'n/a')}",
             f"  TensorBoard logs    {dirs.get('logs', 'n/a')}    (tensorboard --logdir {dirs.get('logs', '.')})",
             f"  pipeline artifacts  {s.get('pipeline_root', 'n/a')}",
             *([f"  run report          {s['report']}"] if s.get("report") else []),
             *([f"  registry request    {s['upload_request']}    (the Model Registry models:upload request)"]
               if s.get("upload_request") else []),
             *([f"  full log            {s['log_file']}"] if s.get("log_file") else []),
             f"  training            {_trained_line(s, t)}"]
    e = s.get("evaluation") if isinstance(s.get("evaluation"), dict) else {}
    if e:
        evaluated = len(e["history"]) if isinstance(e.get("history"), list) else 0
        lines.append(f"  evaluator           accuracy {_num(e.get('accuracy'), '.3f')}, loss {_num(e.get('loss'), '.4f')} "
                     f"at step {e.get('step', '?')} on {e.get('examples', '?')} validation examples "
                     f"({evaluated} checkpoint(s) evaluated; scalars in <logs>/validation)")
    lines.append(f"  verification        {_verification_line(v)}")
    study = s.get("tuning") if isinstance(s.get("tuning"), dict) else {}
    if study.get("trials"):
        lines.append(f"  study               {study_line(study, s.get('verified_trial'))}")
    gate = s.get("gate") if isinstance(s.get("gate"), dict) else {}
    if gate:
        lines.append(f"  gate                {gate_line(gate)}")
    steps = s.get("steps") or []
    if steps:
        lines.append("  steps               " + ", ".join(f"{x.get('name')} {_num(x.get('seconds'), '.1f')} s" for x in steps))
    if isinstance(s.get("cost"), dict):
        lines.append(f"  cost                {run_cost.line(s['cost'])}")
    code = s.get("code_version") if isinstance(s.get("code_version"), dict) else {}
    trainer = s.get("trainer_version") if isinstance(s.get("trainer_version"), dict) else {}
    if trainer.get("text"):
        lines.append(f"  trainer code        {trainer['text']}")
    if code.get("text"):
        lines.append(f"  {'tool code' if trainer.get('text') else 'code':<20}{code['text']}")
    return lines + ["=" * 72]
