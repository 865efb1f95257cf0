"""The environment a replica sees: Vertex AI custom training's, rebuilt for loopback, and nothing else.

Pure functions, no processes, no TensorFlow. :func:`vertex_environment` returns the variables Vertex sets for
one replica; :func:`replica_environment` is THE builder of a replica's whole environment, for a process
here and for a container alike (they differ only in the base the variables are laid over):

* a replica **process** (the process runner) starts from :func:`process_base`: the few variables a process
  needs to start on this machine (:data:`BASE_NAMES`: ``PATH``, ``HOME``, locale, ``TMPDIR``, the virtualenv,
  the dynamic loader's path and this machine's OpenBLAS settings), what the trainer image's ``ENV`` sets
  (:data:`IMAGE_ENV`) and ``PYTHONPATH`` = this checkout (the image's ``PYTHONPATH=/app``);
* a replica **container** (``--runner docker``) starts from nothing: the image brings its own ``ENV``;

then the job's declared variables (``trainer.env``, the pools' ``container_spec.env``), then Vertex's
(``CLUSTER_SPEC``, ``TF_CONFIG``, ``AIP_*``, ``CLOUD_ML_*``), then ``VTP_LOCAL_LAUNCHER=1``. Nothing else of
the caller's shell reaches a replica: no credentials (``GOOGLE_APPLICATION_CREDENTIALS``,
``CLOUDSDK_CONFIG``), no ``PYTHONPATH``, no ``TF_USE_LEGACY_KERAS``: a job that passes here because of a
shell variable would fail on Vertex, which never sets it (FACTS.md). A variable the trainer needs is
declared in ``trainer.env`` and then set here and on Vertex alike.

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

from pathlib import Path

from trainers.cluster import LOCAL_LAUNCHER_ENV, OUTPUT_LAYOUT, output_dirs as _layout

NUM_POOLS = 4
POOL_NAMES = tuple(f"workerpool{p}" for p in range(NUM_POOLS))
ROLES = ("chief", "worker", "ps", "evaluator")
# Roles that appear in TF_CONFIG["cluster"]; TensorFlow wants the evaluator outside it.
_TF_CLUSTER_ROLES = ("chief", "worker", "ps")

#: The variables Vertex owns in a replica (:func:`vertex_environment`): a declared variable may not take one
#: of these names, an inherited one is never passed on, and a container stand-in forwards exactly these
#: to its replica container (``PYTHONUNBUFFERED``, the launcher's too, comes from the image's ``ENV`` there).
VERTEX_NAMES = frozenset({"CLUSTER_SPEC", "TF_CONFIG"})
VERTEX_PREFIXES = ("AIP_", "CLOUD_ML_")
#: What a replica process takes from this machine's environment, when set (see the module doc): what a
#: process needs to start, this machine's OpenBLAS settings (set on some processors because older OpenBLAS
#: builds compute wrong results there) and how this machine reaches the network (proxies, CA bundles: a
#: replica that downloads its data needs them here; on Vertex the machine's own apply). No credentials.
BASE_NAMES = ("PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "USER", "LOGNAME",
              "VIRTUAL_ENV", "LD_LIBRARY_PATH", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
              "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
              "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
#: What the trainer image's ``ENV`` gives every replica (containers/Dockerfile), beside its PYTHONPATH.
IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
#: This checkout: what the image's ``PYTHONPATH=/app`` is to a replica process here.
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


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


def aip_variables(base_output_dir: str) -> dict[str, str]:
    """AIP_MODEL_DIR / AIP_CHECKPOINT_DIR / AIP_TENSORBOARD_LOG_DIR under ``base_output_dir``, laid out by
    ``trainers.cluster.output_dirs`` (the one layout). Local paths are made absolute; ``gs://`` style URIs
    are kept as they are. Values end with ``/`` as on Vertex."""
    base = str(base_output_dir)
    if "://" not in base:
        base = os.path.abspath(base)
    dirs = _layout(None, base.rstrip("/"))
    return {variable: dirs[key] + "/" for key, (variable, _) in OUTPUT_LAYOUT.items()}


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
    env.update(aip_variables(base_output_dir))
    return env


def is_vertex_variable(name: str) -> bool:
    """A variable Vertex sets for a replica (see :data:`VERTEX_NAMES`)."""
    return name in VERTEX_NAMES or name.startswith(VERTEX_PREFIXES)


def process_base(parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a replica process starts from here (see the module doc): :data:`BASE_NAMES` taken from
    ``parent`` (default ``os.environ``) when set, :data:`IMAGE_ENV`, and ``PYTHONPATH`` = this checkout."""
    parent = os.environ if parent is None else parent
    env = {name: parent[name] for name in BASE_NAMES if parent.get(name)}
    env.update(IMAGE_ENV)
    env["PYTHONPATH"] = PROJECT_ROOT
    return env


def replica_environment(base: Mapping[str, str], declared: Mapping[str, str] | None,
                        vertex: Mapping[str, str]) -> dict[str, str]:
    """THE environment of a replica: ``base`` (:func:`process_base` for a process, ``{}`` for a container),
    then ``declared`` (``trainer.env``), then ``vertex`` (:func:`vertex_environment`), then
    ``VTP_LOCAL_LAUNCHER=1`` (``trainers.cluster.LOCAL_LAUNCHER_ENV``: the replica runs GPU/TPU pools over
    CPUs here instead of stopping as it would on a cloud machine without its accelerators).

    A declared variable never overrides Vertex's (validation refuses those names; here Vertex's win).
    Returns a new dict; nothing given is modified."""
    env = {str(k): str(v) for k, v in base.items() if not is_vertex_variable(str(k))}
    env.update({str(k): str(v) for k, v in (declared or {}).items()})
    env.update(vertex)
    env[LOCAL_LAUNCHER_ENV] = "1"
    return env
