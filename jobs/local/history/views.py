"""Run history shown: the rows of ``runs list`` (a table that fits 120 columns, or JSON) and two runs side by
side for ``runs compare`` (status, the metrics they share, step times, the config keys that differ). What it
shows is what ``jobs.local.history`` read back from the run folders (:class:`jobs.local.history.reader.Run`); this
module reads no file itself, as ``jobs.steps.reporting.page`` renders what ``jobs.steps.reporting.data`` gathered."""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

from jobs.rules import tuning_rules
from jobs.run_records import run_cost
from jobs.rules.command_line import rich_console, shown
from jobs.local.history.reader import Run, validated_config
from jobs.local.history.record_check import parse_time
from jobs.local.run.folder import config_diff


# -- the list -----------------------------------------------------------------------------------------------
def _fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"


def _when(text: str | None) -> str:
    when = parse_time(text)
    return when.strftime("%Y-%m-%d %H:%M") if when else "-"


def _metrics_text(m: dict[str, float], width: int = 1000) -> str:
    parts = []
    if "val_accuracy" in m:
        parts.append(f"val acc {m['val_accuracy']:.3f}")
    if "train_loss" in m:
        parts.append(f"train loss {m['train_loss']:.4f}")
    if not parts:  # a user trainer: the held-out verdict (eval_data), the study's metric, then its own series
        parts = [f"{_short(k)} {v:.4g}" for k, v in list(m.items())[:2]]
    shown = parts[:1]  # as many as fit the column (the first always: the column ends it with "…" if need be)
    for part in parts[1:]:
        if len(", ".join([*shown, part])) > width:
            break
        shown.append(part)
    return ", ".join(shown) or "-"


def _short(series: str) -> str:
    """A Keras TensorBoard series as a column shows it: ``validation/epoch_loss`` -> ``val loss`` (compare and
    the report keep the full names)."""
    for long, short in (("validation/", "val "), ("train/", "train "), ("epoch_", "")):
        series = series.replace(long, short)
    return series


def _steps_text(r: Run) -> str:
    if r.steps is None:
        return "-" if r.total_steps is None else f"0/{r.total_steps}"
    return f"{r.steps}/{r.total_steps}" if r.total_steps else str(r.steps)


#: the widest a row of ``runs list`` may be (a terminal of 120 columns shows it unwrapped)
WIDTH = 120


def _table(head: list[str], rows: list[list[str]], out, widths: dict[str, int] | None = None) -> None:
    """A plain table through rich (aligned columns; readable in a terminal and in a pipe).
    ``widths``: the most characters a column shows (longer cells end in "…"): the rows then fit :data:`WIDTH`.
    Without: a side-by-side table whose first column is its row labels (``runs compare``): in a pipe nothing
    wraps; in a terminal the labels keep their whole width and the values wrap in what is left (rich would
    otherwise shrink every column alike, and a label column shrunk to nothing reads as no labels at all)."""
    from rich import box
    from rich.table import Table

    tty = not widths and out.isatty()
    width = WIDTH if widths else (shutil.get_terminal_size((200, 24)).columns if tty else 1000)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=bool(widths))
    labels = max([len(h) for h in head[:1]] + [len(r[0]) for r in rows if r]) if rows else 0
    for i, h in enumerate(head):
        most = (widths or {}).get(h)
        if widths:
            table.add_column(h, no_wrap=True, overflow="ellipsis" if most else "ignore", max_width=most)
        elif i == 0:
            table.add_column(h, no_wrap=True, min_width=min(labels, max(8, width // 3)), overflow="fold")
        else:
            table.add_column(h, no_wrap=not tty, overflow="fold" if tty else "ignore")
    for row in rows:
        table.add_row(*row)
    rich_console(file=out, width=width, highlight=False, soft_wrap=not widths and not tty).print(table)


def _shown_path(path: str) -> str:
    """Relative to the current folder when under it (``runs/local/report.html``), else absolute."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def json_text(value: Any) -> str:
    """``--json``'s text: JSON (RFC 8259), so a NaN or an infinity a record holds (a loss that diverged, a
    hand-edited file) is ``null``, never Python's ``NaN``/``Infinity``, which no other JSON reader takes."""
    plain = json.loads(json.dumps(value, default=str), parse_constant=lambda _: None)
    return json.dumps(plain, indent=1, allow_nan=False)


def show_list(found: list[Run], root: str, as_json: bool, out=None) -> None:
    out = out or sys.stdout
    if as_json:
        out.write(json_text([r.as_dict() for r in found]) + "\n")
        return
    if not found:
        out.write(f"no runs under {root}\n")
        return
    costs = any(r.cost for r in found)  # the column only where a run has a cost (jobs.run_records.run_cost)
    fixed = [{"status": r.status, "steps": _steps_text(r),
              "wall": _fmt(r.wall_s, ".0f") + " s" if r.wall_s is not None else "-",
              **({"cost": run_cost.short(r.cost)} if costs else {}), "when": _when(r.when),
              "report": "yes" if r.report else "-"} for r in found]
    widths = column_widths(found, costs, fixed)
    rows = [[r.name, r.job or "-", cells["status"], cells["steps"], _metrics_text(r.metrics, widths["final metrics"]),
             cells["wall"], *([cells["cost"]] if costs else []), cells["when"], cells["report"]]
            for r, cells in zip(found, fixed)]
    _table(["run", "job", "status", "steps", "final metrics", "wall", *(["cost"] if costs else []), "when", "report"],
           rows, out, widths=widths)
    if costs:
        out.write("cost: a Vertex run's CustomJobs over their own times; ~: what a local run's option would have cost "
                  "(list prices)\n")
    if any(r.report for r in found):
        out.write(f"reports: {_shown_path(os.path.abspath(root))}/<run>/report.html\n")
    for r in found:
        if r.note and r.status != "finished":
            out.write(f"  {r.name}: {r.status}: {r.note}\n")


def show_run(r: Run, as_json: bool, out=None) -> None:
    """``runs show RUN``: one run whole, the way its folder's records tell it, its cause when it failed (the failing
    replica's error line and hint, as the console said them last)."""
    out = out or sys.stdout
    if as_json:
        out.write(json_text(r.as_dict()) + "\n")
        return
    note = r.note[:-len(r.cause[0])].rstrip() if r.cause and r.note.endswith(r.cause[0]) else r.note  # said below
    rows = [("run", r.name), ("folder", _shown_path(r.path)), ("job", r.job or "-"), ("status", r.status),
            ("note", note or None), *[("cause" if i == 0 else "", line) for i, line in enumerate(r.cause)],
            ("steps", _steps_text(r)), ("wall", _fmt(r.wall_s, ".0f") + " s" if r.wall_s is not None else None),
            ("when", _when(r.when)), ("code version", r.code_version), ("tool version", r.tool_version),
            ("study", _study_text(r.study)), ("best trial", _best_text(r.study)), ("gate", _gate_text(r.gate)),
            *[(key, _cell(value)) for key, value in r.metrics.items()],
            ("report", _shown_path(r.report) if r.report else None),
            ("logs", shown(f"python pipelines/run.py logs {_shown_path(r.path)}") if os.path.isdir(os.path.join(r.path, "logs", "replicas"))
             else None)]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        if value not in (None, ""):
            out.write(f"{label:<{width}}  {value}\n")


#: the widest each fixed column of ``runs list`` gets; ``run`` (never cut: it is what ``compare`` takes) is as
#: wide as the longest name, ``job`` and ``final metrics`` share what is left of :data:`WIDTH`
COLUMNS = {"status": 11, "steps": 9, "wall": 7, "when": 16, "report": 6}
COST_COLUMN = 9
GAPS = 2 * 7


def column_widths(found: list[Run], costs: bool, fixed: list[dict[str, str]]) -> dict[str, int]:
    """Each column's most characters, so that a row fits :data:`WIDTH` (unless a run's name alone is too long:
    names are never cut); ``costs``: with the cost column; ``fixed``: each run's cells of the fixed columns, which
    take only the room their longest cell (or heading) needs, up to :data:`COLUMNS`; the rest goes to the job and the
    metrics."""
    run = max([3, *(len(r.name) for r in found)])
    most = {**COLUMNS, **({"cost": COST_COLUMN} if costs else {})}
    used = {h: min(w, max([len(h), *(len(cells.get(h, "")) for cells in fixed)]))
            for h, w in most.items()}
    left = max(16, WIDTH - GAPS - (2 if costs else 0) - sum(used.values()) - run)
    job = max([3, *(len(r.job or "-") for r in found)])
    metrics = max([13, *(len(_metrics_text(r.metrics)) for r in found)])
    if job + metrics > left:  # the job's name whole if it can be, the metrics (as many as fit) in the rest
        first = max([13, *(len(_metrics_text(r.metrics, 0)) for r in found)])  # each run's first metric, whole
        job = min(job, max(8, left - first))  # the job's name whole where it fits beside them
        room = max(13, left - job)
        metrics = min(room, max(len(_metrics_text(r.metrics, room)) for r in found))
        job = max(job, left - metrics) if job < left - metrics else job
    return {"run": run, "job": job, **used, "final metrics": metrics}


def _study_text(study: dict[str, Any] | None) -> str | None:
    if not study:
        return None
    return f"{study['trials']} trials, {study['succeeded']} succeeded" + (
        f", {study['failed']} failed" if study.get("failed") else "")


def _best_text(study: dict[str, Any] | None) -> str | None:
    best = (study or {}).get("best_trial")
    if not best:
        return None
    text = (f"{best.get('id')}: {study.get('metric')} {tuning_rules.format_value(best.get('metric'))} with "
            f"{tuning_rules.format_parameters(best.get('parameters') or {})}")
    if study.get("baseline") is not None:  # the job as it stands, beside the study
        went = "the baseline's model went on" if study.get("handed_on") == tuning_rules.BASELINE else "it went on"
        text += f" (baseline {tuning_rules.format_value(study['baseline'])}; {went})"
    return text


def _gate_text(gate: dict[str, Any] | None) -> str | None:
    if not gate:
        return None
    return "passed" if gate["passed"] else f"missed: {gate['missed']}"


def comparison(a: Run, b: Run) -> dict[str, Any]:
    rows: list[tuple[str, Any, Any]] = [("job", a.job, b.job), ("status", a.status, b.status),
                                        ("steps", _steps_text(a), _steps_text(b)),
                                        ("wall time (s)", a.wall_s, b.wall_s), ("when", a.when, b.when),
                                        ("code version", a.code_version, b.code_version)]
    if a.tool_version or b.tool_version:  # a user's trainer: its hash above, the tool that ran it here
        rows.append(("tool version", a.tool_version, b.tool_version))
    if a.study or b.study:
        rows += [("study", _study_text(a.study), _study_text(b.study)),
                 ("best trial", _best_text(a.study), _best_text(b.study))]
    if a.gate or b.gate:
        rows.append(("gate", _gate_text(a.gate), _gate_text(b.gate)))
    shared = shared_metrics(a, b)
    for key in [*shared, *(k for k in (*a.metrics, *b.metrics) if k not in shared)]:  # the shared ones first
        if key not in [r[0] for r in rows]:
            rows.append((key, a.metrics.get(key), b.metrics.get(key)))
    times_a = {s.get("name"): s.get("seconds") for s in a.step_times}
    times_b = {s.get("name"): s.get("seconds") for s in b.step_times}
    for step in list(dict.fromkeys([*times_a, *times_b])):
        rows.append((f"step {step} (s)", times_a.get(step), times_b.get(step)))
    ca, cb = a.config, b.config
    if a.config_source != b.config_source:  # like with like: both as validate-config had them, when both are known
        va, vb = validated_config(a.path), validated_config(b.path)
        if va is not None and vb is not None:
            ca, cb = va, vb
    return {"a": a.as_dict(), "b": b.as_dict(), "side_by_side": [{"field": f, "a": x, "b": y} for f, x, y in rows],
            "shared_metrics": shared,
            "config_diff": config_diff(ca, cb),
            "config_known": {"a": a.config is not None, "b": b.config is not None}}


def shared_metrics(a: Run, b: Run) -> list[str]:
    """The metrics both runs measured, the independent ones first: the held-out verdict on ``serving.eval_data``
    (``eval_*``), the study's tag (a tuned run's verified trial; ``val_rmse``), the trainer's validation scalars,
    then the rest."""
    both = [k for k in a.metrics if k in b.metrics]
    rank = lambda k: (0 if k.startswith("eval_") else 2 if k.startswith("validation") else 3, both.index(k))  # noqa: E731
    return sorted(both, key=rank)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def show_compare(a: Run, b: Run, as_json: bool, out=None) -> None:
    out = out or sys.stdout
    result = comparison(a, b)
    if as_json:
        out.write(json_text(result) + "\n")
        return
    out.write(f"A  {a.path}\nB  {b.path}\n")
    for which, run in (("A", a), ("B", b)):
        if run.status == "unreadable":
            out.write(f"{which} is unreadable: {run.note}\n")
    _table(["", "A", "B"], [[r["field"], _cell(r["a"]), _cell(r["b"])] for r in result["side_by_side"]], out)
    shared = result["shared_metrics"]
    out.write(f"shared metrics: {', '.join(shared)}\n" if shared else
              "shared metrics: none (set serving.eval_data in both jobs: every model is then judged on the same "
              "held-out examples)\n")
    diff = result["config_diff"]
    unknown = [x for x, run in (("A", a), ("B", b)) if run.config is None and run.status != "unreadable"]
    if any(run.status == "unreadable" for run in (a, b)):
        out.write("config: not compared (a run's record is unreadable)\n")
    elif unknown:
        out.write(f"config: not recorded for {' and '.join(unknown)} (it stopped before validate-config finished)\n")
    elif not diff:
        out.write("config: identical\n")
    else:
        out.write(f"config: {len(diff)} key(s) differ\n")
        _table(["key", "A", "B"], [[d["key"], _cell(d["a"]), _cell(d["b"])] for d in diff], out)
