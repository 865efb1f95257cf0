"""Every process this product starts dies with the process that started it, whatever kills that one (kill -9
included): the one rule for child processes, and its tools.

* :func:`preexec` (a ``preexec_fn`` for ``subprocess.Popen``): Linux ``prctl(PR_SET_PDEATHSIG)`` in the child
  before it runs anything, so the kernel signals it when its parent goes; if the parent is already gone by then
  (it died between the fork and the prctl), the child ends at once. The signal is tied to the *thread* that
  started the child, so a child must be started by a thread that outlives it (the launcher's, a study's trial
  thread and ci-local's step threads each wait for their child). Elsewhere than Linux it is a no-op and the
  run's token (below) is what a rerun goes by.
* :func:`supervised`: a command wrapped in a small supervisor (``python -I .../lifeline.py PARENT -- CMD``)
  for a child that starts processes of its own which cannot be given a parent-death signal (a build step's bash
  script and what it runs): the supervisor leads the process group, gets SIGTERM when its parent dies, and then
  kills the whole group with SIGKILL (a bash script's children would otherwise live on, re-parented).
* :func:`kfp_steps_die_with_this_process`: kfp.local's ``SubprocessRunner`` starts each pipeline step with a plain
  ``subprocess.Popen`` of ``sh -ec SCRIPT``, and that shell runs the step's Python as its *child* (dash does not
  exec the script's last command): a parent-death signal given to the shell dies with the shell, the step's Python
  is re-parented and lives on (a tune step, with its trials' replicas: what survived a kill -9 of ``vtp --config
  <a study>``). So each step runs under :func:`guarded`: a small supervisor with the parent-death signal that is
  the *subreaper* of everything under it (``PR_SET_CHILD_SUBREAPER``: an orphan below it is re-parented to it,
  not to init) and, when its parent dies, kills every process below it with SIGKILL. It stays in the run's
  process group (a terminal's Ctrl-C still reaches the step itself; the supervisor ignores it and waits).
* :data:`TOKEN_ENV`: the run's own token, in the environment of every process a local run starts (the steps and
  what they start; not a replica, whose environment is Vertex's). A rerun stops what a killed run left by that
  token only (:func:`carrying`, :func:`stop`), never by a pid and start time read from a file: a pid read from a
  file may name any process of the user's.

Why ``prctl`` through ctypes rather than a library: python-prctl needs a C build, and this is one call.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: the environment variable that carries a local run's token (``jobs.local.run.lock.RunLock.token``)
TOKEN_ENV = "VTP_RUN_TOKEN"
#: a token's form (what a lock may name; anything else read from a file is no token)
TOKEN_RE = re.compile(r"[0-9a-f]{32}")


def _prctl():
    """libc's ``prctl``, or None (not Linux). Looked up in the parent: the child between fork and exec must not
    import nor load anything (another thread of the parent may have held the import lock at the fork)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _set_parent_death_signal(sig: int, prctl=None) -> bool:
    prctl = prctl or _prctl()
    return prctl is not None and prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def preexec(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when the process (thread) that started it dies; a child whose
    parent died before the prctl ends at once. Captures the parent's pid and libc's prctl now (call it in the
    parent)."""
    parent, prctl, code = os.getpid(), _prctl(), 128 + int(sig)

    def in_child() -> None:
        if _set_parent_death_signal(sig, prctl) and os.getppid() != parent:
            os._exit(code)
    return in_child


def supervised(argv: list[str]) -> list[str]:
    """``argv`` run under the supervisor (module docstring); start it with ``start_new_session=True`` and
    ``preexec_fn=preexec(signal.SIGTERM)``: the group's leader is the supervisor, and stopping the group
    (``os.killpg(proc.pid, ...)``) stops the supervisor and everything under it, as before."""
    # the file itself, isolated (-I: no PYTHON* variables, no user site, not its folder on sys.path): the step's
    # environment may not import this package, and the supervisor needs only the standard library
    return [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), "--", *argv]


def guarded(argv: list[str]) -> list[str]:
    """``argv`` run under the tree supervisor (module docstring): in this process group, the subreaper of all below
    it; start it with ``preexec_fn=preexec(signal.SIGTERM)``. Its exit status is the command's."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), "--tree", "--", *argv]


def kfp_steps_die_with_this_process() -> None:
    """kfp.local's step processes run :func:`guarded` (their whole tree SIGKILLed when this process dies).
    Idempotent; a kfp without ``subprocess_task_handler.subprocess`` (another version) is left as it is."""
    try:
        from kfp.local import subprocess_task_handler as handler
    except ImportError:
        return
    if getattr(handler.subprocess, "vtp_lifeline", False):
        return

    class _Subprocess:
        """``subprocess`` as kfp's module sees it, with a Popen whose children die with this process."""
        vtp_lifeline = True

        def __getattr__(self, name):
            return getattr(subprocess, name)

        @staticmethod
        def Popen(argv, *args, **kwargs):  # noqa: N802 (subprocess's name)
            kwargs.setdefault("preexec_fn", preexec(signal.SIGTERM))
            return subprocess.Popen(guarded(list(argv)), *args, **kwargs)

    handler.subprocess = _Subprocess()


def _proc_children() -> dict[int, list[int]]:
    """Every live process's children, from ``/proc/*/stat`` (parent pid, field 4)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields and fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first)."""
    tree, found, todo = _proc_children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _kill_below(rounds: int = 50) -> None:
    """SIGKILL every process below this one (a subreaper: orphans come back here) until none is left."""
    for _ in range(rounds):
        below = descendants(os.getpid())
        if not below:
            return
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.02)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _guard(parent: int, argv: list[str]) -> int:
    """The tree supervisor's life (:func:`guarded`): the command as a child; when this process's parent dies
    (SIGTERM by the parent-death signal), everything below it SIGKILLed; a terminal's Ctrl-C is the command's to
    handle (ignored here, not inherited: a handler, not SIG_IGN); after the command ends, whatever it left below is
    ended too. The command's exit status."""
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def on_term(signum, frame):
        if os.getppid() != parent:  # the parent died: nobody else will end what runs below
            _kill_below()
            os._exit(128 + signum)
        try:  # a stop of this step: it is the command's
            os.kill(child.pid, signum)
        except (NameError, OSError):
            pass

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    _set_parent_death_signal(signal.SIGTERM, prctl)
    if os.getppid() != parent:  # the parent died before the signal was set
        return 128 + signal.SIGTERM
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"error: cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    while True:
        try:
            status = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for old interpreters
            continue
    _kill_below()
    return status if status >= 0 else 128 - status


def carrying(token: str) -> list[int]:
    """The live processes (not this one) whose environment holds this run's token (``TOKEN_ENV=token`` exactly);
    [] for anything that is not a token's form. Only processes of this user can be read, which are the only ones a
    run of this user starts."""
    if not isinstance(token, str) or not TOKEN_RE.fullmatch(token):
        return []
    entry, found = f"{TOKEN_ENV}={token}".encode(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if entry in env:  # a zombie's environment reads empty: only the living are found
            found.append(int(name))
    return found


def stop(token: str, grace_s: float = 5.0) -> list[int]:
    """Stop every process carrying ``token`` (:func:`carrying`): SIGTERM, SIGKILL after ``grace_s``; returns their
    pids. A process is found again by the token before each signal (a pid that ended and was reused is not it)."""
    found = carrying(token)
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in carrying(token):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and carrying(token):
            time.sleep(0.05)
    return found


def _supervise(parent: int, argv: list[str]) -> int:
    """The supervisor's life: the command in this process group; SIGTERM (this parent's death, or a stop) kills
    the whole group with SIGKILL; else the command's exit status."""
    def stop_group(signum, frame):
        try:
            os.killpg(os.getpgrp(), signal.SIGKILL)  # this process too: nothing of the group outlives it
        finally:
            os._exit(128 + signum)

    def on_term(signum, frame):
        if os.getppid() != parent:  # the parent died: nobody will stop the group but this
            stop_group(signum, frame)
        # else a stop of the whole group (os.killpg): the command got it too; its parent escalates if need be

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    _set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the signal was set
        stop_group(signal.SIGTERM, None)
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"error: cannot start {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    status = child.wait()
    return status if status >= 0 else 128 - status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    tree = len(argv) > 1 and argv[1] == "--tree"
    if tree:
        del argv[1]
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m jobs.local.process.lifeline PARENT_PID [--tree] -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    return (_guard if tree else _supervise)(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main())
