"""A typed, never-failing view of the hardware sections of a job config dict.

The rules read the job through :func:`view`.  Wrong types (a string where a count belongs, ``None``,
a negative count, a list instead of a mapping) never raise: they become :class:`Problem` entries in
``JobView.problems`` (reported once, by ``rules.check_fields``) and the offending pool is marked
``ok=False`` so the other rules skip it instead of reporting consequences of the same mistake.

Defaults: a job without ``topology`` gets the project's default topology (multi_worker, chief and one
worker on n1-standard-4, us-central1).  Inside a given ``topology`` a missing pool is *unused* (zero
replicas) except the chief, which defaults to one n1-standard-4.  A pool without ``replica_count`` has
one replica if it names a machine type, else none (the chief always one).
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Mapping

from trainers.errors import Problem, problem

POOLS = ("chief", "worker", "parameter_server", "evaluator")
POOL_KEYS = ("replica_count", "machine_type", "accelerator_type", "accelerator_count", "tpu_topology", "disk_spec",
             "nfs_mounts")
TOPOLOGY_KEYS = ("strategy", "region", "tpu_tf_version") + POOLS

DEFAULT_TOPOLOGY: dict[str, Any] = {
    "strategy": "multi_worker",
    "region": "us-central1",
    "tpu_tf_version": "",
    "chief": {"replica_count": 1, "machine_type": "n1-standard-4", "accelerator_type": "",
              "accelerator_count": 0, "tpu_topology": ""},
    "worker": {"replica_count": 1, "machine_type": "n1-standard-4", "accelerator_type": "",
               "accelerator_count": 0, "tpu_topology": ""},
}


@dataclasses.dataclass(frozen=True)
class Pool:
    name: str
    replica_count: int = 0
    machine_type: str = ""
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    ok: bool = True  # all fields well typed

    @property
    def path(self) -> str:
        return f"topology.{self.name}"

    @property
    def used(self) -> bool:
        return self.replica_count > 0


@dataclasses.dataclass
class JobView:
    strategy: str = "multi_worker"
    strategy_ok: bool = True
    region: str = "us-central1"
    region_ok: bool = True
    tpu_tf_version: str = ""
    pools: dict[str, Pool] = dataclasses.field(default_factory=dict)
    image_uri: str = ""
    global_batch_size: int = 0
    spot: bool = False
    restart_on_worker_restart: bool = False
    checkpoint_every_steps: int = 0
    checkpoint_every_seconds: int = 0
    mixed_precision: bool = False
    strict: bool = False  # validation.strict: what the catalog does not know is an error, not a warning
    user_trainer: bool = False  # trainer.module or a changed container.command: not (necessarily) TensorFlow
    problems: list[Problem] = dataclasses.field(default_factory=list)

    @property
    def used_pools(self) -> list[Pool]:
        return [p for p in self.pools.values() if p.used]


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _escape(text: str) -> str:
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(p: Problem) -> Problem:
    """The problem with control characters (newlines from user keys/values) escaped: one line each."""
    return Problem(_escape(p.field), _escape(p.message), tuple(_escape(str(v)) for v in p.valid))


def as_int(value: Any) -> int | None:
    """An integer count, accepting integral floats (kfp compiles ints to 2.0); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_str(value: Any) -> str | None:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return getattr(value, "text", None) or str(value)  # YAML 2.11 read as a number
    return None


def _mapping(value: Any, path: str, problems: list[Problem]) -> Mapping[str, Any] | None:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return value
    problems.append(problem(path, f"must be a mapping, not {type(value).__name__} {value!r:.40}"))
    return None


def _unknown_keys(section: Mapping[str, Any], known: tuple[str, ...], path: str,
                  problems: list[Problem]) -> None:
    for key in section:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=2, cutoff=0.6)
            problems.append(problem(f"{path}.{key}", "unknown key", close or known))


def _pool(name: str, raw: Any, problems: list[Problem]) -> Pool:
    path = f"topology.{name}"
    section = _mapping(raw, path, problems)
    if section is None:
        return Pool(name, ok=False)
    _unknown_keys(section, POOL_KEYS, path, problems)
    ok = True
    strings: dict[str, str] = {}
    for key in ("machine_type", "accelerator_type", "tpu_topology"):
        text = as_str(section.get(key))
        if text is None:
            problems.append(problem(f"{path}.{key}", f"must be a string, not {section.get(key)!r:.40}"))
            ok, text = False, ""
        strings[key] = text
    counts: dict[str, int] = {}
    default_replicas = 1 if name == "chief" or strings["machine_type"] else 0
    for key, default in (("replica_count", default_replicas), ("accelerator_count", 0)):
        raw_value = section.get(key)
        number = default if raw_value is None else as_int(raw_value)
        if number is None or number < 0:
            problems.append(problem(f"{path}.{key}",
                                    f"must be a whole number >= 0, not {raw_value!r:.40}"))
            ok, number = False, 0
        counts[key] = number
    return Pool(name, counts["replica_count"], strings["machine_type"], strings["accelerator_type"],
                counts["accelerator_count"], strings["tpu_topology"], ok)


def _section(job: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = job.get(key)
    return value if isinstance(value, Mapping) else {}


def _flag(section: Mapping[str, Any], key: str, default: Any) -> Any:
    value = section.get(key, default)
    return value if isinstance(value, type(default)) and not (
        isinstance(value, bool) and not isinstance(default, bool)) else default


def view(job: Any) -> JobView:
    """Typed view of ``job`` (never raises); type problems are in ``.problems``."""
    out = JobView()
    if not isinstance(job, Mapping):
        out.problems.append(problem("config", f"must be a mapping, not {type(job).__name__}"))
        out.pools = {"chief": Pool("chief", ok=False)}
        return out
    raw_topology = job.get("topology", DEFAULT_TOPOLOGY)
    topology = _mapping(raw_topology, "topology", out.problems)
    if topology is None:
        out.pools = {"chief": Pool("chief", ok=False)}
        out.strategy_ok = out.region_ok = False
        topology = {}
    else:
        _unknown_keys(topology, TOPOLOGY_KEYS, "topology", out.problems)
        for name in POOLS:
            if name in topology or name == "chief":
                out.pools[name] = _pool(name, topology.get(name), out.problems)
            else:
                out.pools[name] = Pool(name)
    for key in ("strategy", "region", "tpu_tf_version"):
        raw = topology.get(key, DEFAULT_TOPOLOGY[key])
        text = raw if key == "region" and isinstance(raw, str) else as_str(raw)  # a region is checked as sent
        if text is None:
            out.problems.append(problem(f"topology.{key}",
                                        f"must be a string, not {topology.get(key)!r:.40}"))
            if key == "strategy":
                out.strategy_ok = False
            elif key == "region":
                out.region_ok = False
            text = ""
        setattr(out, key, text)

    container = _section(job, "container")
    out.image_uri = as_str(container.get("image_uri")) or ""
    training, checkpoint = _section(job, "training"), _section(job, "checkpoint")
    scheduling = _section(job, "scheduling")
    out.global_batch_size = as_int(training.get("global_batch_size", 0)) or 0
    out.mixed_precision = _flag(training, "mixed_precision", False)
    out.spot = str(scheduling.get("strategy", "STANDARD")).upper() == "SPOT"
    out.restart_on_worker_restart = _flag(scheduling, "restart_job_on_worker_restart", False)
    out.checkpoint_every_steps = as_int(checkpoint.get("every_steps", 20)) or 0
    out.checkpoint_every_seconds = as_int(checkpoint.get("every_seconds", 0)) or 0
    out.strict = _flag(_section(job, "validation"), "strict", False)
    trainer = _section(job, "trainer")
    command = container.get("command")
    out.user_trainer = bool(as_str(trainer.get("module"))) or (
        isinstance(command, list) and command not in ([], ["python", "-m", "trainers.task"]))
    return out
