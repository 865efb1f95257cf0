#!/usr/bin/env python
"""The tree's one move (issue 54, items 3 and 5), done by a script so that it can be run again on any later main.

    python tools/move_tree.py [--dry-run] [--commit]

Run from a clean checkout's root. In this order, and nothing by hand after it:

1. checks: the tree is clean, every old path of :data:`MOVES` is there and no new one is (else: already moved, or
   half moved: it refuses), every text it replaces (:data:`SNIPPETS`, ``tests/test_layout.py``'s ``LAYERS``) is
   found exactly once. Nothing is written before all checks pass; ``--dry-run`` stops here and prints the plan;
2. ``git mv`` of every file by :data:`MOVES` (old dotted module -> new; a package moves with everything under it,
   its data files too; the longest old name that matches wins), the new packages' ``__init__.py`` written
   (:data:`NEW_PACKAGES`), old folders left with no tracked file removed (a folder holding only ``__pycache__``
   would import as a namespace package and hide the old path from ``jobs/moved.py``);
3. every reference rewritten, in ``.py .md .yaml .yml .toml .cfg .txt`` files and ``Dockerfile*`` (not the frozen:
   :data:`FROZEN`): dotted names (``jobs.spec.records.read_at``, ``python -m ...``, ``Subcommand("...")``,
   ``# lazy:`` reasons), file paths (``jobs/spec/hardware/prices.yaml``, ``/app/jobs/...``), ``from P import a, b``
   split where ``a`` and ``b`` now live apart, identifiers (:data:`RENAMES`: the definition, ``from M import N``
   and its uses, ``alias.N``, ``M.N`` in text) and the names a file binds to a module whose last part changed
   (``from jobs.spec import evaluation`` -> ``from jobs.evaluation import examples_file``, every ``evaluation.x`` of that
   file, found with ``ast``). A dotted name is matched whole (``jobs.spec`` never hits ``jobs.specs``);
4. ``jobs/moved.py``: its old-name column kept, every target retargeted; an entry added for every (module, name)
   the previous versions' published YAMLs (``tests/published/*/``) read at a path that moved (:data:`RUNS` for a
   module their container components run), and the moved commands (``python -m OLD`` answers one line);
5. ``tests/test_layout.py``'s ``LAYERS`` from :data:`LAYER_CHANGES`, its docstring, the README's layout table, the
   packages' docstrings and ``jobs/__init__.py``'s from :data:`SNIPPETS`; CHANGELOG.md gets one new section (the
   table of moves; history entries are never rewritten);
6. the component YAMLs compiled again from their definitions; everything staged (``--commit``: committed as
   "mechanical move by tools/move_tree.py").

Before and after it prints the tree by folder (files, lines). Standard library only.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATE = "2026-11-29"  # the CHANGELOG section's and jobs/moved.py's date of this move
ISSUE = "issue 54"

#: old dotted module or package -> new. A package moves with its submodules; the longest old name that matches a
#: module wins (``jobs.spec`` moves to ``jobs.rules`` but ``jobs.spec.records`` to ``jobs.run_records.records``).
MOVES: dict[str, str] = {
    # the job's rules: a folder no person or tool takes for tests
    "jobs.spec": "jobs.rules",
    "jobs.cloud.preflight": "jobs.rules.preflight",  # what Vertex would refuse, checked before sending: rules only
    # what a run leaves and how it is read back
    "jobs.spec.records": "jobs.run_records.records",
    "jobs.spec.provenance": "jobs.run_records.provenance",
    "jobs.spec.own_outputs": "jobs.run_records.own_outputs",
    "jobs.spec.trial_files": "jobs.run_records.trial_files",
    "jobs.spec.run_cost": "jobs.run_records.run_cost",
    "jobs.spec.tensorboard": "jobs.run_records.tensorboard",
    # the held-out verdict: the examples file and the metrics
    "jobs.spec.evaluation": "jobs.evaluation.examples_file",
    "jobs.spec.evaluation_verdict": "jobs.evaluation.verdict",
    # the report's step table beside the run folder that writes it
    "jobs.spec.step_table": "jobs.local.run.step_table",
    # the Google Cloud APIs, one module each, and the project they answer for
    "jobs.cloud.clients": "jobs.cloud.apis.clients",
    "jobs.cloud.credentials": "jobs.cloud.apis.credentials",
    "jobs.cloud.policy": "jobs.cloud.apis.policy",
    "jobs.cloud.lines": "jobs.cloud.apis.lines",
    "jobs.cloud.cloudbuild": "jobs.cloud.apis.cloudbuild",
    "jobs.cloud.gcs": "jobs.cloud.apis.gcs",
    "jobs.cloud.iam": "jobs.cloud.apis.iam",
    "jobs.cloud.job_logs": "jobs.cloud.apis.job_logs",
    "jobs.cloud.notify": "jobs.cloud.apis.notify",
    "jobs.cloud.quotas": "jobs.cloud.apis.quotas",
    "jobs.cloud.registry": "jobs.cloud.apis.registry",
    "jobs.cloud.service_usage": "jobs.cloud.apis.service_usage",
    "jobs.cloud.vertex": "jobs.cloud.apis.vertex",
    "jobs.cloud.project": "jobs.cloud.apis.project",
    # what runs inside a pipeline step's container: THE runner of a Vertex job, a CustomJob, a study
    "jobs.cloud.job_runner": "jobs.cloud.vertex_jobs.job_runner",
    "jobs.cloud.custom_job": "jobs.cloud.vertex_jobs.custom_job",
    "jobs.cloud.tuning_job": "jobs.cloud.vertex_jobs.tuning_job",
    # one meaning per name: the plan of a Vertex job (not the training plan, not the pipeline's)
    "jobs.cloud.plan": "jobs.cloud.planning",
    "trainers.plan": "trainers.training_plan",
    # the commands users type, in one top layer (pipelines/run.py's table names them)
    "jobs.spec.validate_cli": "jobs.commands.validate_cli",
    "jobs.spec.hardware.listing": "jobs.commands.hardware_cli",
    "jobs.cloud.plan_cli": "jobs.commands.plan_cli",
    "jobs.steps.saved_plan": "jobs.commands.saved_plan",
    "jobs.cloud.submit": "jobs.commands.submit",
    "jobs.cloud.templates": "jobs.commands.templates",
    "jobs.cloud.schedule": "jobs.commands.schedule",
    "jobs.local.history.runs_cli": "jobs.commands.runs_cli",
    "jobs.local.history.logs_cli": "jobs.commands.logs_cli",
    "jobs.steps.run_command": "jobs.commands.run_command",
    "jobs.spec.output_file": "jobs.commands.output_file",  # a file a command writes where the user names it
    "jobs.spec.flag_file": "jobs.commands.flag_file",  # a command's flag against the job file
    # `vtp ci-local` (cloudbuild.yaml run here) is a command too; named for it, `local` keeps one meaning in the
    # tree's folders: a job on this machine (jobs/local/)
    "jobs.ci.local": "jobs.commands.ci_local",
}

#: (module that defines it, old name, new name): one meaning per name
RENAMES: list[tuple[str, str, str]] = [
    ("trainers.strategy", "STRATEGIES", "DISTRIBUTION_STRATEGIES"),
    ("jobs.spec.placement", "STRATEGIES", "SCHEDULING_STRATEGIES"),
]

#: the packages the move makes, each with its docstring (a package that is an old path of jobs/moved.py's table
#: answers the old names through its getter)
NEW_PACKAGES: dict[str, str] = {
    "jobs.run_records": (
        "What a run leaves and how it is read back: the records (``records``: names, reading, writing), what made a\n"
        "run (``provenance``), this product's own files in a project folder (``own_outputs``), a study's trials on\n"
        "disk (``trial_files``), what a run cost (``run_cost``), the TensorBoard scalars it wrote (``tensorboard``)."),
    "jobs.evaluation": (
        "The held-out verdict on ``serving.eval_data``: the examples file, its rules and reading (``examples_file``), and\n"
        "the verdict and its figures (``verdict``). Numpy only: running the model is ``jobs.steps.verify``'s."),
    "jobs.commands": (
        "Layer 7, the commands users type: each ``vtp`` subcommand of ``pipelines/run.py``'s table that no lower\n"
        "layer calls: ``run_command`` (``vtp`` itself: the pipeline command and the dispatch), ``validate_cli``,\n"
        "``hardware_cli``, ``plan_cli`` and ``saved_plan`` (``vtp plan``, ``vtp apply``), ``submit`` (``--project``,\n"
        "``register-model``), ``templates`` (``upload-template``), ``schedule``, ``runs_cli``, ``logs_cli``; what\n"
        "they share: ``output_file`` (a file a command writes where the user names it), ``flag_file`` (a flag against\n"
        "the job file); ``ci_local/`` (``vtp ci-local``: ``cloudbuild.yaml`` run on this machine, step by step)."),
    "jobs.cloud.apis": (
        "The Google Cloud APIs under one policy, one module each: ``clients`` (every call: endpoint, credentials,\n"
        "the one retry/timeout policy, errors), ``policy``, ``credentials`` (where the token may go), ``lines``;\n"
        "``vertex``, ``cloudbuild``, ``gcs``, ``registry``, ``job_logs`` (Cloud Logging), ``notify`` (a run's end to\n"
        "its webhook); the user's project as ``vtp plan`` sees it (``project``: ``quotas``, ``service_usage``,\n"
        "``iam``)."),
    "jobs.cloud.vertex_jobs": (
        "What runs inside a pipeline step's container and runs a Vertex job there: THE runner (``job_runner``:\n"
        "create, follow, cancel, logs), the training CustomJob (``custom_job``, with its capacity fall-over along the\n"
        "plan's ranking) and the study (``tuning_job``), each ``python3 -m`` of a container component."),
}

#: how ``tests/test_layout.py``'s ``LAYERS`` changes, applied to the list found (so layers added by others are kept):
#: the layer renamed, the names added beside a name, the layer inserted after the layer holding a name
LAYER_CHANGES = {
    "rename": {"spec": "rules"},
    "beside": {"jobs.rules": ("jobs.run_records", "jobs.evaluation")},
    "insert_after": {"jobs.steps": ("commands", ("jobs.commands",))},
}

FROZEN = ("tests/published/", "CHANGELOG.md", "jobs/moved.py")
GENERATED = re.compile(r"^components/[^/]+/component\.yaml$")  # compiled again from the definitions (step 6)
SUFFIXES = (".py", ".md", ".yaml", ".yml", ".toml", ".cfg", ".txt")
ROOTS = ("jobs", "trainers", "components", "pipelines")

#: (file, text found once before the move, its text after): docstrings, the README's layout rows, the layout test's
#: docstring. Checked before anything is written; then the generic rewrite runs over the result too.
SNIPPETS: list[tuple[str, str, str]] = []  # filled in by tools/move_tree_texts.py


def run(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, text=True, capture_output=True, check=check, **kw)


def tracked() -> list[str]:
    return [p for p in run("git", "ls-files", "-z").stdout.split("\0") if p]


# --- names ------------------------------------------------------------------------------------------------------
def new_name(dotted: str) -> str:
    """``dotted`` (a module, or a module then attributes) after the move: the longest old name of :data:`MOVES`
    that is ``dotted`` or a prefix of it by whole parts."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        if head in MOVES:
            return ".".join([MOVES[head]] + parts[k:])
    return dotted


def renamed_ident(module_old: str, name: str) -> str:
    for mod, old, new in RENAMES:
        if mod == module_old and old == name:
            return new
    return name


def modules_before() -> dict[str, Path]:
    out = {}
    for rel in tracked():
        if rel.endswith(".py") and rel.split("/")[0] in ROOTS:
            parts = rel[:-3].split("/")
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = ROOT / rel
    return out


def new_path(rel: str, packages: set[str]) -> str:
    """A tracked file's path after the move."""
    if rel.endswith(".py"):
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            return new_name(".".join(parts[:-1])).replace(".", "/") + "/__init__.py"
        return new_name(".".join(parts)).replace(".", "/") + ".py"
    # a data file moves with the package it is in (the longest moved package holding it)
    parts = rel.split("/")
    for k in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:k])
        if head in MOVES and head in packages:
            return MOVES[head].replace(".", "/") + "/" + "/".join(parts[k:])
    return rel


# --- text rewrites ----------------------------------------------------------------------------------------------
DOTTED = re.compile(r"(?<![\w.])(?:%s)(?:\.[A-Za-z_]\w*)+" % "|".join(ROOTS))
PATHED = re.compile(r"(?<![\w.])(?:%s)(?:/[\w.*-]+)+/?" % "|".join(ROOTS))
#: a path joined with pathlib's ``/``: ``ROOT / "jobs" / "spec" / "validate.py"``
JOINED = re.compile(r'"(?:%s)"(?:\s*/\s*"[\w.-]+")+' % "|".join(ROOTS))
FROM_IMPORT = re.compile(r"(?P<lead>^[ \t]*|(?<=[\s\"'`>(]))from (?P<mod>(?:%s)(?:\.\w+)*) import "
                         r"(?P<names>\([^()]*\)|[\w \t,]+?)(?P<tail>[ \t]*(?:#[^\n]*)?$|(?=[\\\"'`;\n)]))"
                         % "|".join(ROOTS), re.M)


def rewrite_dotted(match: re.Match) -> str:
    dotted = match.group(0)
    new = new_name(dotted)
    # an identifier of RENAMES named by its full path (``jobs.spec.placement.STRATEGIES``)
    parts = dotted.split(".")
    for k in range(len(parts) - 1, 0, -1):
        mod = ".".join(parts[:k])
        ident = renamed_ident(mod, parts[k])
        if ident != parts[k]:
            new_parts = new.split(".")
            offset = len(parts) - k
            new_parts[-offset] = ident
            new = ".".join(new_parts)
            break
    return new


def rewrite_path(match: re.Match) -> str:
    text = match.group(0)
    slash = text.endswith("/")
    body = text.rstrip("/")
    if body.endswith(".py"):
        return new_name(body[:-3].replace("/", ".")).replace(".", "/") + ".py" + ("/" if slash else "")
    parts = body.split("/")
    for k in range(len(parts), 0, -1):
        head = ".".join(parts[:k])
        if head in MOVES and head in PACKAGES_BEFORE:
            return "/".join([MOVES[head].replace(".", "/")] + parts[k:]) + ("/" if slash else "")
    return text


PACKAGES_BEFORE: set[str] = set()
MODULES_BEFORE: set[str] = set()


def rewrite_joined(match: re.Match) -> str:
    parts = re.findall(r'"([\w.-]+)"', match.group(0))
    new = rewrite_path(PATHED.fullmatch("/".join(parts)))
    return match.group(0) if new == "/".join(parts) else " / ".join(f'"{p}"' for p in new.split("/"))


def split_import(match: re.Match, binds: list[tuple[str, str]], problems: list[str], where: str) -> str:
    """``from P import a, b as c``: each name to where it lives now; one statement per new home (at a line's start),
    the names a file binds to a module whose last part changed recorded in ``binds``."""
    mod, names_text = match.group("mod"), match.group("names")
    inner = names_text.strip()[1:-1] if names_text.strip().startswith("(") else names_text
    items = [n.strip() for n in re.split(r",", inner.replace("\n", " ")) if n.strip()]
    if not items or any(not re.fullmatch(r"\w+(?:\s+as\s+\w+)?", i) for i in items):
        return match.group(0)
    homes: dict[str, list[str]] = {}
    changed = False
    for item in items:
        name, _, alias = (p.strip() for p in item.partition(" as "))
        if f"{mod}.{name}" in MODULES_BEFORE:  # a module
            target = new_name(f"{mod}.{name}")
            home, _, base = target.rpartition(".")
        else:
            home, base = new_name(mod), renamed_ident(mod, name)
        if base != name and not alias:  # the file's uses of the name follow it
            binds.append((name, base))
        if alias == base:
            alias = ""
        changed |= home != mod or base != name or (alias != item.partition(" as ")[2].strip())
        homes.setdefault(home, []).append(f"{base} as {alias}" if alias else base)
    if not changed:
        return match.group(0)
    if len(homes) == 1 and "(" not in names_text and "\n" not in names_text:
        (home, names), = homes.items()
        return f"{match.group('lead')}from {home} import {', '.join(names)}{match.group('tail')}"
    if len(homes) == 1:  # a parenthesized list: keep its layout, change the module and the names in it
        (home, _), = homes.items()
        text = names_text
        for item in items:
            name = item.partition(" as ")[0].strip()
            if f"{mod}.{name}" in MODULES_BEFORE:
                base = new_name(f"{mod}.{name}").rpartition(".")[2]
            else:
                base = renamed_ident(mod, name)
            if base != name:
                text = re.sub(rf"(?<![\w.]){name}\b(?!\s+as\s+{base}\b)", base, text, count=1)
                text = re.sub(rf"\b{base}\s+as\s+{base}\b", base, text)
        return f"{match.group('lead')}from {home} import {text}{match.group('tail')}"
    lead = match.group("lead")
    if match.start() > 0 and match.string[match.start() - 1] != "\n":
        problems.append(f"{where}: `{match.group(0).strip()}` names modules that now live apart, inside a line: "
                        "split by hand in the script's SNIPPETS")
        return match.group(0)
    lines = [f"{lead}from {home} import {', '.join(names)}" for home, names in sorted(homes.items())]
    lines[-1] += match.group("tail")
    return "\n".join(lines)


def rename_bound(text: str, binds: list[tuple[str, str]], problems: list[str], where: str) -> str:
    """In a Python file: each name a file bound by ``from P import old`` (now ``new``) renamed where it is used
    (``ast``: the Name nodes; refused where the file binds ``old`` otherwise too)."""
    if not binds:
        return text
    try:
        tree = ast.parse(text)
    except SyntaxError:
        problems.append(f"{where}: does not parse after the import rewrite; names {binds} not renamed")
        return text
    lines = text.splitlines(keepends=True)
    spans = []
    for old, new in dict(binds).items():
        other = [n for n in ast.walk(tree) if (isinstance(n, ast.Name) and n.id == old and not isinstance(n.ctx, ast.Load))
                 or (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == old)
                 or (isinstance(n, ast.arg) and n.arg == old)
                 or (isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == old for a in n.names))]
        if other:
            problems.append(f"{where}: binds {old!r} otherwise too (line {other[0].lineno}): its uses not renamed")
            continue
        if any(isinstance(n, ast.Name) and n.id == new for n in ast.walk(tree)):
            problems.append(f"{where}: already uses the name {new!r}: {old!r} not renamed")
            continue
        spans += [(n.lineno, n.col_offset, n.end_col_offset, new) for n in ast.walk(tree)
                  if isinstance(n, ast.Name) and n.id == old]
    for lineno, start, end, new in sorted(spans, reverse=True):
        line = lines[lineno - 1]
        b = line.encode()
        lines[lineno - 1] = (b[:start] + new.encode() + b[end:]).decode()
    return "".join(lines)


def rename_identifiers(text: str, rel: str) -> str:
    """:data:`RENAMES` in one Python file: in the defining module every whole word; elsewhere ``alias.OLD`` where
    the file binds ``alias`` to the defining module (``from P import mod [as alias]``, ``import M as alias``)."""
    module = ".".join(Path(rel[:-3]).parts)  # the file's module AFTER the move
    for mod, old, new in RENAMES:
        if new_name(mod) == module:
            text = re.sub(rf"\b{old}\b", new, text)
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        aliases = set()
        target = new_name(mod)
        parent, _, base = target.rpartition(".")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == parent:
                aliases |= {a.asname or a.name for a in node.names if a.name == base}
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.name == target and a.asname}
        for alias in aliases:
            text = re.sub(rf"(?<![\w.]){alias}\.{old}\b", f"{alias}.{new}", text)
    return text


def rewrite_text(text: str, rel: str, problems: list[str]) -> str:
    binds: list[tuple[str, str]] = []
    text = FROM_IMPORT.sub(lambda m: split_import(m, binds, problems, rel), text)
    text = DOTTED.sub(rewrite_dotted, text)
    text = PATHED.sub(rewrite_path, text)
    if rel.endswith(".py"):
        text = JOINED.sub(rewrite_joined, text)
        text = rename_bound(text, binds, problems, rel)
        text = rename_identifiers(text, rel)
    return text


def rewritable(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return ((rel.endswith(SUFFIXES) or name.startswith("Dockerfile")) and not rel.startswith(FROZEN)
            and not GENERATED.match(rel) and not rel.startswith("tools/move_tree"))


# --- jobs/moved.py ------------------------------------------------------------------------------------------------
def _published_reads() -> tuple[set[tuple[str, str]], set[str], set[str]]:
    """What the published YAMLs (``tests/published/*/*.yaml``) read: (module, name) pairs, modules imported whole,
    modules their container components run. As ``tests/test_published_compat.py`` reads them."""
    import yaml  # the project's dependency; only this step needs it

    pairs, imported, runs = set(), set(), set()
    for path in sorted((ROOT / "tests" / "published").glob("*/*.yaml")):
        spec = yaml.safe_load(path.read_text())
        for executor in spec["deploymentSpec"]["executors"].values():
            command = executor["container"].get("command", [])
            runs.update(command[i + 1] for i, p in enumerate(command[:-1]) if p == "-m"
                        and command[i + 1].split(".")[0] in ROOTS)
            try:
                tree = ast.parse(command[-1])
            except SyntaxError:
                continue
            bound = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ROOTS:
                    for alias in node.names:
                        pairs.add((node.module, alias.name))
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif isinstance(node, ast.Import):
                    imported.update(a.name for a in node.names if a.name.split(".")[0] in ROOTS)
            pairs.update((bound[n.value.id], n.attr) for n in ast.walk(tree)
                         if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound)
    return pairs, imported, runs


def _exists_after(module: str, modules_after: set[str]) -> bool:
    return module in modules_after


def moved_tables(modules: dict[str, Path], subcommands: dict[str, str]) -> dict[str, dict]:
    """The new MOVED, COMMANDS, RUNS and MOVED_ON of jobs/moved.py (computed before anything moves)."""
    sys.path.insert(0, str(ROOT))
    ns: dict = {}
    exec(compile((ROOT / "jobs" / "moved.py").read_text(), "jobs/moved.py", "exec"), ns)
    after = {new_name(m) for m in modules}

    def target(t: str) -> str:
        mod, colon, attr = t.partition(":")
        return new_name(mod) + (colon + renamed_ident(mod, attr) if colon else "")

    moved = {old: {name: target(t) for name, t in names.items()} for old, names in ns["MOVED"].items()}
    commands = {old: DOTTED.sub(rewrite_dotted, text) for old, text in ns["COMMANDS"].items()}
    runs_table = {old: new_name(new) for old, new in ns.get("RUNS", {}).items()}
    moved_on = dict(ns.get("MOVED_ON", {}))

    pairs, imported, runs = _published_reads()
    for mod, name in sorted(pairs):
        if mod in after and f"{mod}.{name}" not in modules:
            continue  # a real module after the move, and the name is no moved submodule: it reads it there
        if f"{mod}.{name}" in modules:
            if new_name(f"{mod}.{name}") == f"{mod}.{name}":
                continue
            if mod in after:  # ``from jobs.cloud import clients``: the old submodule answered as a stand-in
                moved.setdefault(f"{mod}.{name}", {})
                continue
            entry = new_name(f"{mod}.{name}")
        elif mod in modules and new_name(mod) != mod:
            entry = f"{new_name(mod)}:{renamed_ident(mod, name)}"
        else:
            continue  # not ours to answer (an old path of the first move: already in the table)
        moved.setdefault(mod, {})[name] = entry
        moved_on.setdefault(mod, DATE)
    for mod in sorted(imported):
        if mod in modules and new_name(mod) != mod:
            moved.setdefault(mod, {})
            moved_on.setdefault(mod, DATE)
    for old in sorted(runs):
        if old in modules and new_name(old) != old:
            runs_table[old] = new_name(old)
            moved_on.setdefault(old, DATE)
    # the moved commands a user types: ``python -m OLD`` answers one line naming the new one
    for module, path in sorted(modules.items()):
        new = new_name(module)
        if new == module or module in runs_table:
            continue
        runnable = (path.name == "__init__.py" and (path.parent / "__main__.py").is_file()) or (
            path.name != "__init__.py" and path.name != "__main__.py" and "__name__ == \"__main__\"" in path.read_text())
        if not runnable or module in commands:
            continue
        vtp = next((name for name, mod in subcommands.items() if mod == module), None)
        commands[module] = f"vtp {vtp} (python -m {new})" if vtp else f"python -m {new}"
        moved_on[module] = DATE
    moved_on = {k: v for k, v in moved_on.items() if k in moved or k in commands or k in runs_table}
    OLD_TABLES.update({name: ns.get(name, {}) for name in ("MOVED", "COMMANDS", "RUNS", "MOVED_ON")})
    return {"MOVED": moved, "COMMANDS": commands, "RUNS": runs_table, "MOVED_ON": moved_on}


OLD_TABLES: dict[str, dict] = {}


def write_moved(tables: dict[str, dict], old: dict[str, dict]) -> None:
    """Each table of jobs/moved.py edited in place (its layout and comments kept): every value retargeted, the
    entries this move adds appended under one comment line."""
    path = ROOT / "jobs" / "moved.py"
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    value = {"MOVED": lambda v: _target(v), "COMMANDS": lambda v: DOTTED.sub(rewrite_dotted, v),
             "RUNS": new_name, "MOVED_ON": lambda v: v}
    spans = []
    for node in tree.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in tables):
            continue
        name = node.target.id
        block = lines[node.lineno - 1:node.end_lineno]
        block = [re.sub(r'^(\s*"[\w.]+":\s*")([^"]+)(")', lambda m: m.group(1) + value[name](m.group(2)) + m.group(3), line)
                 for line in block]
        added = {k: v for k, v in tables[name].items() if k not in old[name]}
        for key in set(tables[name]) & set(old[name]):
            if name == "MOVED" and set(tables[name][key]) != set(old[name][key]):
                raise SystemExit(f"error: jobs/moved.py: MOVED[{key!r}] gains names "
                                 f"{sorted(set(tables[name][key]) - set(old[name][key]))}: add them by hand to the script")
        if added:
            closing = block[-1]
            if not closing.rstrip().endswith("}"):
                raise SystemExit(f"error: jobs/moved.py: {name} does not end with a line holding its closing brace")
            body = _render_dict(added).splitlines()[1:-1]
            if block[-1].strip() == "}" and len(block) > 1:
                block = block[:-1] + [f"    # since {DATE} ({ISSUE}, tools/move_tree.py)\n"] + [l + "\n" for l in body] + [closing]
            else:  # `NAME: T = {}` on one line
                block = [block[0].rstrip("\n").replace("{}", "{\n") + f"    # since {DATE} ({ISSUE}, tools/move_tree.py)\n"
                         + "".join(l + "\n" for l in body) + "}\n"]
        spans.append((node.lineno, node.end_lineno, "".join(block)))
    for start, end, new in sorted(spans, reverse=True):
        lines[start - 1:end] = [new]
    path.write_text("".join(lines))


def _target(t: str) -> str:
    mod, colon, attr = t.partition(":")
    return new_name(mod) + (colon + renamed_ident(mod, attr) if colon else "")


def _render_dict(table: dict, comments: dict[str, str] | None = None) -> str:
    comments = comments or {}
    if not table:
        return "{}"
    out = ["{"]
    for key in sorted(table):
        value = table[key]
        if isinstance(value, dict):
            if not value:
                out.append(f'    "{key}": {{}},')
                continue
            out.append(f'    "{key}": {{')
            out += [f'        "{k}": "{v}",' for k, v in sorted(value.items())]
            out.append("    },")
        else:
            out.append(f'    "{key}": "{value}",{comments.get(key, "")}')
    out.append("}")
    return "\n".join(out)


def subcommand_table() -> dict[str, str]:
    text = (ROOT / "pipelines" / "run.py").read_text()
    return dict(re.findall(r'"([\w-]+)": run_command\.Subcommand\("([\w.]+)"', text))


# --- tests/test_layout.py's LAYERS ------------------------------------------------------------------------------
LAYERS_RE = re.compile(r"^LAYERS: list\[tuple\[str, tuple\[str, \.\.\.\]\]\] = \[\n(?:    .*\n)*?\]\n", re.M)


def new_layers(text: str) -> str:
    found = LAYERS_RE.search(text)
    if not found:
        raise SystemExit("error: tests/test_layout.py: no `LAYERS: list[tuple[str, tuple[str, ...]]] = [` block; "
                         "update LAYERS_RE in tools/move_tree.py")
    layers = ast.literal_eval(found.group(0).split("=", 1)[1])
    out = []
    for name, names in layers:
        names = tuple(dict.fromkeys(new_name(n) for n in names))
        for anchor, extra in LAYER_CHANGES["beside"].items():
            if anchor in names:
                names += tuple(e for e in extra if e not in names)
        out.append((LAYER_CHANGES["rename"].get(name, name), names))
        for anchor, layer in LAYER_CHANGES["insert_after"].items():
            if anchor in names and layer not in out:
                out.append(layer)
    body = "".join(f"    ({n!r}, {names!r}),\n".replace("'", '"') for n, names in out)
    return text[:found.start()] + "LAYERS: list[tuple[str, tuple[str, ...]]] = [\n" + body + "]\n" + text[found.end():]


# --- the summary ------------------------------------------------------------------------------------------------
def by_folder() -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rel in tracked():
        if rel.endswith(".py") and rel.split("/")[0] in ROOTS and (ROOT / rel).is_file():
            folder = rel.rsplit("/", 1)[0]
            out[folder][0] += 1
            out[folder][1] += len((ROOT / rel).read_text().splitlines())
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}


def print_summary(before: dict, after: dict) -> None:
    print(f"{'folder':<34} {'before':>14} {'after':>14}")
    for folder in sorted(set(before) | set(after)):
        b, a = before.get(folder), after.get(folder)
        fmt = lambda x: f"{x[0]:>3} f {x[1]:>6} l" if x else f"{'-':>14}"
        print(f"{folder + '/':<34} {fmt(b):>14} {fmt(a):>14}")
    tb = (sum(v[0] for v in before.values()), sum(v[1] for v in before.values()))
    ta = (sum(v[0] for v in after.values()), sum(v[1] for v in after.values()))
    print(f"{'total':<34} {tb[0]:>3} f {tb[1]:>6} l {ta[0]:>3} f {ta[1]:>6} l")


# --- CHANGELOG ----------------------------------------------------------------------------------------------------
def changelog_section(tables: dict[str, dict]) -> str:
    rows = "\n".join(f"| `{old}` | `{new}` |" for old, new in MOVES.items())
    renames = "; ".join(f"`{mod}.{old}` is `{new_name(mod)}.{new}`" for mod, old, new in RENAMES)
    commands = ", ".join(f"`python -m {old}`" for old, _ in sorted(tables["COMMANDS"].items())
                         if tables["MOVED_ON"].get(old) == DATE)
    runs = ", ".join(f"`python -m {old}`" for old in sorted(tables["RUNS"]))
    return f"""## {DATE}: names that say what they hold ({ISSUE}, items 3 and 5)

The job-side tree moved once more, by `tools/move_tree.py` (one commit, nothing else in it); behaviour is unchanged.
The job's rules are `jobs/rules/` (no tool takes it for tests); what a run leaves and how it is read back is
`jobs/run_records/`; the held-out verdict `jobs/evaluation/`; the report's step table sits with the run folder
(`jobs/local/run/`); `jobs/cloud/` holds the Google Cloud APIs (`apis/`), what runs inside a step's container
(`vertex_jobs/`) and the plan of a Vertex job (`planning.py`); the commands users type are one top layer below the
components, `jobs/commands/`. One meaning per name: {renames}; `trainers.plan` (the training plan) is
`trainers.training_plan`, `jobs.cloud.plan` (a Vertex job's plan) `jobs.cloud.planning`; `vtp ci-local` is
`jobs/commands/ci_local/`.

**Component YAMLs compiled by earlier versions keep running**: every path they import is answered by
`jobs/moved.py`, and the modules their container components run ({runs or "none"}) run their modules now.
Old commands answer one line naming the new one: {commands or "none"}. Code of your own that imports these modules
must use the new paths below.

### Modules moved

| before | now |
|---|---|
{rows}

"""


# --- main ---------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="check and print the plan; write nothing")
    ap.add_argument("--commit", action="store_true", help="commit the move (nothing else in the commit)")
    ap.add_argument("--allow-dirty", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from move_tree_texts import SNIPPETS as texts  # the docstrings, README rows and the layout test's docstring

    if run("git", "status", "--porcelain").stdout.strip() and not args.allow_dirty:
        print("error: the checkout has changes: commit or stash them first (the move is one commit of its own)",
              file=sys.stderr)
        return 2
    modules = modules_before()
    MODULES_BEFORE.update(modules)
    PACKAGES_BEFORE.update(m for m, p in modules.items() if p.name == "__init__.py")
    missing = [old for old in MOVES if old not in modules]
    present = [new for old, new in MOVES.items() if new in modules]
    if missing and len(missing) == len(MOVES) and len(present) == len(MOVES):
        print("already moved: every new path is there, no old one (nothing to do)")
        return 0
    if missing or present:
        print(f"error: half moved or not this tree: old paths missing {missing}, new paths present {present}",
              file=sys.stderr)
        return 2
    problems: list[str] = []
    for rel, old, _new in texts:
        count = (ROOT / rel).read_text().count(old) if (ROOT / rel).is_file() else 0
        if count != 1:
            problems.append(f"{rel}: the text to replace is found {count} times (expected once): "
                            f"{old[:100]!r}...")
    new_layers((ROOT / "tests" / "test_layout.py").read_text())
    files = tracked()
    moves = {rel: new_path(rel, PACKAGES_BEFORE) for rel in files if rel.split("/")[0] in ("jobs", "trainers")}
    moves = {a: b for a, b in moves.items() if a != b}
    clash = [b for b in moves.values() if (ROOT / b).exists()]
    if clash:
        problems.append(f"new paths already taken: {clash}")
    for pkg in NEW_PACKAGES:
        if not any(b.startswith(pkg.replace(".", "/") + "/") for b in moves.values()):
            problems.append(f"NEW_PACKAGES: {pkg} receives no module")
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        return 2
    print(f"{len(moves)} files to move:")
    for a, b in sorted(moves.items()):
        print(f"  {a} -> {b}")
    tables = moved_tables(modules, subcommand_table())
    if args.dry_run:
        print("jobs/moved.py would hold:")
        for name, table in tables.items():
            print(f"{name} = {_render_dict(table)}")
        return 0

    before = by_folder()
    # 5 (first: the snippets are matched against the text as it is now)
    for rel, old, new in texts:
        path = ROOT / rel
        path.write_text(path.read_text().replace(old, new))
    # 2
    for a, b in sorted(moves.items()):
        (ROOT / b).parent.mkdir(parents=True, exist_ok=True)
        run("git", "mv", a, b)
    for pkg, doc in NEW_PACKAGES.items():
        init = ROOT / pkg.replace(".", "/") / "__init__.py"
        if not init.exists():
            getter = ""
            if pkg in tables["MOVED"]:  # an old path of the table that is a real package now
                getter = ("\n\nA component YAML compiled by an earlier version reads old names here, which "
                          ":mod:`jobs.moved` answers.\"\"\"\nfrom jobs import moved\n\n__getattr__ = moved.getter(__name__)\n")
                init.write_text(f'"""{doc}{getter}')
            else:
                init.write_text(f'"""{doc}"""\n')
            run("git", "add", str(init.relative_to(ROOT)))
    for a in sorted({str(Path(a).parent) for a in moves}, key=len, reverse=True):
        folder = ROOT / a
        if folder.is_dir() and not run("git", "ls-files", a).stdout.strip():
            shutil.rmtree(folder)
    # 3
    problems = []
    for rel in tracked():
        path = ROOT / rel
        if not path.is_file() or not rewritable(rel):
            continue
        text = path.read_text()
        new = rewrite_text(text, rel, problems)
        if rel == "tests/test_layout.py":
            new = new_layers(new)
        if new != text:
            path.write_text(new)
    # 4
    write_moved(tables, OLD_TABLES)
    changelog = ROOT / "CHANGELOG.md"
    text = changelog.read_text()
    head, sep, rest = text.partition("\n## ")
    changelog.write_text(head.rstrip("\n") + "\n\n" + changelog_section(tables) + "## " + rest)
    # 6
    proc = subprocess.run([sys.executable, "-c", "import components; components.write_yamls('components')"],
                          cwd=ROOT, text=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode:
        problems.append("the component YAMLs could not be compiled: " + proc.stderr[-2000:])
    run("git", "add", "-A")
    after = by_folder()
    print_summary(before, after)
    if problems:
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        return 1
    if args.commit:
        run("git", "commit", "-q", "-m", "mechanical move by tools/move_tree.py")
        print(run("git", "log", "--oneline", "-1").stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
