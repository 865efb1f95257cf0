"""A run folder's records read strictly, as history must read them: a record that is there and cannot be read back
(not a regular file, too big, not JSON, cut short, nested too deep, a null or a field of the wrong type) is a
reason the run is ``unreadable``, never "no record" (``jobs.run_records.records.read_at`` reads a missing and a broken record
alike as {}: a run's step may, history may not)."""
from __future__ import annotations

import datetime as dt
import json
import os
from typing import Any

from jobs.rules import tuning_rules
from jobs.run_records import records
from trainers import record_reader

STAMP = "%Y%m%d-%H%M%S"


def parse_time(text: Any) -> dt.datetime | None:
    """An ISO time from a record, or a log name's ``YYYYmmdd-HHMMSS`` (local time), as an aware datetime."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.strptime(text, STAMP)
    except ValueError:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    return when if when.tzinfo else when.astimezone()


#: run.json's fields and the types its readers rely on (a record edited by hand, or by another version, may
#: hold anything: such a run is listed as unreadable, never a traceback)
RECORD_TYPES = {"status": str, "finished": str, "config": dict, "summary": dict, "steps": list,
                "verification": dict, "tuning": dict, "gate": dict}
#: run.json's fields every record written by ``jobs.local.run.folder.write_record`` has (null or missing: unreadable)
RECORD_REQUIRED = ("status", "finished", "config", "summary")


def read_record_strictly(path: str, name: str) -> tuple[dict[str, Any], str | None]:
    """The record ``name`` in the run folder ``path``: ``(record, None)``; ``({}, None)`` when there is none;
    ``({}, "NAME: why")`` when a file is there and is not a record a run wrote (THE reader's rules,
    ``trainers.record_reader``: not a regular file, too big, not JSON, cut short, nested too deep, not an object).
    ``jobs.run_records.records.read_at`` reads a missing and a broken record alike as {}: a run's step may, but history
    must not show a broken record as "no record"."""
    try:
        doc = record_reader.read(os.path.join(path, name))
    except record_reader.Unreadable as exc:
        return {}, f"{name}: {exc.why}"
    return (doc if doc is not None else {}), None


_short = record_reader.short

SUMMARY_TYPES = {"name": str, "elapsed_s": (int, float), "training": dict, "trainer": dict, "verification": dict,
                 "evaluation": dict, "tuning": dict, "gate": dict, "steps": list, "code_version": dict, "dirs": dict,
                 "model_scalars": dict, "cost": dict}
NESTED_TYPES = {"trials": list, "best_trial": dict, "bars": list, "lines": list, "scalars": dict, "eval": dict,
                "latency_ms": dict, "per_class": list, tuning_rules.BASELINE: dict, tuning_rules.HANDED_ON: dict,
                "passed": bool}


def figure_problem(study: Any, where: str) -> str | None:
    """A study record's figures that are not numbers (``"metric": "abc"`` in a trial, the best trial, the baseline or
    the run handed on): the first one, or None. A history shows a figure only when a run wrote one."""
    if not isinstance(study, dict):
        return None
    runs = [(f"trials[{i}]", t) for i, t in enumerate(study.get("trials") or []) if isinstance(t, dict)]
    runs += [(key, study[key]) for key in ("best_trial", tuning_rules.BASELINE, tuning_rules.HANDED_ON)
             if isinstance(study.get(key), dict)]
    for name, run in runs:
        found = type_problem(run, {"metric": (int, float)}, f"{where}{name}.")
        if found:
            return found
    return None


def type_problem(doc: dict[str, Any], types: dict[str, Any], where: str) -> str | None:
    """The first field of ``doc`` not of its type in ``types`` (THE reader's rule, ``record_reader.shape_problem``)."""
    return record_reader.shape_problem(doc, types, where=where)


def record_problem(record: dict[str, Any], name: str = records.RUN_RECORD) -> str | None:
    """Why a run record cannot be read back (the first field of a wrong type: ``run.json: finished is str
    "yesterday", not a time``), or None."""
    found = type_problem(record, RECORD_TYPES, f"{name}: ")
    if found:
        return found
    if record:
        missing = [key for key in RECORD_REQUIRED if record.get(key) is None]
        if missing:
            return f"{name}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing or null"
        if record["status"] != "succeeded":
            return f"{name}: status is {_short(record['status'])}, not \"succeeded\" (the only status a run records)"
    if isinstance(record.get("finished"), str) and parse_time(record["finished"]) is None:
        return f"{name}: finished is {json.dumps(record['finished'])[:40]}, not a time (ISO 8601)"
    summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
    found = type_problem(summary, SUMMARY_TYPES, f"{name}: summary.")
    if found:
        return found
    for where, doc in (("", record), ("summary.", summary)):
        for key in ("tuning", "gate", "verification", "trainer"):
            part = doc.get(key)
            if isinstance(part, dict):
                found = type_problem(part, NESTED_TYPES, f"{name}: {where}{key}.")
                if found:
                    return found
    for where, study in (("tuning.", record.get("tuning")), ("summary.tuning.", summary.get("tuning"))):
        found = figure_problem(study, f"{name}: {where}")
        if found:
            return found
    for where, items in (("steps", record.get("steps")), ("tuning.trials", (record.get("tuning") or {}).get("trials"))):
        bad = next((x for x in items or [] if not isinstance(x, dict)), None)
        if bad is not None:
            return f"{name}: {where} holds {type(bad).__name__} {_short(bad)}, not an object"
    return None
