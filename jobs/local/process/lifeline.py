"""Every process this product starts dies with the process that started it, whatever kills that one (kill -9
included): the one rule for child processes, and its three tools.

* :func:`preexec` (a ``preexec_fn`` for ``subprocess.Popen``): Linux ``prctl(PR_SET_PDEATHSIG)`` in the child
  before it runs anything, so the kernel signals it when its parent goes; if the parent is already gone by then
  (it died between the fork and the prctl), the child ends at once. The signal is tied to the *thread* that
  started the child, so a child must be started by a thread that outlives it (the launcher's, a study's trial
  thread and ci-local's step threads each wait for their child). Elsewhere than Linux it is a no-op and the
  lock's record of children (``jobs.local.run.lock.RunLock``) is what a rerun goes by.
* :func:`supervised`: a command wrapped in a small supervisor (``python -I .../lifeline.py PARENT -- CMD``)
  for a child that starts processes of its own which cannot be given a parent-death signal (a build step's bash
  script and what it runs): the supervisor leads the process group, gets SIGTERM when its parent dies, and then
  kills the whole group with SIGKILL (a bash script's children would otherwise live on, re-parented).
* :func:`kfp_steps_die_with_this_process`: kfp.local's ``SubprocessRunner`` starts each pipeline step with a plain
  ``subprocess.Popen`` (FACTS: one process per step): the steps of a local run get :func:`preexec` too, so a
  ``vtp`` run killed with -9 leaves no step (a tune step, and through its own rule its trials) running.

Why ``prctl`` through ctypes rather than a library: python-prctl needs a C build, and this is one call.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1
_ON_START: list[Callable[[int], None]] = []


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


def kfp_steps_die_with_this_process(on_start: Callable[[int], None] | None = None) -> None:
    """kfp.local's step processes get :func:`preexec` (SIGKILL when this process dies), and ``on_start(pid)`` is
    called for each (the run's lock records it: ``jobs.local.run.lock.record_child``). Idempotent (the latest
    ``on_start`` is used); a kfp without ``subprocess_task_handler.subprocess`` (another version) is left as it
    is."""
    _ON_START[:] = [on_start] if on_start else []
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
        def Popen(*args, **kwargs):  # noqa: N802 (subprocess's name)
            kwargs.setdefault("preexec_fn", preexec())
            proc = subprocess.Popen(*args, **kwargs)
            for hook in _ON_START:
                hook(proc.pid)
            return proc

    handler.subprocess = _Subprocess()


def start_time(pid: int) -> int | None:
    """``pid``'s start time (``jobs.spec.command_line.start_ticks``; imported here, not above: the supervisor runs this file
    alone, with the standard library only)."""
    # lazy: script: the supervisor runs this file alone (python -I), with the standard library only
    from jobs.spec.command_line import start_ticks

    return start_ticks(pid)


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
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m jobs.local.process.lifeline PARENT_PID -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    return _supervise(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main())
