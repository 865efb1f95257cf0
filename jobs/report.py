"""The run report: one self-contained HTML file (plots and images embedded) plus a Markdown summary.

Written at the end of every run, local and Vertex (the ``report`` pipeline step), from what the run left:

* every TensorBoard scalar the trainer wrote (``jobs.tensorboard``: the built-in trainer's ``train/loss``
  ..., Keras' ``train/epoch_loss`` and ``validation/epoch_<metric>``, an evaluator's ``validation/...``),
  plotted one metric per chart (a metric's train and validation series together) and listed by name in a
  table, so every series is in the page's text, not only inside a picture;
* the training record (``training.json``: what ran, attempts, restarts; the built-in trainer's
  ``metrics.json``: strategy, replicas, global batch, precision, throughput);
* the verification record (``verification.json``, ``jobs.verify``): the serving signature, its inputs and
  outputs, latency, the predictions on the sample request; for a classifier also accuracy, the confusion
  matrix and a gallery of validation images with predicted and true class;
* the checkpoints kept and the launcher's attempts.

Sections that only make sense for a classifier appear only for one. Plots are matplotlib (Agg), embedded
as base64 PNG, so the file opens anywhere, the Vertex Pipelines UI's HTML viewer included, with no
network. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import base64
import html
import io
import os
import re
from typing import Any

from trainers.paths import join, readable

MAX_PREDICTIONS = 10


def _figure(**kwargs):
    """A matplotlib ``Figure`` made without ``pyplot``: no global figure manager or GUI backend to set up
    (importing ``pyplot`` was 0.6 s of a 1.3 s report step), and nothing to close; ``savefig`` renders PNGs
    with Agg, as matplotlib's "embedding in a web server" example does."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def metric_groups(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, list[str]]:
    """``{metric: [series, ...]}``: series named ``<run>/<metric>`` share a chart (``train/epoch_loss`` and
    ``validation/epoch_loss``); a series without a run is a metric of its own."""
    groups: dict[str, list[str]] = {}
    for series in sorted(scalars):
        metric = series.split("/", 1)[1] if "/" in series else series
        groups.setdefault(metric, []).append(series)
    return groups


def _curves_png(scalars: dict[str, list[tuple[int, float]]]) -> str | None:
    groups = metric_groups(scalars)
    if not groups:
        return None
    columns = min(3, len(groups))
    rows = -(-len(groups) // columns)
    fig = _figure(figsize=(4.6 * columns, 3.1 * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, (metric, names) in zip(axes.flat, groups.items()):
        for name in names:
            steps, values = zip(*scalars[name])
            ax.plot(steps, values, marker="o", markersize=3, label=name)
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.tight_layout()
    return _png(fig)


def _confusion_png(classes: list[str], matrix: list[list[int]]) -> str:
    import numpy as np

    m = np.asarray(matrix)
    fig = _figure(figsize=(1.2 + 0.7 * len(classes), 1 + 0.6 * len(classes)))
    ax = fig.subplots()
    ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > m.max() / 2 else "black")
    ax.set_title("confusion matrix (validation)")
    return _png(fig)


def checkpoint_steps(checkpoint_dir: str) -> list[int]:
    """Steps of the built-in trainer's checkpoints (``ckpt-<step>.index``) in a local or mounted folder."""
    try:
        names = os.listdir(readable(checkpoint_dir))
    except OSError:
        return []
    return sorted({int(m.group(1)) for n in names if (m := re.match(r"ckpt-(\d+)\.index$", n))})


def attempts(logs_dir: str) -> int:
    try:
        return sum(1 for n in os.listdir(readable(join(logs_dir, "replicas"))) if n.startswith("attempt-"))
    except OSError:
        return 0


def job_rows(cfg, training: dict[str, Any]) -> list[tuple[str, str]]:
    """The job table: name, trainer, strategy, replicas, batch, precision, machines, throughput."""
    figures = training.get("metrics") or {}
    rows = [("job", cfg.name if cfg else str(training.get("job", "n/a")))]
    if cfg is not None:
        pools = [(name, p) for name, p in zip(("chief", "worker", "parameter_server", "evaluator"),
                                              cfg.topology.pools()) if p.replica_count]
        machines = "; ".join(
            f"{name} {p.replica_count}× {p.machine_type}" + (f" + {p.accelerator_count}× {p.accelerator_type}"
                                                            if p.accelerator_count else "") for name, p in pools)
        trainer = f"python -m {cfg.trainer.module}" if cfg.trainer.module else f"built-in ({cfg.model.name})"
        rows += [("trainer", trainer), ("strategy", f"{cfg.topology.strategy}"
                                                    + (f" ({figures['strategy']})" if figures.get("strategy") else "")),
                 ("machines (Vertex pools)", machines or "n/a")]
    for key, label in (("replicas", "replicas"), ("global_batch_size", "global batch"), ("precision", "precision")):
        if figures.get(key) is not None:
            rows.append((label, str(figures[key])))
    eps = figures.get("examples_per_second")
    if isinstance(eps, (int, float)):
        rows.append(("throughput", f"{eps:.1f} examples/s"))
    if training.get("seconds") is not None:
        rows.append(("training wall time", f"{training['seconds']} s"))
    return rows


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


def build(*, title: str, rows: list[tuple[str, str]], scalars: dict[str, list[tuple[int, float]]],
          verification: dict[str, Any], checkpoints: list[int], checkpoint_dir: str = "", attempts_seen: int = 0,
          resumed: Any = None) -> dict[str, Any]:
    """The report's content: ``{"html": str, "markdown": str, "classes": [...], "confusion_matrix": [[...]]}``
    (the last two empty unless the model is a classifier; for KFP's ClassificationMetrics)."""
    e = html.escape
    parts = [f"<h1>Run report: {e(title)}</h1>",
             "<h2>Job</h2><table id='job'>" + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
             + "</table>"]
    curves = _curves_png(scalars)
    if curves:
        listing = "".join(
            f"<tr><td>{e(name)}</td><td>{len(points)}</td><td>{points[0][0]}..{points[-1][0]}</td>"
            f"<td>{points[-1][1]:.6g}</td><td>{min(v for _, v in points):.6g}</td></tr>"
            for name, points in sorted(scalars.items()))
        parts.append("<h2>Training</h2>"
                     f"<img id='curves' alt='every scalar the trainer wrote, one chart per metric' "
                     f"src='data:image/png;base64,{curves}'>"
                     "<table id='scalars'><tr><th>series</th><th>points</th><th>steps</th><th>last</th><th>min</th></tr>"
                     f"{listing}</table>")
    else:
        parts.append("<h2>Training</h2><p id='curves'>no TensorBoard scalars were found</p>")
    classes, matrix = verification.get("classes") or [], verification.get("confusion_matrix") or []
    classifier = bool(classes and matrix)
    if verification:
        latency = verification.get("latency_ms") or {}
        io_rows = "".join(f"<tr><th>input {e(k)}</th><td>{e(v)}</td></tr>" for k, v in (verification.get("inputs") or {}).items())
        io_rows += "".join(f"<tr><th>output {e(k)}</th><td>{e(v)}</td></tr>"
                           for k, v in (verification.get("outputs") or {}).items())
        parts.append(
            "<h2>Verification</h2>"
            f"<p id='verification'>signature <b>{e(str(verification.get('signature')))}</b> of {e(str(verification.get('model_dir', '')))} "
            f"(TensorFlow {e(str(verification.get('framework_version', '?')))}), loaded in a process that never trained, "
            f"ran on {verification.get('instances')} instances ({e(str(verification.get('input_source', '')))}): "
            f"{latency.get('median', '?')} ms median, {latency.get('first_call', '?')} ms first call</p>"
            f"<table id='signature'>{io_rows}</table>{_predictions_table(verification, e)}")
        acc, loss = verification.get("accuracy"), verification.get("loss")
        if isinstance(acc, (int, float)) and isinstance(loss, (int, float)):
            parts.append(f"<p id='validation'>accuracy <b>{acc:.3f}</b>, loss {loss:.4f} on "
                         f"{verification.get('examples')} {e(str(verification.get('split', '')))} examples</p>")
    else:
        parts.append("<h2>Verification</h2><p id='verification'>not verified</p>")
    if classifier:
        parts.append(f"<img id='confusion-matrix' alt='confusion matrix' "
                     f"src='data:image/png;base64,{_confusion_png(classes, matrix)}'>")
        gallery = verification.get("gallery") or []
        if gallery:
            cells = "".join(
                f"<figure class='{'ok' if g['label'] == g['predicted'] else 'wrong'}'>"
                f"<img alt='{e(g['label'])}' src='data:image/png;base64,{g['png_base64']}'>"
                f"<figcaption>pred {e(g['predicted'])} ({g['probability']:.2f})<br>true {e(g['label'])}</figcaption>"
                "</figure>" for g in gallery)
            parts.append(f"<h2>Validation samples</h2><div id='samples'>{cells}</div>")
    kept = ", ".join(f"ckpt-{s}" for s in checkpoints) or "none of the built-in trainer's"
    parts.append("<h2>Checkpoints and resumes</h2><ul id='checkpoints'>"
                 f"<li>checkpoints kept: {e(kept)} ({e(checkpoint_dir or 'n/a')})</li>"
                 f"<li>launcher attempts: {attempts_seen or 'n/a'}; this run resumed from step "
                 f"{resumed if resumed is not None else '— (fresh start, or not reported by the trainer)'}</li></ul>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ccc;padding:4px 10px;text-align:left}"
             "#samples{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0;text-align:center;font-size:12px}"
             "figure.ok figcaption{color:#176317}figure.wrong figcaption{color:#b00020}img{max-width:100%}"
             "#samples img{width:96px;height:96px;image-rendering:pixelated}")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Run report: {e(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    md = [f"# Run report: {title}", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    if scalars:
        md += ["", "| series | last | min |", "|---|---|---|"] + [
            f"| {name} | {points[-1][1]:.6g} | {min(v for _, v in points):.6g} |" for name, points in sorted(scalars.items())]
    if verification:
        md += ["", f"Verified `{verification.get('signature')}` on {verification.get('instances')} instances: "
                   f"{(verification.get('latency_ms') or {}).get('median', '?')} ms median."]
        if isinstance(verification.get("accuracy"), (int, float)):
            md += [f"Validation accuracy **{verification['accuracy']:.3f}** on {verification.get('examples')} examples."]
    md += ["", f"Checkpoints: {kept}."]
    return {"html": page, "markdown": "\n".join(md) + "\n", "classes": classes if classifier else [],
            "confusion_matrix": matrix if classifier else []}


def gather(cfg, base: str = "", *, verification: dict[str, Any] | None = None, logs_uri: str = "",
           checkpoints_uri: str = "") -> dict[str, Any]:
    """The report of a run: what ``base`` (a run folder, local or ``gs://`` read through the ``/gcs`` mount)
    holds, with the given parts winning over it. Any part may be missing."""
    from jobs.tensorboard import read_scalars
    from trainers import fileio

    training: dict[str, Any] = {}
    if base:
        where = readable(base)
        training = fileio.read_json(join(where, "training.json")) or {}
        if not training.get("metrics"):
            builtin = fileio.read_json(join(where, "metrics.json"))
            if builtin:
                training["metrics"] = builtin
        if verification is None:
            verification = fileio.read_json(join(where, "verification.json"))
    logs = logs_uri or (join(base, "logs") if base else "")
    checkpoints = checkpoints_uri or (join(base, "checkpoints") if base else "")
    resumed = (training.get("metrics") or {}).get("resumed_from_step")
    if resumed is None:
        resumed = next((r.get("resumed_from_step") for r in reversed(training.get("restarts") or [])
                        if r.get("resumed_from_step") is not None), None)
    title = cfg.name if cfg else (os.path.basename(base.rstrip("/")) if base else "model")
    return build(title=title, rows=job_rows(cfg, training), scalars=read_scalars(readable(logs)) if logs else {},
                 verification=verification or {}, checkpoints=checkpoint_steps(checkpoints) if checkpoints else [],
                 checkpoint_dir=checkpoints, attempts_seen=attempts(logs) if logs else 0, resumed=resumed)


def write(path: str, content: dict[str, Any]) -> str:
    """Write the report's HTML to ``path`` atomically; returns ``path``."""
    from trainers import fileio

    fileio.write_bytes_atomic(readable(path), content["html"].encode("utf-8"))
    return path
