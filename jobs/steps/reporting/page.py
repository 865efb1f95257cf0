"""The run report: one self-contained HTML file (plots and images embedded) plus a Markdown summary, rendered
here (:func:`build`) from what ``jobs.steps.reporting.data`` gathered (:func:`jobs.steps.reporting.data.gather`).

It answers the question a user opens it with, "is this model any good?", first (held-out accuracy against
the majority-class baseline, the weakest class, how much one validation image weighs), then says how the
model was made. Written at the end of every run, local and Vertex (the ``report`` pipeline step), from what
the run left:

* every TensorBoard scalar the trainer wrote (``jobs.run_records.tensorboard``: the built-in trainer's ``train/loss``
  ..., Keras' ``train/epoch_loss`` and ``validation/epoch_<metric>``, an evaluator's ``validation/...``),
  plotted one metric per chart (a metric's train and validation series together) and listed by name in a
  table, so every series is in the page's text, not only inside a picture;
* the training record (``training.json``: what ran, attempts, restarts; the built-in trainer's
  ``metrics.json``: strategy, replicas, global batch, precision, throughput);
* the verification record (``verification.json``, ``jobs.steps.verify``): the serving signature, its inputs and
  outputs, latency, the predictions on the sample request; for a classifier also accuracy, the confusion
  matrix and a gallery of validation images with predicted and true class;
* the checkpoints kept and the launcher's attempts;
* the job config: the hyperparameters; the prepared data's ``manifest.json``: examples per split and class;
* ``steps.json`` (``jobs.local.run.step_timer.StepTimer``, local runs): each pipeline step's wall time so far, and
  ``.run.lock`` (held by the run while this step runs): when and by which command the run started;
* the code version (``jobs.run_records.provenance.code_version``): the project's git commit, else the installed package's version; for a
  user's trainer also its own (``jobs.images.user_code.trainer_version``: its repository's commit, and its files' content hash);
* a tuned run's study (``tuning.json``, or the ``study`` artifact: every trial, the best marked, charts of the
  metric per trial and per parameter; the figures, folders and hyperparameters shown are the verified
  trial's) and the gate's verdict (``gate.json``): both sections live in ``jobs.steps.reporting.sections``.

Sections that only make sense for a classifier appear only for one. Charts are SVG written by
``jobs.steps.reporting.charts``, embedded as ``data:`` images, so the file opens anywhere, the Vertex Pipelines UI's HTML viewer
included, with no network. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import html
import os
from typing import Any

from jobs.local.run import step_table
from jobs.steps.reporting import charts as report_charts, sections
from jobs.steps.reporting.eval_section import EVAL_MISSING, eval_html, eval_markdown, eval_verdict
from jobs.run_records.tensorboard import CURVES_HOW, NO_SCALARS
from trainers import fileio
from jobfile.paths import readable

MAX_PREDICTIONS = 10


def _predictions_table(verification: dict[str, Any], e) -> str:
    rows = verification.get("predictions") or []
    if not rows:
        return ""
    names = sorted(rows[0])
    head = "".join(f"<th>{e(n)}</th>" for n in names)
    body = "".join("<tr><td>" + str(i) + "</td>" + "".join(f"<td>{e(_short(r.get(n)))}</td>" for n in names) + "</tr>"
                   for i, r in enumerate(rows[:MAX_PREDICTIONS]))
    more = f"<p>({len(rows) - MAX_PREDICTIONS} more)</p>" if len(rows) > MAX_PREDICTIONS else ""
    return f"<table id='predictions'><tr><th>instance</th>{head}</tr>{body}</table>{more}"


def _short(value: Any, limit: int = 120) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _fmt(value: Any, spec: str = ".4g") -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def per_class(classes: list[str], matrix: list[list[int]]) -> list[dict[str, Any]]:
    """Precision and recall of every class from the confusion matrix (rows: true class, columns: predicted);
    None where undefined (a class never predicted has no precision)."""
    out = []
    for i, name in enumerate(classes):
        support = sum(matrix[i])
        predicted = sum(row[i] for row in matrix)
        hit = matrix[i][i]
        out.append({"class": name, "support": support, "predicted": predicted, "correct": hit,
                    "precision": hit / predicted if predicted else None, "recall": hit / support if support else None})
    return out


def _table(element_id: str, head: list[str], rows: list[list[str]], e) -> str:
    return (f"<table id='{element_id}'><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in row) + "</tr>" for row in rows) + "</table>")


def _kv_table(element_id: str, rows: list[tuple[str, str]], e) -> str:
    return (f"<table id='{element_id}'>" + "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows)
            + "</table>")


def verdict(verification: dict[str, Any], classes_stats: list[dict[str, Any]], scalars: dict[str, list],
            data: dict[str, Any] | None, train: dict[str, Any]) -> list[str]:
    """The answer to "is this model any good?", as sentences of plain text (facts and their yardsticks): the
    held-out verdict on ``serving.eval_data`` for any model (``jobs.steps.reporting.eval_section.eval_verdict``), the built-in
    classifier's on its validation split; a user's model without eval_data is said not to be judged, and how to
    have it judged."""
    acc, examples = verification.get("accuracy"), verification.get("examples")
    held_out = eval_verdict(verification.get("eval"))
    out = []
    if isinstance(acc, (int, float)) and isinstance(examples, int) and examples:
        out.append(f"Validation accuracy {acc:.3f} ({round(acc * examples)} of {examples} held-out images right), "
                   "measured on the exported model in a process that never trained.")
        if classes_stats:
            top = max(classes_stats, key=lambda c: c["support"])
            out.append(f"Yardsticks: always answering the most common class ({top['class']}, {top['support']} of "
                       f"{examples}) scores {top['support'] / examples:.3f}; guessing at random "
                       f"{1 / len(classes_stats):.3f}.")
            recalls = [c for c in classes_stats if c["recall"] is not None]
            weakest = min(recalls, key=lambda c: c["recall"], default=None)
            if weakest is not None and weakest["recall"] < max(c["recall"] for c in recalls):
                out.append(f"Weakest class: {weakest['class']}, recall {weakest['recall']:.3f} "
                           f"({weakest['correct']} of {weakest['support']} found).")
            elif weakest is not None:
                out.append(f"Every class has the same recall, {weakest['recall']:.3f}.")
        out.append(f"With {examples} validation images, one image is {100 / examples:.1f} points of accuracy: "
                   "differences smaller than that are noise.")
        if isinstance(train.get("train_accuracy"), (int, float)):
            out.append(f"Training accuracy over the last logged steps: {train['train_accuracy']:.3f} (a large gap "
                       "above the validation accuracy means the model learned its training images, not the task).")
        out += held_out
    elif verification:
        out += held_out
        finals = {name: points[-1][1] for name, points in scalars.items() if points}
        shown = {k: v for k, v in finals.items() if k.startswith("validation")} or finals
        if shown:
            out.append("The trainer's own final values: "
                       + ", ".join(f"{k} {v:.4g}" for k, v in sorted(shown.items())[:6]) + ".")
        if not held_out:
            out.append(EVAL_MISSING)
        out.append(f"The exported model loads and serves: {verification.get('signature', '?')} answered "
                   f"{verification.get('instances', '?')} instance(s).")
    else:
        out.append("The model was not verified: nothing here says it loads or serves.")
    if data and not data.get("missing") and data.get("counts"):
        counts = (data["counts"].get("train") or {}).values()
        if counts and min(counts) and max(counts) / min(counts) >= 1.5:
            out.append(f"The training classes are unbalanced ({min(counts)} to {max(counts)} images per class).")
    return out


def build(*, title: str, rows: list[tuple[str, str]], scalars: dict[str, list[tuple[int, float]]],
          verification: dict[str, Any], checkpoints: list[int], checkpoint_dir: str = "", attempts_seen: int = 0,
          resumed: Any = None, fresh: bool = False, hyperparameters: list[tuple[str, str]] = (),
          data: dict[str, Any] | None = None, steps: dict[str, Any] | None = None,
          provenance: list[tuple[str, str]] = (), train: dict[str, Any] | None = None,
          restarts: list[dict[str, Any]] = (), vertex_attempts: list[dict[str, Any]] = (),
          study: dict[str, Any] | None = None,
          gate: dict[str, Any] | None = None, gate_expected: bool = False, gate_where: str = "") -> dict[str, Any]:
    """The report's content: ``{"html": str, "markdown": str, "classes": [...], "confusion_matrix": [[...]]}``
    (the last two empty unless the model is a classifier; for KFP's ClassificationMetrics). ``resumed``: the
    step this run restored; ``fresh``: the trainer said it restored nothing (started from step 0). ``study``:
    ``jobs.steps.reporting.sections.study_facts``; ``gate``: the gate's record (``gate_expected``: the job sets bars, so
    a missing record is said)."""

    e = html.escape
    train = train or {}
    classes, matrix = verification.get("classes") or [], verification.get("confusion_matrix") or []
    classifier = bool(classes and matrix)
    stats = per_class(classes, matrix) if classifier else []
    answer = verdict(verification, stats, scalars, data, train) + sections.study_verdict(study) \
        + sections.gate_verdict(gate)
    parts = [f"<h1>Run report: {e(title)}</h1>",
             "<h2>Is this model any good?</h2><ul id='verdict'>" + "".join(f"<li>{e(x)}</li>" for x in answer) + "</ul>"
             + eval_html(verification.get("eval"), e)]
    if provenance:
        parts.append("<h2>Run</h2>" + _kv_table("provenance", list(provenance), e))
    parts.append("<h2>Job</h2>" + _kv_table("job", rows, e))
    if hyperparameters:
        parts.append("<h2>Hyperparameters</h2>" + _kv_table("hyperparameters", list(hyperparameters), e))
    parts.append(sections.study_html(study, e))
    if data is not None:
        parts.append(_data_html(data, e))
    parts.append(_training_html(scalars, e))
    parts.append(_verification_html(verification, e))
    if classifier:
        parts += _classifier_html(verification, stats, e)
    parts.append(_model_html(verification, e))
    parts.append(sections.gate_html(gate, e, expected=gate_expected, where=gate_where))
    parts.append(step_table.section(steps))  # completed by the local run once the pipeline has ended
    kept = ", ".join(f"ckpt-{s}" for s in checkpoints) or "none of the built-in trainer's"
    start = _start_text(resumed, fresh)
    parts.append(_checkpoints_html(kept, checkpoint_dir, attempts_seen, start, restarts, vertex_attempts, e))
    md = [f"# Run report: {title}", "", *[f"- {x}" for x in answer], *eval_markdown(verification.get("eval")),
          "", "| | |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in [*provenance, *rows, *hyperparameters]]
    md += sections.study_markdown(study)
    md += _results_markdown(data, scalars, verification, stats)
    md += sections.gate_markdown(gate)
    md += _run_markdown(steps, kept, start, vertex_attempts)
    return {"html": _page(title, parts), "markdown": "\n".join(md) + "\n", "classes": classes if classifier else [],
            "confusion_matrix": matrix if classifier else []}


def _data_html(data: dict[str, Any], e) -> str:
    """The Data section: the prepared data's classes and examples per split, or where its manifest was missing."""
    if data.get("missing"):
        return f"<h2>Data</h2><p id='data'>no prepared-data manifest at {e(str(data.get('dir')))}</p>"
    counts, totals = data.get("counts") or {}, data.get("num_examples") or {}
    body = [[c, (counts.get("train") or {}).get(c, "?"), (counts.get("validation") or {}).get(c, "?")]
            for c in data["classes"]]
    body.append(["total", totals.get("train", "?"), totals.get("validation", "?")])
    return (f"<h2>Data</h2><p>{len(data['classes'])} classes, {data.get('image_size')}×{data.get('image_size')} "
            f"pixels ({e(str(data.get('encoding')))} records) in {e(str(data.get('dir')))}, prepared from "
            f"{e(str(data.get('source')))}{' ' + e(str(data['path'])) if data.get('path') else ''}</p>"
            + _table("data", ["class", "train", "validation"], body, e))


def _training_html(scalars: dict[str, list[tuple[int, float]]], e) -> str:
    """The Training section: one chart per metric and every series listed by name, or how to have curves."""
    curves = report_charts.curves_uri(scalars)
    if not curves:
        return f"<h2>Training</h2><p id='curves'>{e(NO_SCALARS)}.</p><p id='curves-how'>{e(CURVES_HOW)}.</p>"
    validation_series = sorted(n for n in scalars if n.startswith("validation"))
    listing = "".join(
        f"<tr><td>{e(name)}</td><td>{len(points)}</td><td>{points[0][0]}..{points[-1][0]}</td>"
        f"<td>{points[-1][1]:.6g}</td><td>{min(v for _, v in points):.6g}</td></tr>"
        for name, points in sorted(scalars.items()))
    note = (f"validation series: {', '.join(validation_series)} (plotted with the train series of the same "
            "metric; written during training, in the training's precision: the Verification section measures the "
            "exported model again, so its last figures can differ slightly)"
            if validation_series else "no validation series: the trainer wrote training series only")
    return ("<h2>Training</h2>"
            f"<img id='curves' alt='every scalar the trainer wrote, one chart per metric' "
            f"src='{curves}'>"
            f"<p id='validation-series'>{e(note)}</p>"
            "<table id='scalars'><tr><th>series</th><th>points</th><th>steps</th><th>last</th><th>min</th></tr>"
            f"{listing}</table>")


def _verification_html(verification: dict[str, Any], e) -> str:
    """The Verification section: the serving signature, its inputs and outputs, latency, predictions, accuracy."""
    if not verification:
        return "<h2>Verification</h2><p id='verification'>not verified</p>"
    latency = verification.get("latency_ms") or {}
    io_rows = "".join(f"<tr><th>input {e(k)}</th><td>{e(v)}</td></tr>" for k, v in (verification.get("inputs") or {}).items())
    io_rows += "".join(f"<tr><th>output {e(k)}</th><td>{e(v)}</td></tr>"
                       for k, v in (verification.get("outputs") or {}).items())
    out = (
        "<h2>Verification</h2>"
        f"<p id='verification'>signature <b>{e(str(verification.get('signature')))}</b> of {e(str(verification.get('model_dir', '')))} "
        f"(TensorFlow {e(str(verification.get('framework_version', '?')))}), loaded in a process that never trained, "
        f"ran on {verification.get('instances')} instances ({e(str(verification.get('input_source', '')))}): "
        f"{latency.get('median', '?')} ms median, {latency.get('first_call', '?')} ms first call</p>"
        f"<table id='signature'>{io_rows}</table>{_predictions_table(verification, e)}")
    acc, loss = verification.get("accuracy"), verification.get("loss")
    if isinstance(acc, (int, float)) and isinstance(loss, (int, float)):
        out += (f"<p id='validation'>accuracy <b>{acc:.3f}</b>, loss {loss:.4f} on "
                f"{verification.get('examples')} {e(str(verification.get('split', '')))} examples</p>")
    return out


def _classifier_html(verification: dict[str, Any], stats: list[dict[str, Any]], e) -> list[str]:
    """A classifier's sections: precision and recall per class, the confusion matrix, the validation samples."""
    classes, matrix = verification["classes"], verification["confusion_matrix"]
    parts = ["<h3>Per class (validation)</h3>" + _table(
        "per-class", ["class", "images", "predicted as it", "precision", "recall"],
        [[c["class"], c["support"], c["predicted"], _fmt(c["precision"], ".3f"), _fmt(c["recall"], ".3f")]
         for c in stats], e)
        + "<p>precision: of the images predicted as the class, the share that are; recall: of the class's "
          "images, the share found; n/a: never predicted</p>",
        f"<img id='confusion-matrix' alt='confusion matrix' "
        f"src='{report_charts.data_uri(report_charts.confusion(classes, matrix))}'>"]
    order = {c: i for i, c in enumerate(classes)}
    gallery = sorted(verification.get("gallery") or [], key=lambda g: order.get(g.get("label"), len(order)))
    if gallery:
        cells = "".join(
            f"<figure class='{'ok' if g['label'] == g['predicted'] else 'wrong'}' data-class='{e(g['label'])}'>"
            f"<img alt='{e(g['label'])}' src='data:image/png;base64,{g['png_base64']}'>"
            f"<figcaption>pred {e(g['predicted'])} ({g['probability']:.2f})<br>true {e(g['label'])}</figcaption>"
            "</figure>" for g in gallery)
        shown = sorted({g["label"] for g in gallery}, key=lambda c: order.get(c, len(order)))
        parts.append(f"<h2>Validation samples</h2><p>{len(gallery)} images of {len(shown)} of the "
                     f"{len(classes)} classes ({e(', '.join(shown))})</p><div id='samples'>{cells}</div>")
    return parts


def _model_html(verification: dict[str, Any], e) -> str:
    """The Model section (parameters, size on disk, trained precision); empty when nothing of it is known."""
    model_rows = []
    if isinstance(verification.get("parameters"), int):
        model_rows.append(("parameters", f"{verification['parameters']:,} (the variables its serving signature reads)"))
    size = _folder_bytes(verification.get("model_dir") or "")
    if size:
        model_rows.append(("SavedModel on disk", f"{size / 1e6:.1f} MB"))
    meta = verification.get("metadata") or {}
    if meta.get("trained_precision"):
        model_rows.append(("trained in", f"{meta['trained_precision']}; exported as float32"))
    return "<h2>Model</h2>" + _kv_table("model", model_rows, e) if model_rows else ""


def _start_text(resumed: Any, fresh: bool) -> str:
    """Where this run started: the step it resumed from, step 0, or that the trainer did not say."""
    if resumed is not None:
        return f"this run resumed from step {resumed}"
    if fresh:
        return "this run started from step 0 (there was no checkpoint to resume from)"
    return "where this run started is not reported by the trainer"


def _checkpoints_html(kept: str, checkpoint_dir: str, attempts_seen: int, start: str,
                      restarts: list[dict[str, Any]], vertex_attempts: list[dict[str, Any]], e) -> str:
    """The Checkpoints and resumes section: checkpoints kept, attempts, restarts, Vertex fail-overs."""
    restart_text = "".join(
        f"<li>restart: {e(str(r.get('replica')))} exited with status {e(str(r.get('exit_status')))}; attempt "
        f"{e(str(r.get('attempt')))} resumed from step {e(str(r.get('resumed_from_step')))}</li>" for r in restarts)
    vertex_text = "".join(
        f"<li>Vertex CustomJob {e(str(a.get('job', '')).rsplit('/', 1)[-1])} in {e(str(a.get('region')))} "
        f"{e(str(a.get('strategy')))}: {e(str(a.get('state')))}"
        + (f"; fell over to {e(str(a['fell_over_to']))}, resuming from {e(str(a.get('resumes_from')))}"
           if a.get("fell_over_to") else "") + "</li>" for a in vertex_attempts)
    return ("<h2>Checkpoints and resumes</h2><ul id='checkpoints'>"
            f"<li>checkpoints kept: {e(kept)} ({e(checkpoint_dir or 'n/a')})</li>"
            f"<li>launcher attempts: {attempts_seen or 'n/a'}; {e(start)}</li>{restart_text}{vertex_text}</ul>")


def _page(title: str, parts: list[str]) -> str:
    """The self-contained HTML page around the sections."""
    e = html.escape
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:left}"
             "#verdict li{margin:.3em 0}"
             "#samples{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0;text-align:center;font-size:12px}"
             "figure.ok figcaption{color:#176317}figure.wrong figcaption{color:#b00020}img{max-width:100%}"
             "#samples img{width:96px;height:96px;image-rendering:pixelated}" + sections.STYLE)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Run report: {e(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def _results_markdown(data: dict[str, Any] | None, scalars: dict[str, list[tuple[int, float]]],
                      verification: dict[str, Any], stats: list[dict[str, Any]]) -> list[str]:
    """The Markdown summary's data, training series, verification and per-class lines."""
    md = []
    if data and not data.get("missing"):
        totals = data.get("num_examples") or {}
        md += ["", f"Data: {len(data['classes'])} classes, {totals.get('train', '?')} train and "
                   f"{totals.get('validation', '?')} validation examples."]
    if scalars:
        md += ["", "| series | last | min |", "|---|---|---|"] + [
            f"| {name} | {points[-1][1]:.6g} | {min(v for _, v in points):.6g} |" for name, points in sorted(scalars.items())]
    if verification:
        md += ["", f"Verified `{verification.get('signature')}` on {verification.get('instances')} instances: "
                   f"{(verification.get('latency_ms') or {}).get('median', '?')} ms median."]
        if isinstance(verification.get("accuracy"), (int, float)):
            md += [f"Validation accuracy **{verification['accuracy']:.3f}** on {verification.get('examples')} examples."]
    if stats:
        md += ["", "| class | images | precision | recall |", "|---|---|---|---|"] + [
            f"| {c['class']} | {c['support']} | {_fmt(c['precision'], '.3f')} | {_fmt(c['recall'], '.3f')} |" for c in stats]
    return md


def _run_markdown(steps: dict[str, Any] | None, kept: str, start: str,
                  vertex_attempts: list[dict[str, Any]]) -> list[str]:
    """The Markdown summary's last lines: step times, checkpoints and where the run started, Vertex fail-overs."""
    md = []
    ended = [x for x in (steps or {}).get("steps") or [] if isinstance(x, dict)]
    if ended:
        md += ["", "Steps: " + ", ".join(f"{x.get('name', '?')} {_fmt(x.get('seconds'), '.1f')} s" for x in ended) + "."]
    md += ["", f"Checkpoints: {kept}; {start}."]
    md += [f"Vertex fell over: CustomJob {str(a.get('job', '')).rsplit('/', 1)[-1]} in {a.get('region')} "
           f"{a.get('strategy')} ended {a.get('state')} ({a.get('cause')}); went on in {a['fell_over_to']} from "
           f"{a.get('resumes_from')}." for a in vertex_attempts if a.get("fell_over_to")]
    return md


def _folder_bytes(path: str) -> int:
    """Bytes of the files under a local (or mounted) folder; 0 when it cannot be walked here."""
    where = readable(path) if path else ""
    if not where or "://" in where or not os.path.isdir(where):
        return 0
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(where) for f in files)


def write(path: str, content: dict[str, Any]) -> str:
    """Write the report's HTML to ``path`` atomically; returns ``path``."""
    fileio.write_bytes_atomic(readable(path), content["html"].encode("utf-8"))
    return path
