"""Where and how a job may run on Vertex: the options of the job file's ``placement`` section, in order.

One option is a region, a scheduling strategy (``STANDARD``, ``SPOT``, ``FLEX_START``) and a rung of the hardware
ladder (``placement.hardware``: rung 0 is ``topology`` as written, rung k its k-th alternative). The list is the
user's order of preference: ``vtp plan`` checks each (hardware in the region, quota, bucket distance, price) and ranks
them (``jobs.rules.ranking``: a rung before the next, the cheapest first within a rung); after Vertex ends a job for
capacity, the training step creates it again with the next option that is left (same ``base_output_directory``: the
trainer resumes from its checkpoint). Without a ``placement`` section the only option is the submission's region and
``scheduling.strategy`` on ``topology``.

This module is the spec layer's one reader of the section (the order, a rung applied to the job, the section's form);
the ladder's rules are ``jobs.rules.ladder``, the checks that need the project (quota, bucket) live with the clients,
the choice with ``vtp plan``.
"""
from __future__ import annotations

import abc
import dataclasses

from jobs.rules.hardware.rules import num_replicas
from jobs.rules.hardware.shared import region_problems
from jobfile import config as config_lib
from jobfile.errors import ConfigError, Problem, problem

SCHEDULING_STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")
#: the pools a rung may change, in Vertex's order
POOLS = ("chief", "worker", "parameter_server", "evaluator")


@dataclasses.dataclass(frozen=True)
class Option:
    """One way the job may run. Its fields are what :func:`with_option` applies to the job, and all that THE
    placement procedure (``jobs.rules.ranking``) and the plan carried to the pipeline know of it: the region, the
    scheduling strategy, the rung of the hardware ladder (0: ``topology``; k: ``placement.hardware[k-1]``) and how the
    rung is named (empty without a ladder)."""
    region: str
    strategy: str
    rung: int = 0
    hardware: str = ""

    def __str__(self) -> str:
        return f"{self.region} {self.strategy}" + (f" on {self.hardware}" if self.hardware else "")


def options(cfg: config_lib.JobConfig, region: str = "") -> list[Option]:
    """Every option of the job, in the user's order: rung by rung (``topology``, then each of
    ``placement.hardware``), each region of ``placement.regions`` (else ``region``, else ``topology.region``) with
    each strategy of the rung (its own ``strategies``, else ``placement.strategies``, else ``scheduling.strategy``),
    region by region."""
    regions = list(cfg.placement.regions) or [region or cfg.topology.region]
    strategies = list(cfg.placement.strategies) or [cfg.scheduling.strategy]
    ladder = cfg.placement.hardware
    rungs = [(0, strategies)] + [(k, list(h.strategies) or strategies) for k, h in enumerate(ladder, 1)]
    seen: list[Option] = []
    for rung, theirs in rungs:
        name = rung_name(cfg, rung) if ladder else ""
        for r in regions:
            for s in theirs:
                o = Option(r, s, rung, name)
                if o not in seen:
                    seen.append(o)
    return seen


def region_field(cfg: config_lib.JobConfig, option: Option) -> str:
    """Where ``option``'s region comes from, as a line names it: ``placement.regions[i]`` when the section lists it,
    else ``topology.region`` (a problem of the region under :func:`with_option` is the section's, not the flag's)."""
    regions = list(cfg.placement.regions)
    return f"placement.regions[{regions.index(option.region)}]" if option.region in regions else "topology.region"


def with_option(cfg: config_lib.JobConfig, option: Option) -> config_lib.JobConfig:
    """The job as it runs under ``option``: on its rung (:func:`on_rung`), its region and scheduling strategy replaced
    (``max_wait_duration``, FLEX_START's own field, kept only under FLEX_START)."""
    job = on_rung(cfg, option.rung)
    wait = job.scheduling.max_wait_duration if option.strategy == "FLEX_START" else ""
    return dataclasses.replace(
        job, topology=dataclasses.replace(job.topology, region=option.region),
        scheduling=dataclasses.replace(job.scheduling, strategy=option.strategy, max_wait_duration=wait))


def submitted(cfg: config_lib.JobConfig, option: Option) -> config_lib.JobConfig:
    """The job as a submission carries it to the pipeline when the plan picked ``option``: under ``option`` on the
    topology's rung, FLEX_START's wait kept for an option the training step may fall over to; as written on a later
    rung (its rungs are changes of the written topology, and the pipeline's training step applies the rung's hardware
    from the plan's judgement, ``jobs.rules.ranking``)."""
    if option.rung:
        return cfg
    job = with_option(cfg, option)
    return dataclasses.replace(job, scheduling=dataclasses.replace(
        job.scheduling, max_wait_duration=cfg.scheduling.max_wait_duration))


# --------------------------------------------------------------------------------------------------
# The hardware ladder: a rung applied to the job


def global_batch(cfg: config_lib.JobConfig) -> int:
    """The job's global batch on ``topology``: ``training.global_batch_size``, else the per-replica batch x the
    replicas in sync (``jobs.rules.hardware.rules.num_replicas``, the catalog's count). Every rung keeps it."""
    t = cfg.training
    return t.global_batch_size or t.per_replica_batch_size * num_replicas(cfg.to_dict())


def rung_topology(cfg: config_lib.JobConfig, rung: int) -> config_lib.Topology:
    """``topology`` on ``rung``: each pool the rung names with the fields it gives replaced, its ``strategy`` if
    given; ``topology`` itself on rung 0."""
    if not rung:
        return cfg.topology
    ladder = cfg.placement.hardware
    if not 0 < rung <= len(ladder):
        raise ConfigError([problem("placement.hardware", f"has {len(ladder)} alternative(s): there is no rung {rung} "
                                                         "(a plan made for another job file)",
                                   [f"rungs 0 (topology) to {len(ladder)}"])])
    h = ladder[rung - 1]
    pools = {}
    for name in POOLS:
        change = getattr(h, name)
        if change is None:
            continue
        given = {f.name: getattr(change, f.name) for f in dataclasses.fields(change)
                 if getattr(change, f.name) is not None}
        pools[name] = dataclasses.replace(getattr(cfg.topology, name), **given)
    return dataclasses.replace(cfg.topology, strategy=h.strategy or cfg.topology.strategy, **pools)


def on_rung(cfg: config_lib.JobConfig, rung: int) -> config_lib.JobConfig:
    """The job on rung ``rung`` of its ladder: ``topology`` changed (:func:`rung_topology`), the global batch kept
    (``training.global_batch_size`` set to the topology's, :func:`global_batch`: the trainer then divides it by the
    rung's replicas and resumes the same training), the rung's scheduling strategies as ``placement.strategies``, and
    no ladder of its own (its rungs are changes of the written topology, not of this one). Rung 0: the job itself."""
    if not rung:
        return cfg
    h = cfg.placement.hardware[rung - 1] if 0 < rung <= len(cfg.placement.hardware) else None
    topology = rung_topology(cfg, rung)
    strategies = list(h.strategies) if h and h.strategies else list(cfg.placement.strategies)
    return dataclasses.replace(
        cfg, topology=topology, training=dataclasses.replace(cfg.training, global_batch_size=global_batch(cfg)),
        placement=dataclasses.replace(cfg.placement, strategies=strategies, hardware=[]))


def hardware_label(topology: config_lib.Topology) -> str:
    """A topology's training hardware in a few words: ``8x NVIDIA_H100_80GB (a3-highgpu-8g)``, ``16x
    NVIDIA_TESLA_A100 (2x a2-highgpu-8g)``, ``ct5lp-hightpu-4t 2x2``, ``2x n1-standard-4``."""
    groups: dict[tuple, int] = {}
    for name in ("chief", "worker"):
        pool = getattr(topology, name)
        if pool.replica_count > 0:
            key = (pool.machine_type, pool.accelerator_type if pool.accelerator_count > 0 else "",
                   pool.accelerator_count, pool.tpu_topology)
            groups[key] = groups.get(key, 0) + pool.replica_count
    parts = []
    for (machine, accel, count, tpu), n in groups.items():
        machines = f"{n}x {machine}" if n > 1 else machine
        if tpu:
            parts.append(f"{machines} {tpu}")
        elif accel:
            parts.append(f"{n * count}x {accel} ({machines})")
        else:
            parts.append(f"{n}x {machine}")
    return " + ".join(parts) or "no machine"


def rung_name(cfg: config_lib.JobConfig, rung: int) -> str:
    """How the plan and the fall-over name ``rung``: its ``name``, else its hardware (:func:`hardware_label`)."""
    h = cfg.placement.hardware[rung - 1] if 0 < rung <= len(cfg.placement.hardware) else None
    return (h.name if h is not None and h.name else "") or hardware_label(rung_topology(cfg, rung))


def placement_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The section's form: regions named as Vertex names them, no repeats, known strategies; the budget's bars
    finite and not negative."""
    p: list[Problem] = []
    regions = cfg.placement.regions
    for i, r in enumerate(regions):
        named = region_problems(f"placement.regions[{i}]", r)
        if named:
            p += named
        elif r in regions[:i]:
            p.append(problem(f"placement.regions[{i}]", f"{r} is listed twice", [x for x in dict.fromkeys(regions)]))
    strategies = cfg.placement.strategies
    for i, s in enumerate(strategies):
        if s in strategies[:i]:
            p.append(problem(f"placement.strategies[{i}]", f"{s} is listed twice", list(SCHEDULING_STRATEGIES)))
    for name in ("max_per_hour", "max_total"):
        value = getattr(cfg.budget, name)
        if value < 0:  # NaN and infinity never get here: the schema refuses them (jobfile.coerce)
            p.append(problem(f"budget.{name}", f"{value} is not a price in US dollars (a finite number, 0 for "
                                               "no bar)", ["100", "0"]))
    return p


# --------------------------------------------------------------------------------------------------
# What ``vtp plan`` learns about the user's project, one finding a line. The plan (the choice among the options,
# the request, the price) asks a :class:`Project`; ``jobs.cloud.apis.project`` answers through the real client
# libraries (Cloud Quotas, Service Usage, Cloud Storage, Artifact Registry, IAM, Compute); a test answers with a
# fake. Every finding is one line; ``ok`` None means it could not be checked (no credentials, no permission: the
# line names what is missing), which ``--require-checks`` turns into an error.


@dataclasses.dataclass(frozen=True)
class Finding:
    #: what was checked, short: ``quota custom_model_training_nvidia_h100_gpus in us-central1``
    what: str
    #: True: fine; False: a problem (``severity`` says how bad); None: not checked (``line`` says why)
    ok: bool | None
    #: the one line to print (without an ``error:``/``warning:`` prefix)
    line: str
    #: the command that mends it (a ``gcloud`` line), or ""
    fix: str = ""
    severity: str = "error"  # error | warning


class Project(abc.ABC):
    """The user's project as the plan sees it: an interface (``jobs.cloud.apis.project.CloudProject`` through the real
    APIs, ``jobs.cloud.planning.Unchecked`` without a project, a fake in a test). Each method returns findings; none
    raises for a cloud failure (a 403, a 5xx, a dropped connection or silence is an ``ok=None`` finding naming the
    cause)."""

    @abc.abstractmethod
    def quota(self, cfg: config_lib.JobConfig, option: Option) -> list[Finding]:
        """The job's needs under ``option`` (its region; SPOT draws on the preemptible quotas) against the
        project's Vertex AI training quotas there: one finding per quota the job needs."""

    @abc.abstractmethod
    def bucket_location(self, uri: str) -> tuple[str | None, list[Finding]]:
        """The Cloud Storage location of ``uri``'s bucket (``US-CENTRAL1``, ``US``, ``EU``...), or None with
        the finding that says why it is not known (the bucket is missing, no permission...)."""

    def image_digest(self, image: str) -> tuple[str | None, str]:
        """(the digest ``image``'s tag points at in its registry now, or None; why it is not known): what a saved
        plan records and ``vtp apply`` compares. Default: not known."""
        return None, "this project cannot read registries"

    @abc.abstractmethod
    def setup(self, cfg: config_lib.JobConfig, option: Option) -> list[Finding]:
        """The rest of the project's side for the chosen option: the APIs the job uses are enabled, the images
        exist by digest, the service account exists and the caller may act as it, the network / reservation /
        persistent resource named exist."""
