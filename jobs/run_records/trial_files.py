"""A study's trials on disk: each trial's folder, laid out as Vertex lays out a trial's, and the cloudml-hypertune
files its replicas report their metric to, read the way Vertex reads them.

Every trial trains in a folder of its own, ``<base>/<trial id>/`` (:func:`trial_base`, Vertex's layout for a
trial's CustomJob), the baseline in ``<base>/baseline/`` (:func:`baseline_base`), and each replica reports to a
file of its own (:func:`metric_file`, :func:`read_reports`; the chief's is the trial's, its LAST report of the
study's tag counting: :func:`last_value`). A tuned run's figures and folders are its verified trial's
(:func:`trial_dirs`, :func:`read_trial_metrics`). The local study, the pipeline's baseline CustomJob
(``jobs.rules.job_spec``), the pick step and the run's readers share this layout.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

from jobs.run_records.records import METRICS_RECORD, read_at
from jobs.rules.tuning_rules import BASELINE
from trainers.cluster import OUTPUT_LAYOUT, output_dirs
from jobfile.regular_file import NotARegularFile, open_regular
from jobfile.paths import join

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


def baseline_base(base: str) -> str:
    """The baseline's base output directory: ``<base>/baseline`` (its model ``<base>/baseline/model/``)."""
    return trial_base(base, BASELINE)


def trial_folder(base: str, trial: dict[str, Any]) -> str:
    """A trial's base output directory (``<base>/<id>``, or the folder holding its recorded model: ``<id>/model``, or
    ``<id>/model/<folder>`` when the SavedModel was one folder below ``AIP_MODEL_DIR``, ``jobs.rules.saved_model``)."""
    parts = str(trial.get("model_dir") or "").rstrip("/").split("/")
    if len(parts) < 2:
        return trial_base(base, str(trial.get("id")))
    return "/".join(parts[:-2] if len(parts) > 2 and parts[-2] == OUTPUT_LAYOUT["model"][1] else parts[:-1])


def trial_dirs(base: str, trial: dict[str, Any]) -> dict[str, str]:
    """The trial's model, checkpoints and TensorBoard logs folders, laid out as any job's
    (``trainers.cluster.output_dirs``)."""
    return output_dirs(None, trial_folder(base, trial))


def read_trial_metrics(base: str, trial: dict[str, Any]) -> dict[str, Any]:
    """What the built-in trainer wrote at the end of the trial (``<base>/<id>/metrics.json``; {} for a user
    trainer, which writes none)."""
    return read_at(trial_folder(base, trial), METRICS_RECORD)
