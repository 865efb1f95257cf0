"""Hardware rules: every check from the seeds, each a small function ``rule(job) -> list[Problem]``.

``check_job(job)`` runs them all and returns a :class:`Report` with every error at once plus warnings
(valid but wasteful or risky: see ``jobs.rules.hardware.advice``).  ``job`` is a ``JobConfig``, or plain data read
through THE parser (``jobs.rules.hardware.shared.view``: its problems of shape are ``check_fields``'s); mostly
``topology`` is read (and ``training``, ``container.image_uri``, ``checkpoint``, ``scheduling`` for warnings).
Field paths are dotted paths of the job file.

Conventions: a TPU v2/v3 (pods too) is ``machine_type: cloud-tpu`` + ``accelerator_type: TPU_V3`` +
``accelerator_count: <cores>`` in ``topology.chief``; a TPU VM is its machine type (e.g.
``ct5lp-hightpu-4t``) + optional ``tpu_topology``, also in the chief pool.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from jobs.rules.hardware.advice import check_warnings
from jobs.rules.hardware.names import accelerator_verdict, machine_verdict
from jobs.rules.hardware.today import tensorflow_problems, tpu_vm_shape_problems, unknowns
from jobfile.errors import ConfigError, Problem, problem
from jobs.rules.hardware.catalog import Catalog, load_catalog
from jobs.rules.hardware.shared import (JobView, Pool, one_line, view, checked_pools as _checked, has_tpu, infer_strategy,
                                  machine_of as _machine, or_join as _or, region_problems, tpu_cores, tpu_pool)
from jobs.rules.hardware.tpu_rules import check_tpu_accelerators, check_tpu_pools, check_tpu_version

__all__ = ["RULES", "Report", "check_accelerator_types", "check_batch", "check_evaluator", "check_fields",
           "check_gpu_count", "check_gpu_resources", "check_job", "check_parameter_servers", "check_machine_types", "check_regions", "check_same_gpus",
           "check_strategy", "check_tpu_accelerators", "check_tpu_pools", "check_tpu_version", "check_zones",
           "gpu_resource_shortfall", "has_tpu", "infer_strategy", "num_replicas", "tpu_cores", "valid_gpu_counts"]



@dataclasses.dataclass
class Report:
    errors: list[Problem] = dataclasses.field(default_factory=list)
    warnings: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        if self.errors:
            raise ConfigError(self.errors)


def _cat() -> Catalog:
    return load_catalog()


def _num(x: float) -> str:
    return f"{x:g}"


def num_replicas(job: Any) -> int:
    """Replicas in sync: one_device 1; mirrored the chief's accelerators; multi_worker the sum over
    chief and worker machines of max(1, accelerators); parameter_server one worker's max(1, accelerators)
    (a step runs on one worker, asynchronously); tpu the TPU core count (8 for a v2-8/v3-8)."""
    v = view(job)
    strategy = v.strategy if v.strategy in _cat().strategies else infer_strategy(v)
    chief, worker = v.pools["chief"], v.pools.get("worker", Pool("worker"))
    if strategy == "mirrored":
        return max(1, chief.accelerator_count)
    if strategy == "multi_worker":
        return max(1, sum(p.replica_count * max(1, p.accelerator_count) for p in (chief, worker)))
    if strategy == "parameter_server":
        return max(1, worker.accelerator_count)
    if strategy == "tpu":
        tpus = [p for p in v.used_pools if p.ok and tpu_pool(p)]
        return tpu_cores(tpus[0]) if tpus else 8
    return 1


# ---- field-level rules ------------------------------------------------------------------------
def check_fields(job: Any) -> list[Problem]:
    """Types, the single chief, strategy name, region name, accelerator type/count pairing."""
    cat, v = _cat(), view(job)
    out = list(v.problems)
    chief = v.pools["chief"]
    if chief.ok and chief.replica_count != 1:
        out.append(problem("topology.chief.replica_count",
                           f"the chief pool (worker pool 0) has exactly 1 replica, not {chief.replica_count}; "
                           "put more machines in topology.worker", [1]))
    if v.strategy_ok and v.strategy not in cat.strategies:
        out.append(problem("topology.strategy", f"unknown strategy {v.strategy!r}",
                           cat.suggest(v.strategy, cat.strategies) or cat.strategies))
    if v.region_ok:
        out += region_problems("topology.region", v.region)
    for p in v.used_pools:
        m = _machine(p)
        if not p.ok or (m and m.tpu) or _cat().is_tpu(p.accelerator_type):
            continue
        if p.accelerator_count > 0 and not p.accelerator_type:
            out.append(problem(f"{p.path}.accelerator_type",
                               f"accelerator_count is {p.accelerator_count} but no accelerator_type is set",
                               sorted(cat.gpus_for(p.machine_type)) if m else ()))
        elif p.accelerator_type and p.accelerator_count == 0:
            out.append(problem(f"{p.path}.accelerator_count",
                               f"accelerator_type is {p.accelerator_type} but accelerator_count is 0"))
    return out


def check_machine_types(job: Any) -> list[Problem]:
    """Every used pool names a machine type: a legacy AI Platform name, an empty one, a near miss of a known
    type (``n1-standrd-8``: "did you mean") or no machine type name at all are errors; a well-formed type the
    catalog does not know is a warning (``jobs.rules.hardware.today.unknowns``)."""
    cat, out = _cat(), []
    for p in view(job).used_pools:
        if not p.ok or p.machine_type in cat.machines:
            continue
        field = f"{p.path}.machine_type"
        legacy = cat.legacy_machines.get(p.machine_type)
        if not p.machine_type:
            out.append(problem(field, "a used pool needs a machine type", ["n1-standard-4", "e2-standard-8"]))
        elif legacy:
            gpus = f" with {legacy.accelerator_count} {legacy.accelerator_type}" if legacy.accelerator_type else ""
            out.append(problem(field, f"{p.machine_type} is a legacy AI Platform machine type; on Vertex use "
                                      f"{legacy.machine_type}{gpus}", [legacy.machine_type]))
        else:
            verdict = machine_verdict(p.machine_type, cat.machines, cat.not_listed_families)
            if verdict.kind == "near":
                out.append(problem(field, f"unknown machine type {p.machine_type!r} (did you mean "
                                          f"{verdict.suggest[0]}?)", verdict.suggest))
            elif verdict.kind == "malformed":
                out.append(problem(field, f"{p.machine_type!r} is not a machine type name (SERIES-CLASS-SIZE, "
                                          "e.g. n1-standard-8, a3-highgpu-8g, ct5lp-hightpu-4t, or cloud-tpu)",
                                   cat.suggest(p.machine_type, cat.machines) or ["n1-standard-4"]))
    return out


def check_accelerator_types(job: Any) -> list[Problem]:
    """Every accelerator_type is a Vertex enum name: a near miss of a known one (``nvidia-tesla-t4``, ``NVIDA_L4``)
    or a name of no accelerator's form is an error; a well-formed one the catalog does not know (``NVIDIA_B300``)
    is a warning (``jobs.rules.hardware.today.unknowns``)."""
    cat, out = _cat(), []
    for p in view(job).used_pools:
        if p.ok and p.accelerator_type and p.accelerator_type not in cat.accelerator_types:
            verdict = accelerator_verdict(p.accelerator_type, cat.accelerator_types)
            if verdict.kind == "near":
                out.append(problem(f"{p.path}.accelerator_type", f"unknown accelerator type {p.accelerator_type!r} "
                                                                 f"(did you mean {verdict.suggest[0]}?)", verdict.suggest))
            elif verdict.kind == "malformed":
                out.append(problem(f"{p.path}.accelerator_type", f"{p.accelerator_type!r} is not an accelerator type "
                                                                 "name (NVIDIA_... or TPU_..., as the API's "
                                                                 "AcceleratorType names them)", list(cat.gpus)[3:9]))
    return out


# ---- GPU rules ---------------------------------------------------------------------------------
def gpu_resource_shortfall(machine_type: str, gpu: str, count: int) -> str | None:
    """Why ``count`` GPUs cannot serve ``machine_type`` (None if they can), by the per-GPU rule.

    Each GPU serves at most ``per_gpu`` vCPUs and memory (catalog; V100: 12 vCPUs, 76 GB from the
    Spanish seed), and AI Platform caps 4 x P100 at 64 vCPUs / 208 GB and 8 x K80 at 208 GB.

    Conflict with the seed table: by this rule 8 V100 serve 608 GB, less than n1-highmem-96's 624 GB,
    yet the table marks that pair valid.  The TABLE is authoritative for the machine types it lists
    (``check_gpu_count``); this rule decides only for n1 types absent from the table
    (``check_gpu_resources``) and explains the table's rejections in error messages.
    """
    cat = _cat()
    m, g = cat.machines.get(machine_type), cat.gpus.get(gpu)
    if not m or not g or m.vcpus is None or m.memory_gb is None or count <= 0:
        return None
    max_vcpus, max_mem = count * g.per_gpu_vcpus, count * g.per_gpu_memory_gb
    for limit in cat.special_limits:
        if limit["gpu"] == gpu and limit["count"] == count:
            if limit.get("max_vcpus") is not None:
                max_vcpus = min(max_vcpus, limit["max_vcpus"])
            if limit.get("max_memory_gb") is not None:
                max_mem = min(max_mem, limit["max_memory_gb"])
    if m.vcpus > max_vcpus:
        return f"{count} {gpu} serve at most {_num(max_vcpus)} vCPUs; {machine_type} has {_num(m.vcpus)}"
    if m.memory_gb > max_mem:
        return f"{count} {gpu} serve at most {_num(max_mem)} GB; {machine_type} has {_num(m.memory_gb)} GB"
    return None


def valid_gpu_counts(machine_type: str, gpu: str) -> tuple[int, ...]:
    """Valid counts: the table cell, or for an n1 type absent from the table the GPU's counts that
    pass the resource rule."""
    cat = _cat()
    counts = cat.table_counts(machine_type, gpu)
    if counts is not None:
        return counts
    if machine_type.startswith("n1-") and gpu in cat.n1_gpus:
        return tuple(c for c in cat.gpus[gpu].counts if not gpu_resource_shortfall(machine_type, gpu, c))
    return ()


def _machines_taking(gpu: str, count: int, near: str) -> list[str]:
    cat = _cat()
    ref = cat.machines[near].vcpus or 0
    family = near.rsplit("-", 1)[0]
    names = [n for n in cat.gpu_table if count in cat.gpu_table[n].get(gpu, ())]
    names.sort(key=lambda n: (not n.startswith(family), abs((cat.machines[n].vcpus or 0) - ref)))
    return names[:2]


def check_gpu_count(job: Any) -> list[Problem]:
    """The GPU count is valid for the machine type (seed table, every cell), GPUs built into a2/a3/g2
    types are attached."""
    cat, out = _cat(), []
    for p in _checked(view(job)):
        m, gpu, n = _machine(p), p.accelerator_type, p.accelerator_count
        if m.tpu or cat.is_tpu(gpu):
            continue
        built_in = cat.gpus_for(p.machine_type) if cat.gpu_required(p.machine_type) else {}
        if not gpu:
            for g, counts in built_in.items():
                out.append(problem(f"{p.path}.accelerator_type",
                                   f"{p.machine_type} has {counts[0]} {g} built in: set accelerator_type "
                                   f"{g} and accelerator_count {counts[0]}", [g]))
            continue
        if n <= 0:
            continue
        counts = cat.table_counts(p.machine_type, gpu)
        if counts is None:  # n1 type absent from the table: the GPU's counts (resources: check_gpu_resources)
            counts = cat.gpus[gpu].counts if p.machine_type.startswith("n1-") and gpu in cat.n1_gpus else ()
        if not counts:
            best = max(cat.gpus[gpu].counts)
            # a type with GPUs built in takes those alone: that is the reason, not what other GPUs would serve
            if built_in:
                why = f"{p.machine_type} has {_or(f'{c[0]} {g}' for g, c in built_in.items())} built in"
            else:
                why = gpu_resource_shortfall(p.machine_type, gpu, best) if gpu in cat.n1_gpus else None
            if why is None:
                why = f"{gpu} comes with {_or(_machines_taking(gpu, cat.gpus[gpu].counts[0], p.machine_type))}"
            out.append(problem(f"{p.path}.accelerator_type", f"{p.machine_type} cannot take {gpu} ({why})",
                               sorted(cat.gpus_for(p.machine_type))))
        elif n not in counts:
            why = gpu_resource_shortfall(p.machine_type, gpu, n)
            alt = _machines_taking(gpu, n, p.machine_type)
            out.append(problem(f"{p.path}.accelerator_count",
                               f"{p.machine_type} takes {_or(counts)} {gpu}, not {n}"
                               + (f" ({why})" if why else "")
                               + (f"; machine types that take {n}: {', '.join(alt)}" if alt else ""), counts))
    return out


def check_gpu_resources(job: Any) -> list[Problem]:
    """Enough vCPUs and memory for the GPUs, for n1 machine types the seed table does not list."""
    cat, out = _cat(), []
    for p in _checked(view(job)):
        gpu, n = p.accelerator_type, p.accelerator_count
        if (cat.table_counts(p.machine_type, gpu) is None and p.machine_type.startswith("n1-")
                and gpu in cat.n1_gpus and n in cat.gpus[gpu].counts):
            why = gpu_resource_shortfall(p.machine_type, gpu, n)
            if why:
                out.append(problem(f"{p.path}.accelerator_count", f"not enough GPUs for {p.machine_type}: {why}",
                                   valid_gpu_counts(p.machine_type, gpu)))
    return out


def _gpus_used(v: JobView) -> list[str]:
    cat = _cat()
    return list(dict.fromkeys(p.accelerator_type for p in _checked(v)
                              if cat.is_gpu(p.accelerator_type) and p.accelerator_count > 0))


def check_regions(job: Any) -> list[Problem]:
    """The region offers every accelerator of the job, where the catalog has data: the GPU regions and zones
    (GPU seed, ~2021 zone data), the TPU seed's regions for cloud-tpu, TPU v5e's regions. A region or an
    accelerator the catalog has no region data for is a warning (``jobs.rules.hardware.today.unknown_places``)."""
    cat, v = _cat(), view(job)
    if not v.region_ok or region_problems("topology.region", v.region):
        return []
    out, gpus = [], [g for g in _gpus_used(v) if cat.regions_offering(g)]
    if gpus and (v.region in cat.gpu_regions or v.region in cat.zones):
        for gpu in gpus:
            if v.region not in cat.regions_offering(gpu):
                out.append(problem("topology.region", f"{v.region} does not offer {gpu}",
                                   cat.regions_offering(gpu)))
    for p in _checked(v):
        m = _machine(p)
        generation = cat.generation_of(p.machine_type)
        if cat.is_tpu(p.accelerator_type) and m.tpu != "vm" and v.region not in cat.tpu_regions:
            out.append(problem("topology.region", f"{p.accelerator_type} is not offered in {v.region}; "
                                                  "TPUs are offered only in us-central1 and europe-west4",
                               cat.tpu_regions))
        elif generation and generation.regions and v.region not in generation.regions:
            out.append(problem("topology.region", f"{p.machine_type} is not offered in {v.region}",
                               generation.regions))
    return out


def check_zones(job: Any) -> list[Problem]:
    """All GPU types of one job are offered together by one zone of the region (GPU seed)."""
    cat, v = _cat(), view(job)
    gpus = [g for g in _gpus_used(v) if v.region in cat.regions_offering(g)]
    if len(gpus) < 2 or any(set(gpus) <= types for types in cat.zones.get(v.region, {}).values()):
        return []
    elsewhere = [f"{r} ({', '.join(z for z, types in zs.items() if set(gpus) <= types)})"
                 for r, zs in cat.zones.items() if any(set(gpus) <= types for types in zs.values())]
    return [problem("topology.region",
                    f"no zone of {v.region} offers {_or(sorted(gpus)).replace(' or ', ' and ')} together; "
                    "all GPU types of one job must be in one zone: use one GPU type or another region",
                    elsewhere[:6])]


def check_same_gpus(job: Any) -> list[Problem]:
    """Multi-worker: the chief and every worker have the same GPU type and count (lab seed). Not under
    parameter_server, where the chief only coordinates (GPUs there: a warning, ``jobs.rules.hardware.advice``)."""
    v = view(job)
    chief, worker = v.pools["chief"], v.pools.get("worker", Pool("worker"))
    if not (chief.used and worker.used and chief.ok and worker.ok) or tpu_pool(chief) or tpu_pool(worker) \
            or v.strategy == "parameter_server":
        return []
    def gpus(p: Pool) -> str:
        return f"{p.accelerator_count} {p.accelerator_type}" if p.accelerator_count else "no GPU"
    if (chief.accelerator_type, chief.accelerator_count) == (worker.accelerator_type, worker.accelerator_count):
        return []
    why = ("every machine of a multi-worker job needs the same GPUs (the strategy splits each step's batch evenly "
           "over all of them and waits for the slowest at every all-reduce)")
    if chief.machine_type != worker.machine_type:
        # two machine types with their GPUs built in (a3-ultragpu-8g: H200, a3-highgpu-8g: H100) cannot meet on a
        # GPU type: naming the chief's GPU for the workers would only be refused by the workers' machine type. The
        # one way out is the same machine type (and GPUs) in every pool.
        return [problem("topology.worker.machine_type",
                        f"{why}: the chief has {gpus(chief)} on {chief.machine_type}, the workers {gpus(worker)} on "
                        f"{worker.machine_type}; use one machine type in every multi-worker pool: the workers as the "
                        f"chief (machine_type {chief.machine_type}, {gpus(chief)}), or the chief as the workers "
                        f"(machine_type {worker.machine_type}, {gpus(worker)})", [chief.machine_type])]
    key = "accelerator_type" if chief.accelerator_type != worker.accelerator_type else "accelerator_count"
    return [problem(f"topology.worker.{key}", f"{why}: the chief has {gpus(chief)}, the workers have {gpus(worker)}",
                    [getattr(chief, key)])]


def check_strategy(job: Any) -> list[Problem]:
    """Strategy vs topology: one_device/mirrored one machine; multi_worker >= 2 machines; tpu iff a TPU."""
    cat, v = _cat(), view(job)
    if not v.strategy_ok or v.strategy not in cat.strategies:
        return []
    s, tpu = v.strategy, has_tpu(v)
    chief, worker = v.pools["chief"], v.pools.get("worker", Pool("worker"))
    if tpu and s != "tpu":
        return [problem("topology.strategy", f"the job has a TPU, so the strategy is tpu, not {s}", ["tpu"])]
    if s == "tpu" and not tpu:
        return [problem("topology.strategy", "strategy tpu needs a TPU in topology.chief (machine_type cloud-tpu "
                                             "with TPU_V2/TPU_V3, or a TPU VM type such as ct5lp-hightpu-4t)",
                        [infer_strategy(v)])]
    if s in ("one_device", "mirrored") and worker.used:
        return [problem("topology.worker.replica_count",
                        f"{s} runs on one machine, but topology.worker.replica_count is {worker.replica_count}; "
                        "set it to 0 or use strategy multi_worker", [0])]
    if s == "multi_worker" and chief.replica_count + worker.replica_count < 2 and chief.ok and worker.ok:
        return [problem("topology.strategy", "multi_worker needs at least 2 machines (chief + workers), but "
                                             "there is only the chief; add workers (topology.worker.replica_count "
                                             ">= 1) or use a single-machine strategy", [infer_strategy(v)])]
    if s == "parameter_server":
        return check_parameter_servers(job)
    return []


def check_parameter_servers(job: Any) -> list[Problem]:
    """parameter_server: at least one parameter server (worker pool 2) holds the variables and at least one
    worker (pool 1) computes; the chief only coordinates (TF2 ParameterServerStrategy)."""
    v = view(job)
    ps, worker = v.pools.get("parameter_server", Pool("parameter_server")), v.pools.get("worker", Pool("worker"))
    out = []
    if ps.ok and not ps.used:
        out.append(problem("topology.parameter_server.replica_count",
                           "strategy parameter_server needs parameter servers (worker pool 2) to hold the variables, "
                           "but there are none; set a replica count and machine_type (e.g. n1-highmem-8), or use "
                           "strategy multi_worker", [1, 2]))
    if worker.ok and not worker.used:
        out.append(problem("topology.worker.replica_count",
                           "strategy parameter_server needs workers (worker pool 1) to compute: the chief only "
                           "coordinates; set a replica count and machine_type", [2, 4]))
    return out


def check_evaluator(job: Any) -> list[Problem]:
    """The evaluator (worker pool 3): one replica evaluates every checkpoint (two would evaluate the same ones
    and write the same files); none with a TPU (TPU jobs have no side-car evaluator here)."""
    v = view(job)
    ev = v.pools.get("evaluator", Pool("evaluator"))
    if not (ev.ok and ev.used):
        return []
    if has_tpu(v) or v.strategy == "tpu":
        return [problem("topology.evaluator.replica_count",
                        "strategy tpu has no side-car evaluator (it evaluates checkpoints of the other strategies); "
                        "set it to 0 and evaluate the exported model (the pipeline's verify step does)", [0])]
    if ev.replica_count > 1:
        return [problem("topology.evaluator.replica_count",
                        f"one evaluator evaluates every checkpoint; {ev.replica_count} would all evaluate the same "
                        "checkpoints and write the same files", [0, 1])]
    return []


def check_batch(job: Any) -> list[Problem]:
    """training.global_batch_size (when > 0) is divisible by the number of replicas."""
    v = view(job)
    n, gbs = num_replicas(job), v.job.training.global_batch_size
    if gbs <= 0 or gbs % n == 0:
        return []
    lower, upper = gbs // n * n, (gbs // n + 1) * n
    return [problem("training.global_batch_size",
                    f"{gbs} is not divisible by the {n} replicas in sync", [x for x in (lower, upper) if x > 0])]


RULES: tuple[Callable[[Any], list[Problem]], ...] = (
    check_fields, check_machine_types, check_accelerator_types, check_gpu_count, check_gpu_resources,
    check_regions, check_zones, check_same_gpus, check_tpu_accelerators, check_tpu_pools, check_tpu_version,
    check_strategy, check_evaluator, check_batch,
)


def check_job(job: Any, strict: bool | None = None) -> Report:
    """Run every rule; return all errors at once and the warnings. What the catalog does not know
    (``jobs.rules.hardware.today.unknowns``) is a warning, or an error when ``strict`` (default: the job's
    ``validation.strict``)."""
    job = view(job)  # parsed once: every rule reads this view
    errors: list[Problem] = []
    for rule in RULES:
        errors.extend(rule(job))
    tf_errors, tf_warnings = tensorflow_problems(job)
    errors += tpu_vm_shape_problems(job) + tf_errors
    unknown = unknowns(job)
    strict = job.job.validation.strict if strict is None else strict
    warnings = (check_warnings(job) + tf_warnings) if strict else (unknown + check_warnings(job) + tf_warnings)
    if strict:
        errors += [Problem(p.field, p.message.split(": Vertex decides")[0] + ": refused under validation.strict "
                                                                           "(--strict)", p.valid) for p in unknown]
    return Report(errors=list(dict.fromkeys(map(one_line, errors))),
                  warnings=list(dict.fromkeys(map(one_line, warnings))))
