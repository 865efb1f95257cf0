"""The tree's layering, as the README's layout table states it, read from the source with ``ast``.

Every import counts, the ones inside functions too: a lazy import is still a dependency, so it must point down
like any other; and a first-party import stays inside a function only with a stated, true reason
(:func:`test_every_first_party_import_inside_a_function_says_why`), so every file's dependencies are at its head.

The layers, bottom to top: each a folder (:data:`LAYERS`; a module may import its own layer and the layers below,
never one above; every first-party module is in exactly one):

0. ``jobfile/``: the job file (its schema, THE parser of it, presets, the one-line problems, paths, the bounded
   read of a file a user names), below both sides: imports neither, nor kfp, nor TensorFlow;
1. ``trainers/``: what runs inside a replica; imports no job side and no kfp;
2. ``jobs/rules/``, ``jobs/run_records/``, ``jobs/evaluation/``: what a job is and whether it is valid, with nothing
   run yet (the one-line errors, the hardware catalog and rules, the image reference, THE job spec, the replica
   environment, placement, each section's rules, validation, the preflight, the AI Platform import); what a run
   leaves and how it is read back (the records, a study's trial files, provenance, the cost, TensorBoard's
   scalars); the held-out verdict (the examples file, the figures);
3. ``jobs/cloud/``: the Google Cloud APIs under one policy (``apis/``), what runs inside a step's container to run
   a Vertex job (``vertex_jobs/``), the plan of a Vertex job (``planning``);
4. ``jobs/images/``: building an image through one builder interface;
5. ``jobs/local/``: a job on this machine (``process/``, ``launch/``, ``run/``, ``history/``, in that order);
6. ``jobs/steps/``, ``jobs/tuning/``, ``jobs/ci/``: the pipeline's steps as plain calls, the gate, verification, the
   report, compiling; a study on this machine; the decisions of the CI's steps;
7. ``jobs/commands/``: the commands users type (``pipelines/run.py``'s table), where no lower layer calls them;
8. ``components/``: the KFP components, each a thin wrapper of a step;
9. ``pipelines/``: wiring only; nothing imports it.

``jobs/__init__.py`` and ``jobs/moved.py`` (the old import paths published component YAMLs name) sit with the rules.
And no two first-party modules import each other, directly or round a loop, at import time or later.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("jobfile", "trainers", "jobs", "components", "pipelines")

#: (layer, the modules and packages in it), bottom first. A name stands for itself and every module under it;
#: the longest name that matches places a module.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("job file", ("jobfile",)),
    ("trainers", ("trainers",)),
    ("rules", ("jobs", "jobs.rules", "jobs.run_records", "jobs.evaluation")),
    ("clients", ("jobs.cloud",)),
    ("images", ("jobs.images",)),
    ("local runtime", ("jobs.local",)),
    ("steps", ("jobs.steps", "jobs.tuning", "jobs.ci")),
    ("commands", ("jobs.commands",)),
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


def _named(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names one import statement in ``package`` names (``from a import b`` gives ``a`` and ``a.b``;
    relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]


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
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.update(_named(child, package))
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


def test_the_job_file_imports_neither_side_nor_kfp_nor_tensorflow():
    """The job file is read by the replica and the job side alike: nothing of either, nor a heavy library."""
    modules = _sources()
    bad = {name: sorted(i for i in _imports(path, name) if i.split(".")[0] in
                        ("trainers", "jobs", "components", "pipelines", "kfp", "tensorflow", "keras", "tf_keras"))
           for name, path in modules.items() if name.startswith("jobfile")}
    assert {k: v for k, v in bad.items() if v} == {} and "jobfile.config" in modules


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
        "jobs/run_records/records.py": "from jobs.rules import validate\n",
        "jobs/rules/validate.py": "import jobs.run_records.records\n\ndef later():\n    from pipelines import run\n",
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
        "jobs/run_records/records.py": "from jobs.rules import validate\n",
        "jobs/rules/validate.py": "def problems():\n    from jobs.run_records.records import read_at\n    return read_at\n",
    })
    assert not _fails(test_no_import_cycle_at_import_time)
    assert _fails(test_no_import_cycle_counting_imports_inside_functions)
    assert not _fails(test_no_module_imports_a_higher_layer_counting_imports_inside_functions)


def test_the_checker_finds_an_upward_import_inside_a_function(tmp_path, monkeypatch):
    """The spec reaching up into the local runtime from inside a function (as validation once did for the
    replica environment) is an upward import; the same import from the runtime down is not."""
    _plant(tmp_path, monkeypatch, {
        "jobs/rules/validate.py": "def problems():\n    from jobs.local.launcher import launch\n    return launch\n",
        "jobs/local/__init__.py": "",
        "jobs/local/launcher.py": "from jobs.rules import validate\n",
    })
    assert layer_of("jobs.rules.validate") < layer_of("jobs.local.launcher")
    assert _fails(test_no_module_imports_a_higher_layer_counting_imports_inside_functions)
    assert not _fails(test_no_import_cycle_at_import_time)
    (tmp_path / "jobs" / "rules" / "validate.py").write_text("def problems():\n    return None\n")
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


# --- every first-party import inside a function says why it is there -----------------------------------------

#: third-party libraries whose import costs a light command (seconds, or hundreds of milliseconds): a first-party
#: module that pulls one in at import time is imported inside a function by a module that does not already.
HEAVY = ("tensorflow", "tf_keras", "keras", "kfp", "google_cloud_pipeline_components", "google.cloud", "google.api_core",
         "googleapiclient", "grpc", "matplotlib", "apache_beam", "docker", "requests", "numpy", "selenium")
#: ``# lazy: <reason>`` on the line above: the reasons an import may stay inside a function.
REASONS = ("KFP component body", "heavy:", "cycle:", "script:", "one step:")
#: the module every component's process imports: each step's function imports that step's own modules
STEP_CALLS = "jobs.steps.calls"


def _heavy_at_import(modules: dict[str, Path], graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module -> the :data:`HEAVY` libraries importing it loads (its own import-time imports, those of the
    first-party modules it imports at import time (``graph``: :func:`_graph` at import time), and of its packages)."""
    direct = {name: _imports(path, name, import_time_only=True) for name, path in modules.items()}
    memo: dict[str, set[str]] = {}

    def walk(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name in memo:
            return memo[name]
        found = {h for i in direct[name] for h in HEAVY if i == h or i.startswith(h + ".")}
        parts = name.split(".")
        deps = graph[name] | {p for k in range(1, len(parts)) if (p := ".".join(parts[:k])) in modules}
        for dep in deps - seen - {name}:
            found |= walk(dep, seen | {name})
        memo[name] = found
        return found

    return {name: walk(name) for name in modules}


def _imports_inside_functions(path: Path, module: str):
    """(line, the first-party modules it names, the enclosing function, the comment above) of every first-party
    import statement inside a function of ``path``."""
    source = path.read_text()
    lines = source.splitlines()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []

    def visit(node: ast.AST, functions: tuple) -> None:
        for child in ast.iter_child_nodes(node):
            inner = functions + (child,) if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) else functions
            if functions and isinstance(child, (ast.Import, ast.ImportFrom)):
                first = [n for n in _named(child, package) if n.split(".")[0] in PACKAGES]
                if first:  # the comment above this import, or above the run of imports it is in
                    k = child.lineno - 2
                    while k > 0 and lines[k].strip().startswith(("from ", "import ")):
                        k -= 1
                    above = lines[k].strip() if k >= 0 else ""
                    out.append((child.lineno, first, functions[-1], above))
            visit(child, inner)

    visit(ast.parse(source, str(path)), ())
    return out


def _unexplained_imports_inside_functions() -> list[str]:
    modules = _sources()
    graph = _graph(modules, import_time_only=True)
    heavy = _heavy_at_import(modules, graph)
    bad = []
    for name, path in sorted(modules.items()):
        for line, names, function, above in _imports_inside_functions(path, name):
            where = f"{path.relative_to(ROOT)}:{line}"
            if not above.startswith("# lazy: "):
                bad.append(f"{where}: a first-party import inside a function without '# lazy: <reason>' above it")
                continue
            reason = above[len("# lazy: "):]
            targets = {r for n in names if (r := _resolve(n, modules)) and r != name}
            if reason.startswith("KFP component body"):
                if not any("component" in ast.unparse(d) for d in getattr(function, "decorator_list", [])):
                    bad.append(f"{where}: '{reason}' but {getattr(function, 'name', 'lambda')} is not a component")
            elif reason.startswith("heavy:"):
                claimed = {h.strip() for h in reason[len("heavy:"):].split("(")[0].split(",") if h.strip()}
                gained = set().union(*(heavy[t] for t in targets)) - heavy[name] if targets else set()
                if not claimed or not claimed <= gained:
                    bad.append(f"{where}: '{reason}' but importing it at the head adds {sorted(gained) or 'nothing heavy'}")
            elif reason.startswith("cycle:"):
                if not any(_reaches(graph, t, name) for t in targets):
                    bad.append(f"{where}: '{reason}' but no import-time path leads from {sorted(targets)} back to {name}")
            elif reason.startswith("one step:"):
                if name != STEP_CALLS:
                    bad.append(f"{where}: '{reason}' outside {STEP_CALLS} (the one module every step's process imports)")
            elif reason.startswith("script:"):
                if not any(_is_main_block(node) for node in ast.parse(path.read_text()).body):
                    bad.append(f"{where}: '{reason}' but {path.name} has no ``if __name__ == \"__main__\":`` block")
            else:
                bad.append(f"{where}: '# lazy: {reason}': the reasons are {', '.join(REASONS)}")
    return bad


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def test_every_first_party_import_inside_a_function_says_why():
    """A file's first-party dependencies are at its head. One stays inside a function only with ``# lazy:`` and
    a reason that is true: a KFP component's body (compiled into its YAML, so self-contained), a heavy library
    the importing module does not already load (named, and checked against what the target loads), an import
    cycle (checked: the target reaches back at import time), a file that also runs alone as a script with the
    standard library only (checked: it has a ``__main__`` block), or a step's own modules in the one module every
    component's process imports (checked: only in ``jobs.steps.calls``)."""
    assert _unexplained_imports_inside_functions() == []


def test_the_checker_finds_an_unexplained_or_untrue_lazy_import(tmp_path, monkeypatch):
    _plant(tmp_path, monkeypatch, {
        "jobs/rules/light.py": "import json\n",
        "jobs/rules/heavy.py": "import tensorflow\n",
        "jobs/steps/user.py": ("def a():\n    from jobs.rules import light\n\n"
                               "def b():\n    # lazy: heavy: tensorflow\n    from jobs.rules import light\n\n"
                               "def c():\n    # lazy: heavy: tensorflow\n    from jobs.rules import heavy\n\n"
                               "def d():\n    # lazy: KFP component body\n    from jobs.rules import light\n\n"
                               "def e():\n    # lazy: cycle: jobs.rules.light\n    from jobs.rules import light\n\n"
                               "def f():\n    # lazy: script: runs alone\n    from jobs.rules import light\n\n"
                               "def g():\n    # lazy: one step: g\n    from jobs.rules import light\n"),
    })
    found = _unexplained_imports_inside_functions()
    assert [f.split(":")[1] for f in found] == ["2", "6", "14", "18", "22", "26"], found
