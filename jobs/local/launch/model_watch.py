"""What an attempt's replicas did with the job's cluster and its model folder, seen from outside: whether each
training replica ever joined the cluster it was given, and how many times (and by whom) the model folder was
written. A job whose replicas all exited 0 can still hold a model nobody should trust: a trainer with no distribution
strategy, run as a chief and a worker, trains the whole job twice, each replica alone, and both write
``AIP_MODEL_DIR`` (the last one written is what verify sees). Vertex says nothing of it; the launcher says it in one
line (:meth:`ModelWatch.findings`) before the train step hands the model on.

How, without touching what a replica sees:

* **joined**: a replica that builds ``MultiWorkerMirroredStrategy`` (or a parameter-server cluster) starts a gRPC
  server on the address its ``TF_CONFIG`` gives it and keeps it until it exits; the launcher chose those ports
  (free, on 127.0.0.1), so a port of a training replica seen listening (``/proc/net/tcp``, ``tcp6``; sampled every
  :data:`PORT_SAMPLE_S` while the attempt runs) means that replica joined. None seen: it never did.
* **written**: the model folder exists before any replica starts (the launcher makes it); Linux's inotify counts every
  ``saved_model.pb`` completed in it (TensorFlow writes it to a temporary name and renames it into place; one
  SavedModel, one event), where two writers a few milliseconds apart would look like one to a poll. Where inotify is
  not available (not Linux), the file's inode and time are polled instead.
* **by whom**: Keras 3's ``model.export`` prints ``Saved artifact at '<folder>'``, and TensorFlow's own SavedModel
  writer logs ``Assets written to: <folder>``: a replica whose output says one of them for the model folder wrote it.

Only ``/proc`` and inotify (through ctypes: two system calls, not worth a dependency in the image) are read; any of
it that cannot be read makes the watch say nothing, never fail a job.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import struct
import time
from typing import Iterable, Mapping

from jobs.local.launch.hints import SAVE_RULE

#: how often the training replicas' ports are looked at (a joined replica listens from its strategy's start to its
#: end: seconds at the least)
PORT_SAMPLE_S = 0.1
MODEL_FILE = "saved_model.pb"
_IN_CLOSE_WRITE, _IN_MOVED_TO = 0x00000008, 0x00000080
_EVENT = struct.Struct("iIII")
_LISTEN = "0A"
_SAVED = re.compile(r"(?:Saved artifact at '([^']+)'|Assets written to: (\S+?)(?:/assets)?/?$)")


def _names(replicas: list[str]) -> str:
    return replicas[0] if len(replicas) == 1 else ", ".join(replicas[:-1]) + " and " + replicas[-1]


def listening_ports(tables: Iterable[str] = ("/proc/net/tcp", "/proc/net/tcp6")) -> set[int] | None:
    """The TCP ports something listens on in this network namespace; None where the tables cannot be read."""
    found, read = set(), False
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _LISTEN:
                try:
                    found.add(int(fields[1].rsplit(":", 1)[1], 16))
                except (IndexError, ValueError):
                    continue
    return found if read else None


class _Inotify:
    """``saved_model.pb`` completions in one folder, counted by the kernel (see the module doc)."""

    def __init__(self, folder: str):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self.fd, os.fsencode(folder), _IN_CLOSE_WRITE | _IN_MOVED_TO) < 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")

    def count(self) -> int:
        seen = 0
        while True:
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, OSError):
                return seen
            offset = 0
            while offset + _EVENT.size <= len(data):
                _wd, _mask, _cookie, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size:offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                seen += name == MODEL_FILE.encode()

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


class _Poll:
    """Where inotify is missing: a new inode or time of ``saved_model.pb`` since the last look is one write."""

    def __init__(self, folder: str):
        self.path, self.last = os.path.join(folder, MODEL_FILE), self._stamp(os.path.join(folder, MODEL_FILE))

    @staticmethod
    def _stamp(path: str):
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def count(self) -> int:
        now = self._stamp(self.path)
        changed = now is not None and now != self.last
        self.last = now
        return int(changed)

    def close(self) -> None:
        return None


class ModelWatch:
    """One attempt's watch: ``ports`` maps each training replica (chief, workers) to the port its TF_CONFIG names;
    call :meth:`sample` while the attempt runs, :meth:`line` with each replica's output line, :meth:`findings` once it
    succeeded, :meth:`close` always."""

    def __init__(self, model_dir: str, ports: Mapping[str, int]):
        self.model_dir = model_dir.rstrip("/") or "/"
        self.ports = dict(ports)
        self.joined: set[str] = set()
        self.writes = 0
        self.savers: list[str] = []
        self.ports_readable = True
        self._next_sample = 0.0
        self._closed = False
        try:
            self._files = _Inotify(self.model_dir)
        except (OSError, AttributeError):
            self._files = _Poll(self.model_dir)

    def sample(self) -> None:
        if self._closed:
            return
        self.writes += self._files.count()
        if len(self.ports) < 2 or time.monotonic() < self._next_sample or len(self.joined) == len(self.ports):
            return
        self._next_sample = time.monotonic() + PORT_SAMPLE_S
        listening = listening_ports()
        if listening is None:
            self.ports_readable = False
            return
        self.joined |= {name for name, port in self.ports.items() if port in listening}

    def line(self, replica: str, text: str) -> None:
        m = _SAVED.search(text)
        if m and (m.group(1) or m.group(2)).rstrip("/") == self.model_dir and replica not in self.savers:
            self.savers.append(replica)

    def findings(self) -> list[str]:
        """The line to say about a job whose replicas all succeeded, or none (one training replica, nothing seen)."""
        self.sample()
        training = list(self.ports)
        if len(training) < 2:
            return []
        alone = [name for name in training if name not in self.joined] if self.ports_readable else []
        savers = [name for name in training if name in self.savers]
        folder = f"{self.model_dir}/"
        if alone == training:
            wrote = (f"; {folder} was written {self.writes} times, by {_names(savers or training)}: the model there is "
                     "whichever came last, not one trained together" if len(savers) > 1 or self.writes > 1 else "")
            return [f"{_names(training)} never joined the cluster they were given (no replica opened its TF_CONFIG "
                    f"address): each ran your trainer on its own, {len(training)} separate runs{wrote}. To train together, "
                    "create tf.distribute.MultiWorkerMirroredStrategy() before the model (it reads TF_CONFIG), and "
                    f"{SAVE_RULE}; to train on one machine: --fresh --set topology.strategy=one_device --set "
                    "topology.worker.replica_count=0"]
        out = []
        if alone:
            out.append(f"{_names(alone)} never joined the cluster {_names([n for n in training if n not in alone])} "
                       "formed (no TF_CONFIG address opened): it ran your trainer on its own; create "
                       "tf.distribute.MultiWorkerMirroredStrategy() before the model in every replica")
        if len(savers) > 1:
            out.append(f"{_names(savers)} each wrote the model folder {folder}: the model there is whichever came "
                       f"last; {SAVE_RULE}")
        elif self.writes > 1:  # the kernel saw the model completed more than once; no replica's output said where it
            out.append(f"{folder} was written {self.writes} times while {_names(training)} trained together: the model "
                       f"there is whichever came last; {SAVE_RULE}")
        return out

    def close(self) -> None:
        """The last writes counted (a replica may write and exit between two samples), then the watch ends."""
        if not self._closed:
            self.writes += self._files.count()
            self._closed = True
            self._files.close()
