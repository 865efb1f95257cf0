"""The run report's charts: written here as SVG, embedded in the page as ``data:image/svg+xml`` images.

The one home of how a chart is made and embedded: a :class:`Chart` (one plot: lines, points, a dashed level, ticks,
a legend) drawn by :meth:`Chart.svg`, laid out several to a picture by :func:`grid`, embedded by :func:`data_uri`;
the page's charts (the training curves, one chart per metric: :func:`curves`; the confusion matrix:
:func:`confusion`) and the study's (``jobs.steps.reporting.sections``) are made of it. Nothing here imports
TensorFlow, numpy or matplotlib.

Why not matplotlib (what drew them before): on the 2-core machines here ``import matplotlib.figure`` took 0.45-1.0 s
and drawing the default run's two charts 0.35-0.6 s more (``tight_layout`` measuring every label, Agg rasterising,
PNG compression): most of the report step, paid by every run (docs/performance.md, "The fixed cost"). These charts
are polylines, markers, rectangles and text on linear or log axes: SVG says that directly, a browser scales it
sharp, the file is smaller, and a test reads a chart's ticks and points from the :class:`Chart` rather than from
pixels. Text is measured by an estimate (:data:`CHAR_WIDTH` of the font size a character), so a margin leaves room.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import math
from typing import Sequence

#: matplotlib's default colour cycle (tab10), so the charts look as they did
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
#: an average character's width in a sans-serif font, as a share of the font size (for margins and legends)
CHAR_WIDTH = 0.6
FONT = "font-family='DejaVu Sans,Arial,Helvetica,sans-serif'"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def number(value: float) -> str:
    """A tick label: short, no float noise (``0.1``, ``2e-05``, ``1000``)."""
    return f"{value:.4g}"


@dataclasses.dataclass
class Series:
    """Points of one thing: joined by a line (``line``), each drawn as ``marker`` (``o``, ``*``, ``x``, none: "")."""
    points: list[tuple[float, float]]
    colour: str = COLOURS[0]
    label: str = ""
    line: bool = True
    marker: str = "o"
    #: the marker's radius in px
    size: float = 3.0
    opacity: float = 1.0


@dataclasses.dataclass
class Chart:
    """One plot. ``xticks``: explicit (position, label) ticks (a categorical axis, trial ids), else chosen from the
    data; ``xscale``: ``linear`` or ``log``; ``levels``: (y, colour, label) drawn dashed across the plot."""
    title: str
    width: int = 460
    height: int = 310
    xlabel: str = ""
    ylabel: str = ""
    series: list[Series] = dataclasses.field(default_factory=list)
    xscale: str = "linear"
    xticks: list[tuple[float, str]] | None = None
    xlim: tuple[float, float] | None = None
    levels: list[tuple[float, str, str]] = dataclasses.field(default_factory=list)
    legend: bool = True

    def stars(self) -> list[tuple[float, float]]:
        """The points drawn as stars (the best trial)."""
        return [p for s in self.series if s.marker == "*" for p in s.points]

    def points(self) -> list[tuple[float, float]]:
        """Every point drawn with a marker."""
        return [p for s in self.series if s.marker for p in s.points]

    def svg(self, x: float = 0, y: float = 0) -> str:
        return _draw(self, x, y)


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2, 2.5, 5 x 10^k apart) covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return []
    if high == low:
        return [low]
    raw = (high - low) / max(1, count - 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks, value = [], first
    while value <= high + step * 1e-9:
        ticks.append(0.0 if abs(value) < step * 1e-9 else round(value, 12))
        value += step
    return ticks


def _log_ticks(low: float, high: float) -> list[float]:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    decades = [10.0 ** k for k in range(first, last + 1)]
    if last - first > 2:
        return [t for t in decades if low <= t <= high] or decades
    return [m * d for d in decades for m in (1, 2, 5) if low <= m * d <= high] or decades


def _padded(low: float, high: float, share: float = 0.05, log: bool = False) -> tuple[float, float]:
    if log:
        a, b = math.log10(low), math.log10(high)
        pad = (b - a) * share or 0.3
        return 10 ** (a - pad), 10 ** (b + pad)
    pad = (high - low) * share or (abs(high) * 0.1 or 1.0)
    return low - pad, high + pad


def _draw(chart: Chart, ox: float, oy: float) -> str:
    """``chart`` as an SVG group at (ox, oy)."""
    xs = [p[0] for s in chart.series for p in s.points]
    ys = [p[1] for s in chart.series for p in s.points] + [lv[0] for lv in chart.levels]
    log = chart.xscale == "log" and xs and min(xs) > 0
    if chart.xlim:
        x0, x1 = chart.xlim
    elif xs:
        x0, x1 = _padded(min(xs), max(xs), log=log)
    else:
        x0, x1 = 0.0, 1.0
    y0, y1 = _padded(min(ys), max(ys)) if ys else (0.0, 1.0)
    yticks = [t for t in _nice_ticks(y0, y1) if y0 <= t <= y1]
    if chart.xticks is not None:
        xticks = [t for t in chart.xticks if x0 <= t[0] <= x1]
    else:
        xticks = [(t, number(t)) for t in (_log_ticks(x0, x1) if log else _nice_ticks(x0, x1)) if x0 <= t <= x1]
    lines_below = max((label.count("\n") + 1 for _, label in xticks), default=1)
    left = 14 + CHAR_WIDTH * 10 * max((len(number(t)) for t in yticks), default=3) + (16 if chart.ylabel else 0)
    bottom = 8 + 13 * lines_below + (18 if chart.xlabel else 0)
    top, right = 26, 12
    w, h = chart.width - left - right, chart.height - top - bottom

    def px(v: float) -> float:
        if log:
            return left + (math.log10(v) - math.log10(x0)) / (math.log10(x1) - math.log10(x0)) * w
        return left + (v - x0) / (x1 - x0) * w

    def py(v: float) -> float:
        return top + h - (v - y0) / (y1 - y0) * h

    out = [f"<g transform='translate({ox:.1f},{oy:.1f})' {FONT}>",
           f"<text x='{left + w / 2:.1f}' y='17' font-size='12' text-anchor='middle'>{esc(chart.title)}</text>",
           f"<rect x='{left:.1f}' y='{top}' width='{w:.1f}' height='{h:.1f}' fill='none' stroke='#333'/>"]
    for t in yticks:
        y = py(t)
        out.append(f"<line x1='{left:.1f}' x2='{left + w:.1f}' y1='{y:.1f}' y2='{y:.1f}' stroke='#000' "
                   "stroke-opacity='0.12'/>"
                   f"<text x='{left - 5:.1f}' y='{y + 3.5:.1f}' font-size='10' text-anchor='end'>{number(t)}</text>")
    for t, label in xticks:
        x = px(t)
        out.append(f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{top}' y2='{top + h:.1f}' stroke='#000' stroke-opacity='0.12'/>")
        for i, part in enumerate(label.split("\n")):
            out.append(f"<text x='{x:.1f}' y='{top + h + 14 + 12 * i:.1f}' font-size='10' "
                       f"text-anchor='middle'>{esc(part)}</text>")
    if chart.xlabel:
        out.append(f"<text x='{left + w / 2:.1f}' y='{chart.height - 6}' font-size='11' "
                   f"text-anchor='middle'>{esc(chart.xlabel)}</text>")
    if chart.ylabel:
        out.append(f"<text transform='translate(12,{top + h / 2:.1f}) rotate(-90)' font-size='11' "
                   f"text-anchor='middle'>{esc(chart.ylabel)}</text>")
    for level, colour, _ in chart.levels:
        out.append(f"<line x1='{left:.1f}' x2='{left + w:.1f}' y1='{py(level):.1f}' y2='{py(level):.1f}' "
                   f"stroke='{colour}' stroke-width='1.2' stroke-dasharray='5,3'/>")
    for s in chart.series:
        pts = [(px(x), py(y)) for x, y in s.points]
        if s.line and len(pts) > 1:
            out.append(f"<polyline fill='none' stroke='{s.colour}' stroke-width='1.5' stroke-opacity='{s.opacity}' "
                       f"points='{' '.join(f'{x:.1f},{y:.1f}' for x, y in pts)}'/>")
        out.extend(_marker(s.marker, x, y, s.size, s.colour) for x, y in pts if s.marker)
    entries = [(s.colour, s.label, s.marker, s.line) for s in chart.series if s.label]
    entries += [(colour, label, "", True) for _, colour, label in chart.levels if label]
    if chart.legend and entries:
        width = max(len(label) for _, label, _, _ in entries) * CHAR_WIDTH * 9.5 + 38
        lx, ly = left + w - width - 6, top + 6
        out.append(f"<rect x='{lx:.1f}' y='{ly:.1f}' width='{width:.1f}' height='{14 * len(entries) + 6}' "
                   "fill='#fff' fill-opacity='0.8' stroke='#ccc'/>")
        for i, (colour, label, marker, line) in enumerate(entries):
            y = ly + 12 + 14 * i
            if line:
                out.append(f"<line x1='{lx + 5:.1f}' x2='{lx + 23:.1f}' y1='{y - 3:.1f}' y2='{y - 3:.1f}' "
                           f"stroke='{colour}' stroke-width='1.5'/>")
            if marker:
                out.append(_marker(marker, lx + 14, y - 3, 3, colour))
            out.append(f"<text x='{lx + 28:.1f}' y='{y:.1f}' font-size='9'>{esc(label)}</text>")
    out.append("</g>")
    return "".join(out)


def _marker(kind: str, x: float, y: float, size: float, colour: str) -> str:
    if kind == "*":
        r = size
        points = " ".join(f"{x + (r if i % 2 == 0 else r * 0.4) * math.sin(i * math.pi / 5):.1f},"
                          f"{y - (r if i % 2 == 0 else r * 0.4) * math.cos(i * math.pi / 5):.1f}" for i in range(10))
        return f"<polygon points='{points}' fill='{colour}'/>"
    if kind == "x":
        return (f"<path d='M{x - size:.1f},{y - size:.1f}L{x + size:.1f},{y + size:.1f}M{x - size:.1f},{y + size:.1f}"
                f"L{x + size:.1f},{y - size:.1f}' stroke='{colour}' stroke-width='1.5'/>")
    return f"<circle cx='{x:.1f}' cy='{y:.1f}' r='{size:.1f}' fill='{colour}'/>"


def grid(charts: Sequence[Chart], columns: int = 3) -> str:
    """Charts side by side, ``columns`` to a row, as one SVG document."""
    columns = max(1, min(columns, len(charts)))
    width = max(c.width for c in charts)
    height = max(c.height for c in charts)
    rows = -(-len(charts) // columns)
    body = "".join(c.svg((i % columns) * width, (i // columns) * height) for i, c in enumerate(charts))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{columns * width}' height='{rows * height}' "
            f"viewBox='0 0 {columns * width} {rows * height}'><rect width='100%' height='100%' fill='#fff'/>"
            f"{body}</svg>")


def data_uri(svg: str) -> str:
    """``data:image/svg+xml;base64,...``: the page stays one self-contained file."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def metric_groups(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, list[str]]:
    """``{metric: [series, ...]}``: series named ``<run>/<metric>`` share a chart (``train/epoch_loss`` and
    ``validation/epoch_loss``); a series without a run is a metric of its own."""
    groups: dict[str, list[str]] = {}
    for series in sorted(scalars):
        metric = series.split("/", 1)[1] if "/" in series else series
        groups.setdefault(metric, []).append(series)
    return groups


def curves(scalars: dict[str, list[tuple[int, float]]]) -> list[Chart]:
    """One chart per metric, its series (train, validation) together, against the step."""
    return [Chart(metric, xlabel="step", series=[
        Series([(float(s), float(v)) for s, v in scalars[name] if math.isfinite(v)], COLOURS[i % len(COLOURS)], name)
        for i, name in enumerate(names)]) for metric, names in metric_groups(scalars).items()]


def curves_uri(scalars: dict[str, list[tuple[int, float]]]) -> str | None:
    charts = curves(scalars)
    return data_uri(grid(charts)) if charts else None


def _blue(share: float) -> str:
    """matplotlib's ``Blues`` from white (0) to dark blue (1), by its end points and middle."""
    stops = ((247, 251, 255), (107, 174, 214), (8, 48, 107))
    share = min(1.0, max(0.0, share))
    (a, b), t = ((stops[0], stops[1]), share * 2) if share <= 0.5 else ((stops[1], stops[2]), share * 2 - 1)
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


def confusion(classes: list[str], matrix: list[list[int]]) -> str:
    """The confusion matrix as an SVG document: rows the true class, columns the predicted one, each cell's count."""
    n = len(classes)
    cell = 44
    longest = max((len(str(c)) for c in classes), default=1)
    left = 34 + longest * CHAR_WIDTH * 10
    top = 28
    bottom = 30 + longest * CHAR_WIDTH * 10 * 0.71  # the column labels turned 45 degrees
    most = max((v for row in matrix for v in row), default=0) or 1
    title = "confusion matrix (validation)"
    width, height = max(left + n * cell + 12, len(title) * CHAR_WIDTH * 12 + 16), top + n * cell + bottom
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
           f"viewBox='0 0 {width:.0f} {height:.0f}' {FONT}><rect width='100%' height='100%' fill='#fff'/>",
           f"<text x='{width / 2:.1f}' y='17' font-size='12' text-anchor='middle'>{title}</text>"]
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            x, y = left + j * cell, top + i * cell
            out.append(f"<rect x='{x:.1f}' y='{y}' width='{cell}' height='{cell}' fill='{_blue(value / most)}'/>"
                       f"<text x='{x + cell / 2:.1f}' y='{y + cell / 2 + 4:.1f}' font-size='11' text-anchor='middle' "
                       f"fill='{'#fff' if value > most / 2 else '#000'}'>{value}</text>")
    for i, name in enumerate(classes):
        out.append(f"<text x='{left - 5:.1f}' y='{top + i * cell + cell / 2 + 4:.1f}' font-size='10' "
                   f"text-anchor='end'>{esc(name)}</text>")
        x, y = left + i * cell + cell / 2, top + n * cell + 8
        out.append(f"<text transform='translate({x:.1f},{y:.1f}) rotate(-45)' font-size='10' "
                   f"text-anchor='end'>{esc(name)}</text>")
    out.append(f"<text x='{left + n * cell / 2:.1f}' y='{height - 5:.0f}' font-size='11' "
               "text-anchor='middle'>predicted</text>"
               f"<text transform='translate(12,{top + n * cell / 2:.1f}) rotate(-90)' font-size='11' "
               "text-anchor='middle'>true</text></svg>")
    return "".join(out)
