"""The run report's charts: matplotlib figures made without ``pyplot``, embedded in the page as base64 PNG.

The one home of how a chart is made and embedded (:func:`figure`, :func:`png`), for the page's own charts (the
training curves, one chart per metric: :func:`curves_png`; the confusion matrix: :func:`confusion_png`) and for
the study's (``jobs.steps.reporting.sections``). Without ``pyplot`` there is no global figure manager or GUI backend to
set up and nothing to close; ``savefig`` renders with Agg. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import base64
import io


def figure(**kwargs):
    """A matplotlib ``Figure`` made without ``pyplot``: no global figure manager or GUI backend to set up
    (importing ``pyplot`` was 0.6 s of a 1.3 s report step), and nothing to close; ``savefig`` renders PNGs
    with Agg, as matplotlib's "embedding in a web server" example does."""
    from matplotlib.figure import Figure

    return Figure(**kwargs)

def png(fig) -> str:
    """The figure as base64 PNG, laid out by ``tight_layout`` (done here, once): ``savefig(bbox_inches="tight")``
    would draw the whole figure once more to measure it (0.3-0.5 s of a 1.7 s report step on 2 cores)."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")

def metric_groups(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, list[str]]:
    """``{metric: [series, ...]}``: series named ``<run>/<metric>`` share a chart (``train/epoch_loss`` and
    ``validation/epoch_loss``); a series without a run is a metric of its own."""
    groups: dict[str, list[str]] = {}
    for series in sorted(scalars):
        metric = series.split("/", 1)[1] if "/" in series else series
        groups.setdefault(metric, []).append(series)
    return groups

def curves_png(scalars: dict[str, list[tuple[int, float]]]) -> str | None:
    groups = metric_groups(scalars)
    if not groups:
        return None
    columns = min(3, len(groups))
    rows = -(-len(groups) // columns)
    fig = figure(figsize=(4.6 * columns, 3.1 * rows))
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
    return png(fig)

def confusion_png(classes: list[str], matrix: list[list[int]]) -> str:
    import numpy as np

    m = np.asarray(matrix)
    fig = figure(figsize=(1.2 + 0.7 * len(classes), 1 + 0.6 * len(classes)))
    ax = fig.subplots()
    ax.imshow(m, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for (i, j), v in np.ndenumerate(m):
        ax.text(j, i, str(v), ha="center", va="center", color="white" if v > m.max() / 2 else "black")
    ax.set_title("confusion matrix (validation)")
    return png(fig)
