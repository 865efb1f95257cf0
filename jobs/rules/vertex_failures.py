"""Why a Vertex AI job failed, in one hint line: the causes are data (``jobs/rules/hardware/vertex_failures.yaml``: each
cause's patterns, hint, whether the training step may fall over, and where Vertex's wording comes from, with the
date it was read). The one Vertex job runner (``jobs.cloud.vertex_jobs.job_runner``) calls :func:`classify` with the job's
``error.message`` and the failed replicas' last log lines; the training step falls over to the next placement
option only when :attr:`Cause.falls_over` (capacity: a stockout, an expired FLEX_START wait, Spot capacity gone).

Also the names both sides use for a replica: Vertex's log ``task_name`` (``workerpool0-0``) and this product's
(``chief-0``, the local launcher's ``<role>-<i>.log``), mapped through ``trainers.cluster.POOL_ROLES``.

The local hints (a replica's traceback on this machine) are ``jobs.local.launch.hints``; these are Vertex's.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Iterable

import yaml

from trainers.cluster import POOL_ROLES

DATA = os.path.join(os.path.dirname(__file__), "hardware", "vertex_failures.yaml")
#: a replica Vertex names in a failed job's message: "The replica workerpool0-0 exited with a non-zero status of 1"
TASK_RE = re.compile(r"\bworkerpool([0-3])-(\d+)\b")
#: the last line of a Python traceback: "ValueError: ...", "pkg.mod.SomeError: ...", "KeyboardInterrupt"
EXCEPTION_RE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)\b(?::.*)?$")


@dataclasses.dataclass(frozen=True)
class Cause:
    kind: str          # capacity | quota | out_of_memory | image_pull | permission | user_code
    what: str          # "no capacity (stockout) in the region"
    hint: str          # the one line, region filled in
    falls_over: bool   # the training step may create the job again under the next placement option
    confirmed: bool = True  # False: Vertex's own wording was not found; the hint says "probably"


@functools.lru_cache(maxsize=1)
def _causes() -> tuple[dict, ...]:
    with open(DATA, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return tuple(doc["causes"])


def read_date() -> str:
    with open(DATA, encoding="utf-8") as f:
        return str(yaml.safe_load(f)["read"])


def _match(text: str, region: str) -> Cause | None:
    for c in _causes():
        if any(re.search(p, text, re.IGNORECASE) for p in c["patterns"]):
            return Cause(c["kind"], c["what"], c["hint"].format(region=region or "the region"),
                         bool(c["falls_over"]), bool(c.get("confirmed", True)))
    return None


def python_exception(lines: Iterable[str]) -> str | None:
    """The last line of the last Python traceback in ``lines`` (oldest first), or None."""
    lines = [ln.rstrip() for ln in lines]
    found = None
    seen_traceback = False
    for ln in lines:
        if ln.startswith("Traceback (most recent call last)"):
            seen_traceback = True
        elif seen_traceback and EXCEPTION_RE.match(ln):
            found = ln
    return found


def classify(message: str, lines: Iterable[str] = (), region: str = "") -> Cause | None:
    """The cause of a failed job: from its ``error.message`` first, then from the failed replicas' last log
    lines (oldest first): a resource or permission cause they name, else the user's own Python exception (its
    last line). None when nothing known matches (the runner then prints the replica's lines only)."""
    lines = list(lines)
    cause = _match(message or "", region)
    if cause is not None:
        return cause
    exception = python_exception(lines)
    text = "\n".join(lines)
    cause = _match(exception, region) if exception else None
    if cause is None and not exception:
        cause = _match(text, region)
    if cause is not None:
        return cause
    if exception:
        return Cause("user_code", "a Python exception in your code",
                     f"your code raised: {exception[:300]}", falls_over=False)
    return None


def failed_tasks(message: str) -> list[str]:
    """The replicas (Vertex task names, ``workerpool0-0``) a failed job's message names, in order, once each."""
    return list(dict.fromkeys(f"workerpool{m.group(1)}-{m.group(2)}" for m in TASK_RE.finditer(message or "")))


def replica_of(task: str) -> str:
    """``workerpool0-0`` -> ``chief-0`` (this product's name of the replica; the local launcher's log name)."""
    m = re.fullmatch(r"(workerpool[0-3])-(\d+)", task)
    return f"{POOL_ROLES[m.group(1)]}-{m.group(2)}" if m else task


def task_of(replica: str) -> str | None:
    """``chief-0`` -> ``workerpool0-0``; a Vertex task name is returned as it is; None for anything else."""
    if re.fullmatch(r"workerpool[0-3]-\d+", replica):
        return replica
    m = re.fullmatch(r"([a-z_]+)-(\d+)", replica)
    by_role = {role: pool for pool, role in POOL_ROLES.items()}
    return f"{by_role[m.group(1)]}-{m.group(2)}" if m and m.group(1) in by_role else None


def replica_names() -> list[str]:
    """Valid ``--replica`` forms, for an error line."""
    return [f"{role}-0" for role in POOL_ROLES.values()] + ["workerpool0-0"]
