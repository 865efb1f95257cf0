"""What a job costs on Vertex AI, from the price table (``prices.yaml``: dated, every figure with its source, null
where no figure is known) and the hardware catalog (a machine's vCPUs and memory, a TPU slice's chips).

* :func:`job_price`: one CustomJob's list price per hour under its region and scheduling strategy, pool by pool;
* :func:`cost`: the job as Vertex runs it: a study's ``parallel_trials`` at once plus the baseline beside them per
  hour, and the most it can cost at ``scheduling.timeout`` (every trial's timeout x ``max_trials``, + the
  baseline's);
* :func:`budget_problems`: ``budget.max_per_hour`` / ``budget.max_total`` (``--max-cost``) against that, one
  problem per bar, naming the bar, the figure and what would fit.

Unknown is said, never guessed: a piece without a figure makes the price ``None`` with the piece named; a region
without figures is priced at us-central1's and marked; Spot and FLEX_START without a known discount are priced at
the on-demand figure as the most they can cost, and marked. Pure: no cloud, no TensorFlow, a few milliseconds.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from jobs.spec.hardware.catalog import CLOUD_TPU, load_catalog, topology_chips
from trainers import config as config_lib
from trainers.errors import Problem, problem

PRICES_PATH = Path(__file__).with_name("prices.yaml")
BASE_REGION = "us-central1"
POOLS = ("chief", "worker", "parameter_server", "evaluator")
#: TPU v2/v3 devices (machine ``cloud-tpu``): 8 cores are 4 chips
CORES_PER_LEGACY_CHIP = 2


@functools.lru_cache(maxsize=4)
def load_prices(path: str | None = None) -> Mapping[str, Any]:
    """``prices.yaml`` as loaded (cached)."""
    return yaml.safe_load(Path(path or PRICES_PATH).read_text(encoding="utf-8"))


def source_line(key: str, table: Mapping[str, Any] | None = None) -> str:
    """``what (url, read DATE)`` of a source key of the table."""
    src = (table or load_prices())["sources"].get(key) or {}
    where = ", ".join(x for x in (src.get("url", ""), f"read {src['read']}" if src.get("read") else "") if x)
    return f"{src.get('what', key)}" + (f" ({where})" if where else "")


@dataclasses.dataclass(frozen=True)
class PoolPrice:
    pool: str
    replicas: int
    what: str  # "n1-standard-8 + 2 NVIDIA_TESLA_T4"
    per_replica: float | None  # None: a piece has no figure (``unknown`` names it)
    unknown: tuple[str, ...] = ()

    @property
    def hourly(self) -> float | None:
        return None if self.per_replica is None else self.per_replica * self.replicas


@dataclasses.dataclass(frozen=True)
class JobPrice:
    """One CustomJob's price per hour (the sum of its pools), or None with what is unknown."""
    region: str
    strategy: str
    pools: tuple[PoolPrice, ...]
    marks: tuple[str, ...]  # what the figure assumes (region priced as us-central1, Spot at on-demand)

    @property
    def per_hour(self) -> float | None:
        figures = [p.hourly for p in self.pools]
        return None if any(f is None for f in figures) else sum(figures)

    @property
    def unknown(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u for p in self.pools for u in p.unknown))


def _n(value: Any) -> int:
    try:
        return int(float(value or 0))
    except (TypeError, ValueError):
        return 0


def pool_price(name: str, pool: Mapping[str, Any], factor: float, table: Mapping[str, Any] | None = None) -> PoolPrice:
    """One pool's price per replica-hour at ``factor`` x us-central1's figures."""
    table = table or load_prices()
    cat = load_catalog()
    machine_type = str(pool.get("machine_type") or "")
    accel, count = str(pool.get("accelerator_type") or ""), _n(pool.get("accelerator_count"))
    replicas = _n(pool.get("replica_count", 1 if name == "chief" else 0))
    machine = cat.machines.get(machine_type)
    unknown: list[str] = []
    total = 0.0

    def add(figure: Any, amount: float, what: str) -> None:
        nonlocal total
        if figure is None:
            unknown.append(what)
        else:
            total += float(figure) * amount

    if machine is not None and machine.tpu == "vm":  # a TPU VM slice: Cloud TPU bills per chip, host included
        chips = topology_chips(str(pool.get("tpu_topology") or "")) or machine.chips
        entry = table["tpus"].get(machine.family) or {}
        add(entry.get("chip_hour"), chips, f"TPU {machine.family} (per chip)")
        what = f"{machine_type} {pool.get('tpu_topology') or ''} ({chips} chips)".replace("  ", " ")
    elif machine_type == CLOUD_TPU:  # TPU v2/v3 devices or pods: per chip, 2 cores a chip
        generation = accel.replace("_POD", "")
        entry = table["tpus"].get(generation) or {}
        chips = max(1, count // CORES_PER_LEGACY_CHIP)
        add(entry.get("chip_hour"), chips, f"{generation} (per chip)")
        what = f"cloud-tpu {accel} x {count} cores"
    else:
        family = cat.family_of(machine_type)
        rates = table["families"].get(family) or {}
        if machine is None or machine.vcpus is None or machine.memory_gb is None:
            unknown.append(f"{machine_type} (not in the hardware catalog)")
        else:
            add(rates.get("vcpu"), machine.vcpus, f"{family} vCPUs")
            add(rates.get("gb"), machine.memory_gb, f"{family} memory")
        what = machine_type
        if accel and count > 0:
            gpu = table["gpus"].get(accel) or {}
            add(gpu.get("hour"), count, accel)
            what += f" + {count} {accel}"
    per_replica = None if unknown else total * factor
    return PoolPrice(name, replicas, what, per_replica, tuple(unknown))


def region_factor(region: str, table: Mapping[str, Any] | None = None) -> tuple[float, str]:
    """(factor over us-central1's figures, a mark when the region has no figures of its own)."""
    entry = (table or load_prices())["regions"].get(region)
    if entry and entry.get("factor") is not None:
        return float(entry["factor"]), ""
    return 1.0, f"{BASE_REGION}'s prices: the table has no figures for {region}"


def job_price(cfg: config_lib.JobConfig, region: str = "", strategy: str = "") -> JobPrice:
    """The CustomJob of ``cfg`` per hour in ``region`` (default ``topology.region``) under ``strategy`` (default
    ``scheduling.strategy``)."""
    table = load_prices()
    region = region or cfg.topology.region
    strategy = strategy or cfg.scheduling.strategy
    factor, mark = region_factor(region, table)
    marks = [mark] if mark else []
    discount = (table.get("discounts") or {}).get(strategy) or {}
    if strategy != "STANDARD":
        if discount.get("factor") is None:
            marks.append(f"{strategy} at the on-demand price (the most it can cost: no {strategy} figure known)")
        else:
            factor *= float(discount["factor"])
    topology = cfg.to_dict()["topology"]
    pools = tuple(pool_price(name, topology.get(name) or {}, factor, table) for name in POOLS
                  if _n((topology.get(name) or {}).get("replica_count", 1 if name == "chief" else 0)) > 0)
    return JobPrice(region, strategy, pools, tuple(marks))


TIMEOUT_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)s$")


def timeout_hours(cfg: config_lib.JobConfig) -> float:
    """``scheduling.timeout`` in hours (Vertex's default of 7 days when it is not a duration)."""
    m = TIMEOUT_RE.fullmatch(cfg.scheduling.timeout or "")
    return float(m.group(1)) / 3600 if m else 7 * 24.0


@dataclasses.dataclass(frozen=True)
class Cost:
    """The job as Vertex runs it: ``runs_at_once`` CustomJobs per hour, ``runs`` of them at most over the timeout."""
    job: JobPrice
    hours: float  # one run's timeout
    runs_at_once: int  # 1; a study: parallel trials (+ 1 for the baseline)
    runs: int  # 1; a study: max_trials (+ 1 for the baseline)
    note: str  # how the figures are made (a study's shape)

    @property
    def per_hour(self) -> float | None:
        return None if self.job.per_hour is None else self.job.per_hour * self.runs_at_once

    @property
    def most(self) -> float | None:
        return None if self.job.per_hour is None else self.job.per_hour * self.hours * self.runs


def cost(cfg: config_lib.JobConfig, region: str = "", strategy: str = "") -> Cost:
    """:func:`job_price` scaled to the job as Vertex runs it (a study: its trials, each the job, and the baseline
    CustomJob beside them, which is the same job)."""
    price = job_price(cfg, region, strategy)
    hours = timeout_hours(cfg)
    t = cfg.tuning
    if not t.enabled:
        return Cost(price, hours, 1, 1, f"one CustomJob for at most scheduling.timeout, {hours:g} h")
    trials, parallel = max(1, t.max_trials), max(1, min(t.parallel_trials, max(1, t.max_trials)))
    baseline = 1 if t.baseline else 0
    note = (f"a study: {parallel} trial{'s' if parallel > 1 else ''} at once"
            + (" + the baseline" if baseline else "") + f"; {trials} trials"
            + (" + the baseline" if baseline else "") + f", each for at most scheduling.timeout, {hours:g} h")
    return Cost(price, hours, parallel + baseline, trials + baseline, note)


def money(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def budget_problems(cfg: config_lib.JobConfig, figures: Cost, max_cost: float | None = None) -> list[Problem]:
    """The budget's bars (``budget.max_per_hour``, ``budget.max_total`` or ``--max-cost``; 0: no bar) against the
    cost: one problem per bar crossed, naming the bar, the figure and what would fit."""
    out: list[Problem] = []
    total_bar = max_cost if max_cost is not None else cfg.budget.max_total
    field_total = "--max-cost" if max_cost is not None else "budget.max_total"
    per_hour, most = figures.per_hour, figures.most
    if cfg.budget.max_per_hour and per_hour is not None and per_hour > cfg.budget.max_per_hour:
        fit = [f"budget.max_per_hour={per_hour:.2f}"]
        at_once = int(cfg.budget.max_per_hour // figures.job.per_hour) if figures.job.per_hour else 0
        trials = at_once - (1 if cfg.tuning.enabled and cfg.tuning.baseline else 0)
        if figures.runs_at_once > 1 and trials >= 1:  # a study: fewer trials at once fit under the bar
            fit.insert(0, f"tuning.parallel_trials={trials}")
        out.append(problem("budget.max_per_hour", f"the plan costs {money(per_hour)} an hour "
                                                  f"({figures.note.split(';')[0]}), over the bar of "
                                                  f"{money(cfg.budget.max_per_hour)}", fit))
    if total_bar and most is not None and most > total_bar:
        hours_fit = total_bar / (figures.job.per_hour * figures.runs) if figures.job.per_hour else 0
        fit = [f"scheduling.timeout={max(60, int(hours_fit * 3600))}s", f"{field_total}={most:.2f}"]
        out.append(problem(field_total, f"the plan can cost up to {money(most)} ({figures.note}), over the bar of "
                                        f"{money(total_bar)}", fit))
    return out


def unpriced_bars(cfg: config_lib.JobConfig, figures: Cost, max_cost: float | None = None) -> list[str]:
    """Bars that cannot be checked because a piece of the job has no figure (a warning each; ``--require-checks``
    makes them errors)."""
    if figures.job.per_hour is not None:
        return []
    bars = [b for b, v in (("budget.max_per_hour", cfg.budget.max_per_hour),
                           ("--max-cost" if max_cost is not None else "budget.max_total",
                            max_cost if max_cost is not None else cfg.budget.max_total)) if v]
    return [f"{b}: not checked: the price table has no figure for {', '.join(figures.job.unknown)} "
            f"(prices.yaml, {load_prices()['prices']['date']})" for b in bars]
