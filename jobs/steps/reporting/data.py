"""The run report's facts, gathered from what a run left: :func:`gather` reads a run folder's records
(``jobs.run_records.records``), the TensorBoard scalars (``jobs.run_records.tensorboard``), the checkpoints and the launcher's
attempts, the prepared data's manifest and the job config, and hands them to the page (``jobs.steps.reporting.page.build``).

Any part may be missing (a KFP user's run of given parts, an unfinished run, a ``gs://`` folder read through
Vertex's ``/gcs`` mount); a tuned run's figures, logs and checkpoints are those of the trial whose model was
verified (``jobs.rules.tuning_rules.verified_trial``). What each record holds is in ``jobs.steps.reporting.page``'s docstring.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from jobs.local.run.lock import RunLock
from jobs.images.user_code import trainer_version
from jobs.rules import tuning_rules
from jobs.run_records import provenance, records, run_cost, trial_files
from jobs.steps.reporting import page as report, sections
from jobs.run_records.tensorboard import read_scalars
from trainers import record_reader
from jobfile import config as config_lib
from jobfile.paths import join, readable


def checkpoint_steps(checkpoint_dir: str) -> list[int]:
    """Steps of the built-in trainer's checkpoints (``ckpt-<step>.index``) in a local or mounted folder."""
    try:
        names = os.listdir(readable(checkpoint_dir))
    except OSError:
        return []
    return sorted({int(m.group(1)) for n in names if (m := re.match(r"ckpt-(\d+)\.index$", n))})


def attempts(logs_dir: str) -> int:
    try:
        return sum(1 for n in os.listdir(readable(join(logs_dir, "replicas"))) if n.startswith("attempt-"))
    except OSError:
        return 0


def job_rows(cfg, training: dict[str, Any]) -> list[tuple[str, str]]:
    """The job table: name, trainer, strategy, machines, replicas, throughput, training wall time."""
    figures = training.get("metrics") or {}
    rows = [("job", cfg.name if cfg else str(training.get("job", "n/a")))]
    if cfg is not None:
        pools = [(name, p) for name, p in zip(("chief", "worker", "parameter_server", "evaluator"),
                                              cfg.topology.pools()) if p.replica_count]
        machines = "; ".join(
            f"{name} {p.replica_count}× {p.machine_type}" + (f" + {p.accelerator_count}× {p.accelerator_type}"
                                                            if p.accelerator_count else "") for name, p in pools)
        trainer = f"python -m {cfg.trainer.module}" if cfg.trainer.module else f"built-in ({cfg.model.name})"
        rows += [("trainer", trainer), ("strategy", f"{cfg.topology.strategy}"
                                                    + (f" ({figures['strategy']})" if figures.get("strategy") else "")),
                 ("machines (Vertex pools)", machines or "n/a")]
    if figures.get("replicas") is not None:  # batch and precision: in the hyperparameters
        rows.append(("replicas", str(figures["replicas"])))
    eps = figures.get("examples_per_second")
    if isinstance(eps, (int, float)):
        rows.append(("training throughput", f"{eps:.1f} examples/s (this run's training loop from its first step "
                                            "to its last, validation passes excluded: the last "
                                            "train/examples_per_second point)"))
    if training.get("seconds") is not None:
        rows.append(("training wall time", f"{training['seconds']} s"))
    return rows


def hyperparameter_rows(cfg, figures: dict[str, Any], trial: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """What was chosen for the training: the built-in trainer's hyperparameters (from the config, and what
    the trainer reports it really used), or a user trainer's command line (its hyperparameters are its own).
    ``trial``: the study's trial whose model this is; its values are what that training used (the built-in
    trainer takes them as config overrides, a user trainer as ``--NAME=VALUE`` after its arguments)."""
    if cfg is None:
        return []
    cfg, flags, tuned = sections.with_trial(cfg, trial)
    t, d, c = cfg.training, cfg.data, cfg.checkpoint
    if cfg.user_trainer:
        command = (["python", "-m", cfg.trainer.module] + list(cfg.trainer.args) if cfg.trainer.module
                   else list(cfg.container.command) + list(cfg.container.args))
        return tuned + [("trainer command", " ".join(command + flags)),
                        ("hyperparameters", "your trainer's own (its arguments above; Vertex passes a tuning "
                                            "trial's as flags)")]
    steps = figures.get("steps")
    length = f"{t.steps} steps" if t.steps else f"{t.epochs} epochs" + (f" ({steps} steps)" if steps else "")
    global_batch = figures.get("global_batch_size") or t.global_batch_size or None
    precision = t.precision + (f" → {figures['precision']}" if figures.get("precision") else "")
    if isinstance(figures.get("precision_reason"), str) and t.precision == "auto":  # what auto measured, or why not
        precision += f" ({figures['precision_reason'].removeprefix('auto: ')})"
    if cfg.topology.evaluator.replica_count:
        validation = "the side-car evaluator replica, at every checkpoint"
    else:
        validation = "the chief, at every checkpoint save and at the end"
    every = " or ".join(x for x in (f"{c.every_steps} steps" if c.every_steps else "",
                                    f"{c.every_seconds:g} s" if c.every_seconds else "") if x) or "the end only"
    return tuned + [
        ("model", cfg.model.name), ("optimizer", t.optimizer), ("learning rate", f"{t.learning_rate:g}"),
        ("training length", length),
        ("batch", f"{t.per_replica_batch_size} per replica" + (f", {global_batch} global" if global_batch else "")),
        ("image size", f"{d.image_size}×{d.image_size}"), ("precision", precision),
        ("seed", f"{t.seed}" + (" (op-deterministic)" if t.deterministic else "")),
        ("data augmentation", "random crop and flip" if d.augment else "none"),
        ("shuffle buffer", str(d.shuffle_buffer)),
        ("checkpoints", f"every {every}, {c.keep} kept"), ("validation", validation)]


def data_summary(cfg) -> dict[str, Any] | None:
    """The prepared data's ``manifest.json`` (examples per split and class), or None when the job has none
    (a user trainer reading its own data) or it cannot be read."""
    if cfg is None or cfg.data.source == "none":
        return None
    where = config_lib.prepared_data_dir(cfg)
    manifest = record_reader.read_or_none(join(readable(where), "manifest.json")) if where else None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("classes"), list):
        return {"dir": where, "missing": True}
    return {"dir": where, "source": cfg.data.source, "path": cfg.data.path, "classes": manifest["classes"],
            "counts": manifest.get("counts") or {}, "num_examples": manifest.get("num_examples") or {},
            "image_size": manifest.get("image_size"), "encoding": manifest.get("encoding", "raw")}


def provenance_rows(base: str, steps: dict[str, Any], verification: dict[str, Any], cfg=None) -> list[tuple[str, str]]:
    """When the run started and with which command (the run lock, held while this step runs; local runs),
    when this page was written, and from which code: a user's trainer's own version
    (``jobs.images.user_code.trainer_version``) and this tool's apart."""
    import datetime as dt

    holder: dict[str, Any] = RunLock(base).holder() if base and "://" not in base else {}  # THE reader's rules
    rows = []
    started = steps.get("started") or holder.get("started")
    if started:
        rows.append(("run started", str(started)))
    rows.append(("report written", dt.datetime.now().astimezone().isoformat(timespec="seconds")))
    trainer = trainer_version(cfg)
    if trainer:
        rows.append(("trainer code version", trainer["text"]))
        rows.append(("tool version (this pipeline)", provenance.code_version()["text"]))
    else:
        rows.append(("code version", provenance.code_version()["text"]))
    if holder.get("command"):
        rows.append(("command", str(holder["command"])))
    if verification.get("framework_version"):
        rows.append(("TensorFlow", str(verification["framework_version"])))
    if base:
        rows.append(("run folder", base))
    return rows


def gather(cfg, base: str = "", *, verification: dict[str, Any] | None = None, logs_uri: str = "",
           checkpoints_uri: str = "", study: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of a run: what ``base`` (a run folder, local or ``gs://`` read through the ``/gcs`` mount)
    holds, with the given parts winning over it. Any part may be missing. ``study``: the hyperparameter
    study's record (the ``tune`` or ``hyperparameter_tuning_job`` step's); without it, ``<base>/tuning.json``
    when the job has a ``tuning:`` section. A tuned run's training figures, logs and checkpoints are those of
    the trial whose model was verified."""
    where = readable(base) if base else ""
    tuned = cfg is None or cfg.tuning.enabled
    expect_gate = cfg is not None and records.is_gated(cfg)
    steps: dict[str, Any] = {}
    gate: dict[str, Any] = {}
    if where:
        if verification is None:
            verification = record_reader.read_or_none(join(where, records.VERIFICATION_RECORD))
        if study is None and tuned:
            study = records.read_at(where, records.TUNING_RECORD)
        if cfg is None:  # a report of given parts: the gate's record, if one is there
            gate = records.read_at(where, records.GATE_RECORD)
        if "://" not in where:
            steps = records.read_at(where, records.STEPS_RECORD)
    verification = verification or {}
    trial = tuning_rules.verified_trial(study, str(verification.get("model_dir") or "")) if study else None
    training: dict[str, Any] = {}
    if trial is not None:  # the trials trained, each in <base>/<id>/: the figures are the verified trial's
        figures = trial_files.read_trial_metrics(where or "", trial) if where or trial.get("model_dir") else {}
        training = {"metrics": figures} if figures else {}
        dirs = trial_files.trial_dirs(base, trial) if base or trial.get("model_dir") else {}
    elif where:
        training = record_reader.read_or_none(join(where, records.TRAINING_RECORD)) or {}
        if not training.get("metrics"):
            builtin = record_reader.read_or_none(join(where, records.METRICS_RECORD))
            if builtin:
                training["metrics"] = builtin
        dirs = {"logs": join(base, "logs"), "checkpoints": join(base, "checkpoints")}
    else:
        dirs = {}
    logs = logs_uri or dirs.get("logs", "")
    checkpoints = checkpoints_uri or dirs.get("checkpoints", "")
    figures = training.get("metrics") or {}
    resumed = figures.get("resumed_from_step")
    restarts = [r for r in training.get("restarts") or [] if isinstance(r, dict)]
    # a Vertex run's CustomJob attempts (jobs.cloud.vertex_jobs.custom_job: a fall-over to the next placement option each)
    placement = [a for a in (records.read_at(where, records.VERTEX_JOBS_RECORD).get("attempts") or [] if where else [])
                 if isinstance(a, dict)]
    if resumed is None:
        resumed = next((r.get("resumed_from_step") for r in reversed(restarts)
                        if r.get("resumed_from_step") is not None), None)
    # the built-in trainer says resumed_from_step null when it restored nothing: a fresh start, not a gap
    fresh = resumed is None and "resumed_from_step" in figures
    title = cfg.name if cfg else (os.path.basename(base.rstrip("/")) if base else "model")
    specs = ({n: dataclasses.asdict(p) for n, p in cfg.tuning.parameters.items()}
             if cfg is not None and cfg.tuning.enabled else None)
    scalars = read_scalars(readable(logs)) if logs else {}
    if expect_gate:
        gate = sections.checked_gate(cfg, figures, scalars, study, verification)
    run_rows = provenance_rows(base, steps, verification, cfg)
    # what it cost: a Vertex run's CustomJobs by their own times; a local run, what its option would have cost
    cost = (run_cost.vertex_estimate(placement) if placement else
            run_cost.local_estimate(cfg, run_cost.training_seconds(steps.get("steps") or []))
            if cfg is not None and where and "://" not in where else None)
    if cost:
        run_rows.append(("estimated cost", run_cost.line(cost)))
    return report.build(title=title, rows=job_rows(cfg, training), scalars=scalars,
                 verification=verification, checkpoints=checkpoint_steps(checkpoints) if checkpoints else [],
                 checkpoint_dir=checkpoints, attempts_seen=attempts(logs) if logs else 0, resumed=resumed,
                 fresh=fresh, hyperparameters=hyperparameter_rows(cfg, figures, trial), data=data_summary(cfg),
                 steps=steps, provenance=run_rows, train=figures,
                 restarts=restarts, vertex_attempts=placement, study=sections.study_facts(study, verification, specs), gate=gate,
                 gate_expected=expect_gate, gate_where=base)
