"""Job files and presets into a plain document: YAML read, ``--set key=value`` overrides applied, relative
paths made absolute (the job config's loading; the typed schema is ``jobfile.config``).

A preset is a name (``local``, ``multiworker``...) of a YAML file in ``jobfile/presets/``; anything else is a
job file's path. Relative paths in a job *file* are relative to that file's folder (:data:`RELATIVE_TO_FILE`);
in a preset and in ``--set`` they are relative to the current directory. A job file naming
``trainer.module`` and no ``data.source`` reads its own data (``data.source: none``). Every problem is a
``jobfile.errors.ConfigError`` naming ``--config`` or ``--set``.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import yaml

from jobfile.errors import ConfigError, problem
from jobfile.regular_file import read_regular


PRESET_DIR = Path(__file__).resolve().parent / "presets"


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _read_yaml(source: str) -> dict[str, Any]:
    path = Path(source)
    if not path.suffix and not path.exists():
        if source not in presets():
            near = difflib.get_close_matches(source, presets(), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError([problem("--config", f"no preset or file named {source!r}{hint}", presets())])
        path = PRESET_DIR / f"{source}.yaml"
    if not path.exists():
        raise ConfigError([problem("--config", f"file {str(path)!r} does not exist; give a YAML file or a preset", presets())])
    try:
        doc = yaml.safe_load(read_regular(str(path), "--config").decode("utf-8", "replace"))
    except yaml.YAMLError as exc:
        raise ConfigError([problem("--config", f"{path} is not valid YAML: {exc}".replace("\n", " "))]) from None
    if doc is None:  # empty, or comments only: not a job with every field at its default
        raise ConfigError([problem("--config", f"{path} is empty (no sections): a job file holds at least the job's "
                                               "name, its data and its topology; start from a preset",
                                   [f"{PRESET_DIR / 'local.yaml'} (copy it)", "--config local"])])
    if not isinstance(doc, dict):
        raise ConfigError([problem("--config", f"{path} must hold a mapping at the top level")])
    return doc


def _set_path(doc: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = doc
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


def apply_overrides(doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides; values are parsed as YAML (``8``, ``true``, ``[a, b]``)."""
    problems = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            problems.append(problem("--set", f"{item!r} is not key=value (e.g. training.steps=50)"))
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        _set_path(doc, key.strip(), value)
    if problems:
        raise ConfigError(problems)
    return doc


def is_preset(source: str) -> bool:
    """A preset name (``local``), not a file path."""
    return not Path(source).suffix and not Path(source).exists() and source in presets()


#: THE rule for a relative path, as every message about a missing path says it (see the module docstring).
RELATIVE_RULE = "a --set value is relative to the current folder, a job file's to the file's folder"


def found_elsewhere(path: str, folders: list[str]) -> list[str]:
    """Existing files or folders named as ``path``'s last part in ``folders`` (the current folder, the trainer's
    folder): what a missing relative path most likely meant, for a did-you-mean."""
    name, seen, found = os.path.basename(os.path.normpath(path)), set(), []
    for folder in folders:
        candidate = os.path.normpath(os.path.join(folder, name)) if folder else ""
        if candidate and candidate != os.path.normpath(path) and candidate not in seen and os.path.exists(candidate):
            seen.add(candidate)
            found.append(candidate)
    return found


#: Paths a job file may give relative to its own folder (see the module docstring).
RELATIVE_TO_FILE = ("trainer.source_dir", "serving.sample_request", "serving.eval_data", "data.path",
                    "data.prepared_dir", "output.base_dir", "budget.prices")


def _is_local_relative(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and "://" not in value and not os.path.isabs(value)


def absolute_paths(doc: dict[str, Any], folder: str) -> dict[str, Any]:
    """``doc`` with its relative local paths (:data:`RELATIVE_TO_FILE`) made absolute against ``folder``;
    a user trainer's empty ``trainer.source_dir`` becomes ``folder`` itself."""
    for dotted in RELATIVE_TO_FILE:
        section, key = dotted.split(".")
        node = doc.get(section)
        if isinstance(node, dict) and _is_local_relative(node.get(key)):
            node[key] = os.path.normpath(os.path.join(folder, node[key]))
    trainer = doc.get("trainer")
    if isinstance(trainer, dict) and trainer.get("module") and not trainer.get("source_dir"):
        trainer["source_dir"] = os.path.abspath(folder)
    return doc


def _user_trainer_defaults(doc: dict[str, Any]) -> dict[str, Any]:
    """A job file naming ``trainer.module`` and no ``data.source``: the trainer reads its own data."""
    trainer, data = doc.get("trainer"), doc.get("data")
    if isinstance(trainer, dict) and trainer.get("module") and not (isinstance(data, dict) and "source" in data):
        doc["data"] = {**(data if isinstance(data, dict) else {}), "source": "none"}
    return doc


def load_document(source: str | None = "local", overrides: list[str] | None = None) -> dict[str, Any]:
    """The plain document of a preset name or YAML file with overrides applied (not yet type-checked).
    Relative paths become absolute: a job file's against its folder, a preset's and ``--set``'s against
    the current directory."""
    source = source or "local"
    doc = _read_yaml(source)
    doc.pop("description", None)
    doc = absolute_paths(doc, os.getcwd() if is_preset(source) else str(Path(source).resolve().parent))
    return absolute_paths(_user_trainer_defaults(apply_overrides(doc, list(overrides or []))), os.getcwd())
