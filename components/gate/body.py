"""gate's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the bars of
``serving.gate`` checked by ``jobs.steps.gate``."""
from __future__ import annotations

import json

from kfp.dsl import Artifact, Input, Metrics, Model, Output

from jobs.steps import gate as gate_lib


def gate(model: Input[Model], gated_model: Output[Model], metrics: Output[Metrics], result: Output[Artifact],
         config_json: str, verification: Input[Artifact] = None, training_metrics: Input[Metrics] = None,
         tensorboard: Input[Artifact] = None, tuning_metric: str = "", parent_model: str = "",
         api_endpoint: str = "", dry_run: bool = False, record_dir: str = "", study: Input[Artifact] = None):
    """Fills ``gated_model``, ``metrics`` and ``result``; a bar missed: the record written, one ``error:`` line, exit 1."""
    try:
        outcome = gate_lib.step(
            config_json, verification_path=verification.path if verification is not None else None,
            study_path=study.path if study is not None else None,
            tensorboard_path=tensorboard.path if tensorboard is not None else None,
            training=dict(training_metrics.metadata) if training_metrics is not None else None,
            tuning_metric=tuning_metric, parent_model=parent_model, dry_run=dry_run, api_endpoint=api_endpoint,
            record_dir=record_dir)
    except gate_lib.StepFailed as exc:
        print(f"error: {exc}", flush=True)
        raise SystemExit(1)
    with open(result.path, "w", encoding="utf-8") as f:
        json.dump(outcome.to_dict(), f, indent=1)
    for line in outcome.notes + outcome.lines:
        print(f"gate: {line}", flush=True)
    if not outcome.passed:
        print(f"error: {outcome.missed}", flush=True)
        raise SystemExit(1)
    for name, value in gate_lib.logged_metrics(outcome).items():
        metrics.log_metric(name, value)
    gated_model.uri = model.uri
    gated_model.metadata.update({**dict(model.metadata), "gate": {"passed": True, "bars": outcome.lines}})
    print(f"gate: passed{f' ({len(outcome.checks)} bars)' if outcome.checks else ''}: {model.uri} goes on to the "
          "Model Registry", flush=True)
