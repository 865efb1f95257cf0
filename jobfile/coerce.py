"""Plain data (a YAML document, a JSON config, ``--set`` values) into typed dataclasses, every problem with its
field path: the job config's generic coercer.

:func:`build` walks a dataclass's type hints: nested dataclasses, ``list[X]``, ``dict[K, V]``, ``Literal``
choices (with "did you mean" for a near miss), ``X | None`` (unset), and the scalars, accepting what YAML and
compiled KFP parameters make of them (``2.0`` for an int, ``1e-3`` read as a string, an env value given as a
number) and refusing the rest. It knows nothing of the job config's sections (``jobfile.config`` is the schema)
and never raises: each problem is appended to ``problems`` (``jobfile.errors.Problem``, ``field: what is
wrong; valid choices: ...``) and the field keeps its default, so one pass reports every problem at once.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from typing import Any, Literal

from jobfile.errors import Problem, problem

#: Every integer of the job config is a count, a size or a seed that Vertex's API (or TensorFlow) carries as an
#: int32 (``replica_count``'s neighbours ``accelerator_count`` and ``boot_disk_size_gb``, the tuning job's trial
#: counts are ``int32`` in ``aiplatform_v1``): a larger one is refused here, by its field, before any rule reads it.
INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


def _optional(tp: Any) -> Any:
    """``X`` for ``X | None`` (a field whose absence means something: unset), else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def _type_name(tp: Any) -> str:
    if _optional(tp) is not None:
        return _type_name(_optional(tp))
    if tp is Any:
        return "a string or a number"
    if typing.get_origin(tp) is dict:
        return "a mapping"
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if typing.get_origin(tp) is list:
        return "a list of " + _type_name(typing.get_args(tp)[0])
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(value: Any, tp: Any, path: str, problems: list[Problem]) -> Any:
    if _optional(tp) is not None:  # unset (None, or "" from --set key=) keeps the default: None
        return None if value is None or value == "" else _coerce(value, _optional(tp), path, problems)
    if tp is Any:  # a scalar of a list whose items' type is a matter of meaning (tuning values), not of shape
        if isinstance(value, (str, int, float, bool)):
            return value
        problems.append(problem(path, f"expected a string or a number, got {type(value).__name__} {value!r}"))
        return None
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        named = [str(c) for c in choices if c != ""]
        near = difflib.get_close_matches(str(value), named, n=1) or \
            [c for c in named if str(value) and c.upper().startswith(str(value).upper())][:1]
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        shown = [("'' (unset)" if c == "" else c) for c in choices]
        problems.append(problem(path, f"{value!r} is not allowed{hint}", shown))
        return None
    if origin is dict:  # labels, trainer.env: str -> str; tuning.parameters: str -> Parameter
        if not isinstance(value, dict):
            what = "a mapping of strings" if typing.get_args(tp)[1] is str else "a mapping"
            problems.append(problem(path, f"expected {what}, got {type(value).__name__} {value!r}"))
            return None
        key_tp, item_tp = typing.get_args(tp)
        if item_tp is str:  # YAML reads `TF_USE_LEGACY_KERAS: 1` as a number: an env value is its text
            value = {k: (str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                     for k, v in value.items()}
        return {_coerce(k, key_tp, path, problems): _coerce(v, item_tp, f"{path}.{k}", problems) for k, v in value.items()}
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, str) and item_tp is str:
            value = value.split()  # "--set container.args='--a 1'" convenience
        if not isinstance(value, list):
            problems.append(problem(path, f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}"))
            return None
        return [_coerce(v, item_tp, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path, problems)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, float) and value.is_integer():  # compiled KFP parameters turn ints to 2.0
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if INT32_MIN <= value <= INT32_MAX:
                return value
            problems.append(problem(path, f"{value} is beyond a 32-bit integer (the API's counts and sizes are "
                                          f"int32: at most {INT32_MAX:,})", [INT32_MAX if value > 0 else 0]))
            return None
    elif tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None:
            if math.isfinite(number):
                return number
            problems.append(problem(path, f"{value} is not a finite number", ["a finite number, e.g. 0.001"]))
            return None
    elif tp is str:
        if isinstance(value, str):
            return value
        if value is None:
            return ""
    quote, quoted = "", []
    if tp is str and isinstance(value, bool):
        quote, quoted = " (YAML reads an unquoted yes/no/on/off/true/false as true or false: quote it)", ["'1'", "'true'"]
    elif tp is str and isinstance(value, (int, float)):  # args: ["--epochs", 3]: a command line's words are text
        quoted = [json.dumps(str(value))]
        quote = f" (YAML reads an unquoted {value!r} as a number: quote it, {quoted[0]})"
    examples = {int: ["a whole number, e.g. 8"], float: ["a finite number, e.g. 0.001"], bool: ["true", "false"]}
    problems.append(problem(path, f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}{quote}",
                            quoted or examples.get(tp, ())))
    return None


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's resolved field types, once per class (resolving string annotations is the costly part)."""
    return typing.get_type_hints(cls)


def build(cls: type, data: Any, path: str, problems: list[Problem]) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(problem(path or "config", f"expected a mapping, got {type(data).__name__} {data!r}"))
        return cls()
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        shown = str(key) or "''"  # an empty key is named as one, never as no field at all
        field_path = f"{path}.{shown}" if path else shown
        if key not in names:
            near = difflib.get_close_matches(str(key), names, n=1)
            hint = f" did you mean {near[0]!r}?" if near else ""
            problems.append(problem(field_path, f"unknown field;{hint} {path or 'the config'} has these fields",
                                    names))
            continue
        coerced = _coerce(value, hints[key], field_path, problems)
        if coerced is not None:
            kwargs[key] = coerced
    return cls(**kwargs)
