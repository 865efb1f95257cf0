"""The run lock: one live run per output folder (``<base>/.run.lock``), and what a killed run left behind.

Another live run holding the folder -> refused at once with one line naming it (pid, start time, command), or,
with ``--wait``, waited for. The lock is ``fcntl.flock`` on ``<base>/.run.lock``: the kernel drops it when its
holder dies, so a run killed with ``kill -9`` never blocks the next one. Why not a pid file: a pid file outlives a
kill -9 and then needs pid-reuse guessing; flock needs none.

The lock records the run's own token (:attr:`RunLock.token`, random), which every process the run starts carries in
its environment (``jobs.local.process.lifeline.TOKEN_ENV``): a rerun stops what a killed run left by that token
(:func:`stop_leftovers`), never by a pid read from the file (a copy's stale lock, or one edited by hand, may name
any process of the user's). The lock is read by THE record reader (``trainers.record_reader``): a lock that is a
list, holds a field of another type, is nested deep or is a named pipe is a damaged lock (nothing is stopped by it;
a lock that is not a regular file is refused in one line).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import stat
import sys
import time
import uuid
from typing import Any, Callable

from jobs.local.process import lifeline
from jobs.rules.command_line import invoked_as
from trainers import record_reader

LOCK_NAME = ".run.lock"
#: what a lock holds (``pid``, ``started``, ``command``, ``token``) and the types its readers rely on
LOCK_TYPES = {"pid": int, "started": str, "command": str, "token": str}
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
        """What the lock says of the run that holds (or held) it; {} when it says nothing readable."""
        try:
            return record_reader.read(self.path, types=LOCK_TYPES, limit=1 << 20) or {}
        except record_reader.Unreadable:
            return {}

    def describe_holder(self) -> str:
        h = self.holder()
        if not h:
            return "another run"
        return f"run pid {h.get('pid')} started {h.get('started')} ({h.get('command', '?')})"

    def acquire(self, wait_s: float = 0.0, poll_s: float = 0.5, log=print, claim: bool = True) -> "RunLock":
        """Take the lock; wait up to ``wait_s`` seconds for a live holder (0: refuse at once). ``claim``: a run's
        lock: what a killed run left is stopped (:func:`stop_leftovers`) and this run's token written; without it
        (``runs prune``) the folder is only held, the lock's record kept as it is and nothing stopped."""
        if os.path.exists(self.base) and not os.path.isdir(self.base):
            raise NotThisJob(f"output.base_dir: {self.base} is a file, not a folder; a run writes its folder there: "
                             f"run elsewhere with --set output.base_dir={self.base}-run (or move the file)")
        try:
            os.makedirs(self.base, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
        except OSError as exc:  # a folder (or a dangling link) where the lock file goes: not this product's lock
            what = "a folder" if os.path.isdir(self.path) else f"not a lock file ({exc.strerror or exc})"
            raise NotThisJob(f"output.base_dir: {self.path} is {what}; the run lock is a plain file there: remove "
                             f"it (rmdir {self.path}), or run elsewhere with --set output.base_dir=OTHER_DIR") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a named pipe, a device: never this product's lock
            os.close(fd)
            raise NotThisJob(f"output.base_dir: {self.path} is not a regular file (a named pipe or a device); the run "
                             f"lock is a plain file there: remove it (rm {self.path}), or run elsewhere with --set "
                             "output.base_dir=OTHER_DIR")
        os.set_blocking(fd, True)
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
        self.left_token = self.holder().get("token")
        self._fd = fd
        if not claim:
            return self
        stop_leftovers(self.left_token, log)  # what a killed run left, before anything starts
        self.token = uuid.uuid4().hex
        self._info = {"pid": os.getpid(), "started": now_iso(), "command": " ".join([invoked_as(), *sys.argv[1:]]),
                      "token": self.token}
        self._write()
        RunLock.held = self
        return self

    #: the lock this process holds (its run's)
    held: "RunLock | None" = None
    #: this run's token (every process it starts carries it: ``lifeline.TOKEN_ENV``), and the one the lock held
    #: before (a killed run's: :func:`stop_leftovers`)
    token: str = ""
    left_token: Any = None

    def _write(self) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(self._info).encode(), 0)

    def release(self) -> None:
        if RunLock.held is self:
            RunLock.held = None
        if self._fd is not None:
            try:
                if self._info:  # a run's own record; a lock only held (runs prune) is left as it was
                    os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def stop_leftovers(token: Any, log: Callable[[str], None] = print, grace_s: float = 5.0) -> list[int]:
    """Stop the processes a killed run left: those carrying its token (read from its lock; anything not of a
    token's form names nothing), SIGTERM then SIGKILL after ``grace_s``; one line for those found. Returns their
    pids. A rerun calls it once it holds the lock, so no step of the old run runs beside the new."""
    alive = lifeline.carrying(token)
    if not alive:
        return []
    log(f"stopping {len(alive)} process(es) a killed run left in this folder: pid {', '.join(map(str, alive))}")
    lifeline.stop(token, grace_s)
    return alive
