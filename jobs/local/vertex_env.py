"""The environment Vertex AI custom training gives each replica, rebuilt for loopback.

Pure functions, no processes, no TensorFlow: :func:`vertex_environment` returns the variables, and
:func:`replica_environment` layers them over a parent environment with every inherited cluster
variable removed.  :mod:`jobs.local.launcher` documents the full contract and uses both.

Worker pools (Vertex's ``workerPoolSpecs[]`` positions):

=====  ==============  ==============  =======================================
pool   CLUSTER_SPEC    TF_CONFIG role  replicas
=====  ==============  ==============  =======================================
0      workerpool0     chief           exactly 1 (the primary replica)
1      workerpool1     worker          0..n
2      workerpool2     ps              0..n (parameter servers never exit alone)
3      workerpool3     evaluator       0..n (not listed in TF_CONFIG's cluster)
=====  ==============  ==============  =======================================
"""
from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

from trainers.cluster import LOCAL_LAUNCHER_ENV, OUTPUT_LAYOUT

NUM_POOLS = 4
POOL_NAMES = tuple(f"workerpool{p}" for p in range(NUM_POOLS))
ROLES = ("chief", "worker", "ps", "evaluator")
# Roles that appear in TF_CONFIG["cluster"]; TensorFlow wants the evaluator outside it.
_TF_CLUSTER_ROLES = ("chief", "worker", "ps")

#: Inherited variables that would describe some *other* cluster; never passed to a replica.
SCRUBBED_NAMES = frozenset({"CLUSTER_SPEC", "TF_CONFIG"})
SCRUBBED_PREFIXES = ("AIP_", "CLOUD_ML_")


def validate_replica_counts(replica_counts: Sequence[int]) -> tuple[int, int, int, int]:
    """Check ``replica_counts`` (pools 0..3, trailing pools may be left out) and pad it to 4.

    Raises ValueError naming the offending pool.
    """
    if isinstance(replica_counts, (str, bytes)) or not hasattr(replica_counts, "__len__"):
        raise ValueError(
            f"replica_counts must be a sequence of up to {NUM_POOLS} integers "
            f"(workerpool0..workerpool3), got {replica_counts!r}")
    counts = list(replica_counts)
    if not 1 <= len(counts) <= NUM_POOLS:
        raise ValueError(
            f"replica_counts must list 1 to {NUM_POOLS} worker pools "
            f"(workerpool0=chief, workerpool1=worker, workerpool2=ps, workerpool3=evaluator), "
            f"got {len(counts)}: {counts!r}")
    out = []
    for pool, count in enumerate(counts):
        name = f"{POOL_NAMES[pool]} ({ROLES[pool]})"
        if isinstance(count, bool) or not isinstance(count, int):
            if isinstance(count, float) and count.is_integer():  # compiled KFP params: 2.0
                count = int(count)
            else:
                raise ValueError(f"{name} replica count must be an integer, got {count!r}")
        if count < 0:
            raise ValueError(f"{name} replica count must be >= 0, got {count}")
        out.append(count)
    out += [0] * (NUM_POOLS - len(out))
    if out[0] != 1:
        raise ValueError(
            f"{POOL_NAMES[0]} (chief) replica count must be 1 (Vertex's primary replica), "
            f"got {out[0]}")
    return tuple(out)  # type: ignore[return-value]


def output_dirs(base_output_dir: str) -> dict[str, str]:
    """AIP_MODEL_DIR / AIP_CHECKPOINT_DIR / AIP_TENSORBOARD_LOG_DIR under ``base_output_dir``.

    Local paths are made absolute; ``gs://`` style URIs are kept as they are.  Values end with
    ``/`` as on Vertex.
    """
    base = str(base_output_dir)
    if "://" not in base:
        base = os.path.abspath(base)
    base = base.rstrip("/")
    return {variable: f"{base}/{leaf}/" for variable, leaf in OUTPUT_LAYOUT.values()}


def vertex_environment(replica_counts: Sequence[int], addresses: Mapping[str, Sequence[str]],
                       pool: int, index: int, base_output_dir: str,
                       job_id: str) -> dict[str, str]:
    """The env vars Vertex sets for replica ``index`` of worker pool ``pool``.

    ``addresses`` maps ``"workerpool0".."workerpool3"`` to that pool's ``host:port`` list (one
    per replica; pools with no replicas may be missing or empty).  Returns CLUSTER_SPEC,
    TF_CONFIG, the three AIP_* output dirs, CLOUD_ML_JOB_ID and PYTHONUNBUFFERED=1.
    """
    counts = validate_replica_counts(replica_counts)
    if not isinstance(pool, int) or not 0 <= pool < NUM_POOLS:
        raise ValueError(f"pool must be 0..{NUM_POOLS - 1}, got {pool!r}")
    if not isinstance(index, int) or not 0 <= index < counts[pool]:
        raise ValueError(
            f"index {index!r} out of range for {POOL_NAMES[pool]} ({ROLES[pool]}) "
            f"with {counts[pool]} replica(s)")
    unknown = set(addresses) - set(POOL_NAMES)
    if unknown:
        raise ValueError(f"addresses has unknown keys {sorted(unknown)}; use {list(POOL_NAMES)}")
    cluster: dict[str, list[str]] = {}
    for p, name in enumerate(POOL_NAMES):
        addrs = [str(a) for a in addresses.get(name, ())]
        if len(addrs) != counts[p]:
            raise ValueError(
                f"{name} ({ROLES[p]}) has {counts[p]} replica(s) but {len(addrs)} address(es)")
        if addrs:
            cluster[name] = addrs

    cluster_spec = {
        "cluster": cluster,
        "environment": "cloud",
        "task": {"type": POOL_NAMES[pool], "index": index},
    }
    tf_cluster = {ROLES[p]: cluster[POOL_NAMES[p]]
                  for p in range(NUM_POOLS)
                  if ROLES[p] in _TF_CLUSTER_ROLES and POOL_NAMES[p] in cluster}
    tf_config = {
        "cluster": tf_cluster,
        "task": {"type": ROLES[pool], "index": index},
        "environment": "cloud",
    }
    env = {
        "CLUSTER_SPEC": json.dumps(cluster_spec),
        "TF_CONFIG": json.dumps(tf_config),
        "CLOUD_ML_JOB_ID": str(job_id),
        "PYTHONUNBUFFERED": "1",
    }
    env.update(output_dirs(base_output_dir))
    return env


def is_scrubbed(name: str) -> bool:
    return name in SCRUBBED_NAMES or name.startswith(SCRUBBED_PREFIXES)


def replica_environment(parent: Mapping[str, str], extra: Mapping[str, str] | None,
                        vertex: Mapping[str, str]) -> dict[str, str]:
    """``parent`` minus CLUSTER_SPEC/TF_CONFIG/AIP_*/CLOUD_ML_*, plus ``extra``, plus ``vertex``, plus
    ``VTP_LOCAL_LAUNCHER=1`` (``trainers.cluster.LOCAL_LAUNCHER_ENV``): the replica runs GPU/TPU pools over
    CPUs here instead of stopping as it would on a cloud machine without its accelerators.

    Returns a new dict; ``parent`` (normally ``os.environ``) is never modified.
    """
    env = {k: v for k, v in parent.items() if not is_scrubbed(k)}
    for k, v in (extra or {}).items():
        env[str(k)] = str(v)
    env.update(vertex)
    env[LOCAL_LAUNCHER_ENV] = "1"
    return env
