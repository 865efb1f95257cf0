"""This product's own files in a user's project folder: told apart from the user's code by their content.

A user runs ``vtp`` in the folder that holds their trainer (``trainer.source_dir: .``), so what ``vtp`` writes there
lands beside the code: a compiled pipeline (``--compile-only h100.pipeline.yaml``), a saved plan (``vtp plan --out
plan.json``), run folders (``--set output.base_dir=out``), the precision measurements' cache (``.vtp-cache/``), and
the job files themselves (``job.yaml``, ``gpu-job.yaml``). None of them is the trainer's code: the image build leaves
them out of the code layer and the code hash (``jobs.images.user_code.collect_code``, the one selection of a
trainer's files), so compiling, planning or adding a second job file does not make the folder's finished run
"another job".

Each is recognised by what only this product writes, never by its name alone (a user's ``config.yaml`` or
``run.json`` stays code): a compiled pipeline by KFP's top-level keys, a plan by :func:`jobs.commands.plan_cli.write_json`'s
keys, a job file by every key being a field of this product's job schema (``jobfile.config``), a run folder by the
records a run leaves (``jobs.run_records.records``). Files are read only when their suffix fits and up to a size a real one
never passes.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

import yaml

from jobs.run_records import records
from trainers import record_reader
from jobfile import config as config_lib
from jobfile.regular_file import NotARegularFile, read_regular

#: folders this product writes at any depth of a project: the precision measurements' cache
#: (``trainers.precision.cache_dir``: ``<parent of output.base_dir>/.vtp-cache``)
CACHE_DIRS = (".vtp-cache",)
#: what the KFP compiler writes at the top of a pipeline spec (``jobs.steps.compiled``)
_PIPELINE_KEYS = ("pipelineInfo", "root", "deploymentSpec")
#: what ``vtp plan --out`` writes at the top of a plan (``jobs.commands.saved_plan``): its kind, and the keys every plan
#: since the first carries (a plan saved by an earlier version has no kind)
SAVED_PLAN_KIND = "vtp-plan"
PLAN_KEYS = ("project", "requests", "options", "checks")
#: a job file, a plan: never this big (a compiled pipeline of a big study is about 200 KB)
_JOB_LIMIT, _DOC_LIMIT = 256 * 1024, 16 * 1024 * 1024


def _text(path: str, limit: int) -> str | None:
    try:
        if os.path.islink(path) or os.path.getsize(path) > limit:
            return None
        return read_regular(path, path, limit=limit).decode("utf-8")
    except (OSError, NotARegularFile, UnicodeDecodeError):
        return None


def is_compiled_pipeline(path: str | os.PathLike) -> bool:
    """A KFP v2 pipeline spec as the compiler writes it: ``pipelineInfo``, ``root`` and ``deploymentSpec`` at the
    top level. Read as text (a compiled pipeline is hundreds of KB: parsing it as YAML would cost a second)."""
    text = _text(str(path), _DOC_LIMIT)
    return text is not None and all(re.search(rf"^{key}:", text, re.MULTILINE) for key in _PIPELINE_KEYS)


def is_saved_plan(path: str | os.PathLike) -> bool:
    """A plan ``vtp plan --out`` wrote: a JSON object of kind :data:`SAVED_PLAN_KIND`, or with :data:`PLAN_KEYS` at
    its top (read by THE reader: a damaged or huge file is no plan)."""
    doc = _record(os.path.dirname(os.fspath(path)) or ".", os.path.basename(os.fspath(path)))
    return doc.get("kind") == SAVED_PLAN_KIND or all(key in doc for key in PLAN_KEYS)


def _section_fields() -> dict[str, set[str] | None]:
    """The job schema's sections and their fields (None: a plain value, ``name``)."""
    out: dict[str, set[str] | None] = {"description": None}
    for f in dataclasses.fields(config_lib.JobConfig):
        default = getattr(config_lib.JobConfig(), f.name)
        out[f.name] = {g.name for g in dataclasses.fields(default)} if dataclasses.is_dataclass(default) else None
    return out


def is_job_file(path: str | os.PathLike) -> bool:
    """A job file of this product: a YAML mapping whose every key is a section of the job schema
    (``jobfile.config.JobConfig``) and every section's key one of that section's fields, with a ``trainer`` or a
    ``topology`` section. A user's own config (``{trainer: {epochs: 5}}``, ``{model: ..., optimizer: ...}``) fails the
    rule and stays code."""
    if not str(path).endswith((".yaml", ".yml")):
        return False
    text = _text(str(path), _JOB_LIMIT)
    if text is None:
        return False
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return False
    if not isinstance(doc, dict) or not ({"trainer", "topology"} & set(doc)):
        return False
    sections = _section_fields()
    for key, value in doc.items():
        if key not in sections:
            return False
        fields = sections[key]
        if fields is not None and not (isinstance(value, dict) and set(value) <= fields):
            return False
    return True


def _record(folder: str, name: str) -> dict[str, Any]:
    """The JSON object ``name`` in ``folder`` by THE reader ({} when none, damaged, a link or not an object)."""
    path = os.path.join(folder, name)
    if os.path.islink(path):
        return {}
    try:
        found = record_reader.read(path, limit=_DOC_LIMIT)
    except record_reader.Unreadable:
        return {}
    return found if isinstance(found, dict) else {}


def is_run_folder(folder: str | os.PathLike) -> bool:
    """A run folder this product wrote (``output.base_dir`` of a local run, or a ``--fresh`` copy of one): it holds
    ``provenance.json`` (what made the run) or ``run.json`` (a finished run) with their keys."""
    folder = str(folder)
    made = _record(folder, records.PROVENANCE_RECORD)
    if "config" in made and "written" in made:
        return True
    finished = _record(folder, records.RUN_RECORD)
    return "status" in finished and "config" in finished


def file_kind(path: str | os.PathLike) -> str | None:
    """What of this product's ``path`` is (``"a compiled pipeline"``, ``"a saved plan"``, ``"a job file"``), or None:
    the user's. Only ``.yaml``/``.yml``/``.json`` files are read."""
    name = str(path)
    if name.endswith((".yaml", ".yml")):
        if is_compiled_pipeline(name):
            return "a compiled pipeline (vtp --compile-only)"
        if is_job_file(name):
            return "a job file"
    elif name.endswith(".json") and is_saved_plan(name):
        return "a saved plan (vtp plan --out)"
    return None


def folder_kind(folder: str | os.PathLike) -> str | None:
    """What of this product's ``folder`` is (a run folder, the precision cache), or None."""
    if os.path.basename(str(folder).rstrip("/")) in CACHE_DIRS:
        return "the precision measurements' cache"
    if is_run_folder(folder):
        return "a run folder"
    return None
