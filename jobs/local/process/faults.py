"""Fault injection for local jobs: find a replica's process, kill it on a log line, compare results bitwise.

Used by ``scripts/kill_trials.py`` and the resilience tests. Processes are found through ``/proc``
(Linux): a job's replicas are the processes whose environment mentions the job's output directory
(``AIP_*`` point into it), and a replica's pool comes from its ``CLUSTER_SPEC``.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any


def _read(pid: int, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of a process."""
    fields = _read(pid, "stat").decode().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def pids_with_env(marker: str) -> list[int]:
    """Live processes (not zombies, not this one) whose environment mentions ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if marker.encode() in _read(int(entry), "environ") and _stat(int(entry))[0] != "Z":
                found.append(int(entry))
        except OSError:
            continue
    return found


def replica_pid(marker: str, pool: str) -> int | None:
    """The process of the replica of worker pool ``pool`` (``workerpool1``) of the job writing under
    ``marker``: the top of that replica's process tree, never one of its helpers (such as its start-up
    watchdog), which inherit its environment."""
    members = set()
    for pid in pids_with_env(marker):
        try:
            env = dict(kv.split(b"=", 1) for kv in _read(pid, "environ").split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if f'"type": "{pool}"'.encode() in env.get(b"CLUSTER_SPEC", b""):
            members.add(pid)
    tops = []
    for pid in members:
        try:
            if _stat(pid)[1] not in members:
                tops.append(pid)
        except OSError:
            continue
    return min(tops) if tops else None


def kill_leftovers(marker: str, wait_s: float = 10) -> list[int]:
    """Wait up to ``wait_s`` for the job's processes to end, then SIGKILL what is left; returns those pids."""
    deadline = time.monotonic() + wait_s
    while pids_with_env(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = pids_with_env(marker)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


class KillOnLine:
    """A launcher ``log`` callback that sends ``sig`` to one replica when a line containing ``trigger``
    appears (once), and keeps every line."""

    def __init__(self, marker: str, pool: str, trigger: str, sig: int = signal.SIGKILL, echo: Any = None):
        self.marker, self.pool, self.trigger, self.sig, self.echo = marker, pool, trigger, sig, echo
        self.fired = False
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        if self.echo:
            self.echo(line)
        if not self.fired and self.trigger in line:
            pid = replica_pid(self.marker, self.pool)
            if pid:
                os.kill(pid, self.sig)
                self.fired = True


def attempt_lines(lines: list[str], attempt: int) -> list[str]:
    """The log lines of one attempt (from its ``[launcher] attempt N: started`` line to the next)."""
    out, inside = [], False
    for line in lines:
        if line.startswith("[launcher] attempt "):
            inside = line.startswith(f"[launcher] attempt {attempt}:")
        if inside:
            out.append(line)
    return out


def checkpoint_variables(prefix: str) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """Every saved variable of a checkpoint prefix (or ``<saved_model>/variables/variables``) as
    (dtype, shape, raw bytes), so equal entries are bitwise equal. ``save_counter`` counts saves, not
    training state, and is left out."""
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    out = {}
    for name in reader.get_variable_to_shape_map():
        if name == "_CHECKPOINTABLE_OBJECT_GRAPH" or name.startswith("save_counter/"):
            continue
        value = np.asarray(reader.get_tensor(name))
        out[name] = (value.dtype.str, value.shape, value.tobytes())
    return out


def stderr_echo(line: str) -> None:
    print(line, file=sys.stderr)
