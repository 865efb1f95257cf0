"""What a run cost, estimated: its option's price an hour (all its replicas) x the time it ran. One home for the
figure the run summary, the report and ``vtp runs list`` show.

* A Vertex run (:func:`vertex_estimate`): every CustomJob the training step created (``vertex_jobs.json``: each
  attempt's option, its price an hour as the plan judged it, and the job's own ``start_time`` and ``end_time``, as
  Vertex gives them): price x (end - start), summed. Vertex does not bill a job that failed for a reason other than
  the user's cancellation (its pricing page), so a failed attempt (a stockout) is shown and not counted.
* A local run (:func:`local_estimate`): what the planned option (the first THE placement procedure ranks without the
  project: ``jobs.rules.ranking``) would have cost for the time the training step ran here, said as an estimate.

List prices (the price table, a user's price file over it): not the bill. An unknown price is said, never guessed.
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Mapping, Sequence

from jobs.rules import ranking
from jobs.rules.hardware import prices
from jobfile import config as config_lib
from jobfile.errors import ConfigError

#: the pipeline steps whose wall time is the training (a local run)
TRAINING_STEPS = ("train", "tune")


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def vertex_estimate(attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``{"usd", "seconds", "how", "jobs"}`` from a Vertex run's CustomJob attempts; None without any; ``usd`` None
    when a billed attempt's price or times are unknown."""
    rows = [a for a in attempts if isinstance(a, Mapping)]
    if not rows:
        return None
    usd, seconds, unknown, jobs = 0.0, 0.0, [], []
    for a in rows:
        start, end = _time(a.get("start_time")), _time(a.get("end_time"))
        ran = (end - start).total_seconds() if start and end else None
        per_hour = a.get("per_hour") if isinstance(a.get("per_hour"), (int, float)) else None
        billed = a.get("state") in ("SUCCEEDED", "CANCELLED")  # Vertex bills no job that failed on its side
        jobs.append(f"{str(a.get('job') or '?').rsplit('/', 1)[-1]} in {a.get('region')} {a.get('strategy')}: "
                    f"{a.get('state')}" + (f", {ran:,.0f} s" if ran is not None else "")
                    + (f" at {prices.money(per_hour)} an hour" if per_hour is not None else "")
                    + ("" if billed else " (not billed: it failed)"))
        if not billed:
            continue
        if ran is None or per_hour is None:
            unknown.append(str(a.get("job") or "?").rsplit("/", 1)[-1])
            continue
        usd += per_hour * ran / 3600
        seconds += ran
    how = ("its CustomJobs' price an hour x their own start to end times (list prices)" if not unknown else
           f"unknown: no price or no times for CustomJob {', '.join(unknown)}")
    return {"usd": None if unknown else round(usd, 6), "seconds": round(seconds, 1), "how": how, "jobs": jobs,
            "estimate": "vertex"}


def local_estimate(cfg: config_lib.JobConfig, seconds: float | None) -> dict[str, Any] | None:
    """What the planned option would have cost on Vertex for ``seconds`` of training here: ``{"usd", "seconds",
    "option", "per_hour", "how"}``; None without a time."""
    if seconds is None:
        return None
    try:
        table = prices.price_table(cfg.budget.prices)
    except ConfigError:
        table = prices.load_prices()
    judged = ranking.judge_options(cfg, table=table)
    pick = ranking.rank(judged).pick or (judged[0] if judged else None)
    if pick is None:
        return None
    per_hour = pick.price.per_hour
    return {"usd": None if per_hour is None else round(per_hour * seconds / 3600, 6), "seconds": round(seconds, 1),
            "option": str(pick.option), "per_hour": per_hour, "estimate": "local",
            "how": (f"what {pick.option} would have cost on Vertex ({prices.money(per_hour)} an hour, "
                    f"{pick.price.note.split(';')[0] if pick.price.runs_at_once > 1 else 'every replica'}) for the "
                    f"{seconds:,.1f} s it trained here: an estimate, list prices"
                    if per_hour is not None else
                    f"unknown: no figure for {', '.join(pick.price.unknown)} for {pick.option}")}


def training_seconds(steps: Sequence[Mapping[str, Any]]) -> float | None:
    """The wall time of a local run's training step(s), from its step table."""
    found = [s.get("seconds") for s in steps or [] if isinstance(s, Mapping) and s.get("name") in TRAINING_STEPS
             and isinstance(s.get("seconds"), (int, float))]
    return float(sum(found)) if found else None


def line(cost: Mapping[str, Any] | None) -> str:
    """The one line a summary or report says of it."""
    if not cost:
        return "n/a"
    usd = cost.get("usd")
    return str(cost.get("how")) if usd is None else f"about {prices.money(usd)}: {cost.get('how')}"


def short(cost: Mapping[str, Any] | None) -> str:
    """``runs list``'s cell: ``~$0.0012`` (local: ``~``, an estimate of what it would have cost), ``$4.70``."""
    if not cost or cost.get("usd") is None:
        return "-" if not cost else "unknown"
    return ("~" if cost.get("estimate") == "local" else "") + prices.money(cost["usd"])
