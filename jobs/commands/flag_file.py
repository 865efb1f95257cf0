"""A flag against the job file, said (rule 6 of issue 56): wherever a command's flag and the job file both give a
value, one ``warning:`` line names which wins; a flag given empty (``--network ''``) or as ``0`` either means what
its help says or is refused, never silently the default.

* :func:`flag_file_warnings`: ``--region`` over ``topology.region`` (and the job file's ``placement.regions`` over
  ``--region`` for the training job), ``--service-account`` over ``vertex.service_account``, ``--network`` over
  ``vertex.network``, ``--max-cost`` over ``budget.max_total``; submit, ``upload-template`` and ``vtp plan`` say
  them alike.
* :func:`empty_flag_problems`: a flag given as an empty string is refused, naming how to clear the file's value
  instead (``--set vertex.network=``) or to leave the flag out.
* :func:`max_cost_problems`: ``--max-cost`` a finite number of US dollars above 0 (0 would refuse every plan; the
  file's ``budget.max_total: 0`` means "no bar", which a flag never needs to say: leave it out).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from jobfile import config as config_lib
from jobfile.errors import Problem, problem

#: the flags that override a field of the job file: flag -> (the attribute on argparse's namespace, the field)
OVERRIDES = {"--service-account": ("service_account", "vertex.service_account"),
             "--network": ("network", "vertex.network")}


def flag_file_warnings(cfg: config_lib.JobConfig, region: str, service_account: str, network: str,
                       max_cost: float | None = None) -> list[str]:
    """One ``warning:`` line for each flag that overrides a different value of the job file, naming which wins: a
    flag of the submission wins over its field (``--region`` over ``topology.region``, ``--service-account`` over
    ``vertex.service_account``, ``--network`` over ``vertex.network``, ``--max-cost`` over ``budget.max_total``),
    except the job file's ``placement.regions``, which decide where the training job runs over ``--region`` (the
    pipeline job itself runs in ``--region``)."""
    out = []
    if region and region != cfg.topology.region:
        out.append(f"--region: {region} wins over the job file's topology.region ({cfg.topology.region}): the job "
                   f"runs in {region}")
    if region and cfg.placement.regions and list(cfg.placement.regions) != [region]:
        out.append(f"placement.regions: the job file's {', '.join(cfg.placement.regions)} win over --region {region} "
                   f"for the training job (the pipeline job runs in {region})")
    for flag, value, field, current in (("--service-account", service_account, "vertex.service_account",
                                         cfg.vertex.service_account),
                                        ("--network", network, "vertex.network", cfg.vertex.network)):
        if value and current and value != current:
            out.append(f"{flag}: {value} wins over the job file's {field} ({current})")
    if max_cost is not None and cfg.budget.max_total and max_cost != cfg.budget.max_total:
        out.append(f"--max-cost: ${max_cost:,.2f} wins over the job file's budget.max_total "
                   f"(${cfg.budget.max_total:,.2f})")
    return out


def empty_flag_problems(args: Any, flags: Iterable[str] = tuple(OVERRIDES)) -> list[Problem]:
    """A flag of ``flags`` given as an empty (or blank) string: refused, never taken for "not given"."""
    out = []
    for flag in flags:
        attr, field = OVERRIDES.get(flag, (flag[2:].replace("-", "_"), None))
        value = getattr(args, attr, None)
        if isinstance(value, str) and not value.strip():
            instead = (f"leave {flag} out to use the job file's {field}, or clear it with --set {field}="
                       if field else f"leave {flag} out")
            out.append(problem(flag, f"is empty: {instead}"))
    return out


def max_cost_problems(value: float | None, flag: str = "--max-cost") -> list[Problem]:
    """``--max-cost``: None (not given) or a finite number of US dollars above 0."""
    if value is None:
        return []
    if not (math.isfinite(value) and value >= 0):
        return [problem(flag, f"{value:g} is not a price in US dollars", ["100"])]
    if value == 0:
        return [problem(flag, "0 would refuse every plan (the most the job may cost, in US dollars); leave the flag "
                              "out for no bar but the job file's budget.max_total", ["100"])]
    return []
