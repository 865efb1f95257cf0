"""What a launched job came to: its result (:class:`JobResult`), the failure that ended an attempt
(:class:`ReplicaFailure`, which says it the way a person reads it: the replica's last lines, then its own error line
and a hint for a known failure), a restart (:class:`RestartRecord`), and the two ways ``launch`` ends early
(:class:`JobFailed` with ``check=True``, :class:`Stopped` when its ``stop`` event was set)."""
from __future__ import annotations

import dataclasses
import signal

from jobs.local.launch.hints import hint_for


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
    #: the trainer's code (``trainer.source_dir``) and the job's declared variables: a hint says what
    #: works for that code (``jobs.local.launch.hints``)
    source_dir: str | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the trainer's requirements file (``trainer.requirements``) and the runner its replicas ran under
    #: (``process``: this environment's packages; ``docker``: the image's): where a missing module must be installed
    requirements: str | None = None
    runner: str = "process"

    @property
    def name(self) -> str:
        return f"{self.role}-{self.replica.rsplit('-', 1)[-1]}"

    def cause(self) -> list[str]:
        """The replica's own reason, as the last lines of :meth:`describe` (and of the console, which shows them
        last too): ``<name>'s error: <its error line>`` and, for a known failure, ``hint: ...``
        (``jobs.local.launch.hints``). Empty when the replica printed no error."""
        lines = []
        if self.error_line:
            line = " ".join(self.error_line.split())
            # an error: line is written to be read whole (the way out is at its end); an exception's may hold
            # a whole array on one line
            limit = 1000 if line.startswith("error: ") else 300
            line = line[len("error: "):] if line.startswith("error: ") else line
            lines.append(f"{self.name}'s error: {line if len(line) <= limit else line[:limit - 3] + '...'}")
        hint = hint_for([self.error_line or "", *self.last_lines], self.source_dir, self.env,
                        requirements=self.requirements, runner=self.runner)
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
    #: what a successful job's replicas did that makes its model doubtful (never joined their cluster, several wrote
    #: the model folder: ``jobs.local.launch.model_watch``), one line each, to be said before the model is used
    notes: list[str] = dataclasses.field(default_factory=list)

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
