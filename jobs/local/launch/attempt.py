"""One attempt of a launched job: every replica started at once on fresh ports of 127.0.0.1 with the environment
Vertex would give it (:class:`Attempt`), its output pumped line by line to the log and to its own file, its
processes reaped, the done and worker-failure rules applied (:meth:`Attempt.wait`), and :meth:`Attempt.close`,
which always leaves no process behind. The contracts are the supervisor's (``jobs.local.launch.supervisor``)."""
from __future__ import annotations

import collections
import os
import selectors
import signal
import socket
import subprocess
import time
from typing import Sequence

from jobs.local.launch.hints import ARGPARSE_ERROR
from jobs.local.launch.model_watch import ModelWatch
from jobs.local.launch.outcome import ReplicaFailure, Stopped, status_text
from jobs.local.process import lifeline
from jobs.rules.replica_env import POOL_NAMES, ROLES, aip_variables, replica_environment, vertex_environment

#: a replica's last lines kept for its failure report
TAIL_LINES = 20
_POLL_S = 0.05


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):  # all held open together, so the ports are distinct
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# Replicas run in their own sessions (a terminal's Ctrl-C must reach only the launcher), so nothing else would
# stop them if the launcher were killed: they would train on, unowned, into a folder the next run then takes
# over. Each gets the one rule for children (``jobs.local.process.lifeline.preexec``: SIGKILL when the launcher dies).


class Replica:
    def __init__(self, pool: int, index: int, log_path: str):
        self.pool, self.index, self.role = pool, index, ROLES[pool]
        self.name = f"{self.role}-{index}"
        self.replica = f"{POOL_NAMES[pool]}-{index}"
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.error_line: str | None = None  # see ReplicaFailure.error_line
        self._in_traceback = False
        self._error_open = 0                # brackets the exception line left open (its message goes on)
        self._error_close: str | None = None  # the line that closed them: the end of the message
        self.buf = b""
        self.fd: int | None = None
        self.logfile = None


def separator(attempt: int, replica: str) -> str:
    """The line that opens an attempt's lines in a replica's log file (an earlier run's lines may be above it)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return f"===== {when} {replica} attempt {attempt} started (launcher pid {os.getpid()}) =====\n"


class Attempt:
    """One run of every replica; ``close()`` always leaves no process behind."""

    def __init__(self, number, counts, command, base, env, job_id, cwd, log, on_line, base_env, replica_env=None,
                 stop=None, workdirs=None, failure_context=None):
        self.number, self.log, self.on_line, self.stop = number, log, on_line, stop
        self.cwd, self.env = cwd, dict(env or {})
        # each replica's own working folder (``jobs.local.launch.workdir``), else ``cwd``; the trainer's code for hints
        self.workdirs, self.folders = workdirs, []
        self.source_dir = workdirs.source_dir if workdirs is not None else cwd
        self.failure_context = dict(failure_context or {})
        self.tolerated: list[ReplicaFailure] = []
        self.dir = os.path.join(base, "logs", "replicas", f"attempt-{number}")
        os.makedirs(self.dir, exist_ok=True)
        self.replicas = [Replica(p, i, os.path.join(self.dir, f"{ROLES[p]}-{i}.log"))
                         for p in range(len(counts)) for i in range(counts[p])]
        port_of = dict(zip((r.name for r in self.replicas), _free_ports(len(self.replicas))))
        addresses = {POOL_NAMES[p]: [f"127.0.0.1:{port_of[f'{ROLES[p]}-{i}']}" for i in range(counts[p])]
                     for p in range(len(counts)) if counts[p]}
        self.sel = selectors.DefaultSelector()
        # the training replicas (chief, workers): whether each joins its cluster, and who writes the model folder
        self.watch = ModelWatch(aip_variables(base)["AIP_MODEL_DIR"],
                                {r.name: port_of[r.name] for r in self.replicas if r.role in ("chief", "worker")})
        try:
            for r in self.replicas:
                extra = {**(env or {}), **(replica_env(r.role, r.index) if replica_env else {})}
                child_env = replica_environment(
                    base_env, extra, vertex_environment(counts, addresses, r.pool, r.index, base, job_id))
                r.logfile = open(r.log_path, "ab")
                r.logfile.write(separator(number, r.name).encode())
                folder = cwd
                if workdirs is not None:
                    folder = workdirs.make(r.name)
                    self.folders.append(folder)
                r.proc = subprocess.Popen(
                    list(command), env=child_env, cwd=folder, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                    bufsize=0, preexec_fn=lifeline.preexec())
                r.fd = r.proc.stdout.fileno()
                os.set_blocking(r.fd, False)
                self.sel.register(r.fd, selectors.EVENT_READ, r)
            self.log(f"[launcher] attempt {number}: started "
                     + ", ".join(f"{r.name} (pid {r.proc.pid})" for r in self.replicas))
        except BaseException:
            self.close(0)
            raise

    # -- output -----------------------------------------------------------------------------
    def _emit(self, r: Replica, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        r.tail.append(text)
        if text.startswith("Traceback (most recent call last)"):
            r._in_traceback = True
        elif r._in_traceback and text and not text[0].isspace():  # the exception line ends the traceback
            r.error_line, r._in_traceback = text, False
            r._error_open, r._error_close = _open_brackets(text), None
        elif text.startswith("error: ") or ARGPARSE_ERROR.match(text):
            r.error_line, r._error_open, r._error_close = text, 0, None
        elif r._error_open > 0:  # a message that opened a bracket (a tensor's repr) goes on until it closes
            r._error_open += _open_brackets(text)
            if r._error_open <= 0:
                r._error_open, r._error_close = 0, text
        self.log(f"[{r.name}] {text}")
        self.watch.line(r.name, text)
        self.on_line(r, text)

    def _read(self, r: Replica) -> bool:
        """Read what is available; False at EOF (fd closed)."""
        while r.fd is not None:
            try:
                data = os.read(r.fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                self._close_fd(r)
                return False
            r.logfile.write(data)
            r.logfile.flush()
            r.buf += data
            *lines, r.buf = r.buf.split(b"\n")
            for line in lines:
                self._emit(r, line)
            if len(r.buf) > 65536:
                self._emit(r, r.buf)
                r.buf = b""
        return False

    def _close_fd(self, r: Replica) -> None:
        if r.fd is None:
            return
        if r.buf:
            self._emit(r, r.buf)
            r.buf = b""
        try:
            self.sel.unregister(r.fd)
        except (KeyError, ValueError):
            pass
        r.proc.stdout.close()
        r.fd = None

    def pump(self, timeout: float) -> None:
        if not self.sel.get_map():
            time.sleep(max(timeout, 0))
            return
        for key, _ in self.sel.select(max(timeout, 0)):
            self._read(key.data)

    def reap(self) -> list[Replica]:
        """Replicas whose process exited since the last call (output drained)."""
        done = []
        for r in self.replicas:
            if r.proc is not None and r.returncode is None and r.proc.poll() is not None:
                r.returncode = r.proc.returncode
                self._read(r)  # the pipe holds everything it wrote before dying
                done.append(r)
        return done

    def running(self) -> list[Replica]:
        return [r for r in self.replicas if r.proc is not None and r.returncode is None]

    # -- stopping -----------------------------------------------------------------------------
    def _signal_groups(self, sig: int) -> None:
        for r in self.replicas:
            if r.proc is not None:
                try:
                    os.killpg(r.proc.pid, sig)  # start_new_session: pgid == pid
                except (ProcessLookupError, PermissionError):
                    pass

    def close(self, grace_s: float, servers: Sequence[str] = ()) -> None:
        """SIGTERM every group, wait up to grace_s, SIGKILL every group, reap, close files.

        Replicas whose role is in ``servers`` are not waited for: once only they run, the grace ends."""
        def waiting() -> list[Replica]:
            return [r for r in self.running() if r.role not in servers]

        try:
            alive = self.running()
            if alive and not waiting():  # only servers left: the chief is gone, nothing to save there
                self.log("[launcher] stopping " + ", ".join(r.name for r in alive)
                         + " (SIGKILL: with the chief gone, servers hold nothing to save)")
            elif alive and grace_s > 0:
                self.log("[launcher] stopping " + ", ".join(r.name for r in alive)
                         + f" (SIGTERM, then SIGKILL after {grace_s:g} s)")
                self._signal_groups(signal.SIGTERM)
                end = time.monotonic() + grace_s
                while waiting() and time.monotonic() < end:
                    self.pump(min(_POLL_S, end - time.monotonic()))
                    self.reap()
                stubborn = waiting()
                if stubborn:
                    self.log("[launcher] " + ", ".join(r.name for r in stubborn)
                             + f" ignored SIGTERM for {grace_s:g} s; sending SIGKILL")
        finally:
            self._kill_and_reap()

    def _kill_and_reap(self) -> None:
        blocked = False
        try:  # a second Ctrl-C / SIGTERM must not interrupt the kill itself
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            blocked = True
        except (ValueError, OSError, AttributeError):
            pass
        try:
            self._signal_groups(signal.SIGKILL)  # also catches grandchildren of exited leaders
            stuck = []
            for r in self.replicas:  # reap first: nothing below may leave a zombie behind
                if r.proc is None:
                    continue
                try:
                    r.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    stuck.append(f"{r.name} (pid {r.proc.pid})")
                if r.returncode is None:
                    r.returncode = r.proc.returncode
            for r in self.replicas:  # last output; a failing log callback must not stop this
                try:
                    if r.fd is not None:
                        self._read(r)
                        self._close_fd(r)
                except Exception:
                    pass
                finally:
                    if r.proc is not None and r.proc.stdout is not None:
                        r.proc.stdout.close()
                    r.fd = None
                    if r.logfile is not None:
                        r.logfile.close()
            for folder in self.folders:  # the replicas' own working folders go with them, as a container's do
                self.workdirs.remove(folder)
            self.folders = []
            self.sel.close()
            self.watch.close()
            if stuck:
                self.log("[launcher] survived SIGKILL for 30 s: " + ", ".join(stuck))
        finally:
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    # -- waiting --------------------------------------------------------------------------------
    def wait(self, deadline: float | None, servers: Sequence[str] = ("ps",), tolerate: bool = False):
        """Returns ("ok", None), ("failed", replica) or ("timeout", [running replicas]).

        Done when every replica whose role is not in ``servers`` exited 0; with ``tolerate`` a worker's
        failure is logged and ignored while another worker runs."""
        must_finish = [r for r in self.replicas if r.role not in servers]
        while True:
            if self.stop is not None and self.stop.is_set():
                self.log("[launcher] stop requested; stopping all replicas")
                raise Stopped()
            now = time.monotonic()
            self.pump(_POLL_S if deadline is None else min(_POLL_S, deadline - now))
            self.watch.sample()
            done = self.reap()
            for r in done:
                if r.returncode == 0:
                    self.log(f"[launcher] {r.name} exited with status 0")
            failed = [r for r in done if r.returncode != 0]
            if tolerate:
                left = [r for r in self.running() if r.role == "worker"]
                for r in [r for r in failed if r.role == "worker" and left]:
                    self.log(f"[launcher] {r.name} exited with status {status_text(r.returncode)}; tolerated: "
                             f"the chief reschedules its steps on {', '.join(w.name for w in left)}")
                    self.tolerated.append(self.failure(r))
                    failed.remove(r)
            if failed:
                return "failed", failed[0]
            if all(r.returncode == 0 for r in must_finish):
                return "ok", None
            if deadline is not None and time.monotonic() >= deadline:
                return "timeout", self.running()

    def failure(self, r: Replica, **extra) -> ReplicaFailure:
        status = r.returncode if r.returncode is not None else 0
        error = r.error_line
        if error and r._error_close is not None:  # "ValueError: ... (PerReplica:{ … }) with an unsupported type ..."
            error = f"{error.rstrip()} … {r._error_close.strip()}"
        return ReplicaFailure(replica=r.replica, role=r.role, exit_status=status,
                              last_lines=list(r.tail), attempt=self.number, log_file=r.log_path,
                              error_line=error, source_dir=self.source_dir, env=self.env,
                              **self.failure_context, **extra)


def _open_brackets(text: str) -> int:
    """Brackets ``text`` opens minus those it closes: a multi-line exception message (a tensor's repr in it)
    ends on the line that closes what its first line opened."""
    return sum(map(text.count, "([{")) - sum(map(text.count, ")]}"))
