"""Component YAMLs compiled by the previous version keep running in an image of this one.

A KFP user's compiled pipeline (or one uploaded to an Artifact Registry KFP repository) embeds each component's
function source, and that source imports the job side by path. ``tests/published/<commit>/`` holds the YAMLs of
the versions published before every component called the one entry point (``components/entry.py``): 6a0b772, before
the tree was laid out in layer folders (issue 43), and 97d0f77, the last before the entry point (issue 54). Until the
removal date in CHANGELOG.md every module path and every name they read must resolve here (``jobs/moved.py`` keeps
the old paths), every container command they run must still run, and their ``validate_config`` runs in ``kfp.local``.
"""
from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs import moved
from tests.conftest import ROOT

PUBLISHED = ROOT / "tests" / "published"
FIRST_PARTY = ("jobfile", "jobs", "trainers", "components", "pipelines")
YAMLS = sorted(PUBLISHED.glob("*/*.yaml"))
VERSIONS = sorted(p.name for p in PUBLISHED.iterdir() if p.is_dir())


def _sources(path: Path) -> list[str]:
    """The Python programs a component YAML's executors run (the function source KFP embeds)."""
    spec = yaml.safe_load(path.read_text())
    return [executor["container"]["command"][-1] for executor in spec["deploymentSpec"]["executors"].values()]


def _reads(source: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(the ``from M import N`` / ``import M`` statements on the job side, the (module, name) pairs read through a
    module bound by them: ``from jobs import steps`` then ``steps.train_local``)."""
    tree = ast.parse(source)
    statements, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FIRST_PARTY:
            statements.append(ast.unparse(node))
            for alias in node.names:
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in FIRST_PARTY for a in node.names):
            statements.append(ast.unparse(node))
    pairs = sorted({(modules[n.value.id], n.attr) for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in modules})
    return statements, pairs


def test_the_previous_versions_yamls_are_here():
    assert VERSIONS == ["6a0b772", "97d0f77"]
    assert len(list((PUBLISHED / "6a0b772").glob("*.yaml"))) == 12 and len(list((PUBLISHED / "97d0f77").glob("*.yaml"))) == 14


def _commands(path: Path) -> list[list[str]]:
    """The ``python3 -u -m MODULE`` commands of a YAML's container executors (not kfp's executor)."""
    spec = yaml.safe_load(path.read_text())
    return [executor["container"]["command"] for executor in spec["deploymentSpec"]["executors"].values()
            if executor["container"]["command"][:1] == ["python3"]]


@pytest.mark.parametrize("path", [p for p in YAMLS if _commands(p)], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_an_old_container_command_still_runs_the_step(path):
    """An old container component's command (``python3 -u -m jobs.cloud.vertex_jobs.custom_job``) is that step's runtime still:
    its flags, not a moved module's one line."""
    for command in _commands(path):
        assert command[:3] == ["python3", "-u", "-m"]
        proc = subprocess.run([sys.executable, *command[1:], "--help"], capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
        assert proc.returncode == 0 and "--gcp_resources" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: f"{p.parent.name}/{p.stem}")
@pytest.mark.process
def test_every_import_and_name_an_old_yaml_reads_resolves(path):
    """In a fresh interpreter, as a KFP task process starts: each import statement of the old function bodies,
    then each name read through an imported module (a name the job side no longer has at that path fails)."""
    lines = []
    for source in _sources(path):
        statements, pairs = _reads(source)
        lines += statements
        for module, name in pairs:
            lines.append(f"import importlib; getattr(importlib.import_module({module!r}), {name!r})")
    program = "\n".join(dict.fromkeys(lines)) + "\nprint('ok')\n"
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", program + proc.stderr[-2000:]


def test_every_moved_name_is_read_by_an_old_yaml_and_lands_where_the_table_says():
    """No stale entries: every (old module, name) of :data:`jobs.moved.MOVED` is read by some old YAML, and its
    target exists."""
    read = set()
    for path in YAMLS:
        for source in _sources(path):
            statements, pairs = _reads(source)
            read.update(pairs)
            for statement in statements:
                node = ast.parse(statement).body[0]
                if isinstance(node, ast.ImportFrom):
                    read.update((node.module, a.name) for a in node.names)
    for old, names in moved.MOVED.items():
        for name, target in names.items():
            assert (old, name) in read, f"{old}.{name}: no published YAML reads it"
            module, _, attr = target.partition(":")
            found = importlib.import_module(module)
            assert not attr or hasattr(found, attr), target


def test_an_old_path_the_table_lacks_fails_as_python_would():
    proc = subprocess.run([sys.executable, "-c", "from jobs import gate\ngate.no_such_name"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 1 and "AttributeError" in proc.stderr and "no_such_name" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", "import jobs.no_such_module"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert "ModuleNotFoundError" in proc.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", VERSIONS)
def test_an_old_validate_config_yaml_runs_under_kfp_local(tmp_path, version):
    """A previous version's ``validate_config`` YAML, run as kfp.local runs a task (its own process, this
    checkout on the path as the image's ``PYTHONPATH=/app``): its outputs are this version's."""
    old = PUBLISHED / version / "validate_config.yaml"
    program = f"""
import json, sys
from kfp import local
from kfp.components import load_component_from_file
from jobfile import config as config_lib
local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root={str(tmp_path / 'root')!r})
task = load_component_from_file({str(old)!r})(config_json=config_lib.load("local").to_json())
print(json.dumps({{"display_name": task.outputs["display_name"], "pools": len(task.outputs["worker_pool_specs"])}}))
"""
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=280, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["display_name"] and out["pools"] >= 1


def _container_modules() -> list[str]:
    """The modules the previous version's container components run (``python3 -u -m MODULE`` in the command)."""
    found = set()
    for path in YAMLS:
        spec = yaml.safe_load(path.read_text())
        for executor in spec["deploymentSpec"]["executors"].values():
            command = executor["container"].get("command", [])
            found.update(command[i + 1] for i, part in enumerate(command[:-1]) if part == "-m"
                         and command[i + 1].split(".")[0] in FIRST_PARTY)
    return sorted(found)


@pytest.mark.parametrize("module", _container_modules())
def test_every_module_an_old_container_component_runs_still_runs(module):
    """A container component's command line names a module: it must still start (its ``--help``), wherever the
    module lives now (``jobs.moved.RUNS``)."""
    proc = subprocess.run([sys.executable, "-u", "-m", module, "--help"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr[-2000:]


def test_an_old_runnable_path_runs_its_module_now(tmp_path):
    """The mechanism of :data:`jobs.moved.RUNS`, on a planted entry: ``python -m OLD ARGS`` runs the new module as
    ``__main__`` with ARGS, and its exit status is the new module's."""
    (tmp_path / "new_home.py").write_text("import sys\nif __name__ == '__main__':\n"
                                          "    print('ran', sys.argv[1:])\n    sys.exit(3)\n")
    (tmp_path / "sitecustomize.py").write_text("from jobs import moved\nmoved.RUNS['jobs.old_home'] = 'new_home'\n")
    proc = subprocess.run([sys.executable, "-m", "jobs.old_home", "--flag", "x"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
    assert (proc.returncode, proc.stdout.strip()) == (3, "ran ['--flag', 'x']"), proc.stderr[-2000:]
