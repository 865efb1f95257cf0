"""The report's table of pipeline steps, and completing it once the pipeline has ended.

The report step writes ``report.html`` while it runs: then its own time is unknown and the steps after it (or
beside it: upload-model) have not ended, so a page written once would say ``report … running`` and leave them
out for good. The table sits between two markers; the local run, when its pipeline has ended, rewrites just that
part from the final step record (``steps.json``'s steps), atomically. On Vertex, where no process outlives the
pipeline's steps, the page keeps what the report step knew, said as such.
"""
from __future__ import annotations

import html
import os
from typing import Any
from trainers import fileio
from jobfile.regular_file import open_regular

START, END = "<!-- pipeline-steps -->", "<!-- /pipeline-steps -->"


def _fmt(value: Any) -> str:
    return format(value, ".1f") if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def section(steps: dict[str, Any] | None) -> str:
    """The steps' section between the markers: every ended step (name, seconds, status), then the ones still
    running when it was written ("" when no step is known)."""
    e = html.escape
    ended = [s for s in (steps or {}).get("steps") or [] if isinstance(s, dict)]
    running = [str(n) for n in (steps or {}).get("running") or []]
    rows = [[str(s.get("name", "?")), _fmt(s.get("seconds")), str(s.get("status", "")).lower()] for s in ended]
    rows += [[name, "…", "running (this page is written by it)" if name == "report" else "running"] for name in running]
    if not rows:
        return START + END
    total = sum(s.get("seconds") or 0 for s in ended)
    note = (f"{total:.1f} s in the steps above" + (" (the steps still running when this page was written end "
                                                   "after it: run.json keeps every step)" if running else ""))
    table = ("<table id='steps'><tr><th>step</th><th>seconds</th><th>status</th></tr>"
             + "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in rows) + "</table>")
    return f"{START}<h2>Pipeline steps</h2>{table}<p>{e(note)}</p>{END}"


def complete(page: str, steps: list[dict[str, Any]]) -> bool:
    """Rewrite the step table of the report at ``page`` with ``steps`` (every step of the ended pipeline), in
    place and atomically; False when there is no such page or it has no marked table (an older page)."""
    try:
        with open_regular(page, page) as f:  # a page that is not a regular file is not this product's
            text = f.read()
    except (OSError, ValueError):  # NotARegularFile is a ValueError
        return False
    head, sep, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        return False
    fileio.write_bytes_atomic(page, (head + section({"steps": steps}) + tail).encode("utf-8"))
    return os.path.exists(page)
