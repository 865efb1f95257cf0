"""Helpers shared by the rule modules: pools of a job view, TPU detection, strategy inference."""
from __future__ import annotations

import functools
import math
import re
from typing import Any, Iterable

from jobs.spec.hardware.catalog import load_catalog
from jobs.spec.hardware.jobview import JobView, Pool, view
from jobs.spec.hardware.names import region_verdict
from trainers.errors import Problem, problem


def _cat():
    return load_catalog()


def or_join(items: Iterable[object]) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def machine_of(pool: Pool):
    return _cat().machines.get(pool.machine_type)


def checked_pools(v: JobView) -> list[Pool]:
    """Used, well-typed pools whose machine type and accelerator type are known."""
    cat = _cat()
    return [p for p in v.used_pools if p.ok and p.machine_type in cat.machines
            and (not p.accelerator_type or p.accelerator_type in cat.accelerator_types)]


def tpu_pool(pool: Pool) -> bool:
    m = machine_of(pool)
    return bool(m and m.tpu) or _cat().is_tpu(pool.accelerator_type)


def has_tpu(job_or_view: Any) -> bool:
    v = job_or_view if isinstance(job_or_view, JobView) else view(job_or_view)
    return any(p.ok and tpu_pool(p) for p in v.used_pools)


def infer_strategy(job_or_view: Any) -> str:
    """TPU -> tpu; parameter servers -> parameter_server; more than one machine -> multi_worker; one machine,
    >1 GPU -> mirrored; else one_device."""
    v = job_or_view if isinstance(job_or_view, JobView) else view(job_or_view)
    if has_tpu(v):
        return "tpu"
    if v.pools.get("parameter_server", Pool("parameter_server")).used:
        return "parameter_server"
    chief, worker = v.pools["chief"], v.pools.get("worker", Pool("worker"))
    if chief.replica_count + worker.replica_count > 1:
        return "multi_worker"
    return "mirrored" if chief.accelerator_count > 1 else "one_device"


def tpu_cores(pool: Pool) -> int:
    """TPU cores of a pool: the core count of a cloud-tpu, chips x cores per chip of a TPU VM."""
    m = machine_of(pool)
    if m and m.tpu == "vm":
        chips = m.chips
        if re.fullmatch(r"\d+(x\d+)*", pool.tpu_topology or ""):
            chips = math.prod(int(d) for d in pool.tpu_topology.split("x"))
        return max(1, chips * max(1, m.cores_per_chip))
    return pool.accelerator_count if pool.accelerator_count > 0 else 8


@functools.lru_cache(maxsize=4096)
def _region_verdict(region: str, known: tuple[str, ...]):
    """:func:`region_verdict`, once per name and list: a plan checks every option's job, each naming the regions of
    ``placement`` again (its "did you mean" is an edit distance to every known region)."""
    return region_verdict(region, known)


def region_problems(field: str, region: object) -> list[Problem]:
    """The one check of a region's NAME, wherever one is read (``topology.region``, ``placement.regions[i]``,
    ``--region``, ``vtp hardware --region``): one error when it is not of a region's form or is a near miss of a
    region Vertex serves, with "did you mean"; nothing for a listed region, or for a well-formed one the list does
    not have (what the catalog does not know is a warning of ``jobs.spec.hardware.today``, and the submission's
    preflight refuses a region Vertex does not serve)."""
    cat = _cat()
    if not isinstance(region, str):
        return [problem(field, f"expected a region name such as us-central1, got {type(region).__name__} {region!r}",
                        ["us-central1"])]
    verdict = _region_verdict(region, tuple(cat.known_regions))
    if verdict.kind == "malformed":
        hint = f" (did you mean {verdict.suggest[0]}?)" if verdict.suggest else ""
        return [problem(field, f"{region!r} is not a region name: lower case, no spaces, like us-central1{hint}",
                        list(verdict.suggest) or ["us-central1", "europe-west4"])]
    if verdict.kind == "near":
        return [problem(field, f"{region!r} is not a region Vertex AI serves (did you mean {verdict.suggest[0]}?)",
                        list(verdict.suggest))]
    return []
