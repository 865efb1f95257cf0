"""A schedule's time: a cron expression with its time zone, as Vertex AI's ``Schedule.cron`` takes it, checked before
anything is sent (``vtp schedule create``). Pure: no I/O beyond the system's time zone database, no cloud client.

The form (``aiplatform_v1.Schedule.cron``'s documentation, read in the installed client 1.165, 2026-11-29):
``"TZ=America/New_York 0 3 * * *"`` or ``"CRON_TZ=America/New_York 0 3 * * *"``, an IANA time zone and five fields
of unix-cron (minute, hour, day of the month, month, day of the week); without a ``TZ=`` prefix Vertex reads it in
UTC. Each field: ``*``, a number, a range ``a-b``, a step ``*/n`` or ``a-b/n``, or a comma list of those; months
``1-12`` or ``JAN``-``DEC``, days of the week ``0-7`` (0 and 7 Sunday) or ``SUN``-``SAT`` (Cloud Scheduler's unix-cron,
which Vertex's schedules share). Macros (``@daily``) and a sixth (seconds or year) field are refused: the API
documents neither.

:func:`cron_problems` returns one problem for the time zone and one for the expression (the first field that is
wrong), each naming the rule and a valid form.
"""
from __future__ import annotations

import difflib
import functools
import re

from jobfile.errors import Problem, problem

EXAMPLE = "TZ=America/New_York 0 3 * * *"
#: (name, lowest, highest, names for 1.. or 0..)
FIELDS = (("minute", 0, 59, ()), ("hour", 0, 23, ()), ("day of the month", 1, 31, ()),
          ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
          ("day of the week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")))
PREFIX_RE = re.compile(r"^(?:CRON_TZ|TZ)=(\S*)\s+(.*)$")
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


@functools.lru_cache(maxsize=1)
def time_zones() -> frozenset[str]:
    """The IANA time zones this machine knows (``zoneinfo``: the system database, or the ``tzdata`` package)."""
    import zoneinfo

    return frozenset(zoneinfo.available_timezones())


def split(cron: str) -> tuple[str, str]:
    """(time zone or "" for UTC, the five fields) of a ``Schedule.cron``."""
    text = " ".join(str(cron or "").split())
    m = PREFIX_RE.match(text)
    return (m.group(1), m.group(2)) if m else ("", text)


def _value(token: str, low: int, high: int, names: tuple[str, ...]) -> int | None:
    if token.isdigit():
        n = int(token)
        return n if low <= n <= high else None
    upper = token.upper()
    if upper in names:
        return names.index(upper) + (1 if names[0] == "JAN" else 0)
    return None


def _field_problem(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> str | None:
    """Why one field is not unix-cron, or None."""
    for part in text.split(","):
        body, _, step = part.partition("/")
        if step and not (step.isdigit() and 1 <= int(step) <= high):
            return f"the step {step!r} is not a number from 1 to {high}"
        if body == "*":
            continue
        lo_text, dash, hi_text = body.partition("-")
        lo = _value(lo_text, low, high, names)
        hi = _value(hi_text, low, high, names) if dash else lo
        if lo is None or hi is None:
            shown = f"{low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else "")
            return f"{body!r} is not {'a range' if dash else 'a value'} of {shown}"
        if lo > hi:
            return f"the range {body!r} runs backwards"
        if step and not dash and body != "*":
            return f"{part!r}: a step needs * or a range before it (e.g. */{step} or {lo}-{high}/{step})"
    return None


def cron_problems(cron: str, field: str = "--cron") -> list[Problem]:
    """The time zone's problem and the expression's (at most one each; see the module docstring)."""
    out: list[Problem] = []
    zone, fields = split(cron)
    parts = fields.split()
    if len(parts) == 1 and parts[0].lower() in MACROS:
        out.append(problem(field, f"{parts[0]!r}: Vertex's cron takes five fields, not a macro",
                           [f"TZ={zone or 'UTC'} {MACROS[parts[0].lower()]}"]))
    elif len(parts) != 5:
        out.append(problem(field, f"{fields!r} has {len(parts)} field(s); a cron expression has five: minute, hour, "
                                  "day of the month, month, day of the week (after an optional TZ=<IANA name>)",
                           [EXAMPLE]))
    else:
        for text, (name, low, high, names) in zip(parts, FIELDS):
            why = _field_problem(text, name, low, high, names)
            if why:
                out.append(problem(field, f"{name} field {text!r}: {why}", [EXAMPLE]))
                break
    if PREFIX_RE.match(" ".join(str(cron or "").split())) and zone not in time_zones():
        near = difflib.get_close_matches(zone, sorted(time_zones()), n=1, cutoff=0.6)
        shown = fields if not out else "0 3 * * *"  # a valid choice is valid whole
        out.insert(0, problem(field, f"time zone {zone!r} is not an IANA time zone" +
                              (f" (did you mean {near[0]!r}?)" if near else "") + "; Vertex takes TZ=<IANA name> "
                              "before the five fields", [f"TZ={near[0] if near else 'America/New_York'} {shown}"]))
    return out


def describe(cron: str) -> str:
    """``0 3 * * * (America/New_York)``, or ``... (UTC: no TZ= given)``."""
    zone, fields = split(cron)
    return f"{fields} ({zone})" if zone else f"{fields} (UTC: no TZ= given)"
