"""The tree's layering, as the README's layout table states it, read from the source with ``ast``.

Every import counts, the ones inside functions too: a lazy import (TensorFlow, kfp and the cloud clients are
imported where they are used, for start-up time) is still a dependency, so it must point down like any other.

The layers, bottom to top (:data:`LAYERS`; a module may import its own layer and the layers below, never one
above; every first-party module is in exactly one):

1. ``trainers``: what runs inside a replica; imports no job side and no kfp;
2. the spec: what a job is and whether it is valid, with nothing run yet: the job side's one-line errors, how the
   user started the command (``vtp``), the held-out verdict's rules and figures, the
   hardware catalog and rules, the image reference and a job's image, THE job spec, the replica environment,
   the tuning, gate, scheduling and trainer sections' rules, validation and `vtp validate`, the AI Platform import, the records a run leaves and the
   TensorBoard scalars it writes;
3. the clients (``jobs/cloud``): the Google Cloud APIs under one policy, the Vertex jobs' one runner;
4. images (``jobs/images``): building an image through one builder interface;
5. the local runtime (``jobs/local``): replicas as processes or containers, one run per folder, its history;
6. the steps: the pipeline's steps as plain calls, the local study, the gate step, the report, verification,
   writing a compiled pipeline, the CI's decisions;
7. ``components``: the KFP components, each a thin wrapper of a step;
8. ``pipelines``: wiring only; nothing imports it.

And no two first-party modules import each other, directly or round a loop, at import time or later.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainers", "jobs", "components", "pipelines")

#: (layer, the modules and packages in it), bottom first. A name stands for itself and every module under it;
#: the longest name that matches places a module.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("trainers", ("trainers",)),
    ("spec", ("jobs", "jobs.errors", "jobs.cli", "jobs.evaluation", "jobs.evaluation_verdict", "jobs.hardware", "jobs.image_reference", "jobs.job_image", "jobs.job_spec",
              "jobs.replica_env", "jobs.tuning_spec", "jobs.gate_spec", "jobs.scheduling_spec", "jobs.trainer_spec", "jobs.validate", "jobs.aiplatform",
              "jobs.records", "jobs.tuning_rules", "jobs.trial_files", "jobs.provenance", "jobs.tensorboard")),
    ("clients", ("jobs.cloud",)),
    ("images", ("jobs.images",)),
    ("local runtime", ("jobs.local",)),
    ("steps", ("jobs.steps", "jobs.pipeline_plan", "jobs.tuning", "jobs.gate", "jobs.report", "jobs.report_charts",
               "jobs.report_sections", "jobs.report_eval", "jobs.report_data", "jobs.verify", "jobs.compiled", "jobs.ci",
               "jobs.ci_local", "jobs.run_command")),
    ("components", ("components",)),
    ("pipelines", ("pipelines",)),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The first-party module ``name`` loads: itself, or the package it is an attribute of."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` runs when the module is a script, not when it is imported."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators))


def _imports(path: Path, module: str, import_time_only: bool = False) -> set[str]:
    """Dotted names ``path`` imports (``from a import b`` gives ``a.b``; relative imports resolved): every
    import statement, inside functions too. With ``import_time_only`` the bodies of functions and the
    ``__main__`` block are skipped: what runs when the module is imported."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if import_time_only and (isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                                     or _is_main_block(child)):
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names if alias.name != "*")
            visit(child)

    visit(tree)
    return found


def _graph(modules: dict[str, Path], import_time_only: bool = False) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports (a module's own packages left out: importing them is
    Python's doing, not the module's choice), with the packages that importing them runs first."""
    graph = {name: {r for i in _imports(path, name, import_time_only)
                    if (r := _resolve(i, modules)) and r != name and not name.startswith(r + ".")}
             for name, path in modules.items()}
    # importing a.b.c imports its packages a and a.b first: follow those edges too
    for name in list(graph):
        for dep in list(graph[name]):
            parts = dep.split(".")
            graph[name].update(p for k in range(1, len(parts)) if (p := ".".join(parts[:k])) in modules
                               and p != name and not name.startswith(p + "."))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                walk(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name)
    return cycles


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer ``module`` is in (the longest matching name), or None."""
    best, where = "", None
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, where = name, index
    return where


def test_trainers_never_import_the_job_side_or_kfp():
    modules = _sources()
    bad = {name: sorted(i for i in _imports(path, name)
                        if i.split(".")[0] in ("jobs", "components", "pipelines", "kfp", "google_cloud_pipeline_components"))
           for name, path in modules.items() if name.startswith("trainers")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_nothing_below_pipelines_imports_it():
    modules = _sources()
    bad = {name: sorted(i for i in _imports(path, name) if i.split(".")[0] == "pipelines")
           for name, path in modules.items() if not name.startswith("pipelines")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_every_module_is_in_one_layer():
    """A new module is placed on purpose: a name of :data:`LAYERS` covers it."""
    assert sorted(m for m in _sources() if layer_of(m) is None) == []


def test_no_module_imports_a_higher_layer_counting_imports_inside_functions():
    modules = _sources()
    graph = _graph(modules)
    up = sorted(f"{name} ({LAYERS[layer_of(name)][0]}) -> {dep} ({LAYERS[layer_of(dep)][0]})"
                for name, deps in graph.items() for dep in deps
                if layer_of(name) is not None and layer_of(dep) is not None and layer_of(dep) > layer_of(name))
    assert up == []


def test_no_import_cycle_counting_imports_inside_functions():
    assert _cycles(_graph(_sources())) == []


def test_no_import_cycle_at_import_time():
    assert _cycles(_graph(_sources(), import_time_only=True)) == []


def _plant(tmp_path, monkeypatch, files: dict[str, str]) -> None:
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)


def _fails(check) -> bool:
    try:
        check()
    except AssertionError:
        return True
    return False


def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks above are not vacuous: a planted cycle and a planted upward import are found."""
    _plant(tmp_path, monkeypatch, {
        "jobs/records.py": "from jobs import validate\n",
        "jobs/validate.py": "import jobs.records\n\ndef later():\n    from pipelines import run\n",
        "trainers/t.py": "def f():\n    import kfp\n",
    })
    for check in (test_no_import_cycle_at_import_time, test_no_import_cycle_counting_imports_inside_functions,
                  test_nothing_below_pipelines_imports_it, test_trainers_never_import_the_job_side_or_kfp,
                  test_no_module_imports_a_higher_layer_counting_imports_inside_functions):
        assert _fails(check), f"{check.__name__} passed on a planted violation"


def test_the_checker_finds_a_cycle_closed_inside_a_function(tmp_path, monkeypatch):
    """Two modules of one layer, one importing the other at import time, the other importing it back inside
    a function (how the circles of the job side were closed): a cycle, though not one at import time."""
    _plant(tmp_path, monkeypatch, {
        "jobs/records.py": "from jobs import validate\n",
        "jobs/validate.py": "def problems():\n    from jobs.records import read_at\n    return read_at\n",
    })
    assert not _fails(test_no_import_cycle_at_import_time)
    assert _fails(test_no_import_cycle_counting_imports_inside_functions)
    assert not _fails(test_no_module_imports_a_higher_layer_counting_imports_inside_functions)


def test_the_checker_finds_an_upward_import_inside_a_function(tmp_path, monkeypatch):
    """The spec reaching up into the local runtime from inside a function (as validation once did for the
    replica environment) is an upward import; the same import from the runtime down is not."""
    _plant(tmp_path, monkeypatch, {
        "jobs/validate.py": "def problems():\n    from jobs.local.launcher import launch\n    return launch\n",
        "jobs/local/__init__.py": "",
        "jobs/local/launcher.py": "from jobs import validate\n",
    })
    assert layer_of("jobs.validate") < layer_of("jobs.local.launcher")
    assert _fails(test_no_module_imports_a_higher_layer_counting_imports_inside_functions)
    assert not _fails(test_no_import_cycle_at_import_time)
    (tmp_path / "jobs" / "validate.py").write_text("def problems():\n    return None\n")
    assert not _fails(test_no_module_imports_a_higher_layer_counting_imports_inside_functions)


#: the local runtime's folders, bottom first: each imports only its own folder and those before it (imports inside
#: functions counted), so the tree reads as the runtime is built: process tools, launching replicas, one run, history
LOCAL_FOLDERS = ("jobs.local.process", "jobs.local.launch", "jobs.local.run", "jobs.local.history")


def _local_folder(module: str) -> int | None:
    return next((i for i, name in enumerate(LOCAL_FOLDERS) if module == name or module.startswith(name + ".")), None)


def test_the_local_runtime_folders_import_only_downward():
    modules = _sources()
    graph = _graph(modules)
    unplaced = sorted(m for m in modules if m.startswith("jobs.local.") and _local_folder(m) is None)
    up = sorted(f"{name} -> {dep}" for name, deps in graph.items() for dep in deps
                if _local_folder(name) is not None and _local_folder(dep) is not None
                and _local_folder(dep) > _local_folder(name))
    assert (unplaced, up) == ([], [])


def test_the_local_folder_check_finds_an_upward_import(tmp_path, monkeypatch):
    """Launching replicas reaching up into run history (inside a function) is caught."""
    _plant(tmp_path, monkeypatch, {
        "jobs/local/__init__.py": "",
        "jobs/local/launch/__init__.py": "",
        "jobs/local/launch/supervisor.py": "def f():\n    from jobs.local.history import reader\n",
        "jobs/local/history/__init__.py": "",
        "jobs/local/history/reader.py": "",
    })
    assert _fails(test_the_local_runtime_folders_import_only_downward)
    (tmp_path / "jobs" / "local" / "launch" / "supervisor.py").write_text("")
    assert not _fails(test_the_local_runtime_folders_import_only_downward)
