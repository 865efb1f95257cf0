"""The scheduling section's spec: ``scheduling:``'s rules, run by validation before anything is spent.

``scheduling`` says how the CustomJob is scheduled on Vertex (``Scheduling`` and the job's reservation
affinity): its timeout, restarts, the start-up bound of a replica, the strategy (STANDARD, SPOT, FLEX_START:
Dynamic Workload Scheduler), FLEX_START's maximum wait, a persistent resource, a reservation.
:func:`scheduling_problems` checks the section (``jobs.rules.validate`` calls it, as it calls ``jobs.rules.tuning_section``
and ``jobs.rules.gate_section``); :func:`duration_problems` is the one rule for a duration the API can carry. Pure: no
I/O, no cloud client, no TensorFlow.
"""
from __future__ import annotations

import re

from jobfile import config as config_lib
from jobfile.config_vertex import Scheduling
from jobfile.errors import Problem, problem

#: A duration as the job file and the Vertex API write it: seconds with an ``s``.
TIMEOUT_RE = re.compile(r"^\d+(\.\d+)?s$")
#: GPUs that Dynamic Workload Scheduler (``scheduling.strategy: FLEX_START``) serves for Vertex training
#: ("Schedule training jobs based on resource availability": L4, A100, H100, H200, B200).
FLEX_START_GPUS = ("NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB",
                   "NVIDIA_H200_141GB", "NVIDIA_B200")
FLEX_START_MAX_S = 7 * 24 * 3600
#: A bound on a replica's start-up (``scheduling.startup_timeout_s``): Vertex's default job timeout (7 days). A longer
#: one is no bound at all, and past ~9.2e9 s Python's own waits overflow (``threading.TIMEOUT_MAX``).
STARTUP_TIMEOUT_MAX_S = 7 * 24 * 3600
PERSISTENT_RESOURCE_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
RESERVATION_RE = re.compile(r"^projects/[^/]+/zones/([a-z]+-[a-z]+[0-9]+)-[a-z]/reservations/[a-z]([-a-z0-9]*[a-z0-9])?$")


def scheduling_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The section's rules: the job's timeout and restarts, a replica's start-up bound, then the CustomJob's
    scheduling extras, as Vertex documents them (:func:`_flex_start_problems`, the persistent resource id's
    form, :func:`_reservation_problems`)."""
    s, p = cfg.scheduling, _timeout_problems(cfg.scheduling)
    if s.max_wait_duration:
        if not TIMEOUT_RE.fullmatch(s.max_wait_duration):
            p.append(problem("scheduling.max_wait_duration", f"{s.max_wait_duration!r} is not a duration in seconds "
                                                             "(\"0s\": wait indefinitely)", ["1800s", "0s"]))
        else:
            p += duration_problems("scheduling.max_wait_duration", s.max_wait_duration, ["86400s", "0s"])
        planned = {s.strategy, *cfg.placement.strategies, *(x for h in cfg.placement.hardware for x in h.strategies)}
        if "FLEX_START" not in planned:  # an option under FLEX_START gets it (jobs.rules.placement.with_option)
            p.append(problem("scheduling.max_wait_duration", f"applies to FLEX_START only, and neither "
                                                             f"scheduling.strategy ({s.strategy}) nor any strategy of "
                                                             "placement is FLEX_START: set one or remove it",
                             ["FLEX_START"]))
    if s.strategy == "FLEX_START":
        p += _flex_start_problems(cfg)
    if s.persistent_resource_id and not PERSISTENT_RESOURCE_RE.fullmatch(s.persistent_resource_id):
        p.append(problem("scheduling.persistent_resource_id", f"{s.persistent_resource_id!r} is not a persistent "
                                                              "resource id (1-63 lower-case letters, digits and '-', "
                                                              "starting with a letter)", ["my-training-cluster"]))
    return p + _reservation_problems(cfg)


def _timeout_problems(s: Scheduling) -> list[Problem]:
    p: list[Problem] = []
    if not TIMEOUT_RE.fullmatch(s.timeout):
        p.append(problem("scheduling.timeout", f"{s.timeout!r} is not a duration in seconds", ["3600s", "86400s"]))
    else:
        p += duration_problems("scheduling.timeout", s.timeout, ["86400s"])
    if s.max_restarts < 0:
        p.append(problem("scheduling.max_restarts", f"must be 0 or more, got {s.max_restarts}"))
    startup = s.startup_timeout_s
    if not 0 <= startup <= STARTUP_TIMEOUT_MAX_S:
        p.append(problem("scheduling.startup_timeout_s", f"must be between 0 (no bound) and {STARTUP_TIMEOUT_MAX_S:,} s "
                                                         f"(7 days, Vertex's default job timeout), got {startup:g}",
                         [300, 900]))
    return p


def _flex_start_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """FLEX_START (Dynamic Workload Scheduler): its GPUs, the same machine in every pool, a timeout of at most
    7 days."""
    s, p = cfg.scheduling, []
    used = [(name, pool) for name, pool in zip(("chief", "worker", "parameter_server", "evaluator"),
                                               cfg.topology.pools()) if pool.replica_count > 0]
    for name, pool in used:
        if pool.accelerator_type not in FLEX_START_GPUS or pool.accelerator_count <= 0:
            p.append(problem(f"topology.{name}.accelerator_type", f"FLEX_START (Dynamic Workload Scheduler) runs "
                                                                  "training on L4, A100, H100, H200 or B200 GPUs, "
                                                                  f"not {pool.accelerator_type or 'no GPU'}",
                             FLEX_START_GPUS))
    shapes = {(pool.machine_type, pool.accelerator_type, pool.accelerator_count) for _, pool in used}
    if len(shapes) > 1:
        p.append(problem("scheduling.strategy", "FLEX_START needs the same machine (type, GPU type and count) in "
                                                "every worker pool; the pools differ", ["STANDARD", "SPOT"]))
    if TIMEOUT_RE.fullmatch(s.timeout) and float(s.timeout[:-1]) > FLEX_START_MAX_S:
        p.append(problem("scheduling.timeout", f"{s.timeout} is over FLEX_START's 7 days", [f"{FLEX_START_MAX_S}s"]))
    return p


def _reservation_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The reservation affinity's type, key and values: a specific reservation is named by
    ``compute.googleapis.com/reservation-name`` and its full resource name, in a zone of the job's region."""
    r, p = cfg.scheduling.reservation_affinity, []
    field = "scheduling.reservation_affinity"
    example = [f"projects/PROJECT/zones/{cfg.topology.region}-a/reservations/NAME"]
    if not r.reservation_affinity_type and (r.key or r.values):
        p.append(problem(f"{field}.reservation_affinity_type", "is empty but key/values are set",
                         ["SPECIFIC_RESERVATION"]))
    elif r.reservation_affinity_type in ("ANY_RESERVATION", "NO_RESERVATION") and (r.key or r.values):
        p.append(problem(f"{field}.key", f"key and values name a reservation, which only SPECIFIC_RESERVATION takes, "
                                         f"not {r.reservation_affinity_type}", ["SPECIFIC_RESERVATION"]))
    elif r.reservation_affinity_type == "SPECIFIC_RESERVATION":
        if r.key != RESERVATION_KEY:
            p.append(problem(f"{field}.key", f"{r.key or 'empty'}: a specific reservation is named by its name label",
                             [RESERVATION_KEY]))
        if not r.values:
            p.append(problem(f"{field}.values", "names no reservation", example))
        for value in r.values:
            m = RESERVATION_RE.fullmatch(value)
            if not m:
                p.append(problem(f"{field}.values", f"{value!r} is not a reservation's full resource name", example))
            elif m.group(1) != cfg.topology.region:
                p.append(problem(f"{field}.values", f"{value} is in {m.group(1)}, the job runs in "
                                                    f"{cfg.topology.region}: a reservation serves its own zone only",
                                 example))
    return p


def duration_problems(field: str, text: str, valid: list[str]) -> list[Problem]:
    """A duration the API can carry: ``google.protobuf.Duration`` (the type of ``Scheduling.timeout`` and
    ``max_wait_duration``) holds at most 315,576,000,000 s (10,000 years); the installed protobuf library says
    so itself, and a longer one is refused when the job is created, after the pipeline ran up to it. Vertex
    documents no lower cap of its own (its defaults: 7 days for ``timeout``, 24 hours for ``max_wait_duration``;
    FLEX_START's 7-day timeout is checked with FLEX_START)."""
    from google.protobuf import duration_pb2

    try:
        duration_pb2.Duration().FromJsonString(text)
    except ValueError as exc:
        limit = re.search(r"range \[(-?\d+), (\d+)\]", str(exc))
        most = f"{int(limit.group(2)):,} s" if limit else "the protobuf Duration range"
        return [problem(field, f"{text} is longer than a duration the Vertex API can carry (google.protobuf.Duration: "
                               f"at most {most})", valid)]
    return []
