"""The hardware catalog (``catalog.yaml``) loaded once into lookup tables: the seeds' tables and today's Vertex
training hardware (machine families, GPUs, TPU VM generations with their topologies), each with its source.

Everything the rules know about machines, GPUs, TPUs, regions and zones comes from ``catalog.yaml``;
this module only indexes it.  No TensorFlow, no kfp: loading takes a few milliseconds.
"""
from __future__ import annotations

import dataclasses
import datetime
import difflib
import functools
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from jobs.rules.image_reference import BuildError, parse_reference
from trainers.gpus import VOLTA, compute_capability

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")

CLOUD_TPU = "cloud-tpu"  # Vertex machine type of a TPU v2/v3 (pods too); the TPU sits in the chief pool.


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    vcpus: float | None
    memory_gb: float | None
    source: str
    current: bool = False  # a type of today's Vertex, absent from the seeds
    tpu: str = ""  # "" (CPU/GPU machine), "legacy" (cloud-tpu) or "vm" (TPU VM such as ct5lp-hightpu-4t)
    tpu_type: str = ""
    chips: int = 0
    cores_per_chip: int = 0
    topologies: tuple[str, ...] = ()
    family: str = ""  # machine_families key (e2, n1, a3, ...) or the TPU VM generation (v5e, v5p, v6e, v4)
    vertex_training: str = "listed"  # "listed" (Vertex names it for training) or "unconfirmed"

    @property
    def single_host_topologies(self) -> tuple[str, ...]:
        """The topologies that fit on one host of this TPU VM type (chips(topology) <= chips per host)."""
        return tuple(t for t in self.topologies if topology_chips(t) <= self.chips)

    def hosts(self, topology: str) -> int:
        """Hosts (VMs) of a TPU VM slice of ``topology`` on this per-host machine type (at least 1)."""
        chips = topology_chips(topology) if topology else self.chips
        return max(1, -(-chips // max(1, self.chips)))


def topology_chips(topology: str) -> int:
    """Chips of a TPU topology ``AxB`` / ``AxBxC`` (0 when it is not one)."""
    parts = str(topology).split("x")
    if not topology or not all(p.isdigit() and int(p) > 0 for p in parts):
        return 0
    out = 1
    for p in parts:
        out *= int(p)
    return out


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    """A TPU VM generation (v5e, v5p, v6e, v4) of ``catalog.yaml``'s ``tpu_vm`` section."""
    name: str
    accelerator_type: str
    machine_types: tuple[str, ...]
    tensorflow: bool
    tensorflow_note: str
    regions: tuple[str, ...]
    source: str
    vertex_training: str = "listed"


@dataclasses.dataclass(frozen=True)
class Gpu:
    name: str
    label: str
    counts: tuple[int, ...]
    per_gpu_vcpus: float
    per_gpu_memory_gb: float
    status: str
    source: str
    note: str = ""
    end_of_support: str = ""  # the date Vertex's pages give (YYYY-MM-DD), "" when none is known
    use_instead: tuple[str, ...] = ("NVIDIA_TESLA_T4", "NVIDIA_L4")  # what a legacy/retired GPU's line advises
    #: CUDA compute capability, from THE table of it (``trainers.gpus``, which the replica reads too); None: unknown
    compute_capability: tuple[int, int] | None = None

    @property
    def tensor_cores(self) -> bool:
        """Tensor cores (Volta, compute capability 7.0, and later): what makes mixed precision pay."""
        return self.compute_capability is not None and self.compute_capability >= VOLTA

    def advice(self, today: str | None = None) -> str:
        """What a legacy or retired GPU's one line says: its status, its note, its end of support (reached or not,
        against ``today``, ``YYYY-MM-DD``, default the date here) and what to use instead, which the line's valid
        choices list too (:attr:`use_instead`)."""
        text = f"{self.name} is {self.status}: {self.note}" if self.note else f"{self.name} is {self.status}"
        if self.end_of_support:
            today = today or datetime.date.today().isoformat()
            text += (f"; it reached end of support on Vertex AI on {self.end_of_support}, so Vertex may refuse the job"
                     if today >= self.end_of_support else f"; it reaches end of support on Vertex AI on "
                                                          f"{self.end_of_support}")
        return f"{text}; use {' or '.join(self.use_instead)}"


@dataclasses.dataclass(frozen=True)
class LegacyMachine:
    name: str
    machine_type: str
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu: bool = False
    source: str = ""


@dataclasses.dataclass(frozen=True)
class Catalog:
    raw: Mapping[str, Any]
    machines: Mapping[str, Machine]
    gpus: Mapping[str, Gpu]
    # machine type -> GPU type -> valid counts (only machine types of the seed/vertex tables)
    gpu_table: Mapping[str, Mapping[str, tuple[int, ...]]]
    gpu_required_prefixes: tuple[str, ...]
    special_limits: tuple[Mapping[str, Any], ...]
    gpu_regions: tuple[str, ...]
    tpu_regions: tuple[str, ...]
    tpu_vm_regions: tuple[str, ...]
    zones: Mapping[str, Mapping[str, frozenset[str]]]  # region -> zone -> GPU types
    tpu_cores: Mapping[str, tuple[int, ...]]  # TPU_V2 -> (8,), TPU_V2_POD -> (32, ...)
    runtime_versions: tuple[str, ...]
    pytorch_images: Mapping[str, str]  # image URI (no tag) -> tpuTfVersion
    legacy_master_tpu_types: tuple[str, ...]
    legacy_machines: Mapping[str, LegacyMachine]
    scale_tiers: Mapping[str, Mapping[str, Any]]
    strategies: tuple[str, ...]
    date: str = ""
    sources: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    families: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)  # key -> label, source, vertex
    tpu_generations: Mapping[str, TpuGeneration] = dataclasses.field(default_factory=dict)
    not_listed_families: tuple[str, ...] = ()
    boot_disk: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # types, min_gb, max_gb, source
    vertex_regions: tuple[str, ...] = ()  # every region Vertex AI serves (the installed client's list)

    # ---- lookups -------------------------------------------------------------------------------
    def is_gpu(self, accelerator_type: str) -> bool:
        return accelerator_type in self.gpus

    def is_tpu(self, accelerator_type: str) -> bool:
        return accelerator_type in self.tpu_cores or accelerator_type in self.tpu_vm_types

    def generation_of(self, machine_type: str) -> TpuGeneration | None:
        m = self.machines.get(machine_type)
        return self.tpu_generations.get(m.family) if m and m.tpu == "vm" else None

    @functools.cached_property
    def tpu_vm_types(self) -> frozenset[str]:
        return frozenset(m.tpu_type for m in self.machines.values() if m.tpu == "vm" and m.tpu_type)

    def family_of(self, machine_type: str) -> str:
        """The family key of a machine type name (``e2-standard-8`` -> ``e2``); "" for ``cloud-tpu``."""
        m = self.machines.get(machine_type)
        if m and m.family:
            return m.family
        return "" if machine_type == CLOUD_TPU else str(machine_type).split("-", 1)[0]

    def source_line(self, key: str) -> str:
        """``what (url, read DATE)`` of a source key; the key itself when the catalog has no such source."""
        src = self.sources.get(key)
        if not src:
            return key
        where = ", ".join(x for x in (src.get("url", ""), f"read {src['read']}" if src.get("read") else "") if x)
        return f"{src.get('what', key)}" + (f" ({where})" if where else "")

    @functools.cached_property
    def accelerator_types(self) -> tuple[str, ...]:
        return tuple(self.gpus) + tuple(self.tpu_cores) + tuple(sorted(self.tpu_vm_types))

    def gpu_required(self, machine_type: str) -> bool:
        return machine_type.startswith(self.gpu_required_prefixes) and machine_type in self.gpu_table

    def table_counts(self, machine_type: str, gpu: str) -> tuple[int, ...] | None:
        """Valid counts from the tables, () for an empty cell, None when the table has no row."""
        row = self.gpu_table.get(machine_type)
        if row is None:
            return None
        return row.get(gpu, ())

    def gpus_for(self, machine_type: str) -> dict[str, tuple[int, ...]]:
        """GPU types (with counts) a machine type can take: table row, or the n1 rule."""
        row = self.gpu_table.get(machine_type)
        if row is not None:
            return {g: c for g, c in row.items() if c}
        if machine_type.startswith("n1-") and machine_type in self.machines:
            return {g: gpu.counts for g, gpu in self.gpus.items() if g in self.n1_gpus}
        return {}

    @functools.cached_property
    def n1_gpus(self) -> frozenset[str]:
        return frozenset(g for row_name, row in self.gpu_table.items() if row_name.startswith("n1-")
                         for g, counts in row.items() if counts)

    @functools.cached_property
    def known_regions(self) -> tuple[str, ...]:
        """Every region name the catalog knows: Vertex's own list and the regions of its hardware data."""
        return tuple(sorted(set(self.vertex_regions) | set(self.gpu_regions) | set(self.tpu_regions)
                            | set(self.tpu_vm_regions) | set(self.zones)
                            | {r for g in self.tpu_generations.values() for r in g.regions}))

    def regions_offering(self, gpu: str) -> list[str]:
        return [r for r in self.gpu_regions if any(gpu in z for z in self.zones.get(r, {}).values())]

    def suggest(self, name: object, choices: Iterable[str], n: int = 3) -> list[str]:
        choices = list(choices)
        text = str(name)
        exact = [c for c in choices if c.lower() == text.lower().replace("-", "_")
                 or c.lower() == text.lower()]
        if exact:
            return exact[:n]
        found = difflib.get_close_matches(text, choices, n=n, cutoff=0.6)
        return found or difflib.get_close_matches(text, choices, n=n, cutoff=0.3)


def _tuple_ints(values: Iterable[Any]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


@functools.cache
def load_catalog(path: str | None = None) -> Catalog:
    """Load and index ``catalog.yaml`` (cached)."""
    text = Path(path or CATALOG_PATH).read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader

    families = {key: {k: v for k, v in e.items() if k != "types"} for key, e in raw["machine_families"].items()}
    machines = _machines(raw, families)
    generations = _tpu_vm_generations(raw, machines)
    gpus = {name: Gpu(name=name, label=e["label"], counts=_tuple_ints(e["counts"]),
                      per_gpu_vcpus=float(e["per_gpu"]["vcpus"]),
                      per_gpu_memory_gb=float(e["per_gpu"]["memory_gb"]),
                      status=e["status"], source=str(e["source"]), note=str(e.get("note", "")),
                      end_of_support=str(e.get("end_of_support", "")),
                      use_instead=tuple(e.get("use_instead") or Gpu.use_instead),
                      compute_capability=compute_capability(name))
            for name, e in raw["gpu_types"].items()}
    table = _gpu_table(raw, machines, gpus)
    zones = _zones(raw, gpus)
    legacy = _legacy_machines(raw, machines)
    tpu = raw["tpu"]
    return Catalog(
        raw=raw, machines=machines, gpus=gpus, gpu_table=table,
        gpu_required_prefixes=tuple(raw["gpu_required_prefixes"]["prefixes"]),
        special_limits=tuple(raw["special_limits"]),
        gpu_regions=tuple(raw["regions"]["gpu"]["list"]),
        tpu_regions=tuple(raw["regions"]["tpu"]["list"]),
        tpu_vm_regions=tuple(raw["regions"]["tpu_vm"]["list"]),
        zones=zones,
        tpu_cores={name: _tuple_ints(e["cores"]) for name, e in raw["tpu_types"].items()},
        runtime_versions=tuple(str(v) for v in tpu["runtime_versions"]["list"]),
        pytorch_images={str(k): str(v) for k, v in tpu["pytorch_images"]["images"].items()},
        legacy_master_tpu_types=tuple(tpu["legacy_master_tpu_types"]["list"]),
        legacy_machines=legacy,
        scale_tiers=raw["scale_tiers"],
        strategies=tuple(raw["strategies"]["list"]),
        date=str(raw["catalog"]["date"]),
        sources={k: (v if isinstance(v, dict) else {"what": str(v)}) for k, v in raw["sources"].items()},
        families=families, tpu_generations=generations,
        not_listed_families=tuple(raw["not_listed_for_training"]["families"]),
        boot_disk=raw["boot_disk"],
        vertex_regions=tuple(raw["regions"]["vertex"]["list"]),
    )


def _machines(raw: dict[str, Any], families: dict[str, dict[str, Any]]) -> dict[str, Machine]:
    """The machine types listed one by one (``machine_types``) and by family (``machine_families.*.types``)."""
    machines: dict[str, Machine] = {}
    for name, e in raw["machine_types"].items():
        family = name.split("-", 1)[0] if name.split("-", 1)[0] in families else ""
        machines[name] = Machine(
            name=name, vcpus=e.get("vcpus"), memory_gb=e.get("memory_gb"), source=str(e["source"]),
            current=bool(e.get("current", False)), tpu=str(e.get("tpu", "") or ""),
            tpu_type=str(e.get("tpu_type", "") or ""), chips=int(e.get("chips", 0) or 0),
            cores_per_chip=int(e.get("cores_per_chip", 0) or 0),
            topologies=tuple(str(t) for t in e.get("topologies", ())), family=family)
    for key, e in raw["machine_families"].items():
        for name, (vcpus, memory) in (e.get("types") or {}).items():
            if name in machines:
                raise ValueError(f"catalog.yaml: {name} is listed twice")
            machines[name] = Machine(name=name, vcpus=vcpus, memory_gb=memory, source=str(e["source"]),
                                     current=True, family=key)
    return machines


def _tpu_vm_generations(raw: dict[str, Any], machines: dict[str, Machine]) -> dict[str, TpuGeneration]:
    """The TPU VM generations (``tpu_vm``); their machine types are added to ``machines``."""
    generations: dict[str, TpuGeneration] = {}
    for key, g in raw["tpu_vm"].items():
        status = str(g.get("vertex_training", "listed"))
        for name, e in g["machine_types"].items():
            if name in machines:
                raise ValueError(f"catalog.yaml: {name} is listed twice")
            machines[name] = Machine(
                name=name, vcpus=e["vcpus"], memory_gb=e["memory_gb"], source=str(g["source"]), current=True,
                tpu="vm", tpu_type=str(g.get("accelerator_type") or ""), chips=int(e["chips"]),
                cores_per_chip=int(g["cores_per_chip"]), topologies=tuple(str(t) for t in e["topologies"]),
                family=key, vertex_training=status)
        generations[key] = TpuGeneration(
            name=key, accelerator_type=str(g.get("accelerator_type") or ""), machine_types=tuple(g["machine_types"]),
            tensorflow=bool(g["tensorflow"]["supported"]), tensorflow_note=str(g["tensorflow"].get("note", "")),
            regions=tuple(g.get("regions") or ()), source=str(g["source"]), vertex_training=status)
    return generations


def _gpu_table(raw: dict[str, Any], machines: dict[str, Machine],
               gpus: dict[str, Gpu]) -> dict[str, dict[str, tuple[int, ...]]]:
    """``{machine type: {GPU type: the GPU counts it takes}}`` (``gpu_tables``; a missing cell is empty)."""
    table: dict[str, dict[str, tuple[int, ...]]] = {}
    for block in raw["gpu_tables"]:
        columns = block["columns"]
        for machine, cells in block["rows"].items():
            if len(cells) != len(columns):
                raise ValueError(f"catalog.yaml: row {machine} has {len(cells)} cells, not {len(columns)}")
            if machine not in machines:
                raise ValueError(f"catalog.yaml: table row {machine} is not a machine type")
            row = table.setdefault(machine, {})
            for gpu, counts in zip(columns, cells):
                if gpu not in gpus:
                    raise ValueError(f"catalog.yaml: table column {gpu} is not a GPU type")
                row[gpu] = _tuple_ints(counts)
    for row in table.values():  # every GPU type has a cell in every row (missing = empty)
        for gpu in gpus:
            row.setdefault(gpu, ())
    return table


def _zones(raw: dict[str, Any], gpus: dict[str, Gpu]) -> dict[str, dict[str, frozenset[str]]]:
    """``{region: {zone: the GPU types it offers}}``; a zone outside its region or an unknown GPU is refused."""
    zones = {region: {zone: frozenset(types) for zone, types in zs.items()}
             for region, zs in raw["zones"]["regions"].items()}
    for region, zs in zones.items():
        for zone, types in zs.items():
            if not zone.startswith(region + "-") or not types <= set(gpus):
                raise ValueError(f"catalog.yaml: bad zone entry {zone}: {sorted(types)}")
    return zones


def _legacy_machines(raw: dict[str, Any], machines: dict[str, Machine]) -> dict[str, LegacyMachine]:
    """The legacy (AI Platform) machine names, each mapped to a machine type of the catalog."""
    legacy = {name: LegacyMachine(name=name, machine_type=e["machine_type"],
                                  accelerator_type=e.get("accelerator_type", ""),
                                  accelerator_count=int(e.get("accelerator_count", 0)),
                                  tpu=bool(e.get("tpu", False)), source=str(e["source"]))
              for name, e in raw["legacy_machine_types"].items()}
    for lm in legacy.values():
        if lm.machine_type not in machines:
            raise ValueError(f"catalog.yaml: legacy {lm.name} maps to unknown {lm.machine_type}")
    return legacy


def pytorch_image_version(image_uri: str) -> str | None:
    """tpuTfVersion a prebuilt PyTorch XLA image needs (``...pytorch-xla.1-11[:tag|@digest]``); None for any
    other image, or a reference that does not parse (``jobs.images.parse_reference`` says why elsewhere)."""
    try:
        return load_catalog().pytorch_images.get(parse_reference(image_uri).repository)
    except BuildError:
        return None
