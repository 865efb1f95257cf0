"""Reading a config file for ``vtp validate``: YAML whose floats keep their text, so an AI Platform config's
``runtimeVersion: 2.10`` stays "2.10" (a plain float would be 2.1), and one ``error:`` line (``ConfigError``)
for a missing file, a folder, an unreadable file or a YAML syntax error, never a traceback."""
from __future__ import annotations

from typing import Any

import yaml

from jobfile.errors import ConfigError
from jobfile.regular_file import read_regular


class _VersionFloat(float):
    """A YAML float that remembers its text, so ``runtimeVersion: 2.10`` stays "2.10"."""

    text = ""


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    value = _VersionFloat(loader.construct_yaml_float(node))
    value.text = str(node.value)
    return value


_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def load_yaml(path: str) -> Any:
    """Parse a YAML file; raises ConfigError with one clear line for a missing file or bad YAML."""
    try:
        text = read_regular(path, path).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}", field=path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a YAML file", field=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", field=path) from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"YAML syntax error{where}: {what}", field=path) from None
