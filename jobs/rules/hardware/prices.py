"""What a job costs on Vertex AI, from the price table (``prices.yaml``: dated, every figure with its source, null
where no figure is known), laid under the user's own price file when there is one (:func:`price_table`), and the
hardware catalog (a machine's vCPUs and memory, a TPU slice's chips).

* :func:`price_table`: the table, with a user's price file (``budget.prices`` / ``--prices``, the same form) over it:
  every figure of theirs wins and is marked as theirs, so the plan says which figures are the user's;
* :func:`job_price`: one CustomJob's list price per hour under its region and scheduling strategy, pool by pool;
* :func:`cost`: the job as Vertex runs it: a study's ``parallel_trials`` at once plus the baseline beside them per
  hour, and the most it can cost at ``scheduling.timeout`` (every trial's timeout x ``max_trials``, + the
  baseline's).

The budget's bars against these figures, and what a plan does with an unknown price under a bar (it refuses), are
THE placement procedure's (``jobs.rules.ranking``). Unknown is said, never guessed: a piece without a figure makes
the price ``None`` with the piece named, and the key a price file gives it by (``families.a3.vcpu``); a region
without figures is priced at us-central1's and marked; Spot and FLEX_START without a known discount are priced at
the on-demand figure as the most they can cost, and marked. Pure: no cloud, no TensorFlow, a few milliseconds.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import math
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from jobs.rules.hardware.catalog import CLOUD_TPU, load_catalog, topology_chips
from jobfile import config as config_lib
from jobfile.errors import ConfigError, Problem, problem

PRICES_PATH = Path(__file__).with_name("prices.yaml")
BASE_REGION = "us-central1"
POOLS = ("chief", "worker", "parameter_server", "evaluator")
#: TPU v2/v3 devices (machine ``cloud-tpu``): 8 cores are 4 chips
CORES_PER_LEGACY_CHIP = 2
#: the sections of a price file and the figures each entry may give (the table's own form)
SECTIONS = {"families": ("vcpu", "gb"), "gpus": ("hour",), "tpus": ("chip_hour",), "regions": ("factor",),
            "discounts": ("factor",)}
#: the source key of a user's figures
YOURS = "yours"


@functools.lru_cache(maxsize=4)
def load_prices(path: str | None = None) -> Mapping[str, Any]:
    """``prices.yaml`` as loaded (cached)."""
    return yaml.safe_load(Path(path or PRICES_PATH).read_text(encoding="utf-8"))


def table_version(table: Mapping[str, Any] | None = None) -> str:
    """What a saved plan records of the table: its date and the SHA-256 of the figures (the user's included)."""
    table = table or load_prices()
    body = yaml.safe_dump({k: table.get(k) for k in SECTIONS}, sort_keys=True).encode()
    return f"{table['prices']['date']} sha256:{hashlib.sha256(body).hexdigest()[:16]}"


def _figure_problems(field: str, value: Any, positive: bool) -> list[Problem]:
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
            or (positive and value == 0):
        return [problem(field, f"{value!r} is not a price in US dollars an hour (a finite number"
                               f"{' above 0' if positive else ', 0 or more'}, or null for unknown)", ["9.79655057"])]
    return []


def price_file_problems(doc: Any, field: str = "budget.prices") -> list[Problem]:
    """A user's price file against the table's form: the sections of :data:`SECTIONS` (``prices``/``sources``
    allowed and ignored), each entry a name the table knows with its figures as finite numbers (or null); one
    problem per mistake, naming the key."""
    table = load_prices()
    if not isinstance(doc, dict):
        return [problem(field, "is not a mapping of the price table's sections "
                               f"({', '.join(SECTIONS)})", ["gpus: {NVIDIA_H100_80GB: {hour: 9.79655057}}"])]
    out: list[Problem] = []
    for section, entries in doc.items():
        if section in ("prices", "sources"):
            continue
        if section not in SECTIONS:
            out.append(problem(f"{field}: {section}", "is not a section of the price table", list(SECTIONS)))
            continue
        if not isinstance(entries, dict):
            out.append(problem(f"{field}: {section}", "is not a mapping of names to figures",
                               [f"{section}: {{{next(iter(table[section]))}: {{{SECTIONS[section][0]}: 1.0}}}}"]))
            continue
        for name, entry in entries.items():
            key = f"{field}: {section}.{name}"
            if str(name) not in table[section]:
                out.append(problem(key, "is not a name the price table knows", sorted(map(str, table[section]))[:12]))
                continue
            if not isinstance(entry, dict):
                out.append(problem(key, "is not a mapping of figures", [f"{{{SECTIONS[section][0]}: 1.0}}"]))
                continue
            for k, v in entry.items():
                if k in ("source", "note"):
                    continue
                if k not in SECTIONS[section]:
                    out.append(problem(f"{key}.{k}", "is not a figure of this section", list(SECTIONS[section])))
                else:
                    out += _figure_problems(f"{key}.{k}", v, positive=section in ("regions", "discounts"))
    return out


def read_price_file(path: str, field: str = "budget.prices") -> dict[str, Any]:
    """A user's price file, checked (:func:`price_file_problems`); a ConfigError naming ``field`` when it cannot
    be read or is not in the table's form."""
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([problem(field, f"cannot read {path}: {exc.strerror or exc}",
                                   ["a YAML file in the form of jobs/rules/hardware/prices.yaml"])]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([problem(field, f"{path} is not YAML: {' '.join(str(exc).split())[:160]}",
                                   ["gpus: {NVIDIA_H100_80GB: {hour: 9.79655057}}"])]) from None
    problems = price_file_problems(doc, field)
    if problems:
        raise ConfigError(problems)
    return doc


def price_table(user_file: str = "", field: str = "budget.prices") -> Mapping[str, Any]:
    """The price table with ``user_file``'s figures over it: each of theirs (a number, or null to say "unknown" for
    one the table has) replaces the table's and is marked ``source: yours``; ``sources.yours`` names the file. No
    file: the table as it is."""
    table = load_prices()
    if not user_file:
        return table
    theirs = read_price_file(user_file, field)
    out = copy.deepcopy(dict(table))
    for section in SECTIONS:
        for name, entry in (theirs.get(section) or {}).items():
            figures = {k: v for k, v in entry.items() if k in SECTIONS[section]}
            out[section][str(name)] = {**(out[section].get(str(name)) or {}), **figures, "source": YOURS,
                                       "note": entry.get("note") or ""}
    out["sources"] = {**out["sources"], YOURS: {"what": "your price file", "url": str(user_file),
                                                "read": "as given"}}
    return out


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
    #: the price file's keys of the unknown pieces (``families.a3.vcpu``); a machine the catalog lacks has none
    missing: tuple[str, ...] = ()
    #: the pieces priced by the user's price file
    theirs: tuple[str, ...] = ()

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
    theirs_extra: tuple[str, ...] = ()  # the user's figures beside the pools' (a region factor, a discount)

    @property
    def per_hour(self) -> float | None:
        figures = [p.hourly for p in self.pools]
        return None if any(f is None for f in figures) else sum(figures)

    @property
    def unknown(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(u for p in self.pools for u in p.unknown))

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for p in self.pools for k in p.missing))

    @property
    def theirs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*(t for p in self.pools for t in p.theirs), *self.theirs_extra]))

    @property
    def what(self) -> str:
        """``chief a3-highgpu-8g + 8 NVIDIA_H100_80GB, 1 worker a3-highgpu-8g + 8 NVIDIA_H100_80GB``"""
        return ", ".join(f"{p.pool if p.replicas == 1 else f'{p.replicas} x {p.pool}'} {p.what}" for p in self.pools)


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
    missing: list[str] = []
    theirs: list[str] = []
    total = 0.0

    def add(section: str, key: str, figure: str, amount: float, what: str) -> None:
        nonlocal total
        entry = table[section].get(key) or {}
        if entry.get(figure) is None:
            unknown.append(what)
            missing.append(f"{section}.{key}.{figure}")
        else:
            total += float(entry[figure]) * amount
            if entry.get("source") == YOURS:
                theirs.append(what)

    if machine is not None and machine.tpu == "vm":  # a TPU VM slice: Cloud TPU bills per chip, host included
        chips = topology_chips(str(pool.get("tpu_topology") or "")) or machine.chips
        add("tpus", machine.family, "chip_hour", chips, f"TPU {machine.family} (per chip)")
        what = f"{machine_type} {pool.get('tpu_topology') or ''} ({chips} chips)".replace("  ", " ")
    elif machine_type == CLOUD_TPU:  # TPU v2/v3 devices or pods: per chip, 2 cores a chip
        generation = accel.replace("_POD", "")
        chips = max(1, count // CORES_PER_LEGACY_CHIP)
        add("tpus", generation, "chip_hour", chips, f"{generation} (per chip)")
        what = f"cloud-tpu {accel} x {count} cores"
    else:
        family = cat.family_of(machine_type)
        if machine is None or machine.vcpus is None or machine.memory_gb is None:
            unknown.append(f"{machine_type} (not in the hardware catalog)")
        else:
            add("families", family, "vcpu", machine.vcpus, f"{family} vCPUs")
            add("families", family, "gb", machine.memory_gb, f"{family} memory")
        what = machine_type
        if accel and count > 0:
            add("gpus", accel, "hour", count, accel)
            what += f" + {count} {accel}"
    per_replica = None if unknown else total * factor
    return PoolPrice(name, replicas, what, per_replica, tuple(unknown), tuple(missing), tuple(theirs))


def region_factor(region: str, table: Mapping[str, Any] | None = None) -> tuple[float, str]:
    """(factor over us-central1's figures, a mark when the region has no figures of its own)."""
    entry = (table or load_prices())["regions"].get(region)
    if entry and entry.get("factor") is not None:
        return float(entry["factor"]), ""
    return 1.0, f"{BASE_REGION}'s prices: the table has no figures for {region}"


def job_price(cfg: config_lib.JobConfig, region: str = "", strategy: str = "",
              table: Mapping[str, Any] | None = None) -> JobPrice:
    """The CustomJob of ``cfg`` per hour in ``region`` (default ``topology.region``) under ``strategy`` (default
    ``scheduling.strategy``), at ``table``'s figures (default: the built-in table; :func:`price_table` lays a
    user's file over it)."""
    table = table or load_prices()
    region = region or cfg.topology.region
    strategy = strategy or cfg.scheduling.strategy
    factor, mark = region_factor(region, table)
    marks = [mark] if mark else []
    extra = [f"{region}'s factor"] if (table["regions"].get(region) or {}).get("source") == YOURS else []
    discount = (table.get("discounts") or {}).get(strategy) or {}
    if strategy != "STANDARD":
        if discount.get("factor") is None:
            marks.append(f"{strategy} at the on-demand price (the most it can cost: no {strategy} figure known)")
        else:
            factor *= float(discount["factor"])
            if discount.get("source") == YOURS:
                extra.append(f"the {strategy} discount")
    topology = cfg.to_dict()["topology"]
    pools = tuple(pool_price(name, topology.get(name) or {}, factor, table) for name in POOLS
                  if _n((topology.get(name) or {}).get("replica_count", 1 if name == "chief" else 0)) > 0)
    return JobPrice(region, strategy, pools, tuple(marks), tuple(extra))


def strategy_priced(strategy: str, table: Mapping[str, Any] | None = None) -> bool:
    """Whether ``strategy`` has a figure of its own (a discount) rather than the on-demand price."""
    return strategy == "STANDARD" or ((table or load_prices()).get("discounts") or {}).get(strategy, {}).get(
        "factor") is not None


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


def cost(cfg: config_lib.JobConfig, region: str = "", strategy: str = "",
         table: Mapping[str, Any] | None = None) -> Cost:
    """:func:`job_price` scaled to the job as Vertex runs it (a study: its trials, each the job, and the baseline
    CustomJob beside them, which is the same job): a study's budget counts every trial and the baseline."""
    price = job_price(cfg, region, strategy, table)
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
    if value is None:
        return "unknown"
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"
