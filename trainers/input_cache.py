"""Whether an input pipeline may ``cache()`` its part of the train split in memory, or must stream it.

Why a decision at all: ``cache()`` before ``shuffle`` reads the shards once and is the fastest input
pipeline -- but it holds every serialized record of the pipeline in RAM. A data set larger than the
machine's memory (or several replicas on one machine each caching their part) ends in an out-of-memory
kill hours into a job. So the trainer caches only when the pipeline's shard bytes fit a budget
(``data.cache_budget_mb``) and otherwise streams from the files every epoch (parallel reads, prefetch).

The default budget (``cache_budget_mb: -1``) is half of the machine's memory split between the input
pipelines that run on it: one per replica process on this machine (the local launcher runs all replicas
on one machine; on Vertex each replica has its own). The other half is left to the model, TensorFlow's
runtime and the shuffle/prefetch buffers. ``0`` never caches.
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping
from trainers import cluster as cluster_lib

MB = 1 << 20
#: share of the machine's memory the caches of all its input pipelines may use together.
MEMORY_SHARE = 0.5
#: TFRecord framing per record (length + 2 CRCs); the cache holds the record payload only.
RECORD_OVERHEAD = 16


def memory_bytes(meminfo: str = "/proc/meminfo") -> int:
    """Physical memory of this machine (or of its cgroup limit when lower), 0 when unknown."""
    total = 0
    try:
        with open(meminfo, encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        total = 0
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(limit_file, encoding="utf-8") as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < (total or int(raw) + 1):
            total = int(raw)
    return total


def replicas_on_this_machine(cluster: Mapping[str, Iterable[str]], task_type: str, task_index: int) -> int:
    """How many replica processes of the cluster share this task's host (1 when there is no cluster)."""
    tasks = {t: list(addrs) for t, addrs in (cluster or {}).items() if t in ("chief", "worker")}
    if task_type not in tasks or task_index >= len(tasks[task_type]):
        return 1
    host = tasks[task_type][task_index].rsplit(":", 1)[0]
    return max(1, sum(1 for addrs in tasks.values() for a in addrs if a.rsplit(":", 1)[0] == host))


def default_budget_mb(memory: int, replicas_per_machine: int) -> int:
    return int(memory * MEMORY_SHARE / max(1, replicas_per_machine) / MB)


def decide(cached_bytes: int, budget_mb: int, memory: int, replicas_per_machine: int) -> tuple[bool, str]:
    """(cache?, reason) for a pipeline whose records take ``cached_bytes``; ``budget_mb`` as configured."""
    if budget_mb == 0:
        return False, "data.cache_budget_mb=0: streaming"
    if budget_mb < 0:
        if memory <= 0:
            return False, "machine memory unknown and no data.cache_budget_mb: streaming"
        budget_mb = default_budget_mb(memory, replicas_per_machine)
        source = (f"default: {MEMORY_SHARE:.0%} of {memory / MB:,.0f} MB memory / {replicas_per_machine} "
                  f"replica(s) on this machine")
    else:
        source = "data.cache_budget_mb"
    need_mb = cached_bytes / MB
    if need_mb <= budget_mb:
        return True, f"{need_mb:,.1f} MB of records fit the {budget_mb:,} MB budget ({source}): cached in memory"
    return False, (f"{need_mb:,.1f} MB of records exceed the {budget_mb:,} MB budget ({source}): streamed from "
                   "the files every epoch")


def pipeline_bytes(file_sizes: list[int], records: int, policy: str, num_pipelines: int) -> int:
    """Bytes ``cache()`` would hold for one pipeline: its files' payload (all files / n under DATA)."""
    payload = sum(file_sizes) - RECORD_OVERHEAD * records
    return payload // num_pipelines if policy == "DATA" else payload


def file_sizes(paths: list[str]) -> list[int]:
    import tensorflow as tf

    return [int(tf.io.gfile.stat(p).length) for p in paths]


def this_replica(env: Mapping[str, str] | None = None) -> tuple[Mapping[str, list[str]], str, int]:
    """(cluster, task type, task index) of this process, from ``trainers.cluster`` (no cluster: empty)."""
    try:
        info = cluster_lib.read_cluster(dict(os.environ) if env is None else env)
    except Exception:  # a malformed spec is reported by the strategy; here it only sizes a cache
        return {}, "chief", 0
    return info.cluster, info.task_type, info.task_index
