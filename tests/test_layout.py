"""The tree's layering, as the README's layout table states it, read from the source with ``ast``:
``trainers/`` (what runs inside a replica) never imports the job side or kfp; nothing below ``pipelines/``
imports it; the first-party modules' import-time imports form no cycle."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainers", "jobs", "components", "pipelines")


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


def _imports(path: Path, module: str, import_time_only: bool) -> set[str]:
    """Dotted names ``path`` imports (``from a import b`` gives ``a.b``; relative imports resolved). With
    ``import_time_only`` the bodies of functions and the ``__main__`` block are skipped: what runs when the
    module is imported."""
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


def test_trainers_never_import_the_job_side_or_kfp():
    modules = _sources()
    bad = {name: sorted(i for i in _imports(path, name, import_time_only=False)
                        if i.split(".")[0] in ("jobs", "components", "pipelines", "kfp", "google_cloud_pipeline_components"))
           for name, path in modules.items() if name.startswith("trainers")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_nothing_below_pipelines_imports_it():
    modules = _sources()
    bad = {name: sorted(i for i in _imports(path, name, import_time_only=False) if i.split(".")[0] == "pipelines")
           for name, path in modules.items() if not name.startswith("pipelines")}
    assert {k: v for k, v in bad.items() if v} == {}


def test_no_import_cycle_at_import_time():
    modules = _sources()
    graph = {name: {r for i in _imports(path, name, import_time_only=True)
                    if (r := _resolve(i, modules)) and r != name and not name.startswith(r + ".")}
             for name, path in modules.items()}
    # importing a.b.c imports its packages a and a.b first: follow those edges too
    for name in list(graph):
        for dep in list(graph[name]):
            parts = dep.split(".")
            graph[name].update(p for k in range(1, len(parts)) if (p := ".".join(parts[:k])) in modules
                               and p != name and not name.startswith(p + "."))
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
    assert cycles == []


def test_the_checker_finds_a_cycle_and_an_upward_import(tmp_path, monkeypatch):
    """The checks above are not vacuous: a planted cycle and a planted upward import are found."""
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "jobs" / "a.py").write_text("from jobs import b\n")
    (tmp_path / "jobs" / "b.py").write_text("import jobs.a\n\ndef later():\n    from pipelines import run\n")
    (tmp_path / "trainers" / "t.py").write_text("def f():\n    import kfp\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    for check in (test_no_import_cycle_at_import_time, test_nothing_below_pipelines_imports_it,
                  test_trainers_never_import_the_job_side_or_kfp):
        try:
            check()
        except AssertionError:
            continue
        raise AssertionError(f"{check.__name__} passed on a planted violation")
