"""The test tiers: what a test may start, the marks that say so, and the xdist groups that let the suite run in
parallel. Loaded by ``tests/conftest.py`` (``pytest_plugins``), with the guard that keeps the marks true
(``tests/tier_guard.py``).

The tiers, cheapest first (README "Tests" names the commands that select them):

=============  =====================================================================================  ===========
tier           what a test in it may start                                                            selected by
=============  =====================================================================================  ===========
unit           nothing but quick tools (``git``; tier_guard.UNIT_MAY_START); in-process stand-ins      ``-m unit``
process        processes that import no TensorFlow: a command in a subprocess, kfp.local steps, sh    ``-m process``
integration    processes that import TensorFlow: training, a pipeline run, verify, export             ``-m integration``
docker         the test engine and registry (tests/docker_servers.py), containers                     ``-m docker``
browser        headless chromium (chromedriver)                                                       ``-m browser``
=============  =====================================================================================  ===========

A test carries the marks of everything it starts (``process`` is implied by any of the others); a test with none of
them is marked ``unit`` here, at collection, so ``-m unit`` is the unit loop. Marks come from what the test uses,
read at collection (:func:`uses`):

* its code and that of the helpers, classes and fixtures of tests/ it names (a ``vtp(...)`` helper, the closure a
  fixture returns, a stand-in's methods): a call that starts a process (``subprocess.run``, ``Popen``,
  ``os.system``, the product's replica launchers: :data:`STARTERS`) gives ``process``;
* a fixture or helper that starts more says so once, with ``@tier("integration")`` (under a fixture's
  ``@pytest.fixture``); every test that uses it (directly or through other fixtures and helpers) gets those marks.
  A fixture scoped wider than a function that starts a process must say so (the guard fails it otherwise): the
  tests after the first would use what it started without ever being seen starting it;
* the test's own ``@pytest.mark.<tier>`` (or its module's ``pytestmark``) for what cannot be read so: what a
  library starts for it (``kfp.local`` steps, ``vtp ci-local``'s steps), or a process that imports TensorFlow.

An explicit ``@pytest.mark.unit`` keeps a test that names a starter but starts nothing (a launch refused before any
process) in the unit loop. Whatever the marks say, the guard (tests/tier_guard.py) holds each test to them.

**Parallel runs** (pytest-xdist, ``-n auto --dist loadgroup`` in pyproject's addopts): tests that share a fixture
scoped wider than a function (the engine and the trainer image, ``real_runs``, a module's trained run) form one
xdist group and run on one worker, in collection order, so every such fixture is made once per run, never once per
worker; only the cheap ones in :data:`PER_WORKER` are made by each worker that needs them. The heaviest work is sent
first (a group, or a test, weighed by its tiers: the unit tests fill the gaps at the end). A session fixture
whose users are one group can be released right after the group's last test (:func:`release_with_group`).

PYTEST_DONT_REWRITE (no assertions here; conftest imports ``tier`` before pytest loads this as a plugin)
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest

pytest_plugins = ["tests.tier_guard"]  # the tiers come with their guard

#: The marks above ``unit``, in the order the guard names them. ``unit`` is added to a test without any of them.
MARKED = ("process", "integration", "docker", "browser")
#: Fixtures scoped wider than a function that each xdist worker may make for itself (cheap, read-only): every
#: other one is made once per run, by the one worker that runs the group of its users.
PER_WORKER = frozenset({"hypertune_metric_file", "prepared_data"})


def tier(*marks: str):
    """``@tier("integration")`` under a fixture's ``@pytest.fixture``, or on a helper function of tests/ (one that
    runs the pipeline, say): every test that uses the fixture, or calls the helper, gets these marks at collection
    (it starts what they need)."""
    unknown = [m for m in marks if m not in MARKED]
    if not marks or unknown:
        raise ValueError(f"tier{marks}: name one or more of {', '.join(MARKED)}")

    def declare(function):
        function._test_tiers = tuple(marks)
        return function
    return declare


def _declared(fixturedef) -> tuple[str, ...]:
    return getattr(fixturedef.func, "_test_tiers", ())


#: What starts a process when a test (or a helper it calls) names it, by module: ``subprocess.run(...)``,
#: ``os.system(...)``, and the product's own launchers of replicas (a job's processes, as the local runner starts them).
STARTERS = {"subprocess": frozenset({"run", "Popen", "call", "check_call", "check_output", "getoutput",
                                     "getstatusoutput"}),
            "os": frozenset({"system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "popen"}),
            "jobs.local.launch.custom_job": frozenset({"launch"}),
            "jobs.local.launch.supervisor": frozenset({"launch"})}


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):  # a nested function, lambda or comprehension
            yield from _codes(const)


def _starter(obj) -> bool:
    """Whether ``obj`` is one of :data:`STARTERS` (``from subprocess import run`` names the function itself)."""
    module = "os" if getattr(obj, "__module__", None) == "posix" else getattr(obj, "__module__", None)
    return callable(obj) and getattr(obj, "__name__", None) in STARTERS.get(module, ())


def _tests_module(name: str):
    """The module of tests/ a function imports inside itself (``from tests.test_x import helper``), imported."""
    if not name.startswith("tests.") or name in sys.modules:
        return sys.modules.get(name) if name.startswith("tests.") else None
    try:
        return importlib.import_module(name)
    except Exception:  # its collection reports it
        return None


def uses(obj, seen: set | None = None) -> set[str]:
    """The marks of what ``obj`` (a test, a fixture, a helper of tests/, a class of tests/) uses, read from its code
    with no call made: a helper or fixture carrying ``@tier``; ``process`` where it names a call that starts one
    (:data:`STARTERS`); and, through the functions and classes of tests/ it names (helpers, the closure a fixture
    returns, a stand-in's methods; imported at its head or inside it), what those use."""
    seen = set() if seen is None else seen
    obj = getattr(obj, "__wrapped__", obj)
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    if isinstance(obj, type):
        return set().union(*(uses(member, seen) for member in vars(obj).values()
                             if isinstance(member, (types.FunctionType, staticmethod, classmethod, property))))
    if isinstance(obj, (staticmethod, classmethod)):
        return uses(obj.__func__, seen)
    if isinstance(obj, property):
        return set().union(*(uses(f, seen) for f in (obj.fget, obj.fset) if f is not None))
    if not isinstance(obj, types.FunctionType):
        return set()
    found = set(getattr(obj, "_test_tiers", ()))
    scope = obj.__globals__
    for code in _codes(obj.__code__):
        names = set(code.co_names)
        modules = [m for m in map(_tests_module, names) if m is not None]
        # a starter's module imported inside: ``from jobs.local.launch import custom_job`` (or ``... .custom_job
        # import launch``) then ``custom_job.launch(...)``, read by name (nothing imported for it)
        if any(names & STARTERS.get(m, frozenset()) for m in names | {f"{a}.{b}" for a in names if "." in a
                                                                          for b in names}):
            found.add("process")
        for name in names:
            for target in [scope.get(name), *(getattr(m, name, None) for m in modules)]:
                if target is None:
                    continue
                if isinstance(target, types.ModuleType):
                    if names & STARTERS.get(target.__name__, frozenset()):
                        found.add("process")
                    continue
                if _starter(target):
                    found.add("process")
                found.update(getattr(target, "_test_tiers", ()) if callable(target) else ())
                if isinstance(target, (types.FunctionType, type)) and \
                        str(getattr(target, "__module__", "")).startswith("tests"):
                    found |= uses(target, seen)
    return found


def _fixturedefs(item: pytest.Item):
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info else None
        if defs:
            yield name, defs[-1]


def marks_of(item: pytest.Item) -> set[str]:
    return {m for m in MARKED if item.get_closest_marker(m)}


def needs_satisfied(need: str, marks: set[str]) -> bool:
    """``process`` is implied by every tier above unit; the others need their own mark."""
    return bool(marks) if need == "process" else need in marks


# ---- what runs now: the test, the fixture being set up or torn down (the guard reads both) -----------------------
_running: list[pytest.Item] = []
_fixture_stack: list[tuple[str, str, tuple[str, ...]]] = []  # (name, scope, @tier) of the fixture running now


def current_fixture() -> tuple[str, str, tuple[str, ...]]:
    """``(name, scope, its @tier)`` of the fixture being set up or torn down now; ``("", "", ())`` in a test body."""
    return _fixture_stack[-1] if _fixture_stack else ("", "", ())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    _running.append(item)
    try:
        yield
    finally:
        _running.remove(item)


# ---- pytest hooks ---------------------------------------------------------------------------------------------
MARKERS = {
    "unit": "added to every test without a tier mark: starts no process but quick tools such as git (the unit loop: "
            "-m unit)",
    "process": "starts processes that import no TensorFlow (a command in a subprocess, kfp.local steps)",
    "integration": "starts processes that import TensorFlow: training, a pipeline run, verify, export",
    "docker": "the test engine and registry: dockerd, docker-registry, busybox-static (debootstrap for the trainer "
              "image); CI installs them",
    "browser": "headless chromium through chromedriver (Debian chromium, chromium-driver); CI installs them",
}


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent with -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the CPUs this process may run on (xdist's own counts physical cores where
    psutil is installed: one worker on a 2-vCPU machine); ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still wins.

    Why one more: most unit tests wait (a stand-in's timeout, a retry's backoff: 1,938 unit tests used 96 CPU s in 307 s
    of wall) and the image build waits on the engine, so with one worker per CPU the CPUs sat idle while both workers
    waited: the last 2.5 min of the full suite ran 30-36 % busy (CPU sampled every 5 s). With three workers on 2 cores
    the CPUs stayed 97-99 % busy and the suite took 18 min 44 s against 20 min 48 s (same commit, one after the other,
    2026-11-29, 2-core AMD EPYC Zen 4). The tests that give a stand-in a second to answer ran under that load and
    passed; their budgets are the policy's (conftest ``TEST_POLICY``), not a guess of the machine's speed."""
    return int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or len(os.sched_getaffinity(0)) + 1)


def pytest_configure(config: pytest.Config) -> None:
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text} (tests/tiers.py)")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        if config.getoption("dist", "no") not in ("loadgroup", "no"):
            raise pytest.UsageError(
                f"--dist {config.getoption('dist')}: this suite shares its engine, trainer image and trained runs "
                f"through xdist groups; use --dist loadgroup (pyproject's addopts) or -n 0")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Before ``-m`` selects: the tiers of what each test uses (:func:`uses`: its own code, its fixtures', the
    helpers they call), ``unit`` on the rest; the xdist groups and the order."""
    for item in items:
        # an explicit unit mark: the test names a starter but starts nothing (a launch refused before any process);
        # the guard holds it to that. A fixture's @tier still counts (both together: an error below).
        infer = item.get_closest_marker("unit") is None
        used = uses(getattr(item, "function", None)) if infer else set()
        for _name, fixturedef in _fixturedefs(item):
            used.update(_declared(fixturedef))
            if infer and str(getattr(fixturedef.func, "__module__", "")).startswith("tests"):
                used |= uses(fixturedef.func)
        for mark in sorted(used):
            if not item.get_closest_marker(mark):
                item.add_marker(mark)
        has = marks_of(item)
        if item.get_closest_marker("unit") and has:
            raise pytest.UsageError(f"{item.nodeid}: marked unit and {', '.join(sorted(has))}: a unit test starts "
                                    f"nothing (tests/tiers.py); drop one")
        if not has:
            item.add_marker("unit")
    groups = _shared_groups(items)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
            item.stash[_GROUP] = groups[item.nodeid]
    if hasattr(config, "workerinput"):  # an xdist worker: the longest work first (the workers agree on it)
        items[:] = _longest_first(items, groups)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The last test of each group that will run here (what ``-m``/``-k`` left; a group runs on one worker)."""
    _last_of_group.clear()
    for item in session.items:
        if _GROUP in item.stash:
            _last_of_group[item.stash[_GROUP]] = item


def release_with_group(request: pytest.FixtureRequest, finalize) -> None:
    """Call ``finalize()`` right after the last test of the requesting test's group has run here, instead of at
    the end of the session: a session fixture whose users are one group (the engine: stopping it and deleting its
    storage takes a minute or two) then frees its worker for the rest of the run. ``finalize`` must be safe to
    call twice (the fixture's own teardown still runs at the end). Outside a group it is left to that teardown."""
    item = _running[-1] if _running else None  # the test whose setup is making this fixture
    group = item.stash.get(_GROUP, None) if item is not None else None
    if group is not None:
        fixture = _fixture_stack[-1] if _fixture_stack else (request.fixturename, request.scope, ())
        _release.setdefault(group, []).append((fixture, finalize))


_GROUP = pytest.StashKey[str]()
_last_of_group: dict[str, pytest.Item] = {}
_release: dict[str, list] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    yield
    group = item.stash.get(_GROUP, None)
    if group is not None and _last_of_group.get(group) is item:
        for fixture, finalize in reversed(_release.pop(group, [])):
            _fixture_stack.append(fixture)  # what it starts (rm, umount) is the fixture's, as in its teardown
            try:
                finalize()
            finally:
                _fixture_stack.remove(fixture)


#: A rough cost of one test of each tier, for the order only (what its marks say it starts): a test that uses the
#: engine and trains counts 30, a unit test 1.
_WEIGHT = {"docker": 20, "integration": 10, "browser": 3, "process": 2}


def _weight(item: pytest.Item) -> int:
    return sum(_WEIGHT[m] for m in marks_of(item)) or 1


def _longest_first(items: list[pytest.Item], groups: dict[str, str]) -> list[pytest.Item]:
    """Units of work (a group, or one test) ordered by their summed :data:`_WEIGHT`, heaviest first (the longest
    processing time first: what is left at the end is short); equal ones in collection order, and a group's tests
    keep their order."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(groups.get(item.nodeid, item.nodeid), []).append(item)
    order = sorted(units.values(), key=lambda unit: -sum(_weight(i) for i in unit))
    return [item for unit in order for item in unit]


def _shared_groups(items: list[pytest.Item]) -> dict[str, str]:
    """nodeid -> group name: tests joined by every shared fixture (scoped wider than a function, defined in
    tests/, not in :data:`PER_WORKER`) they use, transitively."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keys_of: dict[str, list[str]] = {}
    for item in items:
        keys = []
        for name, fixturedef in _fixturedefs(item):
            if fixturedef.scope == "function" or name in PER_WORKER:
                continue
            if not str(getattr(fixturedef.func, "__module__", "")).startswith("tests"):
                continue  # pytest's own (tmp_path_factory, ...) and plugins'
            instance = {"session": fixturedef.baseid, "package": str(Path(item.path).parent),
                        "module": str(item.path), "class": item.nodeid.rsplit("::", 1)[0]}.get(fixturedef.scope, "")
            keys.append(f"{name}@{Path(instance).name if instance else ''}")
        if keys:
            keys_of[item.nodeid] = keys
            find(keys[0])
            for key in keys[1:]:
                parent[find(key)] = find(keys[0])
    # a group is named by its smallest fixture key: the same on every worker
    roots: dict[str, str] = {}
    for key in sorted(parent):
        roots.setdefault(find(key), key)
    return {nodeid: roots[find(keys[0])] for nodeid, keys in keys_of.items()}


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """What a fixture starts is its own, in its setup and in its teardown: finalizers run last-in first-out, so the
    one added before the fixture runs ends its teardown and the one added after it begins it."""
    entry = (fixturedef.argname, fixturedef.scope, _declared(fixturedef))
    fixturedef.addfinalizer(lambda: _fixture_stack.remove(entry) if entry in _fixture_stack else None)
    _fixture_stack.append(entry)
    try:
        yield
    finally:
        _fixture_stack.remove(entry)
    fixturedef.addfinalizer(lambda: _fixture_stack.append(entry))
