"""The tiers' guard: a test that starts what its marks do not allow fails, naming what it started and the mark to
add (the tiers and their marks: ``tests/tiers.py``). Loaded by ``tests/conftest.py`` (``pytest_plugins``).

While a test runs (setup, call, teardown) every process this interpreter starts is seen (``subprocess.Popen``,
``os.fork``, ``os.posix_spawn``, ``os.system``), and the processes those start are watched through ``/proc`` until
the test ends: one that maps TensorFlow's libraries (``/proc/PID/maps``) needs ``integration``, ``dockerd`` or
``docker-registry`` need ``docker``, chromium or chromedriver need ``browser``, anything else (but ``git`` in a unit
test) needs ``process``. What a fixture scoped wider than a function starts (in its setup or its teardown) is
checked against the fixture's own ``@tier``. Below a pytest a test started, that pytest's own guard judges.
The watch costs nothing to a test that starts nothing: it begins with the test's first process.

PYTEST_DONT_REWRITE (no assertions here)
"""
from __future__ import annotations

import os
import shlex
import subprocess
import threading
from dataclasses import dataclass, field

import pytest

from tests.tiers import current_fixture, marks_of, needs_satisfied

#: What a test in the unit tier may start: quick tools that product code (``git rev-parse``: the code version) or a
#: library (``platform``: ``uname -p``, ``file -b``; ``ctypes.util.find_library``: ``ldconfig -p``; a version probe:
#: ``hg``) calls in-process, whichever test first imports it.
UNIT_MAY_START = frozenset({"git", "hg", "uname", "file", "ldconfig"})
#: Process names (``/proc/PID/comm``, or an argv[0]'s basename) that need the ``docker`` tier: the engine and the
#: registry (a ``docker`` CLI alone reaches no engine but the tests' own; tests/test_cloudbuild.py fakes one).
ENGINE = frozenset({"dockerd", "docker-registry", "containerd", "docker-proxy", "containerd-shim",
                    "containerd-shim-runc-v2"})
#: ... and those that need ``browser``.
BROWSER = frozenset({"chromium", "chromium-browser", "chrome", "chromedriver", "headless_shell"})
#: A process that maps one of these imported TensorFlow (``libtensorflow_framework.so.2``,
#: ``_pywrap_tensorflow_internal.so``): it needs ``integration``.
TENSORFLOW_MAPS = (b"/tensorflow/libtensorflow", b"/_pywrap_tensorflow")
#: How often the processes a test started are looked at (a TensorFlow import takes seconds: none is missed).
POLL_S = 0.2

_HOW_TO = """\
Mark the test with what it starts (the tiers: tests/tiers.py; the commands: README "Tests"):
  @pytest.mark.process      processes that import no TensorFlow (a command in a subprocess, kfp.local steps, sh)
  @pytest.mark.integration  a process that imports TensorFlow (training, a pipeline run, verify, export)
  @pytest.mark.docker       the test engine or registry (dockerd, docker-registry, containers)
  @pytest.mark.browser      headless chromium (chromedriver)
A fixture that starts it declares it once, under its @pytest.fixture: @tier("integration") (from tests.tiers).
Where no process boundary is under test, call the code in-process instead (pipelines.run.main(argv)): unit tests
start nothing but quick tools (git)."""


# ---- what a test starts -------------------------------------------------------------------------------------
@dataclass
class _Started:
    what: str          # the command line, shortened
    need: str          # the mark it needs
    fixture: str = ""  # the fixture being set up or torn down when it started ("" in the test's own body)
    scope: str = ""
    declared: tuple[str, ...] = ()  # that fixture's @tier


@dataclass
class _Watch:
    """One test's run: what it started, and the processes those started (watched until the test ends)."""
    item: pytest.Item
    marks: set[str]
    started: list[_Started] = field(default_factory=list)
    children: set[int] = field(default_factory=set)       # pids this test started directly
    flagged: set[int] = field(default_factory=set)        # descendants already reported
    reported: int = 0                                     # how many entries of ``started`` were judged
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def watching(self) -> bool:
        """Whether descendants can need a mark this test lacks (a docker + integration + browser test: no)."""
        return not {"integration", "docker", "browser"} <= self.marks

    def add(self, argv, pid: int | None) -> None:
        name = _basename(argv)
        if name in UNIT_MAY_START and not self.marks:
            return
        need = "docker" if name in ENGINE else "browser" if name in BROWSER else "process"
        fixture, scope, declared = current_fixture()
        with self.lock:
            self.started.append(_Started(_shorten(argv), need, fixture, scope, declared))
            if pid:
                self.children.add(pid)
        if pid and self.watching() and self.thread is None:
            self.thread = threading.Thread(target=self._poll, name="tier-guard", daemon=True)
            self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(POLL_S):
            self.look()

    def look(self) -> None:
        """One look at every descendant of the processes this test started (each look anew: a process may exec
        another program, or import TensorFlow, at any time)."""
        with self.lock:
            roots = list(self.children)
        for pid in _descendants(roots):
            if pid in self.flagged:
                continue
            comm = _read(pid, "comm").strip().decode(errors="replace")
            need = "docker" if comm in ENGINE else "browser" if comm.startswith(tuple(BROWSER)) else ""
            if not need and "integration" not in self.marks and any(lib in _read(pid, "maps")
                                                                      for lib in TENSORFLOW_MAPS):
                need = "integration"
            if need and not needs_satisfied(need, self.marks):
                self.flagged.add(pid)
                tail = "  (imported TensorFlow)" if need == "integration" else ""
                with self.lock:
                    self.started.append(_Started(_cmdline(pid) + tail, need))

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(5)
            self.look()

    def problems(self) -> list[str]:
        """What was started since the last call that the test's marks do not cover, one line each."""
        with self.lock:
            new, self.reported = self.started[self.reported:], len(self.started)
        out: list[str] = []
        for s in new:
            if s.fixture and s.scope != "function":
                if not needs_satisfied(s.need, set(s.declared)):
                    out.append(f"fixture {s.fixture!r} ({s.scope} scope) started `{s.what}`: declare it under its "
                               f"@pytest.fixture with @tier({s.need!r}) (the tests after the first would use what it "
                               f"started unseen)")
                continue
            if not needs_satisfied(s.need, self.marks):
                where = f" (in fixture {s.fixture!r})" if s.fixture else ""
                out.append(f"started `{s.what}`{where}: needs @pytest.mark.{s.need}")
        counted = {line: out.count(line) for line in out}  # the same command started again: said once
        return [line + (f" ({n} times)" if n > 1 else "") for line, n in counted.items()]


def _read(pid: int, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _cmdline(pid: int) -> str:
    argv = [a.decode(errors="replace") for a in _read(pid, "cmdline").split(b"\0") if a]
    return f"pid {pid}: {_shorten(argv)}" if argv else f"pid {pid}"


def _descendants(roots: list[int]) -> list[int]:
    """The live processes under ``roots`` (``roots`` included), from each thread's ``/proc/PID/task/TID/children``;
    not below a pytest: a test that runs pytest (tests/test_tiers.py, ci-local's unit-tests step) leaves that
    pytest's tests to that pytest's own guard."""
    found, todo = [], list(roots)
    seen = set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        found.append(pid)
        if _runs_pytest(pid):
            continue
        for tid in tasks:
            todo.extend(int(p) for p in _read(pid, f"task/{tid}/children").split())
    return found


def _runs_pytest(pid: int) -> bool:
    argv = _read(pid, "cmdline").split(b"\0")
    return os.path.basename(argv[0]) in (b"pytest", b"py.test") or any(
        a == b"-m" and b == b"pytest" for a, b in zip(argv, argv[1:]))


def _basename(argv) -> str:
    if isinstance(argv, (str, bytes)):
        argv = shlex.split(os.fsdecode(argv)) or [""]
    return os.path.basename(os.fsdecode(argv[0])) if argv else ""


def _shorten(argv, limit: int = 160) -> str:
    text = os.fsdecode(argv) if isinstance(argv, (str, bytes)) else " ".join(os.fsdecode(a) for a in argv)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---- the hooks into process creation (active only while a test runs) ----------------------------------------
_active: _Watch | None = None


def _install() -> None:
    original_execute = subprocess.Popen._execute_child

    def _execute_child(self, args, executable, *rest, **kwargs):
        watch = _active
        result = original_execute(self, args, executable, *rest, **kwargs)
        if watch is not None:
            argv = [executable, *args[1:]] if executable and isinstance(args, (list, tuple)) else args
            watch.add(argv, self.pid)
        return result

    subprocess.Popen._execute_child = _execute_child

    def wrap(name: str, argv_of):
        original = getattr(os, name, None)
        if original is None:
            return

        def call(*args, **kwargs):
            watch = _active
            result = original(*args, **kwargs)
            if watch is not None:
                pid = result if name in ("fork", "posix_spawn", "posix_spawnp") and isinstance(result, int) else None
                if name == "forkpty" and isinstance(result, tuple):
                    pid = result[0]
                if pid != 0:  # in a forked child: nothing to record
                    watch.add(argv_of(args), pid)
            return result
        call.__wrapped__ = original
        setattr(os, name, call)

    wrap("fork", lambda args: ["(a fork of the test process)"])
    wrap("forkpty", lambda args: ["(a fork of the test process, pty)"])
    wrap("posix_spawn", lambda args: args[1] if len(args) > 1 else [args[0]])
    wrap("posix_spawnp", lambda args: args[1] if len(args) > 1 else [args[0]])
    wrap("system", lambda args: args[0] if args else "sh")


_install()


# ---- pytest hooks ---------------------------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    global _active
    watch = _Watch(item, marks_of(item))
    item.stash[_WATCH] = watch
    _active = watch
    try:
        yield
    finally:
        _active = None
        watch.finish()


_WATCH = pytest.StashKey[_Watch]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    report = outcome.get_result()
    watch = item.stash.get(_WATCH, None)
    if watch is None:
        return
    if call.when == "teardown":
        watch.finish()
    problems = watch.problems()
    if not problems:
        return
    tier_name = ", ".join(sorted(watch.marks)) or "unit (no tier mark)"
    message = "\n".join([f"tier guard: {item.nodeid} is in tier {tier_name} and", *(f"  {p}" for p in problems),
                         _HOW_TO])
    if report.failed:
        report.sections.append(("tier guard", message))
    else:
        report.outcome = "failed"
        report.longrepr = message
