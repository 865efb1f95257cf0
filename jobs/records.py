"""The records a run leaves beside it, one JSON file per step (written atomically by the step that knows it),
read here by name: ``training.json`` (what the train step ran), ``metrics.json`` (the built-in trainer's
final figures), ``evaluation.json`` (the side-car evaluator), ``verification.json`` (the verify step).
``jobs.local.runs`` gathers them into ``<base>/run.json``; the report reads them too.
"""
from __future__ import annotations

from typing import Any

from trainers import config as config_lib
from trainers import fileio
from trainers.paths import join


def read_training(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.train_local`` recorded (``<base>/training.json``)."""
    return _read_json(cfg, "training.json")


def _read_json(cfg: config_lib.JobConfig, name: str) -> dict[str, Any]:
    return fileio.read_json(join(config_lib.resolved_base_dir(cfg), name)) or {}


def read_metrics(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the chief wrote at the end of training (``<base>/metrics.json``)."""
    return _read_json(cfg, "metrics.json")


def read_evaluation(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the side-car evaluator wrote (``<base>/evaluation.json``; empty without an evaluator pool)."""
    return _read_json(cfg, "evaluation.json")


def read_verification(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.verify_model`` found (``<base>/verification.json``)."""
    return _read_json(cfg, "verification.json")
