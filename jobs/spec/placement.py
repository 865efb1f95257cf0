"""Where and how a job may run on Vertex: the options of the job file's ``placement`` section, in order.

One option is a region and a scheduling strategy (``STANDARD``, ``SPOT``, ``FLEX_START``). The list is the user's
order of preference: ``vtp plan`` checks each (hardware in the region, quota, bucket distance, price) and takes the
cheapest that fits; after Vertex ends a job for capacity, the training step creates it again with the next option
that is left (same ``base_output_directory``: the trainer resumes from its checkpoint). Without a ``placement``
section the only option is the submission's region and ``scheduling.strategy``.

This module is the spec layer's one reader of the section (the order and the rules); the checks that need the
project (quota, bucket) live with the clients, the choice with ``vtp plan``.
"""
from __future__ import annotations

import abc
import dataclasses

from jobs.spec.hardware.shared import region_problems
from trainers import config as config_lib
from trainers.errors import Problem, problem

STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")


@dataclasses.dataclass(frozen=True)
class Option:
    """One way the job may run. Its fields are what :func:`with_option` applies to the job, and all that THE
    placement procedure (``jobs.spec.ranking``) and the plan carried to the pipeline know of it: a later alternative of
    hardware (a machine type, accelerator and replica counts) is one more field here, enumerated by :func:`options`
    and applied by :func:`with_option`; the ranking and the fall-over stay as they are."""
    region: str
    strategy: str

    def __str__(self) -> str:
        return f"{self.region} {self.strategy}"


def options(cfg: config_lib.JobConfig, region: str = "") -> list[Option]:
    """Every (region, strategy) the job may run as, in order: each region of ``placement.regions`` (else
    ``region``, else ``topology.region``) with each strategy of ``placement.strategies`` (else
    ``scheduling.strategy``), region by region."""
    regions = list(cfg.placement.regions) or [region or cfg.topology.region]
    strategies = list(cfg.placement.strategies) or [cfg.scheduling.strategy]
    seen: list[Option] = []
    for r in regions:
        for s in strategies:
            o = Option(r, s)
            if o not in seen:
                seen.append(o)
    return seen


def region_field(cfg: config_lib.JobConfig, option: Option) -> str:
    """Where ``option``'s region comes from, as a line names it: ``placement.regions[i]`` when the section lists it,
    else ``topology.region`` (a problem of the region under :func:`with_option` is the section's, not the flag's)."""
    regions = list(cfg.placement.regions)
    return f"placement.regions[{regions.index(option.region)}]" if option.region in regions else "topology.region"


def with_option(cfg: config_lib.JobConfig, option: Option) -> config_lib.JobConfig:
    """The job as it runs under ``option``: its region and scheduling strategy replaced (``max_wait_duration``,
    FLEX_START's own field, kept only under FLEX_START)."""
    wait = cfg.scheduling.max_wait_duration if option.strategy == "FLEX_START" else ""
    return dataclasses.replace(
        cfg, topology=dataclasses.replace(cfg.topology, region=option.region),
        scheduling=dataclasses.replace(cfg.scheduling, strategy=option.strategy, max_wait_duration=wait))


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
            p.append(problem(f"placement.strategies[{i}]", f"{s} is listed twice", list(STRATEGIES)))
    for name in ("max_per_hour", "max_total"):
        value = getattr(cfg.budget, name)
        if value < 0:  # NaN and infinity never get here: the schema refuses them (trainers.coerce)
            p.append(problem(f"budget.{name}", f"{value} is not a price in US dollars (a finite number, 0 for "
                                               "no bar)", ["100", "0"]))
    return p


# --------------------------------------------------------------------------------------------------
# What ``vtp plan`` learns about the user's project, one finding a line. The plan (the choice among the options,
# the request, the price) asks a :class:`Project`; ``jobs.cloud.project`` answers through the real client
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
    """The user's project as the plan sees it: an interface (``jobs.cloud.project.CloudProject`` through the real
    APIs, ``jobs.cloud.plan.Unchecked`` without a project, a fake in a test). Each method returns findings; none
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
