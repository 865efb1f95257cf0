"""Today's Vertex on top of the seeds' rules: what the catalog does not know, what is retired, where TensorFlow
does not run.

* :func:`unknowns`: one ``warning:`` line per thing the catalog has no data for (a well-formed machine or
  accelerator type it has never seen, a region it has no data for, a GPU without region data, a TPU
  generation whose regions or whose Vertex training support it cannot confirm), each naming the field and
  ``catalog.date`` and saying "Vertex decides". ``rules.check_job`` makes them errors under
  ``validation.strict: true`` (``--strict``). A near miss of a known name is never here: it is an error of
  ``rules.check_machine_types``/``check_accelerator_types`` (``jobs.rules.hardware.names`` tells them apart).
* :func:`retired_problems`: accelerators Vertex no longer offers (K80: its ``AcceleratorType`` value is
  "Deprecated: ... reached end of support"), refused by the project's job validation (``jobs.rules.validate``) with
  the reason. ``check_job`` alone keeps judging the seeds' 2021 tables, where K80 cells are valid counts.
* :func:`tensorflow_problems`: a TPU generation that TensorFlow does not run on (v6e: Cloud TPU documents
  JAX and PyTorch only): the built-in trainer (TensorFlow) is refused in one line; a user's own trainer
  (maybe JAX) gets one warning saying so.
"""
from __future__ import annotations

from typing import Any

from jobs.rules.hardware.catalog import CLOUD_TPU, load_catalog, topology_chips
from jobs.rules.hardware.names import accelerator_verdict, machine_verdict
from jobs.rules.hardware.shared import JobView, view, checked_pools, region_problems
from jobfile.errors import Problem, problem

STRICT_HINT = "--strict or validation.strict: true refuses it"


def _unknown(field: str, what: str, hint: str = "", valid=()) -> Problem:
    cat = load_catalog()
    return problem(field, f"{what} is not in the hardware catalog of {cat.date}" + (f" ({hint})" if hint else "")
                   + f": Vertex decides whether the job runs; {STRICT_HINT}", valid)


def unknown_names(v: JobView) -> list[Problem]:
    """Well-formed machine and accelerator types the catalog has never seen (near misses and malformed names
    are errors elsewhere)."""
    cat, out = load_catalog(), []
    for p in v.used_pools:
        if not p.ok:
            continue
        if p.machine_type and p.machine_type not in cat.machines and p.machine_type not in cat.legacy_machines:
            verdict = machine_verdict(p.machine_type, cat.machines, cat.not_listed_families)
            if verdict.kind == "new":
                out.append(_unknown(f"{p.path}.machine_type", f"machine type {p.machine_type!r}", verdict.hint,
                                    verdict.suggest))
        if p.accelerator_type and p.accelerator_type not in cat.accelerator_types:
            verdict = accelerator_verdict(p.accelerator_type, cat.accelerator_types)
            if verdict.kind == "new":
                out.append(_unknown(f"{p.path}.accelerator_type", f"accelerator type {p.accelerator_type!r}",
                                    _client_hint(p.accelerator_type) or verdict.hint))
    return out


def _client_hint(accelerator: str) -> str:
    """Whether the installed client knows the value (the create call parses the job with it)."""
    try:
        from google.cloud.aiplatform_v1.types import AcceleratorType
    except ImportError:  # pragma: no cover - the client is a dependency
        return ""
    if accelerator in AcceleratorType.__members__:
        return "the installed google-cloud-aiplatform knows it"
    return "nor does the installed google-cloud-aiplatform: the create call needs a newer client"


def unknown_places(v: JobView) -> list[Problem]:
    """Regions, and accelerators in a region, that the catalog has no data for."""
    cat, out = load_catalog(), []
    if not v.region_ok or region_problems("topology.region", v.region):
        return out
    pools = checked_pools(v)
    gpus = list(dict.fromkeys(p.accelerator_type for p in pools if cat.is_gpu(p.accelerator_type)
                              and p.accelerator_count > 0))
    if v.region not in cat.known_regions:  # well-formed, near no region it knows: a region newer than the catalog?
        out.append(_unknown("topology.region", f"region {v.region}",
                            "nor in the installed google-cloud-aiplatform's list of Vertex AI regions",
                            ["us-central1", "europe-west4"]))
    elif gpus and v.region not in cat.gpu_regions and v.region not in cat.zones:
        out.append(_unknown("topology.region", f"region {v.region} (for {', '.join(gpus)})",
                            "its GPU data covers " + ", ".join(cat.gpu_regions[:6]) + ", ..."))
    elif gpus:
        for gpu in gpus:
            if not any(gpu in types for zs in cat.zones.values() for types in zs.values()):
                out.append(_unknown("topology.region", f"where {gpu} is offered for training",
                                    f"no region data for it; {v.region} may or may not have it"))
    for p in pools:
        generation = cat.generation_of(p.machine_type)
        if generation and not generation.regions:
            out.append(_unknown("topology.region", f"where TPU {generation.name} ({p.machine_type}) is offered",
                                f"no region data for it; {v.region} may or may not have it"))
        if generation and generation.vertex_training != "listed":
            out.append(_unknown(f"{p.path}.machine_type", f"Vertex training on TPU {generation.name} "
                                                          f"({p.machine_type}, {generation.accelerator_type})",
                                "the catalog does not confirm Vertex offers it for custom training"))
    return out


def unknowns(job: Any) -> list[Problem]:
    """Every "the catalog does not know" line of ``job`` (warnings; errors under ``validation.strict``)."""
    v = job if isinstance(job, JobView) else view(job)
    return unknown_names(v) + unknown_places(v)


def retired_problems(job: Any) -> list[Problem]:
    """Accelerators Vertex no longer offers (catalog ``status: retired``), one error each, with the reason."""
    cat, v = load_catalog(), view(job)
    out = []
    for p in v.used_pools:
        gpu = cat.gpus.get(p.accelerator_type) if p.ok else None
        if gpu and gpu.status == "retired":
            out.append(problem(f"{p.path}.accelerator_type", gpu.advice(), gpu.use_instead))
    return list(dict.fromkeys(out))


def tensorflow_problems(job: Any) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) for TPU generations TensorFlow does not run on (catalog ``tpu_vm.*.tensorflow``)."""
    cat, v = load_catalog(), view(job)
    errors, warnings = [], []
    for p in v.used_pools:
        generation = cat.generation_of(p.machine_type) if p.ok else None
        if not generation or generation.tensorflow:
            continue
        others = [m for g in cat.tpu_generations.values() if g.tensorflow and g.vertex_training == "listed"
                  for m in g.machine_types][:3]
        if v.job.user_trainer:
            warnings.append(problem(f"{p.path}.machine_type", f"TPU {generation.name} ({p.machine_type}) does not run "
                                                              f"TensorFlow: {generation.tensorflow_note}; fine if your "
                                                              "trainer is JAX or PyTorch", others))
        else:
            errors.append(problem(f"{p.path}.machine_type", f"TPU {generation.name} ({p.machine_type}) does not run "
                                                            f"TensorFlow, and the built-in trainer is TensorFlow: "
                                                            f"{generation.tensorflow_note}", others))
    return errors, warnings


def tpu_vm_shape_problems(job: Any) -> list[Problem]:
    """A TPU VM slice as Vertex takes it: the per-host machine type and the whole slice's ``tpu_topology`` in
    worker pool 0 with replica_count 1 (``aiplatform`` ``worker_spec_utils``: "TPU jobs only allow 1 replica";
    ``tpu_topology`` "is required for TPU v5 versions"). Multi-host slices are one replica: Vertex starts the
    hosts (chips of the topology / chips per host)."""
    cat, v = load_catalog(), view(job)
    out = []
    for p in v.used_pools:
        m = cat.machines.get(p.machine_type) if p.ok else None
        if not m or m.tpu != "vm" or p.name != "chief":
            continue
        if not p.tpu_topology:
            out.append(problem(f"{p.path}.tpu_topology", f"{p.machine_type} needs a tpu_topology (Vertex requires it "
                                                         "for TPU VM types): the whole slice, e.g. "
                                                         f"{m.single_host_topologies[-1] if m.single_host_topologies else m.topologies[0]}"
                                                         " for one host", m.topologies))
    return out


def describe_slice(machine_type: str, topology: str) -> str:
    """``ct5lp-hightpu-4t 4x4: 16 chips on 4 hosts of 4`` (for tables and notes)."""
    m = load_catalog().machines.get(machine_type)
    if not m or m.tpu != "vm":
        return machine_type if machine_type != CLOUD_TPU else "cloud-tpu"
    chips = topology_chips(topology) or m.chips
    hosts = m.hosts(topology)
    return f"{machine_type} {topology or '(one host)'}: {chips} chips on {hosts} host{'s' if hosts > 1 else ''} of {m.chips}"
