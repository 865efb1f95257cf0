"""How the user started this command line, for its usage lines, ``--help`` and the lines that say how to go on:
``vtp`` (the console script ``pip install`` puts on the PATH, which works from any folder) or
``python pipelines/run.py`` (from a checkout). A help text written for the checkout is shown with the name the
user typed (:func:`shown`), so ``vtp --help`` never suggests a path that does not exist where it was run."""
from __future__ import annotations

import os
import re
import sys

SCRIPT = "vtp"
CHECKOUT = "python pipelines/run.py"


def invoked_as() -> str:
    """``vtp`` when this process was started as the console script, else ``python pipelines/run.py``."""
    return SCRIPT if os.path.basename(sys.argv[0]) == SCRIPT else CHECKOUT


def shown(text: str) -> str:
    """``text`` with ``python pipelines/run.py`` spelled as the user started the command."""
    return text.replace(CHECKOUT, invoked_as())


_ROLE = re.compile(r":(?:func|data|class|meth|mod|attr|obj|exc):`~?([^`]+)`")


def plain(text: str) -> str:
    """A command's help as a person reads it in a terminal: the docstring's reStructuredText markup dropped
    (````x```` and ``:func:`x``` become ``x``) and the command spelled as the user started it (:func:`shown`)."""
    return shown(_ROLE.sub(lambda m: m.group(1), text).replace("``", ""))


def add_job_arguments(parser, help: str = "preset or YAML file") -> None:
    """A command's job: ``--config JOB`` or, as ``vtp validate JOB`` takes it, the job as the first word
    (``vtp plan job.yaml``); :func:`job_of` reads the one given."""
    parser.add_argument("job", nargs="?", metavar="JOB", help=f"{help} (the same as --config JOB)")
    parser.add_argument("--config", default=None, help=f"{help} (default: local)")


def job_of(parser, args, default: str = "local") -> str:
    """The job :func:`add_job_arguments` read (``default`` when none); a usage error when both ways name one and
    they differ."""
    if args.job and args.config and args.job != args.config:
        parser.error(f"the job is given twice ({args.job} and --config {args.config}): give one")
    return args.job or args.config or default


def seconds_problem(flag: str, value: float | None, most: float, *, zero: bool = False, example: str = "") -> str | None:
    """Why a flag's number of seconds cannot be used (not finite, negative, 0 where 0 means nothing, past ``most``),
    in one line naming the flag and a valid value; None when it can (or was not given). The one check of every
    command's duration flags (``--wait``, ``--poll-seconds``, ``vtp ci-local --timeout``): ``float()`` reads
    ``nan`` and ``inf``, which no wait, deadline or sleep takes (``threading`` raises OverflowError past
    ``threading.TIMEOUT_MAX``)."""
    import math

    if value is None:
        return None
    lowest = "0 or more" if zero else "more than 0"
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > most:
        return (f"{flag} {value:g}: give a finite number of seconds, {lowest} and at most {most:,.0f}"
                + (f" (e.g. {flag} {example})" if example else ""))
    return None


def plan_hint(config: str) -> str:
    """The line ``validate`` and ``--compile-only`` end with: where to see the exact request, its price and where
    it can run (``jobs.cloud.planning``)."""
    return shown(f"see the exact Vertex request, its price and where it can run: python pipelines/run.py plan "
                 f"--config {config}")


#: the exit status of a command whose reader closed its output (``vtp validate FILE | head -1``): 128 + SIGPIPE,
#: what ``cat``, ``yes`` or ``git log`` end with when their reader goes away, so a shell's ``pipefail`` sees the
#: same as for them (docs/cli.md "Output cut by a closed pipe")
CLOSED_PIPE = 141


def start_ticks(pid: "int | str" = "self") -> int | None:
    """When process ``pid`` started, in clock ticks since boot (Linux ``/proc/PID/stat`` field 22); None when it is
    gone, a zombie, or unreadable (not Linux). With the pid it names one process: a pid is reused, the pair is not.
    Written here rather than taken from psutil: a read of /proc does not justify a dependency the product does not
    otherwise have."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()  # the command name (field 2) may hold spaces
        return None if fields[0] in (b"Z", b"X") else int(fields[19])  # a zombie has ended: only its pid is left
    except (OSError, ValueError, IndexError):
        return None


def process_age_s() -> float:
    """How long ago this process started (:func:`start_ticks` against ``/proc/uptime``); 0.0 where that cannot be
    read."""
    ticks = start_ticks()
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return 0.0 if ticks is None else max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


_STARTED: list[float] = []  # the running command's start (time.monotonic), innermost last


def command_started() -> float | None:
    """When the command now running started (``time.monotonic``): its process's start when the process is the
    command (``vtp ...``: ``main()`` called without ``argv``), else when ``main(argv)`` was called (in a test);
    None outside a command. A promise like "a create gives up within 120 s" counts from here."""
    return _STARTED[-1] if _STARTED else None


def survives_closed_pipe(command):
    """The entry point's rule (``pipelines/run.py``'s ``main``): records when the command started
    (:func:`command_started`), ends a ``vtp`` process without a long final collection (:func:`_fast_exit`), and
    ``command`` (a ``main(argv) -> int``) made quiet when its reader closes the pipe: Python's
    ``BrokenPipeError`` (on a write, or on the flush at exit) ends it with :data:`CLOSED_PIPE` and no traceback
    and no "Exception ignored" line. The standard library's own recipe (the ``signal`` module's "Note on
    SIGPIPE"): flush inside the guard, then point stdout (and stderr if it is the one closed) at ``/dev/null`` so
    the interpreter's last flush has nowhere to fail. Restoring ``SIG_DFL`` for SIGPIPE instead would also kill
    a command in the middle of writing an artifact, where a closed pipe must not matter."""
    import functools

    import time

    @functools.wraps(command)
    def guarded(argv=None, *args, **kwargs):
        _STARTED.append(time.monotonic() - (process_age_s() if argv is None else 0.0))
        try:
            try:
                status = command(argv, *args, **kwargs)
            finally:  # also after SystemExit (argparse's --help and usage errors)
                _STARTED.pop()
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                if argv is None:
                    _fast_exit()
            return status
        except BrokenPipeError:
            _quiet_closed_streams()
            return CLOSED_PIPE
    return guarded


def _fast_exit() -> None:
    """The process ends right after its command: ``gc.freeze()`` spares the interpreter's final collections the
    million objects the cloud clients' imports leave (seen: 1.7 s on a quiet machine, 3.6-7.5 s under load, after
    a submit's last line, 0.4 s with the freeze). Objects still go when their last reference does; only cycles
    are left for the process's end to reclaim."""
    import gc

    gc.freeze()


def _quiet_closed_streams() -> None:
    """Point stdout and stderr at ``/dev/null`` where they are a closed pipe (or can no longer be flushed)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                try:
                    os.dup2(devnull, stream.fileno())
                except (OSError, ValueError):
                    pass
    finally:
        os.close(devnull)


def rich_console(**kwargs):
    """A ``rich.console.Console(**kwargs)`` whose closed pipe is a ``BrokenPipeError`` for
    :func:`survives_closed_pipe` to end with :data:`CLOSED_PIPE`: rich's own ``on_broken_pipe`` ends the process
    itself with status 1, unlike every other command here."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    return _Console(**kwargs)
