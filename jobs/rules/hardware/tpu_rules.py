"""TPU rules from the TPU seed: cloud_tpu core counts and pods, one TPU worker, no parameter servers,
tpuTfVersion.  Conventions: a TPU v2/v3 (pods too) is ``machine_type: cloud-tpu`` + ``accelerator_type``
+ ``accelerator_count: <cores>`` in ``topology.chief``; a TPU VM is its machine type (e.g.
``ct5lp-hightpu-4t``) + optional ``tpu_topology``.
"""
from __future__ import annotations

from typing import Any

from jobfile.errors import Problem, problem
from jobs.rules.hardware.catalog import CLOUD_TPU, load_catalog, pytorch_image_version
from jobs.rules.hardware.shared import Pool, view, checked_pools, has_tpu, machine_of, or_join, tpu_pool


def _cat():
    return load_catalog()


# ---- TPU rules ---------------------------------------------------------------------------------
def check_tpu_accelerators(job: Any) -> list[Problem]:
    """cloud-tpu carries TPU_V2/TPU_V3 x 8 cores or a pod (V2: 32/128/256/512, V3: 32/128/256);
    TPU VM types take their own chips and topologies; TPUs only on TPU machines."""
    cat, out = _cat(), []
    for p in checked_pools(view(job)):
        m, acc, n = machine_of(p), p.accelerator_type, p.accelerator_count
        if p.tpu_topology and m.tpu != "vm":
            out.append(problem(f"{p.path}.tpu_topology",
                               f"tpu_topology applies only to TPU VM machine types, not {p.machine_type}; remove it"))
        if acc in cat.tpu_cores and m.tpu != "legacy":
            out.append(problem(f"{p.path}.machine_type", f"{acc} runs on machine type {CLOUD_TPU}, "
                                                         f"not {p.machine_type}", [CLOUD_TPU]))
        elif m.tpu == "legacy" and acc not in cat.tpu_cores:
            out.append(problem(f"{p.path}.accelerator_type",
                               f"{CLOUD_TPU} needs a TPU accelerator (TPU_V2 or TPU_V3 with 8 cores, or a pod)"
                               + (f", not {acc}" if acc else ""), list(cat.tpu_cores)))
        elif acc in cat.tpu_vm_types and m.tpu != "vm":
            vms = [name for name, vm in cat.machines.items() if vm.tpu_type == acc]
            out.append(problem(f"{p.path}.machine_type", f"{acc} comes with TPU VM machine types, not "
                                                         f"{p.machine_type}", vms))
        elif m.tpu == "legacy" and n not in cat.tpu_cores[acc]:
            cores = cat.tpu_cores[acc]
            what = f"exactly {cores[0]}" if len(cores) == 1 else or_join(cores)
            out.append(problem(f"{p.path}.accelerator_count", f"{acc} takes {what} cores, not {n}", cores))
        elif m.tpu == "vm":
            if acc and acc != m.tpu_type:
                carries = f"carries {m.tpu_type}" if m.tpu_type else "names its TPU itself (no accelerator_type)"
                out.append(problem(f"{p.path}.accelerator_type",
                                   f"{p.machine_type} {carries}, not {acc}", [m.tpu_type, ""] if m.tpu_type else [""]))
            elif n and n != m.chips:
                out.append(problem(f"{p.path}.accelerator_count",
                                   f"{p.machine_type} has {m.chips} TPU chips, not {n}", [m.chips, 0]))
            if p.tpu_topology and p.tpu_topology not in m.topologies:
                single = m.single_host_topologies
                out.append(problem(f"{p.path}.tpu_topology",
                                   f"{p.machine_type} takes topology {or_join(m.topologies)} ("
                                   f"{or_join(single)} on one host, the rest multi-host), not {p.tpu_topology!r}",
                                   m.topologies))
    return out


def check_tpu_pools(job: Any) -> list[Problem]:
    """A TPU sits in the chief pool; one TPU worker (no workers beside it); no parameter servers."""
    v = view(job)
    tpus = [p for p in v.used_pools if p.ok and tpu_pool(p)]
    out = [problem(f"{p.path}.machine_type", f"a TPU goes in topology.chief, not topology.{p.name}")
           for p in tpus if p.name != "chief"]
    if not tpus:
        return out
    worker, ps = v.pools.get("worker", Pool("worker")), v.pools.get("parameter_server", Pool("parameter_server"))
    if worker.used and worker.name not in {p.name for p in tpus}:
        out.append(problem("topology.worker.replica_count",
                           f"a TPU job runs on its one TPU machine (workerCount 1); remove the "
                           f"{worker.replica_count} worker(s)", [0]))
    if ps.used:
        out.append(problem("topology.parameter_server.replica_count",
                           "no parameter servers with a TPU (the service rejects parameterServerCount > 0)", [0]))
    return out


def check_tpu_version(job: Any, require_for_custom_container: bool = False) -> list[Problem]:
    """tpu_tf_version is a listed runtime (1.15, 2.1-2.9, 2.11) or PyTorch XLA version and matches a
    prebuilt PyTorch XLA image.  The legacy import also requires it for any custom container (on
    Vertex, TPU VMs need no such field, so the project's own format does not)."""
    cat, v = _cat(), view(job)
    if not has_tpu(v):
        return []
    field, version = "topology.tpu_tf_version", v.job.topology.tpu_tf_version
    allowed = list(cat.runtime_versions) + sorted(set(cat.pytorch_images.values()))
    expected = pytorch_image_version(v.job.container.image_uri) if v.job.container.image_uri else None
    if expected and version != expected:
        return [problem(field, f"the PyTorch XLA image {v.job.container.image_uri} needs tpu_tf_version {expected}"
                               + (f", not {version}" if version else ""), [expected])]
    if version and version not in allowed:
        return [problem(field, f"{version} is not a runtime version available for TPUs", allowed)]
    if not version and require_for_custom_container and v.job.container.image_uri:
        return [problem(field, "a TPU running a custom container needs tpu_tf_version: the runtime version "
                               "whose TensorFlow the container uses", cat.runtime_versions)]
    return []


# ---- strategy and batch ------------------------------------------------------------------------
