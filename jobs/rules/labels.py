"""The labels every Vertex resource the product creates carries, so a billing export can be grouped by run: the
PipelineJob (``jobs.commands.submit``), the training step's CustomJob and the baseline's (``jobs.cloud.vertex_jobs.custom_job``), the
HyperparameterTuningJob (``jobs.cloud.vertex_jobs.tuning_job``). A study's trials are CustomJobs Vertex creates from the tuning
job's ``trial_job_spec``, a ``CustomJobSpec``, which has no ``labels`` field (the installed client's message): they
carry none of ours; the tuning job's labels name them by run.

* ``vtp-run``: the pipeline job's id (``<name>-<UTC time>-<4 random>``; a saved plan names it before it is applied);
* ``vtp-trial``: ``none`` (the training job of an untuned run), ``study`` (the tuning job), ``baseline``;
* ``vtp-config``: the first 16 hex digits of the SHA-256 of the job's config as it runs on Vertex, whichever
  placement option it runs under (:func:`config_hash`);
* on a PipelineJob a schedule starts (``vtp schedule``, :func:`run_labels`), also ``vtp-job`` (the job's name) and
  ``vtp-schedule`` (the schedule's): Vertex copies the schedule's pipeline job labels into every run it starts
  (googleapis/python-aiplatform#2929 and #4039: a schedule made without them starts runs without them).

Vertex's label rules (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs,
``labels``; the same for every resource: read 2026-11-29): keys and values at most 63 characters, only lowercase
letters, digits, ``_`` and ``-`` (international characters allowed; this product writes none), keys start with a
letter, at most 64 labels, keys prefixed ``aiplatform.googleapis.com/`` reserved. :func:`value` makes any text a valid
value (lowercased, other characters ``-``, a long one cut with a hash of the whole kept, so two long ids stay apart).
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Mapping

from jobfile import config as config_lib

LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
MAX_LABELS = 64
RESERVED_PREFIX = "aiplatform.googleapis.com/"
RUN, TRIAL, CONFIG = "vtp-run", "vtp-trial", "vtp-config"
#: the label naming the job (``name``) and the schedule that started a run (:func:`run_labels`)
JOB_LABEL, SCHEDULE_LABEL = "vtp-job", "vtp-schedule"
TRIALS = ("none", "study", "baseline")


def value(text: str) -> str:
    """``text`` as a valid label value: lowercased, every other character ``-``; over 63 characters, its first 54 and
    ``-`` and 8 hex digits of the SHA-256 of the whole."""
    v = re.sub(r"[^a-z0-9_-]", "-", str(text).lower())
    if len(v) > 63:
        v = f"{v[:54]}-{hashlib.sha256(str(text).encode()).hexdigest()[:8]}"
    return v


def config_hash(cfg: config_lib.JobConfig) -> str:
    """16 hex digits naming the job's config, the same under every placement option (region, strategy and
    FLEX_START's wait left out) and whichever image the build step hands on (the image names the code, not the
    config): the label ``vtp-config``."""
    neutral = dataclasses.replace(
        cfg, topology=dataclasses.replace(cfg.topology, region=""),
        scheduling=dataclasses.replace(cfg.scheduling, strategy="STANDARD", max_wait_duration=""),
        container=dataclasses.replace(cfg.container, image_uri=""))
    return hashlib.sha256(neutral.to_json().encode()).hexdigest()[:16]


def for_job(cfg: config_lib.JobConfig, run: str = "", trial: str = "none") -> dict[str, str]:
    """The labels of one Vertex resource of ``cfg``'s run ``run`` (empty: not known yet, no ``vtp-run``); ``trial``
    empty: the run itself (the PipelineJob), no ``vtp-trial``."""
    out = {CONFIG: config_hash(cfg)}
    if trial:
        out[TRIAL] = value(trial)
    if run:
        out[RUN] = value(run)
    return out


def run_labels(cfg: config_lib.JobConfig, given: Mapping[str, str] | None = None, *,
               schedule: str = "") -> dict[str, str]:
    """The labels of a scheduled run's PipelineJob: the config's hash (:func:`for_job`; the run's id is Vertex's, made
    at each start), the job's name, the schedule's, and the user's own (``--labels``, checked by the preflight),
    which win."""
    out = {**for_job(cfg.for_vertex(), trial=""), JOB_LABEL: value(cfg.name)}
    if schedule:
        out[SCHEDULE_LABEL] = value(schedule)
    return {**out, **dict(given or {})}


def problems(labels: Mapping[str, str]) -> list[str]:
    """Why ``labels`` breaks Vertex's rules, one line each (empty: valid)."""
    out = [f"{len(labels)} labels, over Vertex's {MAX_LABELS}"] if len(labels) > MAX_LABELS else []
    for k, v in labels.items():
        if k.startswith(RESERVED_PREFIX):
            continue  # Vertex AI Pipelines' own system labels
        if not LABEL_KEY_RE.match(k):
            out.append(f"label key {k!r}: a lowercase letter first, then lowercase letters, digits, '_' or '-', "
                       "at most 63 characters")
        if not LABEL_VALUE_RE.match(str(v)):
            out.append(f"label {k}={v!r}: lowercase letters, digits, '_' or '-', at most 63 characters")
    return out
