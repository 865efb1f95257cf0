"""THE reader of every JSON record this product writes and reads back: a run's records (``run.json``, ``provenance.json``,
``steps.json``, ``tuning.json``...), the run lock, a ``--fresh`` copy's record, a Vertex run's attempts
(``vertex_jobs.json``), the precision cache. A record is read back defensively, in one place, before any field of it
is used:

* the file: a regular file (a named pipe or a device is refused at once, never waited on: ``jobfile.regular_file``)
  of at most ``limit`` bytes (:data:`MAX_BYTES` by default), UTF-8;
* the JSON: nested at most :data:`MAX_DEPTH` levels (checked without recursion: a record 100,000 levels deep is a
  reason, not a ``RecursionError``), numbers finite (``NaN``, ``Infinity``, ``1e400`` refused) and integers of at most
  :data:`MAX_INT_DIGITS` digits (a 400-digit "rate" is no figure a run wrote, and ``float()`` of it overflows);
* its shape: an object (or what ``kind`` says), each field of ``types`` of its type when present (``bool`` is not a
  number), each field of ``required`` present and not null.

A record that is there and fails any of these is :class:`Unreadable` (``str``: ``unreadable: PATH: why``): a history
shows the run as unreadable, a run refuses to go on in the folder rather than guess, a cache measures again. A step
that only needs "the record, if it is whole" calls :func:`read_or_none`.

Why not a schema library (jsonschema, pydantic): the checks are these few, and a record must be refused before it is
parsed whole (size) and while it is parsed (depth, numbers), which neither does; both would be a new dependency of
every replica's image.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping, Sequence

from trainers import fileio
from jobfile.regular_file import NotARegularFile, open_regular

#: a record's limits: bigger, or nested deeper, is no record a run wrote
MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
#: digits of an integer in a record (a step count, a pid, bytes: 19 digits hold any 64-bit one)
MAX_INT_DIGITS = 30


class Unreadable(ValueError):
    """A record that is there and is not one this product wrote: ``str(exc)`` is ``unreadable: PATH: why``;
    ``why`` alone says what is wrong (``nested deeper than 64 levels``, ``attempts is int 5, not list``)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"unreadable: {path}: {why}")
        self.path, self.why = path, why


class _Refused(Exception):
    """Raised by the parser's hooks (a number no record holds); turned into :class:`Unreadable`."""


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"the number {text[:20]}{'...' if len(text) > 20 else ''} is out of range (not finite)")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS} in a record)")
    return int(text)


def _constant(text: str) -> Any:
    raise _Refused(f"{text} is not a number a record holds")


def depth(doc: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply lists and objects nest in ``doc`` (iterative; stops counting past ``limit``)."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, level)
            if level > limit:
                return level
            todo.extend((v, level + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def parse(data: bytes | str, where: str) -> Any:
    """The JSON value of ``data`` under the rules above; :class:`Unreadable` naming ``where`` otherwise."""
    try:
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError:
        raise Unreadable(where, "not UTF-8 text") from None
    try:
        doc = json.loads(text, parse_float=_float, parse_int=_int, parse_constant=_constant)
    except RecursionError:
        raise Unreadable(where, f"nested deeper than {MAX_DEPTH} levels") from None
    except _Refused as exc:
        raise Unreadable(where, str(exc)) from None
    except json.JSONDecodeError as exc:
        cut = "" if text.rstrip().endswith(("}", "]")) else ", cut short"
        raise Unreadable(where, f"not JSON ({exc.msg}: line {exc.lineno} column {exc.colno}{cut})") from None
    except ValueError as exc:  # e.g. Python's own limit on an integer's digits
        raise Unreadable(where, f"not JSON a record holds ({' '.join(str(exc).split())[:120]})") from None
    if depth(doc) > MAX_DEPTH:
        raise Unreadable(where, f"nested deeper than {MAX_DEPTH} levels")
    return doc


def short(value: Any) -> str:
    """A value as a reason quotes it: at most 40 characters of its JSON."""
    try:
        text = json.dumps(value, default=str)
    except (ValueError, RecursionError):
        return type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _names(kind: Any) -> str:
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))


def is_a(value: Any, kind: Any) -> bool:
    """``isinstance`` as a record means it: ``True`` is not an ``int`` (unless ``bool`` is asked for)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kind) and not (isinstance(value, bool) and bool not in kinds)


def shape_problem(doc: Mapping[str, Any], types: Mapping[str, Any] | None = None, required: Sequence[str] = (),
                  where: str = "") -> str | None:
    """Why ``doc``'s fields are not what a reader relies on (the first found: ``status is int 5, not str``;
    ``config is missing or null``), or None. ``types``: field -> type (or tuple of types), checked when present and
    not null; ``required``: fields that must be there and not null."""
    for key in required:
        if doc.get(key) is None:
            return f"{where}{key} is missing or null"
    for key, kind in (types or {}).items():
        value = doc.get(key)
        if value is not None and not is_a(value, kind):
            return f"{where}{key} is {type(value).__name__} {short(value)}, not {_names(kind)}"
    return None


def _bytes(path: str, limit: int) -> bytes | None:
    """The file's bytes (None: it is not there); Unreadable for one that is there and cannot be read whole."""
    plain = fileio.plain_path(path)
    if plain is None:  # gs:// and friends, through TensorFlow
        try:
            if not fileio.exists(path):
                return None
            if fileio.size(path) > limit:
                raise Unreadable(path, f"{fileio.size(path):,} bytes, more than a record holds ({limit:,} at most)")
            return fileio.read_bytes(path)
        except Unreadable:
            raise
        except Exception as exc:  # tf.errors.OpError and friends
            raise Unreadable(path, f"cannot be read ({' '.join(str(exc).split())[:160]})") from None
    try:
        os.lstat(plain)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a folder on its way is a file: nothing under it)
        return None
    except OSError as exc:
        raise Unreadable(path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        with open_regular(plain, path, limit=limit, text=False) as f:
            data = f.read(limit + 1)
    except NotARegularFile as exc:
        text = str(exc)
        why = ("not a regular file" if "not a regular file" in text else
               f"more than a record holds ({limit:,} bytes at most)")
        raise Unreadable(path, why) from None
    except FileNotFoundError:  # a dangling link
        raise Unreadable(path, "a link to nothing, not a regular file") from None
    except OSError as exc:
        raise Unreadable(path, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise Unreadable(path, f"grew past the {limit:,} bytes a record holds")
    return data


def read(path: str, *, types: Mapping[str, Any] | None = None, required: Sequence[str] = (), kind: Any = dict,
         limit: int = MAX_BYTES) -> Any:
    """The record at ``path`` (local, or ``gs://`` through TensorFlow), or None when there is none; raises
    :class:`Unreadable` when a file is there and is not a record of ``kind`` (an object by default) with the
    ``types`` and ``required`` fields (:func:`shape_problem`)."""
    data = _bytes(path, limit)
    if data is None:
        return None
    doc = parse(data, path)
    if not is_a(doc, kind):
        wanted = _names(kind).replace("dict", "object")
        raise Unreadable(path, f"a JSON {type(doc).__name__.replace('dict', 'object')}, not "
                               f"{'an' if wanted[0] in 'aeiou' else 'a'} {wanted}")
    if isinstance(doc, dict):
        why = shape_problem(doc, types, required)
        if why:
            raise Unreadable(path, why)
    return doc


def read_or_none(path: str, *, kind: Any = None) -> Any:
    """The record at ``path``, or None when it is missing or :class:`Unreadable` (a step's own read of a record it may
    do without: the one that wrote it is the step before, or the next run measures again). ``kind``: the type the
    value must have (None: any JSON value)."""
    try:
        doc = read(path, kind=kind or object)
    except Unreadable:
        return None
    return doc
