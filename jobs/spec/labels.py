"""The labels a run's Vertex resources carry: one function (:func:`run_labels`), so a billing export or a console
filter finds every resource of one job whoever made it. Labels follow Vertex's rules (``jobs.cloud.preflight``'s
``LABEL_KEY_RE``/``LABEL_VALUE_RE``: lower-case letters, digits, ``_`` and ``-``, at most 63, keys starting with a
letter; at most 64 labels).

Today ``vtp schedule`` puts them on the schedule's pipeline job, which Vertex copies into every run it starts
(googleapis/python-aiplatform#2929 and #4039: a schedule made without them starts runs without them); the labels of
the run, its trials and its config's hash on every resource are the plan's (issue 49), which belong here.
"""
from __future__ import annotations

import re

from trainers import config as config_lib

#: the label naming the job (``name``) on every resource of its runs
JOB_LABEL = "vtp-job"
#: the label naming the schedule that started a run
SCHEDULE_LABEL = "vtp-schedule"


def label_value(text: str) -> str:
    """``text`` as a label value: lower-case, every other character ``-``, at most 63."""
    return re.sub(r"[^a-z0-9_-]", "-", str(text).lower())[:63]


def run_labels(cfg: config_lib.JobConfig, given: dict[str, str] | None = None, *,
               schedule: str = "") -> dict[str, str]:
    """The labels of a run of ``cfg``: the job's name, the schedule's when a schedule starts it, and the user's own
    (``--labels``, checked by the preflight), which win."""
    out = {JOB_LABEL: label_value(cfg.name)}
    if schedule:
        out[SCHEDULE_LABEL] = label_value(schedule)
    return {**out, **dict(given or {})}
