"""The hardware ladder's rules (``placement.hardware``): what makes a rung a way to run THIS job.

A rung is a change of ``topology`` (``jobs.rules.placement.rung_topology``: machine type, accelerator type and count,
replica counts, TPU type and topology, a pool's boot disk, the strategy) that the training step may create the job on
after a stockout or an expired FLEX_START wait, resuming from the same checkpoints in the same output folder. So a
rung must keep what the checkpoint and the training depend on:

* the same model and checkpoint: a rung changes hardware only (the model, the optimizer and the data are not its
  fields), and its strategy is of the topology's family (:data:`FAMILIES`): the all-reduce strategies (``one_device``,
  ``mirrored``, ``multi_worker``) save the same variables whatever the replica count; a parameter-server or TPU
  checkpoint is another layout;
* the same global batch (``jobs.rules.placement.global_batch``): the built-in trainer takes the rung's per-replica
  batch as the global batch / the rung's replicas in sync, so those must divide it (a user's trainer decides its own
  batch: one warning says what it must keep);
* the same image: the job has one (``container.image_uri``, or the variant ``vtp build`` makes for its pools), so
  every rung needs the same kind of device (none, GPU, TPU);
* something to run: a rung that changes nothing is refused, and so is one that no option can run (the hardware
  catalog and Vertex's rules refuse it in every region and strategy it lists, FLEX_START's GPUs and its one machine
  configuration in every pool included). A rung refused in some options only is the plan's to skip
  (``jobs.rules.ranking.judge_options``).

Each broken rule is one problem naming ``placement.hardware[i]``, its reason and a valid alternative. ``judge`` is
the job's own validation (``jobs.rules.validate.validate``), handed in: that module calls this one.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

from jobs.rules import placement
from jobs.rules.hardware.rules import Report, num_replicas
from jobs.rules.job_image import variant_for
from jobfile import config as config_lib
from jobfile.errors import Problem, problem

#: strategies whose checkpoints restore into one another, by family
FAMILIES = {"one_device": "all-reduce", "mirrored": "all-reduce", "multi_worker": "all-reduce",
            "parameter_server": "parameter-server", "tpu": "TPU"}

#: the field of the catalog's own batch rule (``jobs.rules.hardware.rules.check_batch``)
BATCH_FIELD = "training.global_batch_size"

#: ``job -> Report``: the job's own validation (``jobs.rules.validate.validate`` without the data)
Judge = Callable[[config_lib.JobConfig], Report]


def field(rung: int) -> str:
    """The job file's name of rung ``rung`` (1: ``placement.hardware[0]``)."""
    return f"placement.hardware[{rung - 1}]"


def renamed(p: Problem, rung: int) -> Problem:
    """``p`` of the job on ``rung`` as the job file names it: ``topology.chief.x`` is ``placement.hardware[i].chief.x``
    there, ``topology.strategy`` its ``strategy`` (rung 0, and every other field: as it is)."""
    head, _, rest = p.field.partition(".")
    if rung and head == "topology" and rest.split(".")[0] in (*placement.POOLS, "strategy"):
        return dataclasses.replace(p, field=f"{field(rung)}.{rest}")
    return p


def ladder_problems(cfg: config_lib.JobConfig, judge: Judge) -> list[Problem]:
    """Every rung's problems (module docstring), each rung's first only: the rest would follow from it."""
    out: list[Problem] = []
    seen: list[tuple[config_lib.Topology, tuple[str, ...]]] = [
        (cfg.topology, tuple(cfg.placement.strategies) or (cfg.scheduling.strategy,))]
    for k, h in enumerate(cfg.placement.hardware, 1):
        found = _rung_problems(cfg, k, h, seen, judge)
        out += found[:1]
        seen.append((placement.rung_topology(cfg, k), tuple(h.strategies) or seen[0][1]))
    return out


def ladder_warnings(cfg: config_lib.JobConfig) -> list[Problem]:
    """A user's trainer with a ladder: it decides its own batch, so nothing here can check that it keeps it."""
    if not cfg.placement.hardware or not cfg.user_trainer:
        return []
    return [problem("placement.hardware", "your trainer decides its own batch: keep its global batch the same on "
                                          "every rung (per-replica batch = global batch / "
                                          "strategy.num_replicas_in_sync), or a run resumed on another rung trains "
                                          "on with another batch")]


def _rung_problems(cfg: config_lib.JobConfig, k: int, h: config_lib.Hardware, seen: list, judge: Judge
                   ) -> list[Problem]:
    at = field(k)
    names = [x.name for x in cfg.placement.hardware[:k - 1] if x.name]
    if h.name and h.name in names:
        return [problem(f"{at}.name", f"{h.name!r} names an earlier rung too", [f"{h.name}-{k}"])]
    for i, s in enumerate(h.strategies):
        if s in h.strategies[:i]:
            return [problem(f"{at}.strategies[{i}]", f"{s} is listed twice", list(dict.fromkeys(h.strategies)))]
    base = cfg.topology.strategy
    family = FAMILIES.get(base)
    mine = h.strategy or base
    same = [s for s, f in FAMILIES.items() if f == family]
    if h.strategy and h.strategy not in FAMILIES:
        return [problem(f"{at}.strategy", f"{h.strategy!r} is not a strategy", same or list(FAMILIES))]
    if FAMILIES.get(mine) != family:
        return [problem(f"{at}.strategy", f"{mine} is not of the topology's family ({base}: {family}): a rung resumes "
                                          f"the topology's checkpoints, and a {FAMILIES.get(mine)} checkpoint is "
                                          "another layout", same)]
    topology = placement.rung_topology(cfg, k)
    strategies = tuple(h.strategies) or seen[0][1]
    if (topology, strategies) == seen[0]:
        return [problem(at, "changes nothing: the same hardware and scheduling strategies as topology",
                        ["a pool's machine_type, accelerator_type, accelerator_count, replica_count or tpu_topology",
                         "strategies: [FLEX_START]", "remove it"])]
    for j, earlier in enumerate(seen[1:], 1):
        if (topology, strategies) == earlier:
            return [problem(at, f"is the same hardware and strategies as {field(j)}", ["remove it"])]
    job = placement.on_rung(cfg, k)
    if variant_for(job) != variant_for(cfg):
        return [problem(at, f"runs on {_kind(variant_for(job))}, topology on {_kind(variant_for(cfg))}: the job has "
                            "one image (container.image_uri, or the variant vtp build makes for its pools)",
                        [f"a rung with {_kind(variant_for(cfg))} like topology's", "another job file"])]
    runnable = _runnable_problems(cfg, k, judge)
    if runnable:
        return runnable
    wrong = None if cfg.user_trainer else _batch_problem(cfg, k, job)
    return [wrong] if wrong else []


def _kind(variant: str) -> str:
    return {"cpu": "no accelerator", "gpu": "GPUs", "tpu": "TPUs"}[variant]


def _batch_problem(cfg: config_lib.JobConfig, k: int, job: config_lib.JobConfig) -> Problem | None:
    """The rung's replicas in sync must divide the topology's global batch."""
    g, n = placement.global_batch(cfg), num_replicas(job.to_dict())
    if g % n == 0:
        return None
    how = ("training.global_batch_size" if cfg.training.global_batch_size else
           f"training.per_replica_batch_size {cfg.training.per_replica_batch_size} x topology's "
           f"{num_replicas(cfg.to_dict())} replicas")
    every = [num_replicas(placement.on_rung(cfg, r).to_dict()) for r in range(len(cfg.placement.hardware) + 1)]
    step = math.lcm(*every)
    fits = -(-g // step) * step
    near = [d for d in range(1, g + 1) if g % d == 0]
    closest = sorted(near, key=lambda d: (abs(d - n), d))[:2]
    return problem(field(k), f"its {n} replicas in sync do not divide the global batch of {g} ({how}): a rung keeps "
                             "the global batch, so that the trainer resumes the same training with the same steps",
                   [f"training.global_batch_size={fits} (every rung's replicas divide it)",
                    *(f"a rung of {d} replicas in sync" for d in sorted(closest))])


def _runnable_problems(cfg: config_lib.JobConfig, k: int, judge: Judge) -> list[Problem]:
    """The rung's first problem under its first option when no option of it passes the job's own validation (the
    global batch left to :func:`_batch_problem`, which says it for a ladder)."""
    first: list[Problem] = []
    for option in placement.options(cfg):
        if option.rung != k:
            continue
        errors = [e for e in judge(placement.with_option(cfg, option)).errors if e.field != BATCH_FIELD]
        if not errors:
            return []
        if not first:
            p = renamed(errors[0], k)
            first = [dataclasses.replace(p, message=f"no option can run it ({option}): {p.message}")]
    return first
