"""Scalars from TensorBoard event files, without importing TensorFlow.

Whatever wrote them: the built-in trainer (``train/loss`` ... straight in the logs folder), Keras' TensorBoard
callback (``train/`` and ``validation/`` sub-folders with ``epoch_loss``, ``epoch_<metric>``, plus a
non-scalar ``keras`` tag holding the model config), the side-car evaluator (``validation/``).

:func:`read_scalars` returns ``{"<sub-folder>/<tag>": [(step, value), ...]}`` (just ``<tag>`` for files in
the folder itself), every *scalar* series found, sorted by step; a step written twice (a resumed run)
keeps its last value. Anything that is not a scalar (text, images, histograms, the ``keras`` config tag) is
skipped, never an error; a missing or unreadable folder gives ``{}``.

Why a reader of our own (40 lines: the TFRecord framing and TensorBoard's own ``Event`` protobuf): TensorBoard's
loaders (``EventAccumulator``) reach the file system through ``tensorboard.compat``, which imports TensorFlow
(2-9 s, which a report or a summary does not need) unless a process-wide switch is set, and that switch then
breaks ``tf.summary`` for the rest of the process. It reads local paths, which covers Vertex too: a KFP task
sees ``gs://B/P`` at ``/gcs/B/P``.
"""
from __future__ import annotations

import os
import struct

from jobfile.regular_file import NotARegularFile, open_regular

#: sub-folders that never hold the job's own summaries (the launcher's logs, MWMS workers' temp copies)
SKIP_DIRS = ("replicas",)


def _records(path: str):
    """The records of one TFRecord file (length, its CRC, data, its CRC); a truncated tail (a file still being
    written, or cut by a kill) ends the file quietly. A file that is not a regular one (a named pipe) has none
    (``open_regular``: never waited on)."""
    try:
        f = open_regular(path, path, limit=1 << 62, text=False)
    except (OSError, NotARegularFile):
        return
    with f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                return
            yield data


def _run_dirs(logs_dir: str) -> list[tuple[str, str]]:
    """(run name, folder) for every folder under ``logs_dir`` holding event files."""
    runs = []
    for root, dirs, files in os.walk(logs_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and "workertemp" not in d and not d.startswith("."))
        if any(".tfevents." in f for f in files):
            rel = os.path.relpath(root, logs_dir)
            runs.append(("" if rel == "." else rel.replace(os.sep, "/"), root))
    return runs


#: TensorProto dtypes that hold numbers (``tensorflow/core/framework/types.proto``): (struct format of one value,
#: the repeated field holding values when ``tensor_content`` is empty). bfloat16 (14) keeps its 16 bits in ``half_val``.
_NUMBER_TYPES = {1: ("<f", "float_val"), 2: ("<d", "double_val"), 3: ("<i", "int_val"), 4: ("<B", "int_val"),
                 5: ("<h", "int_val"), 6: ("<b", "int_val"), 9: ("<q", "int64_val"), 14: ("<H", "half_val"),
                 17: ("<H", "int_val"), 19: ("<e", "half_val"), 22: ("<I", "uint32_val"), 23: ("<Q", "uint64_val")}
_BFLOAT16 = 14


def tensor_number(tensor) -> float | None:
    """The number a ``TensorProto`` of one element holds (a TF2 scalar summary's value), else None (a string, a bool,
    more than one element, no value).

    Why not ``tensorboard.util.tensor_util.make_ndarray``: importing it imports TensorBoard's TensorFlow stub, whose
    file layer imports boto3 (0.4-1 s of the report step's 2.3 s on 2 cores) to read one number; a scalar's
    encoding is the dtype's fixed-size little-endian value in ``tensor_content``, or the first of its ``*_val``
    field (make_ndarray repeats a single value to the shape: the same number for one element)."""
    kind = _NUMBER_TYPES.get(tensor.dtype)
    elements = 1
    for dim in tensor.tensor_shape.dim:
        elements *= dim.size
    if kind is None or elements != 1:
        return None
    fmt, field = kind
    if tensor.tensor_content:
        if len(tensor.tensor_content) != struct.calcsize(fmt):
            return None
        (value,) = struct.unpack(fmt, tensor.tensor_content)
    else:
        values = getattr(tensor, field)
        if not values:
            return None
        value = values[0]
        if fmt == "<e":  # a half's 16 bits
            value = struct.unpack("<e", struct.pack("<H", value))[0]
    if tensor.dtype == _BFLOAT16:  # a bfloat16's 16 bits: the high half of a float32
        value = struct.unpack("<f", struct.pack("<I", int(value) << 16))[0]
    return float(value)


def _scalar(value, plugin: str) -> float | None:
    """A summary value as a float when it is a scalar (TF1 ``simple_value``, or a TF2 tensor of the ``scalars``
    plugin, or of none, holding one number), else None."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor") or plugin not in ("scalars", ""):
        return None
    return tensor_number(value.tensor)


def read_scalars(logs_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series under ``logs_dir`` (see the module docstring)."""
    if not logs_dir or not os.path.isdir(logs_dir):
        return {}
    from tensorboard.compat.proto import event_pb2

    out: dict[str, list[tuple[int, float]]] = {}
    for run, folder in _run_dirs(logs_dir):
        series: dict[str, dict[int, float]] = {}
        plugins: dict[str, str] = {}  # TF2 writes a tag's metadata with its first value only
        for name in sorted(f for f in os.listdir(folder) if ".tfevents." in f):
            try:
                for data in _records(os.path.join(folder, name)):
                    event = event_pb2.Event.FromString(data)
                    for value in event.summary.value:
                        if value.metadata.plugin_data.plugin_name:
                            plugins.setdefault(value.tag, value.metadata.plugin_data.plugin_name)
                        number = _scalar(value, plugins.get(value.tag, ""))
                        if number is not None:
                            series.setdefault(value.tag, {})[int(event.step)] = number
            except Exception:  # a foreign or corrupt file: the other files and runs still count
                continue
        for tag, by_step in series.items():
            out[f"{run}/{tag}" if run else tag] = sorted(by_step.items())
    return out


def last_values(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    """``{series: its last value}``: what a summary line shows."""
    return {name: points[-1][1] for name, points in scalars.items() if points}


#: What a run without TensorBoard scalars can show, and how to get curves: THE wording of the report and the summary.
NO_SCALARS = ("no TensorBoard scalars: the trainer wrote none to AIP_TENSORBOARD_LOG_DIR, so there are no curves; its "
              "console lines (Keras' per-epoch figures) are in the replica logs, and the model's own figures are the "
              "verification's (serving.eval_data for a held-out verdict)")
CURVES_HOW = ("for curves, log to that folder: Keras fit: callbacks=[keras.callbacks.TensorBoard(log_dir=os.environ["
              "'AIP_TENSORBOARD_LOG_DIR'])]; a custom loop: tf.summary.create_file_writer(os.environ["
              "'AIP_TENSORBOARD_LOG_DIR']) and tf.summary.scalar per step")
