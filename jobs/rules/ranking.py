"""THE placement procedure: one function (:func:`rank`) orders the options of a job that fit, given what each option
was judged to be (the hardware catalog there, the project's quota there: :class:`Judged`), its price, the budget
(:class:`Bars`) and the options that already failed (``blocked``). SkyPilot's optimizer and failover are the model: a
failure adds the option to the blocked set and the same function is asked again, so ``vtp plan``'s pick on the user's
machine and the training step's fall-over after a stockout on Vertex are one decision, made twice with what is known
each time, never two orderings.

* ``vtp plan`` (``jobs.cloud.planning``) judges every option with the project (:func:`judge_options` with its quota
  check), ranks them and shows the ranking; the pick is the first that fits.
* The pipeline receives that judgement (:func:`to_doc`: each option with its price and the plan's verdict, and the
  bars) as its ``placement_plan`` parameter; the training step (``jobs.cloud.vertex_jobs.custom_job``) ranks it again, with every
  option that failed blocked and what is left of ``scheduling.timeout``: it never creates a job in an option the
  plan refused (the catalog, the quota) and re-checks the budget with that option's own price; with none left it
  stops with one line and creates nothing.
* Without a plan (``--compile-only``, a KFP user's pipeline), the same judgement is made offline (the catalog, the
  prices, the budget; the quota not checked) by :func:`judge_options` without a quota check.

A budget never fails open: under a bar (``budget.max_per_hour``, ``budget.max_total``, ``--max-cost``) an option whose
price cannot be computed does not fit, and the line names the missing figures and the price file that supplies
them. :func:`remedies` offers only what would fit: a shorter ``scheduling.timeout``, fewer replicas or trials at once,
another region or strategy whose known price is under the bar (never a strategy priced like the current one), a
price file, the bar itself.

An option is ``jobs.rules.placement.Option``: a region, a strategy and a rung of the hardware ladder
(``placement.hardware``, which ``jobs.rules.placement.with_option`` applies): :func:`judge_options` judges every rung
in every region and strategy as it judges one, and :func:`rank` orders them.

**Preference and price.** The ladder is the user's order of preference, and the price decides within a rung: every
option of a rung that fits comes before any option of a later rung, and within a rung the cheapest comes first (the
user's order breaks ties). Why not the price across rungs: the price an hour of different hardware does not compare
(sixteen A100 for an hour are not an hour of eight H100: the same training takes another time), and a ladder says
"this hardware, else that one". The budget still bars every option at its own price, on every rung.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, Sequence

from jobs.rules import ladder, placement, validate
from jobs.rules.hardware import prices
from jobs.rules.hardware.rules import num_replicas
from jobs.rules.placement import Finding, Option
from jobfile import config as config_lib

#: the price file's form, as lines name it
PRICE_FILE_FORM = "the form of jobs/rules/hardware/prices.yaml"


@dataclasses.dataclass(frozen=True)
class Priced:
    """One option's price as the budget reads it: one CustomJob per hour (None: unknown, ``unknown`` names the
    pieces and ``missing`` the price file's keys for them), how many run at once and in all (a study: its trials and
    the baseline), one run's hours at most."""
    job_per_hour: float | None
    runs_at_once: int = 1
    runs: int = 1
    hours: float = 168.0
    unknown: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    theirs: tuple[str, ...] = ()
    note: str = ""

    @classmethod
    def of(cls, c: prices.Cost) -> "Priced":
        return cls(c.job.per_hour, c.runs_at_once, c.runs, c.hours, c.job.unknown, c.job.missing, c.job.theirs,
                   c.note)

    @property
    def per_hour(self) -> float | None:
        return None if self.job_per_hour is None else self.job_per_hour * self.runs_at_once

    def most(self, hours: float | None = None) -> float | None:
        """The most it can cost over ``hours`` a run (default: one run's timeout)."""
        return None if self.job_per_hour is None else self.job_per_hour * (self.hours if hours is None else hours) \
            * self.runs


@dataclasses.dataclass(frozen=True)
class Judged:
    """One option as the plan judged it: its price, and ``refused`` (why the catalog or the project rules it out,
    whatever the budget), "" when it may run. ``findings``/``warnings``: what the plan shows of it (not carried to
    the pipeline)."""
    option: Option
    price: Priced
    refused: str = ""
    findings: tuple[Finding, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As JSON carries it (an unknown price: no ``job_per_hour``; KFP parameters hold no null)."""
        return {**dataclasses.asdict(self.option), "refused": self.refused,
                "price": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self.price).items()
                          if v is not None}}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "Judged":
        """An option of a ``placement_plan`` (:meth:`to_dict`), or of the list earlier pipelines carried
        (``{"region", "strategy"}``: fits, price unknown). Numbers as Vertex passes them (JSON floats)."""
        kinds = {f.name: (int if f.name == "rung" else str) for f in dataclasses.fields(Option)}
        option = Option(**{n: kind(doc[n]) for n, kind in kinds.items() if n in doc})
        raw = doc.get("price") if isinstance(doc.get("price"), Mapping) else {}
        fields = {f.name for f in dataclasses.fields(Priced)}
        kept = {k: v for k, v in raw.items() if k in fields}
        for k in ("unknown", "missing", "theirs"):
            kept[k] = tuple(str(x) for x in kept.get(k) or ())
        for k in ("runs_at_once", "runs"):
            if k in kept:
                kept[k] = int(kept[k])
        price = Priced(**{"job_per_hour": None, **kept})
        return cls(option, price, str(doc.get("refused") or ""))


@dataclasses.dataclass(frozen=True)
class Bars:
    """The budget's bars (0: no bar): ``budget.max_per_hour``, and ``budget.max_total`` or ``--max-cost`` (named
    by ``total_field``)."""
    max_per_hour: float = 0.0
    max_total: float = 0.0
    total_field: str = "budget.max_total"

    @classmethod
    def of(cls, cfg: config_lib.JobConfig, max_cost: float | None = None) -> "Bars":
        if max_cost is not None:
            return cls(cfg.budget.max_per_hour, max_cost, "--max-cost")
        return cls(cfg.budget.max_per_hour, cfg.budget.max_total)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None) -> "Bars":
        doc = doc or {}
        return cls(float(doc.get("max_per_hour") or 0), float(doc.get("max_total") or 0),
                   str(doc.get("total_field") or "budget.max_total"))

    def named(self) -> list[str]:
        return [b for b, v in (("budget.max_per_hour", self.max_per_hour), (self.total_field, self.max_total)) if v]


def unpriced_line(bars: Bars, price: Priced, table_date: str = "") -> str:
    """Why an option whose price cannot be computed does not fit under ``bars``: the missing figures."""
    return (f"price unknown under {' and '.join(bars.named())}: no figure for {', '.join(price.unknown)} in the price "
            f"table{f' of {table_date}' if table_date else ''}")


def supply_line(price: Priced) -> str:
    """How to give the figures ``price`` lacks."""
    keys = ", ".join(price.missing) or "a figure of this machine (it is not in the hardware catalog)"
    return (f"a budget is never checked against an unknown price: give {keys} in your own price file (budget.prices: "
            f"FILE in the job file, or --prices FILE; {PRICE_FILE_FORM}), or remove the bar")


def budget_verdict(price: Priced, bars: Bars, hours: float | None = None, table_date: str = "") -> str:
    """Why ``price`` does not fit under ``bars`` over ``hours`` a run (default: its timeout), or "" when it does."""
    if not bars.named():
        return ""
    if price.job_per_hour is None:
        return unpriced_line(bars, price, table_date)
    shape = price.note.split(";")[0] if price.runs_at_once > 1 else "one CustomJob"
    if bars.max_per_hour and price.per_hour > bars.max_per_hour:
        return (f"over budget: budget.max_per_hour: {prices.money(price.per_hour)} an hour ({shape}), over the bar "
                f"of {prices.money(bars.max_per_hour)}")
    most = price.most(hours)
    if bars.max_total and most > bars.max_total:
        left = "" if hours is None else f" for the {hours * 3600:,.0f} s left"
        return (f"over budget: {bars.total_field}: up to {prices.money(most)}{left} ({price.note or shape}), over the "
                f"bar of {prices.money(bars.max_total)}")
    return ""


def brief(why: str) -> str:
    """A reason's first clause (up to its first ``; ``), for a table cell or a line per option: a quota's finding
    goes on with the regions that would fit and the command that asks for more, which the error line keeps."""
    return why.split("; ", 1)[0]


@dataclasses.dataclass
class Ranking:
    """What :func:`rank` decided: the options that fit, best first (the pick is the first), and every other one
    with why it was skipped, in the user's order."""
    order: list[Judged]
    skipped: list[tuple[Judged, str]]

    @property
    def pick(self) -> Judged | None:
        return self.order[0] if self.order else None

    def why(self, option: Option) -> str:
        return next((why for j, why in self.skipped if j.option == option), "")


def rank(judged: Sequence[Judged], bars: Bars = Bars(), blocked: Mapping[Option, str] | None = None,
         hours_left: float | None = None, table_date: str = "") -> Ranking:
    """THE placement procedure. An option fits when it is not blocked (it failed already: ``blocked`` says why), the
    plan did not refuse it (the hardware catalog, the quota) and its price is under every bar over ``hours_left``
    (default: one run's timeout; an unknown price under a bar does not fit). The options that fit come rung by rung
    of the hardware ladder (the user's preference: module docstring), within a rung cheapest first (the most they
    can cost, then per hour); the user's order breaks ties and orders unknown prices (only possible without a bar)
    after every known one of their rung."""
    blocked = blocked or {}
    order: list[tuple[tuple, Judged]] = []
    skipped: list[tuple[Judged, str]] = []
    for i, j in enumerate(judged):
        why = (f"it failed already: {blocked[j.option]}" if j.option in blocked else
               j.refused or budget_verdict(j.price, bars, hours_left, table_date))
        if why:
            skipped.append((j, why))
            continue
        most = j.price.most(hours_left)
        order.append(((j.option.rung, most is None, most or 0.0, j.price.per_hour or 0.0, i), j))
    return Ranking([j for _, j in sorted(order, key=lambda kv: kv[0])], skipped)


# --------------------------------------------------------------------------------------------------
# Judging the options, and carrying the judgement to the pipeline

#: ``(job under an option, option) -> findings``: the project's quota there (``Project.quota``)
QuotaCheck = Callable[[config_lib.JobConfig, Option], list[Finding]]


def judge_options(cfg: config_lib.JobConfig, region: str = "", table: Mapping[str, Any] | None = None,
                  quota: QuotaCheck | None = None) -> list[Judged]:
    """Every option of ``cfg`` (``jobs.rules.placement.options``, in the user's order: every rung of the hardware
    ladder in every region and strategy) judged: the hardware catalog's rules for the job under it
    (``jobs.rules.validate``; a rung's fields named as the job file names them, ``jobs.rules.ladder.renamed``), its
    price at ``table``'s figures, and, with ``quota``, the project's quota there (a short quota refuses it; an
    unchecked one is a finding, not a refusal)."""
    out = []
    for option in placement.options(cfg, region):
        job = placement.with_option(cfg, option)
        price = Priced.of(prices.cost(job, option.region, option.strategy, table))
        report = _named_by(validate.validate(job, check_data=False), placement.region_field(cfg, option))
        if report.errors:
            out.append(Judged(option, price, f"the hardware catalog: {ladder.renamed(report.errors[0], option.rung)}"))
            continue
        findings = tuple(quota(job, option)) if quota is not None else ()
        short = [f for f in findings if f.ok is False and f.severity == "error"]
        out.append(Judged(option, price, short[0].line if short else "", findings,
                          tuple(str(w) for w in report.warnings)))
    return out


def _named_by(report, field: str):
    """``report`` with its ``topology.region`` problems named by ``field`` (where the option's region comes from:
    ``jobs.rules.placement.region_field``), so a region the section lists is not blamed on ``--region``."""
    def named(problems):
        return [dataclasses.replace(p, field=field) if p.field == "topology.region" else p for p in problems]
    return dataclasses.replace(report, errors=named(report.errors), warnings=named(report.warnings))


def to_doc(judged: Iterable[Judged], bars: Bars, ranking: Ranking | None = None, source: str = "") -> dict[str, Any]:
    """The judgement as the pipeline's ``placement_plan`` carries it: every option (the fitting ones in ranked
    order first, then the rest in the user's), its price and the plan's refusal; the bars; where it came from."""
    judged = list(judged)
    if ranking is not None:
        ranked = [j for j in ranking.order] + [j for j in judged if j not in ranking.order]
        judged = ranked
    return {"options": [j.to_dict() for j in judged], "bars": dataclasses.asdict(bars), "source": source}


def from_doc(doc: Mapping[str, Any] | None) -> tuple[list[Judged], Bars]:
    """A ``placement_plan`` read back (:func:`to_doc`); an empty one: no options, no bars."""
    doc = doc or {}
    return [Judged.from_dict(o) for o in doc.get("options") or [] if isinstance(o, Mapping)], \
        Bars.from_dict(doc.get("bars"))


def carried(placement: Iterable[Mapping[str, Any]] | None, location: str, strategy: str) -> list[Judged]:
    """A step's ``placement`` read back (:meth:`Judged.from_dict`: the plan's judgement, or the ``{region,
    strategy}`` list earlier pipelines carried); none: the step's own region and strategy alone, price unknown."""
    judged = [Judged.from_dict(o) for o in placement or ()]
    return judged or [Judged(Option(location, strategy or "STANDARD"), Priced(None))]


def doc_problems(doc: Any) -> str:
    """Why ``doc`` is not a ``placement_plan`` (one line), or ""."""
    if not isinstance(doc, Mapping):
        return "is not a JSON object {options, bars}"
    options = doc.get("options")
    if not isinstance(options, list) or not all(isinstance(o, Mapping) and {"region", "strategy"} <= set(o)
                                                for o in options):
        return 'its options are not a list of {region, strategy, price, refused}, e.g. [{"region": "us-central1", ' \
               '"strategy": "STANDARD"}]'
    for o in options:
        if str(o["strategy"]) not in placement.SCHEDULING_STRATEGIES:
            return f"strategy {o['strategy']!r} of {o['region']} is not one of {', '.join(placement.SCHEDULING_STRATEGIES)}"
        rung = o.get("rung", 0)
        if isinstance(rung, bool) or not isinstance(rung, (int, float)) or rung < 0 or rung != int(rung):
            return f"rung {rung!r} of {o['region']} {o['strategy']} is not a rung of the hardware ladder (0, 1, 2...)"
    return ""


def offline_doc(cfg: config_lib.JobConfig, region: str = "", table: Mapping[str, Any] | None = None,
                max_cost: float | None = None) -> dict[str, Any]:
    """The judgement without the project (the catalog, the prices, the budget; the quota not checked), ranked: what a
    pipeline carries when no plan was made with the project (``--compile-only``)."""
    judged = judge_options(cfg, region, table)
    bars = Bars.of(cfg, max_cost)
    return to_doc(judged, bars, rank(judged, bars), source="the hardware catalog and the price table (the project's "
                                                           "quota not checked)")


# --------------------------------------------------------------------------------------------------
# What would fit


def remedies(cfg: config_lib.JobConfig, bars: Bars, judged: Sequence[Judged], region: str = "",
             table: Mapping[str, Any] | None = None) -> list[str]:
    """What would make the job fit under ``bars`` when nothing does, only what would: a price file for unknown
    figures; for the cheapest option refused only by the budget, a shorter ``scheduling.timeout``, fewer workers or
    trials at once; another region or strategy (not in ``placement``) whose known price is under every bar and not
    the same as the cheapest option's; the bar itself."""
    out: list[str] = []
    missing = list(dict.fromkeys(k for j in judged if not j.refused and j.price.job_per_hour is None
                                 for k in j.price.missing))
    if missing and bars.named():
        out.append(f"budget.prices=FILE giving {', '.join(missing)} (or --prices FILE)")
    over = [j for j in judged if not j.refused and j.price.job_per_hour is not None and budget_verdict(j.price, bars)]
    if not over:
        return out
    best = min(over, key=lambda j: (j.price.most(), j.price.per_hour))
    job = placement.with_option(cfg, best.option)
    fits = lambda c: not budget_verdict(Priced.of(c), bars)  # noqa: E731
    price = best.price
    if bars.max_total and (not bars.max_per_hour or price.per_hour <= bars.max_per_hour):
        seconds = int(bars.max_total / (price.job_per_hour * price.runs) * 3600)
        if seconds >= 600:
            out.append(f"scheduling.timeout={seconds}s")
    t = cfg.tuning
    if t.enabled and price.runs_at_once > 1 and bars.max_per_hour:
        at_once = int(bars.max_per_hour // price.job_per_hour) - (1 if t.baseline else 0)
        if 1 <= at_once < t.parallel_trials:
            trial = job.with_overrides([f"tuning.parallel_trials={at_once}"])
            if fits(prices.cost(trial, best.option.region, best.option.strategy, table)):
                out.append(f"tuning.parallel_trials={at_once}")
    workers = job.topology.worker.replica_count
    pool = f"{ladder.field(best.option.rung)}.worker" if best.option.rung else "topology.worker"
    for w in range(workers - 1, 0, -1):  # the most workers that fit (and, on a ladder, keep the global batch)
        fewer = job.with_overrides([f"topology.worker.replica_count={w}"])
        if cfg.placement.hardware and placement.global_batch(cfg) % num_replicas(fewer.to_dict()):
            continue
        if fits(prices.cost(fewer, best.option.region, best.option.strategy, table)):
            out.append(f"{pool}.replica_count={w}")
            break
    out += _other_options(cfg, bars, judged, best, region, table)
    out.append(f"budget.max_per_hour={price.per_hour:.2f}" if bars.max_per_hour and price.per_hour > bars.max_per_hour
               else f"--max-cost {price.most():.2f}" if bars.total_field == "--max-cost"
               else f"{bars.total_field}={price.most():.2f}")
    return out


def _other_options(cfg: config_lib.JobConfig, bars: Bars, judged: Sequence[Judged], best: Judged, region: str,
                   table: Mapping[str, Any] | None) -> list[str]:
    """Strategies and regions not in the job's options whose known price (not the same as ``best``'s) fits."""
    table = table or prices.load_prices()
    have = {j.option for j in judged}
    out = []
    for strategy in placement.SCHEDULING_STRATEGIES:
        option = dataclasses.replace(best.option, strategy=strategy)
        if option in have or not prices.strategy_priced(strategy, table):
            continue  # a strategy without a figure of its own is priced like on-demand: it cannot help
        if _fits_there(cfg, option, bars, best, table):
            at = f"{ladder.field(option.rung)}.strategies" if option.rung else "placement.strategies"
            out.append(f"{at}=[{strategy}]")
    for r, entry in sorted((table.get("regions") or {}).items(), key=lambda kv: kv[1].get("factor") or 9):
        option = dataclasses.replace(best.option, region=r)
        if option in have or entry.get("factor") is None:
            continue
        if _fits_there(cfg, option, bars, best, table):
            out.append(f"placement.regions=[{r}]")
            break
    return out


def _fits_there(cfg, option: Option, bars: Bars, best: Judged, table) -> bool:
    job = placement.with_option(cfg, option)
    price = Priced.of(prices.cost(job, option.region, option.strategy, table))
    if price.job_per_hour is None or abs(price.job_per_hour - (best.price.job_per_hour or 0)) < 1e-9:
        return False
    return not budget_verdict(price, bars) and not validate.validate(job, check_data=False).errors
