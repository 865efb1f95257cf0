"""The pipeline steps' wall times, from kfp.local's own log records: the one source of a step's duration (the
console's ``✓ step (N s)`` line, ``steps.json`` while the run goes on, ``run.json``'s ``steps`` at its end)."""
from __future__ import annotations

import logging
import os
import re
from typing import Any

from jobs.run_records import records
from jobs.local.run.lock import now_iso
from trainers import fileio


class StepTimer:
    """Records each pipeline task's wall time from kfp.local's own log records (``Executing task 'x'`` ...
    ``Task 'x' finished with status SUCCESS``, logged on the root logger), for the run's duration:
    ``steps`` is ``[{"name", "seconds", "status"}]`` in the order the tasks ended. A filter on the root
    logger, not a handler: kfp.local replaces the root logger's handlers while a pipeline runs.

    The one source of a step's duration: the console's ``✓ step (N s)`` line asks the active timer
    (:func:`step_seconds`) for the figure run.json keeps, rather than timing the line on its own clock.
    Each start and end also rewrites ``<record_dir>/steps.json`` (atomically): the report step, which runs
    inside the pipeline before run.json exists, and ``runs list`` of a run that never finished read it.
    ``record_dir`` defaults to the folder holding kfp.local's pipeline root (run.py's ``<base>``)."""

    _ANSI = re.compile(r"\x1b\[[0-9;]*m")
    _START = re.compile(r"^Executing task '([^']+)'")
    _END = re.compile(r"^Task '([^']+)' finished with status (\w+)")
    #: the timer of the pipeline running in this process (one at a time), for the console
    active: "StepTimer | None" = None

    def __init__(self, record_dir: str | None = None) -> None:
        self.steps: list[dict[str, Any]] = []
        self.record_dir = record_dir
        self.started = now_iso()
        self._started: dict[str, float] = {}
        timer = self

        class _Filter(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                timer.seen(record.getMessage(), record.created)
                return True

        self._filter = _Filter()

    def seen(self, message: str, at: float) -> None:
        text = self._ANSI.sub("", message)
        start, end = self._START.match(text), self._END.match(text)
        if start:
            self._started[start.group(1)] = at
            self._write()
        elif end and end.group(1) in self._started:
            self.steps.append({"name": end.group(1), "seconds": round(at - self._started.pop(end.group(1)), 2),
                               "status": end.group(2)})
            self._write()

    def seconds_of(self, name: str) -> float | None:
        """The recorded wall time of the last run of step ``name`` (None: not ended yet)."""
        return next((s["seconds"] for s in reversed(self.steps) if s["name"] == name), None)

    def _write(self) -> None:
        if not self.record_dir or "://" in self.record_dir:
            return
        try:
            fileio.write_json_atomic(os.path.join(self.record_dir, records.STEPS_RECORD), {
                "started": self.started, "steps": self.steps, "running": sorted(self._started)})
        except OSError:  # a record, never a reason for the run to fail
            pass

    def __enter__(self) -> "StepTimer":
        if self.record_dir is None:
            self.record_dir = _pipeline_root_parent()
        logging.getLogger().addFilter(self._filter)
        StepTimer.active = self
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger().removeFilter(self._filter)
        if StepTimer.active is self:
            StepTimer.active = None


def _pipeline_root_parent() -> str | None:
    """The folder holding kfp.local's pipeline root (``local.init(pipeline_root=<base>/pipeline_root)``)."""
    try:
        # lazy: heavy: kfp (the console and `runs list` read this module; only a pipeline run has kfp loaded)
        from kfp.local import config

        root = config.LocalExecutionConfig.instance.pipeline_root
    except Exception:  # kfp.local not initialised: nothing to write beside
        return None
    return os.path.dirname(os.path.abspath(root)) if root and "://" not in root else None


def step_seconds(name: str) -> float | None:
    """Step ``name``'s wall time as the active :class:`StepTimer` recorded it (None without one)."""
    timer = StepTimer.active
    return timer.seconds_of(name) if timer is not None else None
