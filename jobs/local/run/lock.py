"""The run lock: one live run per output folder (``<base>/.run.lock``), and what a killed run left behind.

Another live run holding the folder -> refused at once with one line naming it (pid, start time, command), or,
with ``--wait``, waited for. The lock is ``fcntl.flock`` on ``<base>/.run.lock``: the kernel drops it when its
holder dies, so a run killed with ``kill -9`` never blocks the next one. Why not a pid file: a pid file outlives a
kill -9 and then needs pid-reuse guessing; flock needs none. The lock records the run's step processes (pid and
start time): a rerun stops any still running before it starts (:func:`stop_leftovers`).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import signal
import sys
import time
from typing import Any

from jobs.local.process.lifeline import start_time
from jobs.spec.command_line import invoked_as
from trainers.fileio import open_regular

LOCK_NAME = ".run.lock"
#: run.py's exit status when another live run holds the output folder (EX_TEMPFAIL: try again later).
EXIT_BUSY = 75


class NotThisJob(Exception):
    """The folder holds a run made of another config or code (or a lock that is not ours): ``str(exc)`` is the
    one line to print (``error: ...``, exit status 2)."""


class FolderBusy(Exception):
    """Another live run holds the output folder; ``str(exc)`` is one line naming it."""


def now_iso() -> str:
    """This moment in local time, to the second, as a run's records write it."""
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


class RunLock:
    """Exclusive hold on an output folder for the life of one run (see the module docstring)."""

    def __init__(self, base: str):
        self.base = base
        self.path = os.path.join(base, LOCK_NAME)
        self._fd: int | None = None
        self._info: dict[str, Any] = {}

    def holder(self) -> dict[str, Any]:
        try:
            with open_regular(self.path, self.path, limit=1 << 20) as f:
                return json.loads(f.read() or "{}")
        except (OSError, ValueError):  # NotARegularFile is a ValueError: a lock that is a pipe holds nothing
            return {}

    def describe_holder(self) -> str:
        h = self.holder()
        if not h:
            return "another run"
        return f"run pid {h.get('pid')} started {h.get('started')} ({h.get('command', '?')})"

    def acquire(self, wait_s: float = 0.0, poll_s: float = 0.5, log=print) -> "RunLock":
        """Take the lock; wait up to ``wait_s`` seconds for a live holder (0: refuse at once)."""
        os.makedirs(self.base, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:  # a folder (or a dangling link) where the lock file goes: not this product's lock
            what = "a folder" if os.path.isdir(self.path) else f"not a lock file ({exc.strerror or exc})"
            raise NotThisJob(f"output.base_dir: {self.path} is {what}; the run lock is a plain file there: remove "
                             f"it (rmdir {self.path}), or run elsewhere with --set output.base_dir=OTHER_DIR") from None
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    wait = ("wait for it (--wait)" if wait_s <= 0 else
                            f"waited {wait_s:g} s; wait longer (--wait with no number waits up to a day; or "
                            f"--wait {max(3600, int(wait_s) * 10)})")
                    raise FolderBusy(f"output.base_dir: {self.base} is in use by {self.describe_holder()}; {wait}, or "
                                     "run elsewhere with --set output.base_dir=OTHER_DIR") from None
                if not told:
                    log(f"waiting for {self.describe_holder()} to finish with {self.base}")
                    told = True
                time.sleep(poll_s)
        stop_leftovers(self.holder().get("children"), log)  # what a killed run left, before anything starts
        self._info = {"pid": os.getpid(), "started": now_iso(), "command": " ".join([invoked_as(), *sys.argv[1:]]),
                      "children": []}
        self._fd = fd
        self._write()
        RunLock.held = self
        return self

    #: the lock this process holds (its run's), for :func:`record_child`
    held: "RunLock | None" = None

    def _write(self) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(self._info).encode(), 0)

    def record_child(self, pid: int) -> None:
        """Note a process this run started (a pipeline step) in the lock, with its start time: a rerun after
        this run was killed stops it if it is still there (:func:`stop_leftovers`), though its parent-death
        signal (``jobs.local.process.lifeline``) should already have ended it."""
        if self._fd is None:
            return
        self._info["children"] = [c for c in self._info["children"] if start_time(c["pid"]) == c["start"]]
        self._info["children"].append({"pid": pid, "start": start_time(pid)})
        self._write()

    def release(self) -> None:
        if RunLock.held is self:
            RunLock.held = None
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def record_child(pid: int) -> None:
    """:meth:`RunLock.record_child` on the lock this process holds (none held: nothing to record)."""
    if RunLock.held is not None:
        RunLock.held.record_child(pid)


def stop_leftovers(children: Any, log=print, grace_s: float = 5.0) -> list[int]:
    """Stop the processes a killed run recorded in its lock (``children``: ``[{"pid", "start"}]``) that are still
    the same processes (pid and start time): SIGTERM, SIGKILL after ``grace_s``; one line for those found.
    Returns their pids. A rerun calls it once it holds the lock, so no step of the old run runs beside the new."""
    alive = [c["pid"] for c in children or [] if isinstance(c, dict) and isinstance(c.get("pid"), int)
             and c["pid"] > 1 and c.get("start") is not None and start_time(c["pid"]) == c["start"]]
    if not alive:
        return []
    log(f"stopping {len(alive)} process(es) a killed run left in this folder: pid {', '.join(map(str, alive))}")
    starts = {pid: start_time(pid) for pid in alive}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in alive:
            if start_time(pid) == starts[pid]:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(start_time(p) == starts[p] for p in alive):
            time.sleep(0.05)
    return alive
