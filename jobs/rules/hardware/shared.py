"""Helpers shared by the rule modules: the job as the rules read it (:func:`view`), TPU detection, strategy
inference.

The rules read the job through :func:`view`, which reads it through THE parser of a job's data
(``jobfile.config.read``: the schema's sections, types and defaults, every problem of shape collected, never
raising), so the rules judge what a run would run: no second parser with defaults of its own. A pool a problem of
shape names is marked ``ok=False`` and the other rules skip it rather than report consequences of the same mistake;
a negative count (the schema's types allow it) is one problem here.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any, Iterable

from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.hardware.names import region_verdict
from jobfile import config as config_lib
from jobfile.errors import Problem, problem

POOLS = ("chief", "worker", "parameter_server", "evaluator")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclasses.dataclass(frozen=True)
class Pool:
    """One worker pool of the job as the rules read it: its hardware fields (``jobfile.config.Pool``), its name,
    and whether the parser found it well formed."""
    name: str
    replica_count: int = 0
    machine_type: str = ""
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    ok: bool = True

    @property
    def path(self) -> str:
        return f"topology.{self.name}"

    @property
    def used(self) -> bool:
        return self.replica_count > 0


@dataclasses.dataclass
class JobView:
    """The parsed job (:attr:`job`, a ``JobConfig``), its problems of shape, and its pools by name. ``strategy``
    and ``region`` are the job's when well formed, else "" (a rule that reads them skips a malformed one)."""
    job: config_lib.JobConfig
    problems: list[Problem]
    pools: dict[str, Pool]
    strategy_ok: bool = True
    region_ok: bool = True

    @property
    def strategy(self) -> str:
        return self.job.topology.strategy if self.strategy_ok else ""

    @property
    def region(self) -> str:
        return self.job.topology.region if self.region_ok else ""

    @property
    def used_pools(self) -> list[Pool]:
        return [p for p in self.pools.values() if p.used]


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(p: Problem) -> Problem:
    """The problem with control characters (newlines from user keys/values) escaped: one line each."""
    return Problem(_escape(p.field), _escape(p.message), tuple(_escape(str(v)) for v in p.valid))


def _named(problems: list[Problem], path: str) -> bool:
    return any(p.field == path or p.field.startswith(path + ".") or p.field.startswith(path + "[") for p in problems)


def view(job: Any) -> JobView:
    """The job as the rules read it: ``job`` a :class:`JobView` (as is), a ``JobConfig``, or plain data (a job
    file's document, a legacy import's translation: parsed by ``jobfile.config.read``). Never raises."""
    if isinstance(job, JobView):
        return job
    cfg, problems = (job, []) if isinstance(job, config_lib.JobConfig) else config_lib.read(job)
    problems = list(problems)
    pools = {}
    for name, pool in zip(POOLS, cfg.topology.pools()):
        ok = not _named(problems, f"topology.{name}") and not any(p.field in ("config", "topology") for p in problems)
        for key in ("replica_count", "accelerator_count"):
            if getattr(pool, key) < 0:
                problems.append(problem(f"topology.{name}.{key}", f"must be a whole number >= 0, not {getattr(pool, key)}"))
                ok = False
        pools[name] = Pool(name, max(0, pool.replica_count), pool.machine_type.strip(), pool.accelerator_type.strip(),
                           max(0, pool.accelerator_count), pool.tpu_topology.strip(), ok)
    return JobView(cfg, problems, pools, strategy_ok=not _named(problems, "topology.strategy"),
                   region_ok=not _named(problems, "topology.region"))


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
    not have (what the catalog does not know is a warning of ``jobs.rules.hardware.today``, and the submission's
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
