"""The run report's sections for the records of the two steps only some runs have: the hyperparameter study
(``tuning.json``: ``jobs.tuning.local``, or Vertex's study in the same shape) and the gate (``gate.json``:
``jobs.steps.gate``). The one home of how the report shows them: the HTML sections, their Markdown, their charts and
their sentences in "Is this model any good?".

Kept out of ``jobs.steps.reporting.page`` (the page, its assembly and the sections every run has) so that module stays one
readable file: these sections read records with their own shapes (trials, bars) and draw charts of their own,
and ``jobs.steps.reporting.page`` only places what they return. Like ``jobs.steps.reporting.page``: pure functions of the records (every
field may be missing: an old, partial or Vertex-made record), charts as ``jobs.steps.reporting.charts.Chart`` embedded
as SVG ``data:`` images (the page stays one self-contained file), no TensorFlow.

Study: every trial (id, parameter values, metric, state, wall time) with the best one marked, the baseline beside
them (the job as it stands) and which model went on and why, which trial the verified model came from, one chart of the metric per trial (by trial id, the best highlighted) and one per
parameter (the metric against the parameter's value; a categorical parameter on a categorical axis in its
declared order, a log-scaled one on a log axis). Gate: the verdict, each bar's line with passed or missed,
the comparison with the parent model's default version or the note saying why there was none.
"""
from __future__ import annotations

from typing import Any

from jobs.rules import gate_section as gate_spec, tuning_rules, tuning_section as tuning_spec
from jobs.run_records.tensorboard import last_values
from jobs.steps import gate as gate_lib
from jobs.steps.reporting import charts as report_charts
from jobs.steps.reporting.eval_section import finite as _finite
from jobfile.errors import ConfigError

#: the sections' CSS, added to the page's
STYLE = ("#trials tr.best td{background:#fff3c4;font-weight:bold}#trials td.failed{color:#b00020}"
         "#study-parameters{display:flex;flex-wrap:wrap;gap:8px}#study-parameters img{width:340px}"
         "#gate td.missed,#gate-verdict.missed{color:#b00020;font-weight:bold}#gate td.passed{color:#176317}")
BEST_COLOUR, COLOUR, FAILED_COLOUR = "#d62728", "#1f77b4", "#888888"


# -- the study ----------------------------------------------------------------------------------------------
def study_facts(study: dict[str, Any] | None, verification: dict[str, Any] | None = None,
                specs: dict[str, dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """What the study sections show, from the study's record: ``{"metric", "goal", "algorithm", "seconds",
    "trials": [{"id", "parameters", "metric", "state", "seconds", "error", "best"}] (id order), "best",
    "verified" (the trial whose model was verified, or None), "parameters" (names, declared order), "specs"
    ({name: {"type", "scale", "values"}}), "counts"}``; None without trials. ``specs`` (the job's
    ``tuning.parameters``) wins over the record's own copy (a Vertex record has none)."""
    if not isinstance(study, dict) or not study.get("trials"):
        return None
    best = tuning_rules.best_trial(study)
    best_id = str(best.get("id")) if best else None
    verified = tuning_rules.verified_trial(study, str((verification or {}).get("model_dir") or ""))
    trials = []
    for t in sorted((t for t in study["trials"] if isinstance(t, dict)), key=lambda t: tuning_rules.trial_order(t.get("id"))):
        trials.append({"id": str(t.get("id")), "parameters": t.get("parameters") or {}, "metric": t.get("metric"),
                       "state": str(t.get("state") or "?"), "seconds": t.get("seconds"), "error": t.get("error") or "",
                       "best": str(t.get("id")) == best_id})
    declared = specs or ((study.get("study") or {}).get("parameters") if isinstance(study.get("study"), dict) else None)
    names = list(dict.fromkeys([*(declared or {}), *(n for t in trials for n in t["parameters"])]))
    run = tuning_rules.baseline_of(study)
    baseline = None if run is None else {
        "id": tuning_rules.BASELINE, "metric": run.get("metric"), "state": str(run.get("state") or "?"),
        "seconds": run.get("seconds"), "error": run.get("error") or "", "custom_job": run.get("custom_job")}
    handed = tuning_rules.handed_on(study) if best else None
    return {"metric": str(study.get("metric") or "metric"), "goal": str(study.get("goal") or "?"),
            "algorithm": study.get("algorithm"), "seconds": study.get("seconds"), "trials": trials, "best": best_id,
            "best_trial": best, "verified": str(verified.get("id")) if verified else None,
            "verification": bool(verification), "parameters": names,
            "specs": {n: dict((declared or {}).get(n) or {}) for n in names}, "counts": tuning_rules.study_counts(study),
            "tuning_job": study.get("tuning_job"), "baseline": baseline, "handed_on": handed}


def with_trial(cfg, trial: dict[str, Any] | None) -> tuple[Any, list[str], list[tuple[str, str]]]:
    """(the config as the trial trained it, the trial's ``--NAME=VALUE`` flags, the Hyperparameters row naming
    them) for the report's Hyperparameters table. The built-in trainer takes a trial's values as config
    overrides (``--training.learning_rate=...``), so its rows show the trial's values; a user trainer gets them
    as flags after its arguments. No trial: the config unchanged, no flags, no row."""
    if trial and str(trial.get("id")) == tuning_rules.BASELINE:  # the study's baseline: the job as it stands
        return cfg, [], [("tuned", "no: the baseline's model, the job as it stands (its own arguments, no tuning "
                                   "flags), which no trial of the study beat")]
    if not trial or not isinstance(trial.get("parameters"), dict):
        return cfg, [], []
    try:
        flags = tuning_spec.parse(cfg.tuning).flags(trial["parameters"])
    except (KeyError, TypeError, ValueError):  # a record of another search space (or none): shown, not applied
        flags = [f"--{k}={v}" for k, v in trial["parameters"].items()]
    row = [("tuned", f"trial {trial.get('id')}'s values (the rows here are that trial's): {' '.join(flags)}")]
    if not cfg.user_trainer:
        try:
            cfg = cfg.with_overrides([flag[2:] for flag in flags])
        except (ConfigError, TypeError, ValueError):  # shown as the study recorded them, in the row above
            pass
    return cfg, flags, row


def _origin(facts: dict[str, Any]) -> str:
    """Which trial the verified model came from, in one sentence."""
    if facts["verified"] == tuning_rules.BASELINE:
        return "The verified model is the baseline's (the job as it stands)."
    if facts["verified"] is not None:
        which = " (the study's best)" if facts["verified"] == facts["best"] else (
            f" (not the study's best, trial {facts['best']})" if facts["best"] else "")
        return f"The verified model is trial {facts['verified']}'s{which}."
    if facts["verification"]:
        return "The verified model's folder is none of the study's trials' models."
    return "The model was not verified: no trial's model was loaded."


def study_summary(facts: dict[str, Any]) -> str:
    n = facts["counts"]
    ended = f"{n['succeeded']} succeeded" + (f", {n['failed']} failed" if n["failed"] else "") + (
        f", {n['other']} stopped or running" if n["other"] else "")
    wall = f" in {facts['seconds']:.0f} s" if _finite(facts["seconds"]) is not None else ""
    how = f" ({facts['algorithm']} search)" if facts.get("algorithm") else ""
    text = f"{n['trials']} trials{how}{wall}: {ended}; goal: {facts['goal']} {facts['metric']}. "
    best = facts["best_trial"]
    if best:
        text += (f"Best: trial {facts['best']}, {facts['metric']} {tuning_rules.format_value(best.get('metric'))} with "
                 f"{tuning_rules.format_parameters(best.get('parameters') or {}) or 'no parameters'}. ")
    else:
        text += "No trial succeeded. "
    return text + _baseline_text(facts) + _origin(facts)


def _sentence(text: str) -> str:
    return (text[:1].upper() + text[1:]).rstrip(".") + ". " if text else ""


def _baseline_text(facts: dict[str, Any]) -> str:
    """The baseline beside the study and which model went on, in sentences ("" without a baseline)."""
    baseline = facts.get("baseline")
    if baseline is None:
        return ""
    if baseline["state"] == tuning_rules.SUCCEEDED:
        ran = (f"Baseline (the job as it stands, no tuning flags): {facts['metric']} "
               f"{tuning_rules.format_value(baseline['metric'])}. ")
    else:
        ran = (f"Baseline (the job as it stands): {baseline['state']}"
               + (f", {baseline['error']}" if baseline["error"] else "") + ". ")
    return ran + _sentence(str((facts.get("handed_on") or {}).get("reason") or ""))


def study_verdict(facts: dict[str, Any] | None) -> list[str]:
    """The study's sentences in "Is this model any good?": the best trial, the baseline beside it and which
    model went on (plainly, when the study found nothing better than the job as it stands)."""
    if not facts:
        return []
    if not facts["best"]:
        return [f"A hyperparameter study ran {facts['counts']['trials']} trials and none succeeded."]
    best = facts["best_trial"]
    head = (f"This model comes from a hyperparameter study: best of {facts['counts']['trials']} trials by "
            f"{facts['metric']} ({facts['goal']}), trial {facts['best']} with "
            f"{facts['metric']} {tuning_rules.format_value(best.get('metric'))}. ")
    if facts["verified"] == tuning_rules.BASELINE:
        head = (f"A hyperparameter study ran {facts['counts']['trials']} trials beside the job as it stands (the "
                f"baseline); its best, trial {facts['best']}, has {facts['metric']} "
                f"{tuning_rules.format_value(best.get('metric'))} ({facts['goal']}). ")
    return [(head + _baseline_text(facts) + _origin(facts)).strip()]


def _runs(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: every trial, then the baseline (no parameters: the job as it stands)."""
    baseline = facts.get("baseline")
    return facts["trials"] + ([{**baseline, "parameters": {}, "best": False}] if baseline else [])


def _trial_rows(facts: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in _runs(facts):
        seconds = _finite(t["seconds"])
        name = "baseline (the job as it stands)" if t["id"] == tuning_rules.BASELINE else t["id"]
        rows.append([name + (" ★ best" if t["best"] else "") + (" (verified)" if t["id"] == facts["verified"] else ""),
                     *[tuning_rules.format_value(t["parameters"].get(n)) if t["id"] != tuning_rules.BASELINE else "—"
                       for n in facts["parameters"]],
                     tuning_rules.format_value(t["metric"]), t["state"] + (f": {t['error']}" if t["error"] else ""),
                     f"{seconds:.1f}" if seconds is not None else "n/a"])
    return rows


def _axis_values(facts: dict[str, Any], name: str) -> tuple[list[str] | None, bool]:
    """(the categories in declared order, or None for a numeric axis; whether the axis is logarithmic)."""
    spec = facts["specs"].get(name) or {}
    seen = [t["parameters"].get(name) for t in facts["trials"] if name in t["parameters"]]
    categorical = spec.get("type") == "categorical" or any(isinstance(v, str) or isinstance(v, bool) for v in seen)
    if categorical:
        order = [str(v) for v in spec.get("values") or []]
        return order + [str(v) for v in dict.fromkeys(seen) if str(v) not in order], False
    log = spec.get("scale") in ("log", "reverse_log") and all((_finite(v) or 0) > 0 for v in seen)
    return None, log


def trials_figure(facts: dict[str, Any]) -> report_charts.Chart | None:
    """The metric of every trial by trial id, the best as a red star; a trial without a metric is an ``x`` at
    the bottom with its state under its id. None when no trial has a metric."""

    values = [_finite(t["metric"]) for t in facts["trials"]]
    if all(v is None for v in values):
        return None
    low = min(v for v in values if v is not None)
    chart = report_charts.Chart(f"{facts['metric']} per trial ({facts['goal']})",
                                width=int(max(460, 55 * len(values) + 200)), xlabel="trial", ylabel=facts["metric"],
                                xlim=(-0.5, len(values) - 0.5))
    xs = list(range(len(values)))
    shown = [(float(x), v) for x, v in zip(xs, values) if v is not None]
    chart.series.append(report_charts.Series(shown, COLOUR, marker="", opacity=0.35))
    for x, t, v in zip(xs, facts["trials"], values):
        if v is None:
            chart.series.append(report_charts.Series([(float(x), low)], FAILED_COLOUR, line=False, marker="x"))
        elif t["best"]:
            chart.series.append(report_charts.Series([(float(x), v)], BEST_COLOUR, f"best: trial {t['id']}",
                                                     line=False, marker="*", size=9))
        else:
            chart.series.append(report_charts.Series([(float(x), v)], COLOUR, line=False))
    baseline = facts.get("baseline")
    level = _finite(baseline.get("metric")) if baseline and baseline.get("state") == tuning_rules.SUCCEEDED else None
    if level is not None:  # the job as it stands: what a trial had to beat
        chart.levels.append((level, FAILED_COLOUR, f"baseline (the job as it stands): {tuning_rules.format_value(level)}"))
    chart.xticks = [(float(x), t["id"] + ("" if v is not None else f"\n{t['state'].lower()}"))
                    for x, t, v in zip(xs, facts["trials"], values)]
    return chart


def parameter_figure(facts: dict[str, Any], name: str) -> report_charts.Chart | None:
    """The metric against one parameter's value over the trials with a metric, the best as a red star. None
    when no trial with a metric has a value for it."""

    points = [(t["parameters"][name], _finite(t["metric"]), t["best"]) for t in facts["trials"]
              if name in t["parameters"] and _finite(t["metric"]) is not None]
    if not points:
        return None
    categories, log = _axis_values(facts, name)
    chart = report_charts.Chart(f"{facts['metric']} by {name}", width=380, height=290, xlabel=name,
                                ylabel=facts["metric"], legend=False)
    if categories is not None:  # a categorical axis: one slot per declared value, in the declared order
        position = {c: i for i, c in enumerate(categories)}
        xs = [float(position[str(v)]) for v, _, _ in points]
        chart.xticks = [(float(i), c) for i, c in enumerate(categories)]
        chart.xlim = (-0.5, len(categories) - 0.5)
    else:
        xs = [float(v) for v, _, _ in points]
        if log:
            chart.xscale = "log"
        declared = [v for v in (facts["specs"].get(name) or {}).get("values") or [] if _finite(v) is not None]
        if declared and not log:  # a discrete parameter: its declared values are the ticks
            chart.xticks = [(float(v), report_charts.number(float(v))) for v in sorted(declared)]
            low, high = min(xs + [float(v) for v in declared]), max(xs + [float(v) for v in declared])
            pad = (high - low) * 0.05 or 1.0
            chart.xlim = (low - pad, high + pad)
    for x, (_, metric, best) in zip(xs, points):
        if best:
            chart.series.append(report_charts.Series([(x, metric)], BEST_COLOUR, line=False, marker="*", size=9))
        else:
            chart.series.append(report_charts.Series([(x, metric)], COLOUR, line=False))
    return chart


def _uri(chart: report_charts.Chart | None) -> str | None:
    return report_charts.data_uri(report_charts.grid([chart], 1)) if chart is not None else None


def study_html(facts: dict[str, Any] | None, e) -> str:
    """The "Hyperparameter study" section ("" without a study)."""
    if not facts:
        return ""
    head = ["trial", *facts["parameters"], facts["metric"], "state", "wall time (s)"]
    body = ""
    for t, row in zip(_runs(facts), _trial_rows(facts)):
        cells = "".join(f"<td>{e(v)}</td>" for v in row[:-2])
        state = f"<td class='{'failed' if t['state'] in ('FAILED', 'INFEASIBLE') else ''}'>{e(row[-2])}</td>"
        body += (f"<tr class='{'best' if t['best'] else ''}' data-trial='{e(t['id'])}'>{cells}{state}"
                 f"<td>{e(row[-1])}</td></tr>")
    parts = [f"<h2>Hyperparameter study</h2><p id='study'>{e(study_summary(facts))}</p>",
             "<table id='trials'><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + f"</tr>{body}</table>"]
    chart = _uri(trials_figure(facts))
    if chart:
        parts.append(f"<img id='study-trials' alt='{e(facts['metric'])} per trial, the best (trial "
                     f"{e(str(facts['best']))}) highlighted' src='{chart}'>")
    else:
        parts.append(f"<p id='study-trials'>no trial reported {e(facts['metric'])}: nothing to chart</p>")
    charts = [(n, _uri(parameter_figure(facts, n))) for n in facts["parameters"]]
    if any(uri for _, uri in charts):
        parts.append("<div id='study-parameters'>" + "".join(
            f"<img class='study-parameter' data-parameter='{e(n)}' alt='{e(facts['metric'])} against {e(n)}' "
            f"src='{uri}'>" for n, uri in charts if uri) + "</div>")
    if facts.get("tuning_job"):
        parts.append(f"<p>Vertex AI HyperparameterTuningJob {e(str(facts['tuning_job']))}</p>")
    return "".join(parts)


def study_markdown(facts: dict[str, Any] | None) -> list[str]:
    if not facts:
        return []
    head = ["trial", *facts["parameters"], facts["metric"], "state", "wall time (s)"]
    rows = [[f"**{r[0]}**" if t["best"] else r[0], *r[1:]] for t, r in zip(_runs(facts), _trial_rows(facts))]
    return (["", "## Hyperparameter study", "", study_summary(facts), "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)] + ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows])


# -- the gate -----------------------------------------------------------------------------------------------
def gate_verdict(gate: dict[str, Any] | None) -> list[str]:
    """The gate's sentence in "Is this model any good?"."""
    if not gate or "passed" not in gate:
        return []
    if gate["passed"]:
        lines = [str(x).rsplit(": passed", 1)[0] for x in gate.get("lines") or []]
        return ["The gate passed: " + ("; ".join(lines) if lines else "no bar was set")
                + ". The model goes on to the Model Registry."]
    return [f"The gate refused this model ({gate_spec.gate_missed_bar(gate)}): it is not registered."]


def _parent_text(gate: dict[str, Any]) -> str:
    parent = gate.get("parent") if isinstance(gate.get("parent"), dict) else None
    if parent:
        evaluation = (f"its evaluation {parent['evaluation']}" if parent.get("evaluation")
                      else "it has no evaluation in the Model Registry")
        return f"compared with {parent.get('model')}'s default version {parent.get('version')} ({evaluation})"
    notes = [str(n) for n in gate.get("notes") or [] if str(n).startswith("better_than_parent")]
    return "; ".join(notes) or "not compared with a parent model (serving.gate.better_than_parent is off)"


def gate_html(gate: dict[str, Any] | None, e, expected: bool = False, where: str = "") -> str:
    """The "Gate" section: the verdict, each bar's line, the parent comparison or its note ("" without a gate;
    a note when the job sets bars and the gate's record is not there)."""
    if not gate or "passed" not in gate:
        if not expected:
            return ""
        return ("<h2>Gate</h2><p id='gate-verdict'>no gate record (gate.json) in "
                f"{e(where or 'the run folder')}: the gate step had not run when this page was written</p>")
    if gate["passed"]:
        verdict = "<p id='gate-verdict' class='passed'>passed: the model goes on to the Model Registry</p>"
    else:
        verdict = (f"<p id='gate-verdict' class='missed'>missed: {e(gate_spec.gate_missed_bar(gate))}; the model is "
                   "not registered</p>")
    bars = [b for b in gate.get("bars") or [] if isinstance(b, dict)]
    lines = [str(x) for x in gate.get("lines") or []]
    rows = ""
    for i, line in enumerate(lines):
        bar = bars[i] if i < len(bars) else {}
        passed = bar.get("passed", line.endswith(": passed"))
        rows += (f"<tr><td>{e(str(bar.get('field', '')))}</td><td>{e(line)}</td>"
                 f"<td class='{'passed' if passed else 'missed'}'>{'passed' if passed else 'missed'}</td></tr>")
    table = ("<table id='gate'><tr><th>set by</th><th>bar</th><th>result</th></tr>" + rows + "</table>") if rows \
        else "<p id='gate'>no bar: every verified model is registered</p>"
    other = [str(n) for n in gate.get("notes") or [] if not str(n).startswith("better_than_parent")]
    notes = ("<ul id='gate-notes'>" + "".join(f"<li>{e(n)}</li>" for n in other) + "</ul>") if other else ""
    return (f"<h2>Gate</h2>{verdict}{table}<p id='gate-parent'>parent: {e(_parent_text(gate))}</p>{notes}")


def gate_markdown(gate: dict[str, Any] | None) -> list[str]:
    if not gate or "passed" not in gate:
        return []
    head = "passed" if gate["passed"] else f"missed: {gate_spec.gate_missed_bar(gate)}"
    return (["", "## Gate", "", f"Gate {head}.", ""] + [f"- {x}" for x in gate.get("lines") or []]
            + [f"- parent: {_parent_text(gate)}"])


def checked_gate(cfg, figures: dict[str, Any], scalars: dict[str, Any], study: dict[str, Any] | None,
                 verification: dict[str, Any]) -> dict[str, Any]:
    """The job's bars checked on this report's figures, by the gate's own rules (``jobs.steps.gate.evaluate``). The
    report runs before the gate step (so that a refused model's run has its report too): it shows what the gate
    step will decide, the parent comparison aside, which only the gate step makes (its record: ``gate.json``)."""
    best = tuning_rules.handed_on(study) if study else None  # the model the study handed on: a trial's, or the baseline's
    tuning = ({study["metric"]: best["metric"]} if best and study.get("metric")
              and isinstance(best.get("metric"), (int, float)) else {})
    measured = gate_lib.measured(training=figures, scalars=last_values(scalars), tuning=tuning,
                                 verification=verification)
    try:
        record = gate_lib.evaluate(cfg.serving.gate, measured, parent_metrics=None, study=study).to_dict()
    except gate_lib.GateError as exc:
        return {"passed": False, "lines": [], "missed": str(exc), "notes": []}
    record["notes"] = [*record.get("notes", []), "checked here on the figures above, as the gate step checks "
                       "them; the gate step decides (with the parent comparison, when set) and records gate.json"]
    return record
