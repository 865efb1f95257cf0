"""Old import paths that published component YAMLs name, kept working after the tree's layout changed.

**Deprecated; removed on 2027-06-01** (CHANGELOG.md, 2026-11-29). Since then every component YAML names one module of
this package, the entry point ``components.entry`` (``components/entry.py``), so no module path behind it needs
keeping. YAMLs compiled before it (``tests/published/6a0b772/``, ``tests/published/97d0f77/``) import internal
paths, and run ``python3 -u -m jobs.cloud.custom_job`` / ``jobs.cloud.tuning_job`` as commands: until the removal
date those paths resolve and those commands run the step (``tests/test_published_compat.py``); a module of theirs moved
before then adds its old path to :data:`MOVED` (an old command must still run the step: :data:`COMMANDS` only
answers "moved"). After it, this module, its table and ``tests/published/`` go, and a YAML
compiled before 2026-11-29 must be compiled again (``python pipelines/run.py components --image IMAGE --out DIR``).

A component YAML compiled by an earlier version embeds its function's source, and that source imports from the job
side by path: ``from jobs import records, steps``, ``from jobs.verify import VerifyError``. A pipeline a user
compiled (or uploaded to an Artifact Registry KFP repository) keeps running in the image of a newer version only
if those paths still resolve. :data:`MOVED` maps each old module a published YAML imports to the names it reads
there and their homes now; nothing else is kept (the new code imports every name from its one home).

How: :func:`install` (called by ``jobs/__init__.py``) appends a finder to ``sys.meta_path``, consulted only when no
real module has the name, that makes each old module as a stand-in whose attributes are looked up in
:data:`MOVED` when read (PEP 562 ``__getattr__``): nothing is imported until an old YAML reads a name, and then only
its home. An old path that is still a real module (``jobs.steps`` is now the steps layer's package) takes its old
names through :func:`getter`. ``tests/test_published_compat.py`` reads every import and attribute of the YAMLs of
the previous version (``tests/published/``) and runs one of them in ``kfp.local``; CHANGELOG.md lists the moves.

A module a published *container* component runs (``python3 -m jobs.cloud.custom_job`` in its command line) must
keep running there: :data:`RUNS` maps each such old runnable path to its module now, and ``python -m OLD`` runs that
module as ``__main__`` with the same arguments.

The old *commands* moved too (``python -m jobs.local.launcher`` is ``python -m jobs.local.launch``): :data:`COMMANDS`
maps each old runnable path (CHANGELOG.md) to the command that does its work now, and ``python -m OLD`` answers with
one ``error:`` line naming it and exit status 2 (:meth:`_Loader.get_code`, what ``runpy`` runs), never a traceback; so
does ``python -m`` of any path :data:`MOVED` keeps for imports (those were never commands: the line names where their
names live now).

Why a finder of our own, not one module file per old path: the old paths would put nine stub modules back at the
top of ``jobs/`` beside the layer folders (the look-alike pairs the new layout removed) and one in ``jobs/local/``;
the finder keeps them in one table, and the table is data a test checks against the YAMLs themselves.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

#: old module -> {name the published YAMLs read there: "its module now:its name"}; since 2026-11-27 (issue 43), the
#: ``trainers.*`` entries since 2026-11-29 (issue 54).
MOVED: dict[str, dict[str, str]] = {
    "jobs.evaluation": {
        "figures": "jobs.evaluation.verdict:figures",
    },
    "jobs.gate": {
        "GateError": "jobs.steps.gate:GateError",
        "measured": "jobs.steps.gate:measured",
        "record_on_version": "jobs.steps.gate:record_on_version",
        "run": "jobs.steps.gate:run",
        "tuning_figures": "jobs.steps.gate:tuning_figures",
    },
    "jobs.job_spec": {
        "baseline_job_spec": "jobs.rules.job_spec:baseline_job_spec",
        "custom_job_spec": "jobs.rules.job_spec:custom_job_spec",
        "parts": "jobs.rules.job_spec:parts",
    },
    "jobs.local.launcher": {
        "JobFailed": "jobs.local.launch.outcome:JobFailed",
    },
    "jobs.placement": {
        "options": "jobs.rules.placement:options",
    },
    "jobs.records": {
        "HANDED_ON": "jobs.rules.tuning_rules:HANDED_ON",
        "TUNING_RECORD": "jobs.run_records.records:TUNING_RECORD",
        "artifact_json": "jobs.run_records.records:artifact_json",
        "baseline_metric": "jobs.rules.tuning_rules:baseline_metric",
        "baseline_of": "jobs.rules.tuning_rules:baseline_of",
        "write_at": "jobs.run_records.records:write_at",
    },
    "jobs.steps": {
        "NoModel": "jobs.steps.calls:NoModel",
        "console_log": "jobs.steps.calls:console_log",
        "prepare": "jobs.steps.calls:prepare",
        "report": "jobs.steps.calls:report",
        "serving_fields": "jobs.steps.calls:serving_fields",
        "train_local": "jobs.steps.calls:train_local",
        "trainer_image": "jobs.steps.calls:trainer_image",
        "upload_model": "jobs.steps.calls:upload_model",
        "verify_model": "jobs.steps.calls:verify_model",
    },
    "jobs.tensorboard": {
        "last_values": "jobs.run_records.tensorboard:last_values",
        "read_scalars": "jobs.run_records.tensorboard:read_scalars",
    },
    "jobs.validate": {
        "validate_or_raise": "jobs.rules.validate:validate_or_raise",
    },
    "jobs.verify": {
        "VerifyError": "jobs.steps.verify:VerifyError",
    },
    # since 2026-11-29 (issue 54): the job file's schema and loader, and what they stand on, went down to jobfile/;
    # the YAMLs of 6a0b772 and 97d0f77 read these (each imports jobs first, which installs this finder)
    "trainers.config": {
        "load_json": "jobfile.config:load_json",
        "resolved_base_dir": "jobfile.config:resolved_base_dir",
    },
    "trainers.errors": {
        "ConfigError": "jobfile.errors:ConfigError",
    },
    "trainers.paths": {
        "join": "jobfile.paths:join",
    },
    # since 2026-11-30 (issue 54, tools/move_tree.py)
    "jobs.cloud.clients": {
        "CloudError": "jobs.cloud.apis.clients:CloudError",
    },
    "jobs.spec": {
        "job_spec": "jobs.rules.job_spec",
        "labels": "jobs.rules.labels",
        "ranking": "jobs.rules.ranking",
        "records": "jobs.run_records.records",
        "tuning_rules": "jobs.rules.tuning_rules",
        "validate": "jobs.rules.validate",
    },
    "jobs.spec.errors": {
        "CloudError": "jobs.rules.errors:CloudError",
    },
    "jobs.spec.evaluation_verdict": {
        "figures": "jobs.evaluation.verdict:figures",
    },
    "jobs.spec.job_spec": {
        "baseline_job_spec": "jobs.rules.job_spec:baseline_job_spec",
        "custom_job_spec": "jobs.rules.job_spec:custom_job_spec",
        "parts": "jobs.rules.job_spec:parts",
        "rung_pools": "jobs.rules.job_spec:rung_pools",
    },
    "jobs.spec.labels": {
        "for_job": "jobs.rules.labels:for_job",
    },
    "jobs.spec.ranking": {
        "doc_problems": "jobs.rules.ranking:doc_problems",
        "offline_doc": "jobs.rules.ranking:offline_doc",
    },
    "jobs.spec.records": {
        "TUNING_RECORD": "jobs.run_records.records:TUNING_RECORD",
        "artifact_json": "jobs.run_records.records:artifact_json",
        "in_run_folder": "jobs.run_records.records:in_run_folder",
        "write_at": "jobs.run_records.records:write_at",
    },
    "jobs.spec.tuning_rules": {
        "HANDED_ON": "jobs.rules.tuning_rules:HANDED_ON",
        "baseline_metric": "jobs.rules.tuning_rules:baseline_metric",
        "baseline_of": "jobs.rules.tuning_rules:baseline_of",
    },
    "jobs.spec.validate": {
        "validate_or_raise": "jobs.rules.validate:validate_or_raise",
    },
}


#: old runnable module (``python -m OLD``, CHANGELOG.md) -> the command now; since 2026-11-27 (issue 43)
COMMANDS: dict[str, str] = {
    "jobs.ci.__main__": "python -m jobs.ci.cloudbuild_steps",  # `python -m jobs.ci`: jobs.ci is a package now
    "jobs.ci_local": "vtp ci-local (python -m jobs.commands.ci_local)",
    "jobs.local.launcher": "python -m jobs.local.launch",
    "jobs.local.runs_cli": "vtp runs (python -m jobs.commands.runs_cli)",
    "jobs.local.lifeline": "python -m jobs.local.process.lifeline",
    "jobs.local.replica_container": "python -m jobs.local.launch.replica_container",
    "jobs.aiplatform.cli": "vtp validate (python -m jobs.commands.validate_cli)",
    # since 2026-11-30 (issue 54, tools/move_tree.py)
    "jobs.ci.local": "vtp ci-local (python -m jobs.commands.ci_local)",
    "jobs.cloud.project": "python -m jobs.cloud.apis.project",
    "jobs.local.history.runs_cli": "vtp runs (python -m jobs.commands.runs_cli)",
    "jobs.spec.validate_cli": "vtp validate (python -m jobs.commands.validate_cli)",
}
#: old module a published container component runs (``python -m OLD`` in its command line) -> its module now, run
#: as ``__main__`` with the same arguments
RUNS: dict[str, str] = {
    # since 2026-11-30 (issue 54, tools/move_tree.py)
    "jobs.cloud.custom_job": "jobs.cloud.vertex_jobs.custom_job",
    "jobs.cloud.tuning_job": "jobs.cloud.vertex_jobs.tuning_job",
}
#: when an old path of these tables moved, where it is not the first move's date
MOVED_ON: dict[str, str] = {
    # since 2026-11-30 (issue 54, tools/move_tree.py)
    "jobs.ci.local": "2026-11-29",
    "jobs.cloud.clients": "2026-11-29",
    "jobs.cloud.custom_job": "2026-11-29",
    "jobs.cloud.project": "2026-11-29",
    "jobs.cloud.tuning_job": "2026-11-29",
    "jobs.local.history.runs_cli": "2026-11-29",
    "jobs.spec": "2026-11-29",
    "jobs.spec.errors": "2026-11-29",
    "jobs.spec.evaluation_verdict": "2026-11-29",
    "jobs.spec.job_spec": "2026-11-29",
    "jobs.spec.labels": "2026-11-29",
    "jobs.spec.ranking": "2026-11-29",
    "jobs.spec.records": "2026-11-29",
    "jobs.spec.tuning_rules": "2026-11-29",
    "jobs.spec.validate": "2026-11-29",
    "jobs.spec.validate_cli": "2026-11-29",
}
FIRST_MOVE = "2026-11-27"  # issue 43
EXIT_MOVED = 2


def _packages() -> set[str]:
    """The old packages above an old path (``jobs.spec`` above ``jobs.spec.records``), answered as stand-in
    packages so that importing the old path, or ``python -m OLD.sub``, reaches the finder (a real package of the
    same name always wins: the finder is asked last)."""
    names = set(MOVED) | set(COMMANDS) | set(RUNS)
    return {name.rsplit(".", k)[0] for name in names for k in range(1, name.count(".") + 1)} - {"jobs"}


def moved_on(old: str) -> str:
    """The date ``old`` moved (CHANGELOG.md names it)."""
    return MOVED_ON.get(old, FIRST_MOVE)


def moved_line(old: str) -> str:
    """The one line ``python -m OLD`` answers with."""
    shown = old[:-len(".__main__")] if old.endswith(".__main__") else old
    if old in COMMANDS:
        return f"error: python -m {shown} moved: run {COMMANDS[old]} (CHANGELOG.md, {moved_on(old)})"
    homes = sorted({target.partition(":")[0] for target in MOVED.get(old, {}).values()})
    return (f"error: {shown} is no command; its names moved to {', '.join(homes) or 'other modules'} "
            f"(CHANGELOG.md, {moved_on(old)})")


def _resolve(old: str, name: str):
    try:
        target = MOVED[old][name]
    except KeyError:
        raise AttributeError(f"module {old!r} has no attribute {name!r} (moved: see CHANGELOG.md)") from None
    module, _, attr = target.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attr) if attr else found


def getter(old: str):
    """A module ``__getattr__`` for ``old``, a path that is still a real module but lost names old YAMLs read."""
    def __getattr__(name: str):
        return _resolve(old, name)
    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name, f"Moved (see jobs/moved.py): {', '.join(sorted(MOVED.get(spec.name, ())))}")
        module.__getattr__ = getter(spec.name)
        return module

    def exec_module(self, module) -> None:
        return None

    def get_code(self, fullname: str):
        """What ``python -m fullname`` runs (``runpy`` asks the loader for the code): the module it is now
        (:data:`RUNS`), or the one moved line, exit 2."""
        if fullname in RUNS:
            return compile(f"import runpy\nrunpy.run_module({RUNS[fullname]!r}, run_name='__main__', alter_sys=True)\n",
                           f"<moved {fullname}>", "exec")
        return compile(f"import sys\nprint({moved_line(fullname)!r}, file=sys.stderr)\nraise SystemExit({EXIT_MOVED})\n",
                       f"<moved {fullname}>", "exec")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        packages = _packages()
        if fullname not in MOVED and fullname not in COMMANDS and fullname not in RUNS and fullname not in packages:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=fullname in packages)


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once): real modules always win."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
