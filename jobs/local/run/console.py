"""What a person sees during a local run: a short console, the full log in a file.

Everything the run prints, at the file-descriptor level (this process's prints and logging, kfp.local's
task dumps, every replica's lines relayed by kfp, TensorFlow's C++ start-up lines), goes through one
pipe into :class:`Console`, which writes every line to the run's log file and shows only what matters:

* one line when a pipeline step starts and one when it ends (status, duration);
* training progress: a live bar on a terminal (rich), otherwise a line at most every few seconds, with
  step/total, loss, accuracy, examples/s and ETA; for a user's Keras trainer, each epoch's metrics as
  ``fit`` prints them; resumes and restarts when they happen;
* a hyperparameter study's own lines: each trial and the baseline starting and ending (n/N, values, metric,
  wall time, the best so far), the study's end and which model goes on (:data:`STUDY`); a trial's replicas' lines
  (``[trial 3] [chief-0] ...``) go to the log only. While a study is quiet, the "still running" line names the
  runs in flight and how long each has run;
* warnings and errors (``warning:``/``error:`` lines, the launcher's failures; a replica's error line once,
  not once per replica). A step's own ``error:`` lines are held until it ends: shown then when the step
  succeeded; when it failed, its last meaningful lines and the log file's path are shown, and then (printed
  by the caller, :meth:`Console.failure_lines`, on stderr, where scripts and ``runs list`` read it) its cause
  as the LAST lines, said once: the step's error and the failing replica's own error line and hint
  (``jobs.local.launch.outcome.ReplicaFailure.cause``), which would otherwise be buried above a tensor dump;
* this process's own lines (summary, notes) unchanged.

Noise never reaches the console: kfp's executor input/output dumps, repeated configs, TensorFlow's C++
``I0000``/``W0000`` lines and absl banners, kfp's non-Python-image RuntimeWarning. ``verbose=True``
shows everything, as before. Why fd-level capture rather than logging filters: half of the noise is
written by C++ code and by child processes straight to the inherited descriptors.
"""
from __future__ import annotations

import collections
import io
import os
import re
import sys
import threading
import time

from jobs.rules.command_line import rich_console
from jobs.local.run.step_timer import step_seconds

ANSI = re.compile(r"\x1b\[[0-9;]*m")
KFP_LOG = re.compile(r"^(?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d\.\d+) - (INFO|WARNING|ERROR) - (.*)$")
TASK_START = re.compile(r"^Executing task '([^']+)'")
TASK_END = re.compile(r"^Task '([^']+)' finished with status (\w+)")
REPLICA = re.compile(r"^\[(chief|worker|ps|evaluator)-(\d+)\] ?(.*)$")
STEP = re.compile(r"^step (\d+)/(\d+) loss=([-\d.naif]+) accuracy=([-\d.naif]+)")
SHARD = re.compile(r"^shard (\d+)/(\d+) written \((\d+)/(\d+) images, (\d+) images/s\)")
SETUP = re.compile(r"^strategy=(\S+) replicas=(\d+) global_batch=(\d+) steps=(\d+) \(from (\d+)\)")
# Keras fit(verbose=2), as a user's trainer prints it: "Epoch 2/3", then "26/26 - 1s - loss: 0.09 - mae: 0.24 ..."
KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)$")
KERAS_END = re.compile(r"^\d+/\d+ - .*?\b(loss: .*)$")
NOISE = (
    re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ \S+:\d+\]"),          # absl / TF C++ log lines
    re.compile(r"^WARNING: All log messages before absl::InitializeLog"),
    re.compile(r"^\S+\.py:\d+: \w*Warning: "), re.compile(r"^warnings\.warn\("),
    re.compile(r"^-{20,}$"),
    # kfp's executor finding the component (not its executor-input dump's first line: that starts the dump)
    re.compile(r"^\[KFP Executor [\d-]+ [\d:,]+ INFO\]: (?!Got executor_input:)"),
)
#: a failed replica's reason as ``ReplicaFailure.cause`` writes it: kept for the end, not shown where it passes
CAUSE = re.compile(r"^((chief|worker|ps|evaluator)-\d+'s error: |hint: )")
#: a line written to fd 1/2 by :meth:`Console.drain`: seen by the reader, never shown nor logged
DRAIN = "\x00vtp-console-drain "
SHOWN_CHILD = re.compile(r"^((error|warning|note|precision): |interrupted|preempted|resumed from step|restart \d|"
                         r"verified |prepared \d)")
#: what a hyperparameter study says (``jobs.tuning.local``, ``jobs.cloud.vertex_jobs.tuning_job``, ``pick_model``): each trial
#: and the baseline starting and ending, the study's end, which model goes on and why (``jobs.run_records.records``)
STUDY = re.compile(r"^(trial \d+ (started|SUCCEEDED|FAILED|INFEASIBLE|stopped|ended)\b|baseline (started|SUCCEEDED|"
                   r"FAILED|INFEASIBLE|stopped)\b|study done |resuming the study |the study (beat|found|stops)|"
                   r"no baseline ran|the baseline )")
#: a run of a study starting and ending, for the "still running" line (which trials are in flight)
RUN_STARTED = re.compile(r"^(trial \d+|baseline) started\b")
RUN_ENDED = re.compile(r"^(trial \d+|baseline) (SUCCEEDED|FAILED|INFEASIBLE|stopped|ended)\b")
PROGRESS_EVERY_S = 5.0
#: a step that has shown nothing for this long gets a "still running" line (then every HEARTBEAT_EVERY_S):
#: a big model's first steps on CPUs here take minutes, and silence reads as a hang
QUIET_S, HEARTBEAT_EVERY_S = 30.0, 60.0
#: a failed step's last lines shown (the log file has them all; its cause comes after them)
FAILED_LINES = 10
#: the clock of the heartbeat and of the "in flight" times (a module attribute: a test puts its own clock in)
monotonic = time.monotonic


def _noise(text: str) -> bool:
    return any(p.search(text) for p in NOISE)


def _body(text: str) -> str:
    """A relayed line without what the launcher put before it: ``[worker-0] `` (a replica's line) or ``| ``
    (a failed replica's last lines, as ``ReplicaFailure.describe`` quotes them)."""
    m = REPLICA.match(text)
    text = m.group(3) if m else text
    return text[2:] if text.startswith("| ") else text


class Console:
    """Capture fds 1 and 2 into a classifier thread; see the module docstring."""

    def __init__(self, verbose: bool = False, tty: bool | None = None):
        self.verbose = verbose
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.log_path: str | None = None
        self._pending: list[str] = []           # lines seen before the log file exists
        self._log = None
        self._task: str | None = None
        self._task_started = 0.0
        self._task_lines: collections.deque[str] = collections.deque(maxlen=400)
        self._in_dump = False                   # inside kfp's executor-input JSON dump (never shown)
        self._cause: list[str] = []             # the running task's failed replica: error line, hint
        self._errors: list[str] = []            # the running task's own error: lines, held until it ends
        self._shown_errors: set[str] = set()    # replica error lines shown (once, whichever replica printed it)
        self.failed: tuple[str, list[str], list[str]] | None = None  # (step, its errors, cause) of a failed step
        self._drained: dict[str, threading.Event] = {}
        self._train: dict[str, float] = {}
        self._in_flight: dict[str, float] = {}  # a study's runs started and not ended: name -> when it started
        self._last_progress = 0.0
        self._bar = None
        self._lock = threading.Lock()
        self._last_shown = self._quiet_since = monotonic()
        self._quiet = threading.Event()  # set: stop the heartbeat
        self._closed: set = set()               # shown-on streams whose reader went away (a closed pipe)

    # -- life cycle -------------------------------------------------------------------------------
    def __enter__(self) -> "Console":
        """fd 1 and fd 2 each become a pipe read by a thread; what is shown goes to the original fd of
        the line (errors stay on stderr)."""
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self.out = io.TextIOWrapper(os.fdopen(os.dup(self._saved[0]), "wb", buffering=0), write_through=True)
        self.err = io.TextIOWrapper(os.fdopen(os.dup(self._saved[1]), "wb", buffering=0), write_through=True)
        self._readers = []
        for fd, shown_on in ((1, self.out), (2, self.err)):
            read_fd, write_fd = os.pipe()
            os.dup2(write_fd, fd)
            os.close(write_fd)
            reader = threading.Thread(target=self._pump, args=(read_fd, shown_on), daemon=True)
            reader.start()
            self._readers.append(reader)
        if not self.verbose:
            threading.Thread(target=self._heartbeat, daemon=True).start()
        self._old_streams = (sys.stdout, sys.stderr)
        sys.stdout = io.TextIOWrapper(os.fdopen(os.dup(1), "wb", buffering=0), write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(2), "wb", buffering=0), write_through=True)
        return self

    def __exit__(self, *exc) -> None:
        self._quiet.set()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout.close()  # our dups of the pipes' write ends ...
        sys.stderr.close()
        sys.stdout, sys.stderr = self._old_streams
        os.dup2(self._saved[0], 1)  # ... and fds 1/2: the readers see EOF
        os.dup2(self._saved[1], 2)
        for reader in self._readers:
            reader.join(timeout=10)
        self._stop_bar()
        for fd in self._saved:
            os.close(fd)
        if self._log is not None:
            self._log.close()
        self.out.close()
        self.err.close()

    def set_log_file(self, path: str) -> None:
        """From now on every line also goes to ``path`` (the lines seen so far are written first)."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with self._lock:
            self._log = open(path, "a", buffering=1, encoding="utf-8", errors="replace")
            self.log_path = path
            self._log.writelines(line + "\n" for line in self._pending)
            self._pending.clear()

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until both readers have handled every line written to fds 1 and 2 so far (kfp.local logs a
        task's end and then raises at once: the reader may not have seen that line yet). False on timeout or
        when not capturing."""
        if not getattr(self, "_readers", None):
            return False
        sys.stdout.flush()
        sys.stderr.flush()
        events = []
        for fd in (1, 2):
            token = f"{DRAIN}{fd} {time.monotonic_ns()}"
            with self._lock:
                events.append(self._drained.setdefault(token, threading.Event()))
            os.write(fd, (token + "\n").encode())
        deadline = time.monotonic() + timeout_s
        return all(e.wait(max(0.0, deadline - time.monotonic())) for e in events)

    def failure_lines(self) -> list[str]:
        """The lines that end a run whose step failed, for the caller to print last (after the step's display):
        ``error: the pipeline failed at step <step>: <its error>``, then the failing replica's own error line
        and hint. Empty when no step failed."""
        if self.failed is None:
            return []
        step, errors, cause = self.failed
        head = f"error: the pipeline failed at step {step}"
        if errors:
            head += f": {errors[-1].removeprefix('error: ')}"
        return [*errors[:-1], head, *(f"  {line}" for line in cause)]  # one line per problem, the step's last

    # -- the pipe ---------------------------------------------------------------------------------
    def _pump(self, fd: int, shown_on) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith(DRAIN):
                    with self._lock:
                        event = self._drained.pop(line, None)
                    if event is not None:
                        event.set()
                    continue
                with self._lock:
                    if self._log is not None:
                        self._log.write(line + "\n")
                    else:
                        self._pending.append(line)
                    self._stream = shown_on
                    try:
                        self._handle(line)
                    except Exception as exc:  # the console must never take the run down
                        self._show(f"(console: {type(exc).__name__}: {exc})")

    def _heartbeat(self, check_s: float = 2.0) -> None:
        """One line when a running step has shown nothing for :data:`QUIET_S` (then every
        :data:`HEARTBEAT_EVERY_S`), naming the step, how long it has been quiet and where the full log is
        (:meth:`beat`, every ``check_s``)."""
        while not self._quiet.wait(check_s):
            with self._lock:
                self.beat()

    def beat(self) -> None:
        """The heartbeat's one check, at :func:`monotonic`'s now (a test drives it with a clock of its own)."""
        now = monotonic()
        if self._task is None or self._bar is not None or now - self._last_shown < QUIET_S:
            return
        quiet = now - self._quiet_since  # since the step last showed a line of its own, not since the last beat
        where = f"; full log: {self.log_path}" if self.log_path else ""
        step = f" at step {int(self._train['step'])}/{int(self._train['total'])}" if "step" in self._train else ""
        if self._in_flight:  # a study: which of its runs are going, and for how long
            runs = ", ".join(f"{name} ({now - since:.0f} s)" for name, since in self._in_flight.items())
            self._show(f"  {self._task} still running: in flight {runs}{where}")
        else:
            self._show(f"  {self._task} still running{step}: nothing to show for {quiet:.0f} s{where}")
        self._last_shown -= QUIET_S - HEARTBEAT_EVERY_S  # the next line after HEARTBEAT_EVERY_S
        self._quiet_since = now - quiet

    def _show(self, text: str) -> None:
        """``text`` on the console. A console whose reader went away (``vtp | head``) is shown nothing more, and
        the run goes on to its end with every line in its log: a reader thread that died of ``BrokenPipeError``
        would leave fd 1 unread, and the run would hang once the pipe filled."""
        self._last_shown = self._quiet_since = monotonic()
        stream = getattr(self, "_stream", self.out)
        if stream in self._closed:
            return
        try:
            if self._bar is not None:
                self._bar[0].console.print(text, markup=False, highlight=False)
            else:
                stream.write(text + "\n")
        except (BrokenPipeError, ConnectionResetError, ValueError):
            self._closed.add(stream)

    # -- classification ---------------------------------------------------------------------------
    def _handle(self, line: str) -> None:
        if self.verbose:
            self._show(line)
            return
        text = ANSI.sub("", line)
        stripped = text.strip()
        if not stripped or _noise(stripped):
            return
        m = KFP_LOG.match(stripped)
        if m:
            self._kfp(m.group(4), m.group(5), int(m["h"]) * 3600 + int(m["m"]) * 60 + float(m["s"]))
            return
        if text.startswith("    "):  # kfp relays a task's output indented by 4 (this process uses 2)
            if self._in_dump:  # kfp's executor input, pretty-printed: ends with its outer "}" at the relay indent
                self._in_dump = text.rstrip() != "    }"
                return
            self._in_dump = stripped.endswith("Got executor_input:")
            if not self._in_dump:
                self._child(stripped)
            return
        self._show(text)  # this process's own lines: summary, errors, notes

    def _kfp(self, level: str, message: str, logged_at: float) -> None:
        """A kfp.local log line; ``logged_at``: its time of day (seconds), which times a step when no run records
        it: the time kfp logged, not when this reader got to the line (which depends on the machine's load)."""
        start, end = TASK_START.match(message), TASK_END.match(message)
        if start:
            self._task, self._task_started = start.group(1), logged_at
            self._task_lines.clear()
            self._in_flight.clear()
            self._cause, self._errors, self._shown_errors = [], [], set()
            self._show(f"▸ {self._task}")
        elif end:
            name, status = end.group(1), end.group(2)
            self._stop_bar()
            took = step_seconds(name)
            if took is None:
                took = (logged_at - self._task_started) % 86400  # a step that ran past midnight
            if status == "SUCCESS":
                for error in self._errors:
                    self._show(f"  {error}")
                self._show(f"✓ {name} ({took:.1f} s)")
            else:
                self._show(f"✗ {name} {status.lower()} after {took:.1f} s; its last lines:")
                errors = set(self._errors)  # said once, as the run's last words (failure_lines)
                meaningful = [t for t in self._task_lines if not _noise(_body(t)) and not CAUSE.match(t)
                              and t not in errors][-FAILED_LINES:]
                for t in meaningful:
                    self._show(f"    {t}")
                if self.log_path:
                    self._show(f"  full log: {self.log_path}")
                self.failed = (name, list(self._errors), list(self._cause))
            self._task = None
        elif level != "INFO":
            self._show(message)

    def _child(self, text: str) -> None:
        self._task_lines.append(text)
        cause = CAUSE.match(text)
        if cause:  # kept for the end (failure_lines), where a person reads first
            if not text.startswith("hint: "):
                self._cause = []
            self._cause.append(text)
            return
        if text.startswith("error: "):  # the step's own problem: held until the step ends (see the module doc)
            self._errors.append(text)
            return
        m = REPLICA.match(text)
        role, body = (f"{m.group(1)}-{m.group(2)}", m.group(3)) if m else ("", text)
        if text.startswith("[launcher]"):
            if re.search(r"restart|failed|timed out|ignored SIGTERM|survived", text):
                self._show(f"  {text}")
            return
        if _noise(body):
            return
        if body.startswith("error: "):  # every replica prints the same problem: show it once
            if body in self._shown_errors:
                return
            self._shown_errors.add(body)
        if role and role != "chief-0":
            if re.match(r"(error|preempted)", body):
                self._show(f"  [{role}] {body}")
            return
        setup, step, shard = SETUP.match(body), STEP.match(body), SHARD.match(body)
        epoch, epoch_end = KERAS_EPOCH.match(body), KERAS_END.match(body)
        if epoch:
            self._train["epoch"] = body
        elif epoch_end:
            metrics = re.sub(r" - \d+m?s/(epoch|step)", "", epoch_end.group(1)).replace(": ", " ")
            self._show(f"  {self._train.get('epoch', 'epoch').lower()}  {metrics}")
        elif shard:
            if self._due(int(shard.group(1)) == int(shard.group(2))):
                self._show(f"  {body}")
        elif setup:
            self._train = {"global_batch": float(setup.group(3)), "total": float(setup.group(4)),
                           "from": float(setup.group(5)), "t0": time.monotonic()}
            self._show(f"  training: {setup.group(2)} replicas ({setup.group(1)}), global batch "
                       f"{setup.group(3)}, steps {setup.group(5)} → {setup.group(4)}")
        elif step:
            self._progress(int(step.group(1)), int(step.group(2)), step.group(3), step.group(4))
        elif STUDY.match(body):
            began, ended = RUN_STARTED.match(body), RUN_ENDED.match(body)
            if began:
                self._in_flight[began.group(1)] = monotonic()
            elif ended:
                self._in_flight.pop(ended.group(1), None)
            self._show(f"  {body}")
        elif SHOWN_CHILD.match(body):
            self._show(f"  {body.split('; sample: ')[0]}")

    # -- training progress ------------------------------------------------------------------------
    def _progress(self, step: int, total: int, loss: str, acc: str) -> None:
        t = self._train
        t["step"] = step
        elapsed = time.monotonic() - t.get("t0", time.monotonic())
        done = step - t.get("from", 0)
        rate = done * t.get("global_batch", 0) / elapsed if elapsed > 0 and done > 0 else 0.0
        eta = (total - step) * elapsed / done if done > 0 else 0.0
        if self.tty:
            self._bar_update(step, total, f"loss {loss}  acc {acc}  {rate:.0f} ex/s")
            return
        if self._due(step >= total):
            self._show(f"  step {step}/{total}  loss {loss}  accuracy {acc}  {rate:.0f} examples/s  "
                       f"ETA {eta:.0f} s")

    def _due(self, last: bool) -> bool:
        """Progress lines off a terminal: the last one always, the others at most every few seconds."""
        now = time.monotonic()
        if last or now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            return True
        return False

    def _bar_update(self, step: int, total: int, fields: str) -> None:
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            progress = Progress(TextColumn("  training"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[info]}"), TimeRemainingColumn(),
                                console=rich_console(file=self.out, force_terminal=True), transient=False)
            progress.start()
            self._bar = (progress, progress.add_task("train", total=total, info=""))
        progress, task = self._bar
        progress.update(task, completed=step, total=total, info=fields)

    def _stop_bar(self) -> None:
        if self._bar is not None:
            self._bar[0].stop()
            self._bar = None
