"""Vertex ``worker_pool_specs`` from the project's job config.

Always four entries: pool 0 chief, 1 workers, 2 parameter servers (or a reduction server), 3 evaluator;
an unused pool (replica_count 0 or absent) is ``{}``.  Counts are cast to int (kfp compiles ints in
nested parameters to floats such as 2.0, and ``accelerator_count`` is an int32 in the proto).
``accelerator_type``/``accelerator_count`` appear only when an accelerator is set, ``tpu_topology`` only
when set.  A TPU v2/v3 is ``{"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3",
"accelerator_count": 8}`` in pool 0; a TPU VM is e.g. ``{"machine_type": "ct5lp-hightpu-4t",
"tpu_topology": "2x2"}``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from jobs.hardware.jobview import DEFAULT_TOPOLOGY, POOLS, as_int

POOL_INDEX = {name: i for i, name in enumerate(POOLS)}


def _int(value: Any) -> int:
    number = as_int(value)
    if number is None:
        try:
            number = int(float(value))
        except (TypeError, ValueError):
            number = 0
    return number


def machine_spec(pool: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"machine_type": str(pool.get("machine_type") or "")}
    accelerator_type = str(pool.get("accelerator_type") or "")
    accelerator_count = _int(pool.get("accelerator_count", 0))
    if accelerator_type and accelerator_count > 0:
        spec["accelerator_type"] = accelerator_type
        spec["accelerator_count"] = accelerator_count
    if pool.get("tpu_topology"):
        spec["tpu_topology"] = str(pool["tpu_topology"])
    return spec


def worker_pool_specs(job: Mapping[str, Any], image_uri: str, command: Sequence[str] = (),
                      args: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The four Vertex worker pools of ``job['topology']`` running ``image_uri`` with command/args."""
    topology = job.get("topology", DEFAULT_TOPOLOGY)
    topology = topology if isinstance(topology, Mapping) else {}
    specs: list[dict[str, Any]] = []
    for name in POOLS:
        pool = topology.get(name) or {}
        if not isinstance(pool, Mapping):
            pool = {}
        default = 1 if name == "chief" or pool.get("machine_type") else 0
        replicas = _int(pool.get("replica_count", default))
        if replicas <= 0:
            specs.append({})
            continue
        container: dict[str, Any] = {"image_uri": image_uri}
        if command:
            container["command"] = [str(c) for c in command]
        if args:
            container["args"] = [str(a) for a in args]
        specs.append({"replica_count": replicas, "machine_spec": machine_spec(pool), "container_spec": container})
    return specs
