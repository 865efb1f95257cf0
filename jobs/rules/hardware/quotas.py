"""Which Vertex AI training quotas a job draws on, and how much of each: ``quotas.yaml`` (the names, with their
sources and read date) read once, and the job's need per quota.

A job's need (:func:`job_needs`) is, per quota, the sum over its used worker pools of replicas x per replica:
GPUs by type (``accelerator_count``), TPU v2/v3 cores (``accelerator_count`` of ``cloud-tpu``), TPU VM chips (the
slice's ``tpu_topology``, else the machine's chips per host), and the vCPUs of every other machine (the catalog's
vCPUs of its type). ``SPOT`` and ``FLEX_START`` draw on the preemptible quotas (``quotas.preemptible_strategies``).
A study runs ``tuning.parallel_trials`` trials at once, each the whole topology, plus the baseline CustomJob
beside it (``tuning.baseline``): its need is the job's times that many. A quota with no known name is a need
whose ``name`` is None and whose ``why`` says so: the plan prints it as not checked.

Spec layer: no client, no cloud; ``jobs.cloud.apis.quotas`` reads the project's limits and compares.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Mapping

import yaml

from jobs.rules.hardware.catalog import CLOUD_TPU, load_catalog, topology_chips

QUOTAS_PATH = Path(__file__).with_name("quotas.yaml")

#: the values a name's ``status`` may take (quotas.yaml's header)
STATUSES = ("cited", "inferred", "unknown")


@dataclasses.dataclass(frozen=True)
class QuotaName:
    """One Vertex training quota: its metric without the service prefix (``custom_model_training_nvidia_t4_gpus``),
    its Cloud Quotas id where a source shows it, the unit, how it is known and from where."""
    metric: str
    quota_id: str
    unit: str
    status: str
    source: str

    def full_metric(self, service: str) -> str:
        return f"{service}/{self.metric}"

    def __str__(self) -> str:
        return self.metric or self.quota_id


@dataclasses.dataclass(frozen=True)
class QuotaEntry:
    """The on-demand and the preemptible quota of one kind of hardware (None: no known name)."""
    on_demand: QuotaName | None
    preemptible: QuotaName | None
    source: str


@dataclasses.dataclass(frozen=True)
class QuotaTable:
    date: str
    service: str
    preemptible_strategies: tuple[str, ...]
    usage: str
    sources: Mapping[str, Mapping[str, str]]
    accelerators: Mapping[str, QuotaEntry]
    tpu_generations: Mapping[str, QuotaEntry]
    cpus: QuotaEntry
    families: Mapping[str, QuotaEntry]
    disk: QuotaEntry

    def names(self) -> list[QuotaName]:
        """Every known quota name of the table (for tests and listings)."""
        entries = [*self.accelerators.values(), *self.tpu_generations.values(), self.cpus, *self.families.values(),
                   self.disk]
        return [n for e in entries for n in (e.on_demand, e.preemptible) if n is not None]


def _entry(raw: Mapping[str, Any], where: str) -> QuotaEntry:
    unit, source = str(raw.get("unit", "")), str(raw.get("source", ""))
    status = str(raw.get("status", ""))
    if status not in STATUSES:
        raise ValueError(f"{QUOTAS_PATH.name}: {where}: status {status!r} is not one of {', '.join(STATUSES)}")
    p_status = str(raw.get("preemptible_status", status))
    if p_status not in STATUSES:
        raise ValueError(f"{QUOTAS_PATH.name}: {where}: preemptible_status {p_status!r} is not one of "
                         f"{', '.join(STATUSES)}")

    def name(metric: str, quota_id: str, how: str) -> QuotaName | None:
        if how == "unknown" or not (metric or quota_id):
            return None
        return QuotaName(metric, quota_id, unit, how, source)

    return QuotaEntry(name(str(raw.get("metric") or ""), str(raw.get("quota_id") or ""), status),
                      name(str(raw.get("preemptible") or ""), str(raw.get("preemptible_quota_id") or ""), p_status),
                      source)


@functools.cache
def load_quotas(path: str | None = None) -> QuotaTable:
    """``quotas.yaml`` indexed (cached)."""
    doc = yaml.safe_load(Path(path or QUOTAS_PATH).read_text())
    head = doc["quotas"]
    return QuotaTable(
        date=str(head["date"]), service=str(head["service"]),
        preemptible_strategies=tuple(head.get("preemptible_strategies") or ()), usage=" ".join(str(head["usage"]).split()),
        sources=doc.get("sources") or {},
        accelerators={k: _entry(v, f"accelerators.{k}") for k, v in (doc.get("accelerators") or {}).items()},
        tpu_generations={k: _entry(v, f"tpu_generations.{k}") for k, v in (doc.get("tpu_generations") or {}).items()},
        cpus=_entry(doc["cpus"], "cpus"), families={k: _entry(v, f"families.{k}") for k, v in (doc.get("families") or {}).items()},
        disk=_entry(doc["disk"], "disk"))


@dataclasses.dataclass(frozen=True)
class Need:
    """How much of one quota the job takes at once. ``name`` None: no quota name is known for ``what`` (``why``)."""
    what: str  # "NVIDIA_H100_80GB GPUs", "vCPUs", "TPU v5e chips"
    amount: int
    name: QuotaName | None
    why: str = ""


def preemptible(strategy: str) -> bool:
    return strategy in load_quotas().preemptible_strategies


def concurrent_jobs(cfg: Any) -> int:
    """How many copies of the topology run at once: 1, or a study's ``parallel_trials`` plus its baseline."""
    tuning = cfg.tuning
    if not tuning.enabled:
        return 1
    return max(1, int(tuning.parallel_trials or 1)) + (1 if tuning.baseline else 0)


def job_needs(cfg: Any, strategy: str | None = None) -> list[Need]:
    """The job's need per quota under ``strategy`` (default: ``scheduling.strategy``), in a stable order:
    accelerators first, then vCPUs (module docstring)."""
    strategy = strategy or cfg.scheduling.strategy
    spot = preemptible(strategy)
    table, catalog = load_quotas(), load_catalog()
    amounts: dict[tuple[str, str], int] = {}  # (kind key, what) -> amount
    entries: dict[tuple[str, str], QuotaEntry | None] = {}

    def add(key: str, what: str, amount: int, entry: QuotaEntry | None) -> None:
        amounts[(key, what)] = amounts.get((key, what), 0) + amount
        entries[(key, what)] = entry

    for pool in cfg.topology.pools():
        replicas, machine_type = int(pool.replica_count or 0), str(pool.machine_type or "")
        if replicas <= 0 or not machine_type:
            continue
        machine = catalog.machines.get(machine_type)
        accelerator, count = str(pool.accelerator_type or ""), int(pool.accelerator_count or 0)
        if machine is not None and machine.tpu == "vm":
            chips = topology_chips(pool.tpu_topology) or machine.chips * replicas
            generation = machine.family
            entry = (table.accelerators.get(machine.tpu_type) if machine.tpu_type
                     else table.tpu_generations.get(generation))
            add(f"tpu:{generation}", f"TPU {generation} chips", chips, entry)
            continue
        if accelerator and count > 0:
            unit = "cores" if accelerator in catalog.tpu_cores else "chips" if catalog.is_tpu(accelerator) else "GPUs"
            add(f"acc:{accelerator}", f"{accelerator} {unit}", replicas * count, table.accelerators.get(accelerator))
        if machine_type == CLOUD_TPU:
            continue
        vcpus = machine.vcpus if machine is not None else None
        family = catalog.family_of(machine_type)
        entry = table.families.get(family, table.cpus)
        if vcpus is None:
            add("cpu", "vCPUs", 0, None)
            amounts[("cpu-unknown", machine_type)] = 0
        else:
            add("cpu", "vCPUs", int(round(vcpus)) * replicas, entry)

    copies = concurrent_jobs(cfg)
    unknown_machines = [what for (key, what) in amounts if key == "cpu-unknown"]
    needs: list[Need] = []
    for (key, what), amount in amounts.items():
        if key == "cpu-unknown":
            continue
        entry = entries[(key, what)]
        if key == "cpu" and unknown_machines:
            needs.append(Need(what, 0, None, f"the hardware catalog does not know the vCPUs of "
                                              f"{', '.join(unknown_machines)}: the vCPU quota is not checked"))
            continue
        name = None if entry is None else (entry.preemptible if spot else entry.on_demand)
        if name is None:
            kind = f"{strategy} (preemptible)" if spot else "on-demand"
            why = (f"no {kind} Vertex training quota name is known for {what} ({QUOTAS_PATH.name}, read "
                   f"{table.date}): Vertex decides")
            needs.append(Need(what, amount * copies, None, why))
        else:
            needs.append(Need(what, amount * copies, name))
    return needs
