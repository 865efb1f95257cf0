"""The test tiers and their guard (tests/tiers.py, tests/tier_guard.py): a test that starts what its marks do not
allow fails, naming what it started and the mark to add; marks come from fixtures too; tests sharing a wide fixture
form one xdist group.

The guard is run as it runs for the suite: a pytest of its own (``-p tests.tiers``, which loads its guard too) over a
small test file, in a subprocess; what those inner tests start is tiny (``python -c``, a renamed ``sleep``, a file
mapped under a ``tensorflow/`` folder standing in for TensorFlow's library), so this module is itself in the process
tier.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import tiers

ROOT = Path(__file__).resolve().parent.parent


HEAD = """
import subprocess, sys
import pytest
from tests.tiers import tier
"""


def inner(tmp_path: Path, source: str, *args: str) -> subprocess.CompletedProcess:
    """``pytest -p tests.tiers`` over one test file (:data:`HEAD` + ``source``), in ``tmp_path`` (its own rootdir)."""
    (tmp_path / "test_inner.py").write_text(HEAD + textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.tiers",
                           "-p", "no:xdist", "test_inner.py", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_unit_test_that_starts_python_fails_naming_the_command_and_the_mark(tmp_path):
    """A test in the unit tier (said with ``@pytest.mark.unit``, or started through what :func:`tiers.uses` cannot
    read) that starts Python fails; ``git`` is allowed; a ``subprocess.run`` the test names is read as ``process``."""
    done = inner(tmp_path, """
        @pytest.mark.unit
        def test_quietly_starts_python():
            subprocess.run([sys.executable, "-c", "print('hello')"], check=True, capture_output=True)

        def test_starts_python_through_what_is_not_read():
            getattr(subprocess, "run")([sys.executable, "-c", "print('unseen')"], check=True, capture_output=True)

        @pytest.mark.unit
        def test_git_is_allowed():
            subprocess.run(["git", "--version"], check=True, capture_output=True)

        @pytest.mark.process
        def test_marked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_read_from_its_code():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
    """)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 failed, 3 passed" in done.stdout, done.stdout
    assert "tier guard: test_inner.py::test_quietly_starts_python is in tier unit (no tier mark) and" in done.stdout, done.stdout
    assert f"started `{sys.executable} -c print('hello')`: needs @pytest.mark.process" in done.stdout, done.stdout
    assert "tier guard: test_inner.py::test_starts_python_through_what_is_not_read is in tier unit (no tier mark)" \
        in done.stdout, done.stdout
    assert "@pytest.mark.integration  a process that imports TensorFlow" in done.stdout  # how to fix it


def _starts_a_process():
    return subprocess.run(["true"], check=False)


@tiers.tier("integration")
def _trains():
    return None


def _calls_the_trainer():
    return _trains()


def test_marks_are_read_from_what_a_test_uses_through_its_helpers():
    """:func:`tiers.uses` reads a function's code, its nested functions and the helpers of tests/ it names (at its
    head or imported inside it), without calling anything."""
    def calls_a_helper():
        _starts_a_process()

    def returns_a_closure():
        return lambda: _calls_the_trainer()

    def imports_a_helper_inside():
        from tests.vertex_steps import start_step
        return start_step

    def names_a_launcher(cfg):
        from jobs.local.launch import custom_job
        return custom_job.launch(cfg, "base")

    def starts_nothing():
        return subprocess.CalledProcessError(1, "x"), len("run")

    assert tiers.uses(calls_a_helper) == {"process"}
    assert tiers.uses(returns_a_closure) == {"integration"}
    assert tiers.uses(imports_a_helper_inside) == {"process"}
    assert tiers.uses(names_a_launcher) == {"process"}
    assert tiers.uses(starts_nothing) == set()


def test_a_descendant_that_maps_tensorflow_needs_integration_and_an_engine_needs_docker(tmp_path):
    library = tmp_path / "site-packages" / "tensorflow" / "libtensorflow_framework.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\0" * 4096)
    fake_dockerd = tmp_path / "bin" / "dockerd"
    fake_dockerd.parent.mkdir()
    shutil.copy(shutil.which("sleep"), fake_dockerd)
    maps_it = tmp_path / "maps_it.py"
    maps_it.write_text("import mmap, sys, time\nf = open(sys.argv[1], 'rb')\n"
                       "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\ntime.sleep(1.5)\n")
    python_maps_it = f"{sys.executable} {maps_it} {library}"
    done = inner(tmp_path, f"""
        @pytest.mark.process
        def test_its_grandchild_imports_tensorflow():
            # through a shell: the process that maps the library is not one this interpreter started
            subprocess.run(["sh", "-c", "{python_maps_it}; true"], check=True)

        @pytest.mark.integration
        def test_marked_integration():
            subprocess.run("{python_maps_it}".split(), check=True)

        @pytest.mark.process
        def test_an_engine_under_a_shell():
            subprocess.run(["sh", "-c", "{fake_dockerd} 1.5; true"], check=True)

        @pytest.mark.integration
        def test_an_engine_started_directly():
            subprocess.run(["{fake_dockerd}", "0.1"], check=True)
    """)
    out = done.stdout
    assert "3 failed, 1 passed" in out, out + done.stderr
    assert "test_its_grandchild_imports_tensorflow is in tier process and" in out
    assert "(imported TensorFlow)`: needs @pytest.mark.integration" in out, out
    assert "test_an_engine_under_a_shell is in tier process and" in out
    assert f"{fake_dockerd} 1.5`: needs @pytest.mark.docker" in out, out
    assert f"started `{fake_dockerd} 0.1`: needs @pytest.mark.docker" in out, out


def test_a_wide_fixture_declares_what_it_starts_and_its_users_get_the_mark(tmp_path):
    source = """
        @pytest.fixture(scope="module")
        def undeclared():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        @pytest.fixture(scope="module")
        @tier("process")
        def declared():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            yield
            subprocess.run([sys.executable, "-c", "pass"], check=True)  # its teardown is its own too

        @pytest.fixture
        def through(declared):
            return 1

        @pytest.mark.process
        def test_first_user_of_undeclared(undeclared):
            pass

        def test_user_of_declared(through):
            pass

        def test_unit():
            pass
    """
    done = inner(tmp_path, source)
    assert "2 passed, 1 error" in done.stdout, done.stdout + done.stderr  # a fixture's fault: at setup
    assert "ERROR at setup of test_first_user_of_undeclared" in done.stdout
    assert ("fixture 'undeclared' (module scope) started `" in done.stdout
            and "declare it under its @pytest.fixture with @tier('process')" in done.stdout), done.stdout
    unit = inner(tmp_path, source, "-m", "unit", "--collect-only")
    assert "test_inner.py::test_unit" in unit.stdout and "test_user_of_declared" not in unit.stdout, unit.stdout
    assert "1/3 tests collected (2 deselected)" in unit.stdout, unit.stdout


def test_unit_and_a_tier_mark_together_is_a_usage_error(tmp_path):
    done = inner(tmp_path, """
        @pytest.mark.unit
        @pytest.mark.process
        def test_both():
            pass
    """, "--collect-only")
    assert done.returncode == 4 and "test_inner.py::test_both: marked unit and process" in done.stderr, done.stderr


# ---- the xdist groups and the order, on stand-ins of collected items (no pytest run) ----------------------------
def _fixturedef(name: str, scope: str, module: str = "tests.conftest", baseid: str = ""):
    func = SimpleNamespace(__module__=module)
    return SimpleNamespace(argname=name, scope=scope, func=func, baseid=baseid)


def _item(nodeid: str, *fixturedefs, marks=()):
    path = Path(ROOT / nodeid.split("::")[0])
    info = SimpleNamespace(name2fixturedefs={fd.argname: [fd] for fd in fixturedefs})
    return SimpleNamespace(nodeid=nodeid, path=path, fixturenames=[fd.argname for fd in fixturedefs],
                           _fixtureinfo=info, get_closest_marker=lambda m: m if m in marks else None)


def test_tests_sharing_a_wide_fixture_are_one_group_however_they_are_linked():
    engine = _fixturedef("dockerd", "session", "tests.docker_servers")
    image = _fixturedef("trainer_image", "session", "tests.docker_servers")
    module = _fixturedef("engine", "module", "tests.test_trainer_image", "tests/test_trainer_image.py")
    runs = _fixturedef("real_runs", "session")
    cheap = _fixturedef("prepared_data", "session")
    theirs = _fixturedef("tmp_path_factory", "session", "_pytest.tmpdir")
    items = [_item("tests/test_build.py::test_a", engine),
             _item("tests/test_trainer_image.py::test_b", image, module),
             _item("tests/test_trainer_image.py::test_c", module),           # joined through the module fixture
             _item("tests/test_docker_runner.py::test_d", image, engine),
             _item("tests/test_runs.py::test_e", runs, cheap),
             _item("tests/test_runs.py::test_f", cheap, theirs),            # per worker only: no group
             _item("tests/test_runs.py::test_g", _fixturedef("tmp_path", "function"))]
    groups = tiers._shared_groups(items)
    assert set(groups) == {f"tests/{n}" for n in ("test_build.py::test_a", "test_trainer_image.py::test_b",
                                                   "test_trainer_image.py::test_c", "test_docker_runner.py::test_d",
                                                   "test_runs.py::test_e")}
    assert len({groups[i.nodeid] for i in items[:4]}) == 1
    assert groups["tests/test_runs.py::test_e"] == "real_runs@"
    # the same module fixture in two modules is two fixtures: two groups
    other = _item("tests/test_other.py::test_h", _fixturedef("engine", "module", "tests.test_other"))
    assert tiers._shared_groups([items[2], other]) == {"tests/test_trainer_image.py::test_c": "engine@test_trainer_image.py",
                                                       "tests/test_other.py::test_h": "engine@test_other.py"}


def test_the_heaviest_work_goes_first_and_a_group_keeps_its_order():
    a, b = _item("t.py::a"), _item("t.py::b", marks=("process",))
    c, d = _item("t.py::c", marks=("integration",)), _item("t.py::d", marks=("docker",))
    g1, g2 = _item("t.py::g1", marks=("docker", "integration")), _item("t.py::g2", marks=("integration",))
    e = _item("t.py::e", marks=("process",))
    order = tiers._longest_first([a, g2, b, c, g1, d, e], {"t.py::g2": "x", "t.py::g1": "x"})  # g2, g1: 10 + 30
    assert [i.nodeid for i in order] == ["t.py::g2", "t.py::g1", "t.py::d", "t.py::c", "t.py::b", "t.py::e", "t.py::a"]


def test_a_tier_names_known_marks_only():
    with pytest.raises(ValueError, match="name one or more of process, integration, docker, browser"):
        tiers.tier("gpu")
    assert tiers.tier("docker", "integration")(lambda: None)._test_tiers == ("docker", "integration")


def _readme_test_commands() -> dict[str, str]:
    """README "Tests": its code block's ``python -m pytest ...`` commands, each by the comment beside it."""
    section = (ROOT / "README.md").read_text().split("\n## Tests\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = {}
    for line in block.splitlines():
        command, _, comment = line.partition("#")
        command = command.split("&&")[-1].strip()
        if command.startswith("python -m pytest"):
            commands[comment.strip()] = command
    return commands


def test_ci_and_cloud_build_run_the_selections_the_readme_names_and_print_the_slowest_tests():
    """The README names the full command and the unit loop; ``.ci/run`` runs that full command and Cloud Build's
    ``unit-tests`` step one of the README's selections, each printing ``--durations``: the tiers cannot drift apart
    between the docs and CI."""
    import yaml

    commands = _readme_test_commands()
    full = next(c for comment, c in commands.items() if comment.startswith("everything"))
    assert full == "python -m pytest -q"
    assert "python -m pytest -q -m unit" in commands.values()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("python -m pytest")]
    assert len(ci) == 1 and ci[0].startswith(full + " --durations="), ci
    steps = {s["id"]: s for s in yaml.safe_load((ROOT / "cloudbuild.yaml").read_text())["steps"]}
    cloud = [line.strip() for line in steps["unit-tests"]["script"].splitlines()
             if line.strip().startswith("python -m pytest")]
    assert len(cloud) == 1 and "--durations=" in cloud[0], cloud
    selection = cloud[0].split(" -p ")[0].split(" --durations")[0]
    assert selection in commands.values(), (selection, commands)


def test_benchmarks_import_nothing_from_tests():
    """What a benchmark measures is product code (or benchmarks/ of its own): never a test's helper."""
    import ast

    found = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n == "tests" or n.startswith("tests.")]
    assert found == []
