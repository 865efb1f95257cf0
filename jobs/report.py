"""The run report: one self-contained HTML file (plots and images embedded) plus a Markdown summary.

Written at the end of every run, local and Vertex (the ``report`` pipeline step), from what the run left
in its output folder: the chief's TensorBoard event files (loss, accuracy, examples/s per step),
``metrics.json`` (training), ``verification.json`` (held-out accuracy, confusion matrix, a gallery of
validation images with predicted and true class), the checkpoints and the launcher's attempts (resumes).
Plots are matplotlib (Agg), embedded as base64 PNG, so the file opens anywhere, including the Vertex
Pipelines UI's HTML artifact viewer, with no network.
"""
from __future__ import annotations

import base64
import html
import io
import re
from typing import Any

from trainers.paths import join

CURVES = ("train/loss", "train/accuracy", "train/examples_per_second")


def read_scalars(logs_dir: str) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` from the event files directly in ``logs_dir`` (local or gs://).

    A resumed run writes some steps twice; the last value written for a step wins."""
    import tensorflow as tf
    from tensorboard.backend.event_processing import event_accumulator

    from tensorboard.backend.event_processing.directory_watcher import DirectoryDeletedError

    if not tf.io.gfile.isdir(logs_dir):
        return {}
    acc = event_accumulator.EventAccumulator(logs_dir, size_guidance={event_accumulator.TENSORS: 0})
    try:
        acc.Reload()
    except (tf.errors.OpError, OSError, ValueError, DirectoryDeletedError):
        return {}
    out: dict[str, list[tuple[int, float]]] = {}
    for tag in acc.Tags().get("tensors", []):
        by_step = {e.step: float(tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)}
        out[tag] = sorted(by_step.items())
    return out


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _curves_png(scalars: dict[str, list[tuple[int, float]]]) -> str | None:
    tags = [t for t in CURVES[:2] if scalars.get(t)]
    if not tags:
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tags), figsize=(5 * len(tags), 3.2))
    for ax, tag in zip(list(axes) if len(tags) > 1 else [axes], tags):
        steps, values = zip(*scalars[tag])
        ax.plot(steps, values, marker="o", markersize=3)
        ax.set_title(tag.split("/")[-1])
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    return _png(fig)


def _confusion_png(classes: list[str], matrix: list[list[int]]) -> str:
    import matplotlib.pyplot as plt
    import numpy as np

    m = np.asarray(matrix)
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * len(classes), 1 + 0.6 * len(classes)))
    ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > m.max() / 2 else "black")
    ax.set_title("confusion matrix (validation)")
    return _png(fig)


def _checkpoints(checkpoint_dir: str) -> list[int]:
    import tensorflow as tf

    try:
        names = tf.io.gfile.listdir(checkpoint_dir)
    except (tf.errors.OpError, OSError):
        return []
    return sorted({int(m.group(1)) for n in names if (m := re.match(r"ckpt-(\d+)\.index$", n.rstrip("/")))})


def _attempts(logs_dir: str) -> int:
    import tensorflow as tf

    try:
        return sum(1 for n in tf.io.gfile.listdir(join(logs_dir, "replicas")) if n.startswith("attempt-"))
    except (tf.errors.OpError, OSError):
        return 0


def _job_rows(cfg, training: dict[str, Any]) -> list[tuple[str, str]]:
    pools = [(name, p) for name, p in zip(("chief", "worker", "parameter_server", "evaluator"), cfg.topology.pools())
             if p.replica_count]
    machines = "; ".join(
        f"{name} {p.replica_count}× {p.machine_type}" + (f" + {p.accelerator_count}× {p.accelerator_type}"
                                                        if p.accelerator_count else "") for name, p in pools)
    eps = training.get("examples_per_second")
    return [("job", cfg.name), ("model", cfg.model.name),
            ("strategy", f"{cfg.topology.strategy} ({training.get('strategy', '?')})"),
            ("replicas", str(training.get("replicas", "?"))), ("global batch", str(training.get("global_batch_size", "?"))),
            ("precision", str(training.get("precision") or getattr(cfg.training, "precision", "float32"))),
            ("machines (Vertex pools)", machines or "n/a"),
            ("throughput", f"{eps:.1f} examples/s" if isinstance(eps, (int, float)) else "n/a")]


def build(cfg, base: str) -> dict[str, Any]:
    """The report's content for the run in ``base``: ``{"html": str, "markdown": str, "classes": [...],
    "confusion_matrix": [[...]]}`` (the last two for KFP's ClassificationMetrics)."""
    from trainers import fileio

    training = fileio.read_json(join(base, "metrics.json")) or {}
    verification = fileio.read_json(join(base, "verification.json")) or {}
    logs, checkpoints = join(base, "logs"), join(base, "checkpoints")
    scalars = read_scalars(logs)
    steps = _checkpoints(checkpoints)
    attempts = _attempts(logs)
    resumed = training.get("resumed_from_step")
    classes, matrix = verification.get("classes") or [], verification.get("confusion_matrix") or []

    e = html.escape
    parts = [f"<h1>Run report: {e(cfg.name)}</h1>",
             "<h2>Job</h2><table id='job'>" + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>"
                                                     for k, v in _job_rows(cfg, training)) + "</table>"]
    curves = _curves_png(scalars)
    parts.append("<h2>Training</h2>" + (f"<img id='curves' alt='loss and accuracy per step' "
                                        f"src='data:image/png;base64,{curves}'>" if curves
                                        else "<p id='curves'>no TensorBoard scalars were found</p>"))
    acc, loss = verification.get("accuracy"), verification.get("loss")
    parts.append("<h2>Validation</h2>" + (
        f"<p id='validation'>accuracy <b>{acc:.3f}</b>, loss {loss:.4f} on {verification.get('examples')} "
        f"{e(str(verification.get('split', '')))} examples (the exported SavedModel, loaded in a fresh process)</p>"
        if isinstance(acc, (int, float)) and isinstance(loss, (int, float)) else "<p id='validation'>not verified</p>"))
    if classes and matrix:
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
    parts.append("<h2>Checkpoints and resumes</h2><ul id='checkpoints'>"
                 f"<li>checkpoints kept: {', '.join(f'ckpt-{s}' for s in steps) or 'none'} ({e(checkpoints)})</li>"
                 f"<li>launcher attempts: {attempts or 'n/a'}; this run resumed from step "
                 f"{resumed if resumed is not None else '— (fresh start)'}</li></ul>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 10px;text-align:left}"
             "#samples{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0;text-align:center;font-size:12px}"
             "figure.ok figcaption{color:#176317}figure.wrong figcaption{color:#b00020}img{max-width:100%}"
             "#samples img{width:96px;height:96px;image-rendering:pixelated}")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>Run report: {e(cfg.name)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    md = [f"# Run report: {cfg.name}", "", "| | |", "|---|---|"] + [f"| {k} | {v} |" for k, v in _job_rows(cfg, training)]
    if isinstance(acc, (int, float)):
        md += ["", f"Validation accuracy **{acc:.3f}** on {verification.get('examples')} examples."]
    md += ["", f"Final train loss {training.get('train_loss')}, steps {training.get('steps')}, "
               f"checkpoints {', '.join(f'ckpt-{s}' for s in steps) or 'none'}."]
    return {"html": page, "markdown": "\n".join(md) + "\n", "classes": classes, "confusion_matrix": matrix}


def write(cfg, base: str) -> tuple[str, dict[str, Any]]:
    """Build the report and write ``<base>/report.html`` atomically; returns (path, content)."""
    from trainers import fileio

    content = build(cfg, base)
    path = join(base, "report.html")
    fileio.write_bytes_atomic(path, content["html"].encode("utf-8"))
    return path, content
