"""Scalars from TensorBoard event files, without importing TensorFlow.

Whatever wrote them: the built-in trainer (``train/loss`` ... straight in the logs folder), Keras' TensorBoard
callback (``train/`` and ``validation/`` sub-folders with ``epoch_loss``, ``epoch_<metric>``, plus a
non-scalar ``keras`` tag holding the model config), the side-car evaluator (``validation/``).

:func:`read_scalars` returns ``{"<sub-folder>/<tag>": [(step, value), ...]}`` (just ``<tag>`` for files in
the folder itself), every *scalar* series found, sorted by step; a step written twice (a resumed run)
keeps its last value. Anything that is not a scalar (text, images, histograms, the ``keras`` config tag) is
skipped, never an error; a missing or unreadable folder gives ``{}``.

Why not through TensorFlow: importing it costs 2-9 s, and a report or a summary needs none of it.
TensorBoard's own ``EventAccumulator`` reads the files; it imports TensorFlow when it can, unless
``tensorboard.compat.notf`` exists, which this module provides (the switch TensorBoard's own
``//tensorboard/compat:no_tensorflow`` build target uses). It reads local paths, which covers Vertex too:
a KFP task sees ``gs://B/P`` at ``/gcs/B/P``.
"""
from __future__ import annotations

import os
import sys
import types

#: sub-folders that never hold the job's own summaries (the launcher's logs, MWMS workers' temp copies)
SKIP_DIRS = ("replicas",)


def _accumulator():
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing import event_accumulator

    return event_accumulator


def _run_dirs(logs_dir: str) -> list[tuple[str, str]]:
    """(run name, folder) for every folder under ``logs_dir`` holding event files."""
    runs = []
    for root, dirs, files in os.walk(logs_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and "workertemp" not in d and not d.startswith("."))
        if any(".tfevents." in f for f in files):
            rel = os.path.relpath(root, logs_dir)
            runs.append(("" if rel == "." else rel.replace(os.sep, "/"), root))
    return runs


def read_scalars(logs_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series under ``logs_dir`` (see the module docstring)."""
    if not logs_dir or not os.path.isdir(logs_dir):
        return {}
    ea = _accumulator()
    from tensorboard.util import tensor_util

    out: dict[str, list[tuple[int, float]]] = {}
    for run, folder in _run_dirs(logs_dir):
        acc = ea.EventAccumulator(folder, size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
        try:
            acc.Reload()
        except Exception:  # a truncated or foreign file: the other runs still count
            continue
        for tag in acc.Tags().get("tensors", []):
            if acc.SummaryMetadata(tag).plugin_data.plugin_name not in ("scalars", ""):
                continue
            by_step: dict[int, float] = {}
            for event in acc.Tensors(tag):
                try:
                    value = tensor_util.make_ndarray(event.tensor_proto)
                    if value.size != 1 or value.dtype.kind not in "fiu":
                        raise ValueError("not a number")
                    by_step[int(event.step)] = float(value.reshape(()))
                except (ValueError, TypeError):
                    by_step = {}
                    break
            if by_step:
                out[f"{run}/{tag}" if run else tag] = sorted(by_step.items())
    return out


def last_values(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    """``{series: its last value}``: what a summary line shows."""
    return {name: points[-1][1] for name, points in scalars.items() if points}
