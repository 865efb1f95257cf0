"""Local launcher: run a job's Vertex AI worker pools as real processes on 127.0.0.1.

Any command is the worker command (``python -m trainer.task --user_arg value`` runs unchanged);
every replica gets the environment Vertex AI custom training would give it, so the same trainer
runs locally and on Vertex.

    python -m jobs.local.launcher --replicas 1,1,0,0 --base-output-dir runs/x -- python -m trainer.task
    result = launch([sys.executable, "-m", "trainer.task"], [1, 1], "runs/x", max_restarts=2)

This module is the supervisor (:func:`launch`); its command line is ``jobs.local.launcher.__main__``. Why ~580
lines in one module: a third of them are the contracts below, and the rest is one loop (start every
replica, pump their output, reap, apply the done and failure rules, restart) whose parts share its state.

Environment contract (``jobs.replica_env``: :func:`replica_environment` builds it)
    Each replica gets only: ``base_env`` (default :func:`process_base`: ``PATH``, ``HOME``, locale,
    ``TMPDIR``, the virtualenv, what the trainer image's ``ENV`` sets and ``PYTHONPATH`` = this checkout;
    nothing else of the launcher's environment, credentials above all), plus ``env=`` (the job's declared
    variables, ``trainer.env``), plus (these win):

    * ``CLUSTER_SPEC`` = ``{"cluster": {"workerpool0": ["127.0.0.1:P"], "workerpool1": [...], ...},
      "environment": "cloud", "task": {"type": "workerpool<p>", "index": i}}``; only non-empty pools.
    * ``TF_CONFIG`` = ``{"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type":
      "chief"|"worker"|"ps"|"evaluator", "index": i}, "environment": "cloud"}``; empty roles left
      out; the evaluator (pool 3) is never in ``cluster``, as TensorFlow requires.  A single-replica
      job also gets a chief-only TF_CONFIG (Vertex sets none there); that is harmless:
      MultiWorkerMirroredStrategy runs as one worker, MirroredStrategy ignores it.
    * ``AIP_MODEL_DIR=<base>/model/``, ``AIP_CHECKPOINT_DIR=<base>/checkpoints/``,
      ``AIP_TENSORBOARD_LOG_DIR=<base>/logs/`` (``<base>`` absolute, same for every replica; the
      three dirs are created, as GCS needs no mkdir), ``CLOUD_ML_JOB_ID=<job_id>``,
      ``PYTHONUNBUFFERED=1``.  No ``AIP_JOB_ID`` (not a documented Vertex variable).
    * A fresh free port per replica on 127.0.0.1 for every attempt.

    The launcher never modifies its own ``os.environ`` (a CLUSTER_SPEC leaking into a KFP task
    process breaks the kfp executor).

Log contract
    stdout and stderr of a replica are merged; every line goes to ``log`` as ``[<role>-<i>] line``
    (``[chief-0]``, ``[worker-1]``, ``[ps-0]``, ``[evaluator-0]``) and, raw, to
    ``<base>/logs/replicas/attempt-<k>/<role>-<i>.log`` (k = 1, 2, ...), each attempt's lines after a
    separator line naming the time, the attempt and the launcher's pid (:func:`separator`): a run resumed in
    the same folder appends to the same files, and its lines never read as the earlier run's.  The
    launcher's own lines are ``[launcher] ...``.  The last 20 lines of each replica are kept for failure reports.

Done rule (``done_when``, CLI ``--done-when``)
    ``"all"`` (default: all-reduce strategies): the job succeeds when every chief, worker and evaluator
    replica has exited 0; parameter servers never exit on their own and are then stopped.  A chief
    exiting 0 while workers run is fine.
    ``"chief"`` (parameter-server training, where workers are servers too): the job succeeds when the
    chief and every evaluator have exited 0; workers and parameter servers are then killed at once
    (SIGKILL, no grace: a server holds nothing that must be saved once the chief is gone), with one
    ``[launcher] stopping ... (SIGKILL: ...)`` line.

Worker-failure rule (``on_worker_failure``, CLI ``--on-worker-failure``)
    ``"restart"`` (default): any replica's failure fails the attempt (below).
    ``"tolerate"`` (parameter-server training; needs ``done_when="chief"``): a worker exiting non-zero
    or dying of a signal is logged (``[launcher] worker-1 exited with status -9 (SIGKILL); tolerated:
    ...``) and the others go on, since the chief reschedules that worker's steps on the rest; only
    when no worker is left does it fail the attempt.  Chief, parameter-server and evaluator failures
    always fail it.

Restart contract (Vertex's ``restart_job_on_worker_restart``)
    When a replica fails (as above), all others are stopped (SIGTERM to each process group,
    ``grace_s``, then SIGKILL: MWMS workers ignore SIGTERM; under ``done_when="chief"`` the grace
    ends as soon as only workers and parameter servers are left) and, while restarts are
    left, the WHOLE job starts again on new ports (``[launcher] restart 1/2: worker-0 exited with
    status -9 (SIGKILL); restarting all replicas``).  A trainer that resumes from a checkpoint
    should print ``resumed from step <N>`` (any case, anywhere in a line): the first such line of
    the new attempt becomes ``RestartRecord.resumed_step``.  ``timeout_s`` bounds the whole job,
    restarts included.  No process is left behind: every process group started is killed and
    reaped on return, on exceptions and on KeyboardInterrupt; the CLI also turns SIGTERM/SIGHUP
    into the same clean-up; a replica whose launcher is killed outright (kill -9) is killed with it
    (``PR_SET_PDEATHSIG``).  A replica exiting with a status in ``permanent_statuses`` (default 2: bad
    config or data, ``trainers.task``'s code, and a command-line usage error by convention) is never
    restarted: the same input would fail the same way (``[launcher] not restarting: ...``).  Replicas
    run in their own sessions, so a terminal's Ctrl-C reaches only the launcher, which then stops them
    (SIGTERM, grace, SIGKILL).

Exit codes (``JobResult.returncode`` and the CLI's status)
    0 success; the failing replica's status when it exited non-zero; 128+N when it died of
    signal N; 124 on timeout; CLI only: 2 usage error, 127 command cannot start, 130 interrupted,
    128+N when the launcher got signal N.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import re
import selectors
import signal
import socket
import subprocess
import threading
import time
from typing import Callable, Collection, Mapping, Sequence

from jobs.local import lifeline
from jobs.local.hints import ARGPARSE_ERROR
from jobs.replica_env import (POOL_NAMES, ROLES, aip_variables, process_base, replica_environment,
                                   validate_replica_counts, vertex_environment)

__all__ = ["ReplicaFailure", "RestartRecord", "JobResult", "JobFailed", "Stopped", "vertex_environment",
           "launch", "RESUMED_RE", "TAIL_LINES"]

RESUMED_RE = re.compile(r"resumed from step (\d+)", re.IGNORECASE)
#: done_when -> the roles that are servers (never exit on their own; stopped once the others are done).
DONE_RULES = {"all": ("ps",), "chief": ("ps", "worker")}
WORKER_FAILURE_RULES = ("restart", "tolerate")
TAIL_LINES = 20
#: Exit statuses never restarted (``launch(permanent_statuses=)``): 2 is ``trainers.task``'s "bad config or
#: data" (one ``error:`` line per problem) and argparse's usage error; a restart would fail the same way.
PERMANENT_STATUSES = frozenset({2})
_POLL_S = 0.05


def status_text(status: int) -> str:
    """``3``, ``-9 (SIGKILL)``, ``137 (128+SIGKILL)``."""
    def name(n: int) -> str | None:
        try:
            return signal.Signals(n).name
        except ValueError:
            return None
    if status < 0 and name(-status):
        return f"{status} ({name(-status)})"
    if 128 < status < 160 and name(status - 128):
        return f"{status} (128+{name(status - 128)})"
    return str(status)


@dataclasses.dataclass
class ReplicaFailure:
    """What went wrong: the replica that failed (or, on timeout, the first one still running)."""

    replica: str               # "workerpool1-0"
    role: str                  # chief | worker | ps | evaluator
    exit_status: int           # returncode; negative = killed by that signal; 124 on timeout
    last_lines: list[str]      # last ~20 log lines of that replica
    attempt: int = 1
    log_file: str | None = None
    timed_out_after: float | None = None   # set when the job hit timeout_s
    still_running: list[str] = dataclasses.field(default_factory=list)
    #: the replica's own error: the exception line that ended its last traceback (with `` … <the line that
    #: closes it>`` when its message spans lines, as a tensor's repr does), its last ``error:`` line, or
    #: argparse's usage error (``task.py: error: unrecognized arguments: ...``)
    error_line: str | None = None
    #: the replicas' working directory (the trainer's code) and the job's declared variables: a hint says what
    #: works for that code (``jobs.local.hints``)
    source_dir: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.replica.rsplit('-', 1)[-1]}"

    def cause(self) -> list[str]:
        """The replica's own reason, as the last lines of :meth:`describe` (and of the console, which shows them
        last too): ``<name>'s error: <its error line>`` and, for a known failure, ``hint: ...``
        (``jobs.local.hints``). Empty when the replica printed no error."""
        from jobs.local.hints import hint_for

        lines = []
        if self.error_line:
            line = " ".join(self.error_line.split())
            # an error: line is written to be read whole (the way out is at its end); an exception's may hold
            # a whole array on one line
            limit = 1000 if line.startswith("error: ") else 300
            line = line[len("error: "):] if line.startswith("error: ") else line
            lines.append(f"{self.name}'s error: {line if len(line) <= limit else line[:limit - 3] + '...'}")
        hint = hint_for([self.error_line or "", *self.last_lines], self.source_dir, self.env)
        if hint:
            lines.append(f"hint: {hint}")
        return lines

    def describe(self) -> str:
        """One head line; then the replica's last lines; then, last, its own reason (:meth:`cause`): the error
        line and a hint for a known failure. Last because that is what a person reads first: a console or a
        terminal shows the end of a failure, and the last lines before it are often a tensor dump."""
        if self.timed_out_after is not None:
            head = (f"job timed out after {self.timed_out_after:g} s (attempt {self.attempt}); "
                    f"still running: {', '.join(self.still_running) or 'none'}.")
        else:
            head = (f"{self.name} ({self.replica}, attempt {self.attempt}) exited with status "
                    f"{status_text(self.exit_status)}.")
        where = f" ({self.log_file})" if self.log_file else ""
        if not self.last_lines and not self.error_line:
            return f"{head} {self.name} printed nothing{where}."
        body = [f"  | {line}" for line in self.last_lines]
        return "\n".join([head, f"  last {len(self.last_lines)} lines of {self.name}{where}:", *body,
                          *(f"  {line}" for line in self.cause())])


@dataclasses.dataclass
class RestartRecord:
    attempt: int                # the attempt this restart started (2 for the first restart)
    failure: ReplicaFailure     # what ended the previous attempt
    resumed_step: int | None    # from the first "resumed from step N" line of this attempt


@dataclasses.dataclass
class JobResult:
    returncode: int
    failure: ReplicaFailure | None
    restarts: list[RestartRecord]
    attempts: int
    log_dir: str                # <base>/logs/replicas
    elapsed_s: float = 0.0
    tolerated: list[ReplicaFailure] = dataclasses.field(default_factory=list)  # on_worker_failure="tolerate"

    @property
    def message(self) -> str:
        if self.failure is None:
            return f"job succeeded after {self.attempts} attempt(s) in {self.elapsed_s:.1f} s"
        return self.failure.describe()


class Stopped(KeyboardInterrupt):
    """``launch(stop=event)`` saw the event set (another thread's Ctrl-C): every replica was stopped the way a
    KeyboardInterrupt stops them (SIGTERM, grace, SIGKILL). A KeyboardInterrupt, so callers that already clean up
    after Ctrl-C treat it the same."""


class JobFailed(RuntimeError):
    """Raised by ``launch(check=True)``; ``.result`` is the :class:`JobResult`."""

    def __init__(self, result: JobResult):
        super().__init__(result.message)
        self.result = result


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
# over. Each gets the one rule for children (``jobs.local.lifeline.preexec``: SIGKILL when the launcher dies).


class _Replica:
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


class _Attempt:
    """One run of every replica; ``close()`` always leaves no process behind."""

    def __init__(self, number, counts, command, base, env, job_id, cwd, log, on_line, base_env, replica_env=None,
                 stop=None):
        self.number, self.log, self.on_line, self.stop = number, log, on_line, stop
        self.cwd, self.env = cwd, dict(env or {})
        self.tolerated: list[ReplicaFailure] = []
        self.dir = os.path.join(base, "logs", "replicas", f"attempt-{number}")
        os.makedirs(self.dir, exist_ok=True)
        self.replicas = [_Replica(p, i, os.path.join(self.dir, f"{ROLES[p]}-{i}.log"))
                         for p in range(len(counts)) for i in range(counts[p])]
        ports = iter(_free_ports(len(self.replicas)))
        addresses = {POOL_NAMES[p]: [f"127.0.0.1:{next(ports)}" for _ in range(counts[p])]
                     for p in range(len(counts)) if counts[p]}
        self.sel = selectors.DefaultSelector()
        try:
            for r in self.replicas:
                extra = {**(env or {}), **(replica_env(r.role, r.index) if replica_env else {})}
                child_env = replica_environment(
                    base_env, extra, vertex_environment(counts, addresses, r.pool, r.index, base, job_id))
                r.logfile = open(r.log_path, "ab")
                r.logfile.write(separator(number, r.name).encode())
                r.proc = subprocess.Popen(
                    list(command), env=child_env, cwd=cwd, stdin=subprocess.DEVNULL,
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
    def _emit(self, r: _Replica, raw: bytes) -> None:
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
        self.on_line(r, text)

    def _read(self, r: _Replica) -> bool:
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

    def _close_fd(self, r: _Replica) -> None:
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

    def reap(self) -> list[_Replica]:
        """Replicas whose process exited since the last call (output drained)."""
        done = []
        for r in self.replicas:
            if r.proc is not None and r.returncode is None and r.proc.poll() is not None:
                r.returncode = r.proc.returncode
                self._read(r)  # the pipe holds everything it wrote before dying
                done.append(r)
        return done

    def running(self) -> list[_Replica]:
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
        def waiting() -> list[_Replica]:
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
            self.sel.close()
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

    def failure(self, r: _Replica, **extra) -> ReplicaFailure:
        status = r.returncode if r.returncode is not None else 0
        error = r.error_line
        if error and r._error_close is not None:  # "ValueError: ... (PerReplica:{ … }) with an unsupported type ..."
            error = f"{error.rstrip()} … {r._error_close.strip()}"
        return ReplicaFailure(replica=r.replica, role=r.role, exit_status=status,
                              last_lines=list(r.tail), attempt=self.number, log_file=r.log_path,
                              error_line=error, source_dir=self.cwd, env=self.env, **extra)


def _open_brackets(text: str) -> int:
    """Brackets ``text`` opens minus those it closes: a multi-line exception message (a tensor's repr in it)
    ends on the line that closes what its first line opened."""
    return sum(map(text.count, "([{")) - sum(map(text.count, ")]}"))


def _job_returncode(status: int) -> int:
    return 128 - status if status < 0 else status


def launch(command: Sequence[str], replica_counts: Sequence[int], base_output_dir: str, *,
           env: Mapping[str, str] | None = None, job_id: str = "local", max_restarts: int = 0,
           timeout_s: float | None = None, grace_s: float = 5.0, cwd: str | None = None,
           log: Callable[[str], None] = print, check: bool = True, done_when: str = "all",
           on_worker_failure: str = "restart", after_attempt: Callable[[], None] | None = None,
           base_env: Mapping[str, str] | None = None, replica_env: Callable[[str, int], Mapping[str, str]] | None = None,
           stop: threading.Event | None = None, permanent_statuses: Collection[int] = PERMANENT_STATUSES) -> JobResult:
    """Run ``command`` as every replica of the worker pools ``replica_counts`` (pools 0..3).

    Returns a :class:`JobResult`; with ``check=True`` a failed or timed-out job raises
    :class:`JobFailed` instead.  ``done_when`` ("all" | "chief") and ``on_worker_failure``
    ("restart" | "tolerate"): see the module docstring, as for the other contracts.
    ``after_attempt``: called once every replica of an attempt is reaped, on every path (the docker
    runner removes the attempt's containers there: a replica process killed with SIGKILL cannot).
    ``base_env``: what every replica process starts from (default :func:`process_base`; the docker runner's
    replica processes are its own container stand-ins, which need the engine's settings).
    ``replica_env(role, index)``: variables for one replica only, over ``env`` (a tuning trial gives each
    replica its own ``CLOUD_ML_HP_METRIC_FILE``); the Vertex variables still win.
    ``stop``: a ``threading.Event`` another thread sets to end the job as a KeyboardInterrupt would (every
    replica SIGTERM, ``grace_s``, SIGKILL; then :class:`Stopped` is raised): the main thread alone gets Ctrl-C,
    and a job run in a worker thread must still stop the preemption way.
    ``permanent_statuses``: exit statuses that end the job at once, restarts left or not (see the module doc).
    """
    counts = validate_replica_counts(replica_counts)
    if isinstance(command, (str, bytes)) or not list(command):
        raise ValueError("command must be a non-empty list of arguments, e.g. "
                         "['python', '-m', 'trainer.task', '--user_arg', 'value']")
    if "://" in str(base_output_dir):
        raise ValueError(f"base_output_dir must be a local directory for the local launcher, "
                         f"got {base_output_dir!r}")
    if cwd is not None and not os.path.isdir(cwd):
        raise ValueError(f"cwd {cwd!r} is not a directory")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
    if grace_s < 0:
        raise ValueError(f"grace_s must be >= 0, got {grace_s!r}")
    if done_when not in DONE_RULES:
        raise ValueError(f"done_when must be one of {', '.join(DONE_RULES)}, got {done_when!r}")
    if on_worker_failure not in WORKER_FAILURE_RULES:
        raise ValueError(f"on_worker_failure must be one of {', '.join(WORKER_FAILURE_RULES)}, "
                         f"got {on_worker_failure!r}")
    if on_worker_failure == "tolerate" and done_when != "chief":
        raise ValueError("on_worker_failure='tolerate' needs done_when='chief': a worker that must finish "
                         "cannot be tolerated when it dies")
    servers = DONE_RULES[done_when]

    base = os.path.abspath(str(base_output_dir))
    for d in aip_variables(base).values():
        os.makedirs(d, exist_ok=True)
    base_env = process_base() if base_env is None else dict(base_env)
    log_dir = os.path.join(base, "logs", "replicas")
    start = time.monotonic()
    deadline = None if timeout_s is None else start + timeout_s
    restarts: list[RestartRecord] = []
    number = 0

    def on_line(_r: _Replica, text: str) -> None:
        if restarts and restarts[-1].attempt == number and restarts[-1].resumed_step is None:
            m = RESUMED_RE.search(text)
            if m:
                restarts[-1].resumed_step = int(m.group(1))

    tolerated: list[ReplicaFailure] = []

    def result(rc: int, failure: ReplicaFailure | None) -> JobResult:
        res = JobResult(rc, failure, restarts, number, log_dir, time.monotonic() - start, tolerated)
        if failure is not None:
            log(f"[launcher] job failed: {failure.describe().splitlines()[0]}")
            if check:
                raise JobFailed(res)
        else:
            log(f"[launcher] {res.message}")
        return res

    while True:
        number += 1
        attempt = _Attempt(number, counts, command, base, env, job_id, cwd, log, on_line, base_env, replica_env, stop)
        try:
            outcome, what = attempt.wait(deadline, servers, on_worker_failure == "tolerate")
            if outcome == "failed":
                failure = attempt.failure(what)
                log(f"[launcher] {what.name} exited with status {status_text(what.returncode)}; "
                    "stopping all replicas")
            elif outcome == "timeout":
                first = next((r for r in what if r.role != "ps"), what[0])
                failure = attempt.failure(first, timed_out_after=timeout_s,
                                          still_running=[r.name for r in what])
                log(f"[launcher] timed out after {timeout_s:g} s; still running: "
                    + ", ".join(r.name for r in what))
        finally:
            # stops the servers after success; everything otherwise
            try:
                attempt.close(grace_s, servers if done_when == "chief" else ())
            finally:
                if after_attempt is not None:
                    after_attempt()
            tolerated.extend(attempt.tolerated)

        if outcome == "ok":
            return result(0, None)
        if outcome == "timeout":
            failure.exit_status = 124
            return result(124, failure)
        over_time = deadline is not None and time.monotonic() >= deadline
        permanent = failure.exit_status in permanent_statuses
        if number > max_restarts or over_time or permanent:
            if over_time and number <= max_restarts:
                log("[launcher] not restarting: timeout reached")
            elif permanent and number <= max_restarts:
                log(f"[launcher] not restarting: {failure.name} exited with status {failure.exit_status} (bad config "
                    "or input): a restart would fail the same way")
            return result(_job_returncode(failure.exit_status), failure)
        log(f"[launcher] restart {number}/{max_restarts}: {failure.name} exited with status "
            f"{status_text(failure.exit_status)}; restarting all replicas")
        restarts.append(RestartRecord(attempt=number + 1, failure=failure, resumed_step=None))
