"""Run history: the local runs under an output root read back (shown by ``jobs.local.history.views``).

    python pipelines/run.py runs list [--root runs] [--json]
    python pipelines/run.py runs compare A B [--root runs] [--json]
    python pipelines/run.py runs prune [--keep N] [--older-than DAYS] [--dry-run] [--root runs]

(the command line: ``jobs.commands.runs_cli``; ``prune``, the one command that deletes: ``jobs.local.history.prune``)

The one home of reading a run folder back as a row of history: the three commands share that one reader,
which decides a run's status from whatever records it left, and refuses a record of the wrong shape as
``unreadable`` (never a traceback). Everything comes from the records a run already leaves (``jobs.local.run.folder``), nothing new is written by a run for this:

* ``run.json`` (a run that succeeded): config, summary (metrics, wall time, report, code version), steps;
* ``steps.json`` (every run, from its first pipeline step): the steps' wall times so far and the one running;
* ``logs/run-<time>.log`` (every run that got past validation): when it started and how it ended: run.py's
  own ``interrupted ...`` line (Ctrl-C) or ``error: ...`` line (a failed step), or neither (killed, crashed);
* ``pipeline_root/<pipeline>-<time>/validate-config/executor_output.json``: the validated config of a run
  that never finished (``config_json``), ``checkpoints/checkpoint``: how far it trained, ``metrics.json``;
* ``.run.lock``: held while a run is live (``running``); ``prune`` takes it before removing a folder, so a
  live run is never removed, and a run cannot start in a folder while it is being removed;
* ``tuning.json`` and ``gate.json`` (``jobs.run_records.records``, which names every record): the study's trials and best trial, the gate's verdict.
  A gate that refused the model fails the run before run.json is written: its ``gate.json`` makes the run
  ``failed`` with the bar it missed as the note, whatever the log's last line says.

A run folder is a direct child of the root holding any of those; ``<base>.<YYYYmmdd-HHMMSS>[-n]`` is named like
a copy ``--fresh`` kept (``jobs.local.run.folder.archive``, which also writes ``.fresh-copy.json`` into it); ``prune``
removes only folders known to be such copies (``jobs.local.history.prune.copy_of``). A record that is there and cannot be
read back (not JSON, cut short, too big, too deep, a null or a field of the wrong type) makes the run
``unreadable``, never "no record" (:func:`read_record_strictly`). No TensorFlow, no kfp: a
listing takes well under a second.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import fcntl
import os
import re
from typing import Any

from jobs.run_records import records, run_cost
from jobs.local.history.results import gate_outcome, number, run_metrics, study_outcome, trainer_code, tuned_scalars
from jobs.local.history.record_check import (NESTED_TYPES, figure_problem, parse_time, read_record_strictly,
                                             record_problem, type_problem)
from jobs.local.run.folder import last_checkpoint
from jobs.local.run.lock import LOCK_NAME
from trainers import record_reader
from jobfile.errors import problem
from jobfile.regular_file import NotARegularFile, open_regular

PROG = "python pipelines/run.py runs"
DEFAULT_ROOT = "runs"
#: --fresh copies `runs prune` keeps per run folder when --keep is not given
DEFAULT_KEEP = 3
ARCHIVE_RE = re.compile(r"^(?P<base>.+)\.(?P<stamp>\d{8}-\d{6})(?:-(?P<n>\d+))?$")
LOG_RE = re.compile(r"^run-(\d{8}-\d{6})\.log$")
MARKERS = (records.RUN_RECORD, records.STEPS_RECORD, records.PROVENANCE_RECORD, LOCK_NAME, records.METRICS_RECORD, records.TRAINING_RECORD, "checkpoints",
           "pipeline_root")
TAIL_BYTES = 64 * 1024
STATUSES = ("running", "finished", "interrupted", "failed", "unfinished")


class UsageError(Exception):
    """Bad input: ``str(exc)`` is one line (printed as ``error: ...``, exit status 2)."""


# -- reading one run folder ------------------------------------------------------------------------------
def is_run_folder(path: str) -> bool:
    if not os.path.isdir(path):
        return False
    if any(os.path.exists(os.path.join(path, m)) for m in MARKERS):
        return True
    return bool(_logs(path))


def _logs(path: str) -> list[str]:
    """The run's console logs, oldest first (their names carry the start time)."""
    try:
        return sorted(n for n in os.listdir(os.path.join(path, "logs")) if LOG_RE.match(n))
    except OSError:
        return []


def lock_held(path: str) -> bool:
    """Whether a live process holds the folder's run lock, without taking it: the kernel's table of locks
    (``/proc/locks``) names the lock file's device and inode. Where that table cannot be read, a
    non-blocking shared lock is tried and dropped at once (a run starting in that instant would be refused
    as busy, which is why it is only the fallback)."""
    lock = os.path.join(path, LOCK_NAME)
    try:
        st = os.stat(lock)
    except OSError:
        return False
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    return any("->" not in line and "FLOCK" in line and key in line.split() for line in table.splitlines())


def _tail(path: str) -> list[str]:
    try:
        with open_regular(path, path, limit=1 << 62, text=False) as f:  # only its tail is read
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            return f.read(TAIL_BYTES).decode("utf-8", "replace").splitlines()
    except (OSError, NotARegularFile):  # a log that is a named pipe: no tail, never a hang
        return []


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


#: what the console said last about a failed replica (``jobs.local.launch.outcome.ReplicaFailure.cause``), after
#: run.py's ``error:`` line: its own error line, then a hint
CAUSE_LINE = re.compile(r"^\s+((?:chief|worker|ps|evaluator)-\d+'s error: .+|hint: .+)$")


def _ending(log_path: str) -> tuple[str, str, list[str]]:
    """How the run that wrote ``log_path`` ended, from run.py's own (unindented) last words (kfp.local colours
    the names in its failure line: the colour codes are dropped): ``(status, note, cause)``. A failed run's note is
    its ``error:`` line and the failing replica's own error line, as the console showed it; ``cause`` is that line
    and the hint after it."""
    lines = [_ANSI.sub("", x) for x in _tail(log_path)]
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if line.startswith("interrupted"):
            return "interrupted", line.split("; resume with:")[0], []
        if line.startswith("error: "):
            cause = []
            for after in lines[i + 1:]:
                m = CAUSE_LINE.match(after)
                if not m:
                    break
                cause.append(m.group(1))
            own = [c for c in cause if not c.startswith("hint: ")][:1]
            return "failed", " ".join([line[len("error: "):], *own]), cause
    return "unfinished", "stopped without a word (killed, or the machine went down); a rerun resumes it", []


def validated_config(path: str) -> dict[str, Any] | None:
    """The validated config of the newest pipeline run in the folder (kfp.local's record of validate-config's
    outputs): the config as the steps got it, with the image the build step chose filled in."""
    root = os.path.join(path, "pipeline_root")
    try:
        attempts = sorted(os.listdir(root), key=lambda n: os.path.getmtime(os.path.join(root, n)), reverse=True)
    except OSError:
        return None
    for name in attempts:
        try:  # THE reader (a regular file, bounded, not too deep), then the config it holds, the same way
            doc = record_reader.read(os.path.join(root, name, "validate-config", "executor_output.json"),
                                     types={"parameterValues": dict}, required=("parameterValues",))
            text = (doc or {}).get("parameterValues", {}).get("config_json")
            config = record_reader.parse(text, "config_json") if isinstance(text, str) else None
        except record_reader.Unreadable:
            continue
        if isinstance(config, dict):
            return config
    return None


@dataclasses.dataclass
class Run:
    """One run folder as history shows it (``as_dict`` is what ``--json`` prints)."""
    name: str
    path: str
    job: str | None
    status: str
    note: str
    archive_of: str | None
    steps: int | None
    total_steps: int | None
    metrics: dict[str, float]
    wall_s: float | None
    when: str | None
    report: str | None
    config: dict[str, Any] | None
    config_source: str | None  # run.json (as given), validate-config (as validated), or None (not recorded)
    step_times: list[dict[str, Any]]
    code_version: str | None  # the code that trained: a user trainer's hash, else this tool's git commit
    study: dict[str, Any] | None = None  # {metric, goal, trials, succeeded, failed, best_trial, baseline, handed_on}
    gate: dict[str, Any] | None = None   # {passed, missed, lines}
    tool_version: str | None = None     # this tool's git commit, when code_version is a user trainer's hash
    cost: dict[str, Any] | None = None  # jobs.run_records.run_cost: a Vertex run's CustomJobs, or a local run's estimate
    #: a failed run's cause as the console said it last: the failing replica's error line, then its hint
    cause: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)



def _unreadable(path: str, why: str) -> Run:
    """A run folder whose records cannot be read back: listed with its path and the reason, never a traceback."""
    name = os.path.basename(path.rstrip("/"))
    when = dt.datetime.fromtimestamp(os.path.getmtime(path)).astimezone().isoformat(timespec="seconds")
    archive = ARCHIVE_RE.match(name)
    return Run(name=name, path=path, job=None, status="unreadable", note=f"{path}: {why}",
               archive_of=archive.group("base") if archive else None, steps=None, total_steps=None, metrics={},
               wall_s=None, when=when, report=None, config=None, config_source=None, step_times=[], code_version=None)


def read_run(path: str) -> Run:
    """Everything the records say about the run in ``path`` (see the module docstring); a run whose records hold
    a field of the wrong type is ``unreadable``, with its path and the field."""
    path = os.path.abspath(path)
    record, why = read_record_strictly(path, records.RUN_RECORD)
    # each record read once: checked here, then read back from these by _read_run
    docs = {}
    for name in (records.TUNING_RECORD, records.GATE_RECORD, records.STEPS_RECORD):
        docs[name], broken = read_record_strictly(path, name)
        why = why or broken
    why = why or record_problem(record)
    for name, doc in docs.items():
        why = why or type_problem(doc, {**NESTED_TYPES, "steps": list, "running": list}, f"{name}: ")
    why = why or figure_problem(docs[records.TUNING_RECORD], f"{records.TUNING_RECORD}: ")
    if why:
        return _unreadable(path, why)
    try:
        return _read_run(path, record, docs)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:  # a shape no check above knows
        return _unreadable(path, f"a record holds a field of an unexpected type ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:120]})")


def _read_run(path: str, record: dict[str, Any], docs: dict[str, dict[str, Any]]) -> Run:
    """The run in ``path`` from its ``run.json`` (``record``) and the study's, the gate's and the steps' records
    (``docs``, by name, as :func:`read_run` read them)."""
    name = os.path.basename(path.rstrip("/"))
    summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
    steps_record = docs[records.STEPS_RECORD]
    logs = _logs(path)
    log_started = parse_time(LOG_RE.match(logs[-1]).group(1)) if logs else None
    finished_at = parse_time(record.get("finished"))
    succeeded = record.get("status") == "succeeded"
    # a finished folder run again later (more steps: an unfinished second attempt) is as that attempt left it
    later_attempt = bool(succeeded and log_started and finished_at and log_started > finished_at)
    status, note, cause = _status(path, record, steps_record, logs, later_attempt)
    gate = gate_outcome(path, record if succeeded and not later_attempt else {}, steps_record, log_started,
                        docs[records.GATE_RECORD])
    if gate and not gate["passed"] and status != "running":
        status, note = "failed", f"the gate refused the model: {gate['missed'] or 'see gate.json'}"

    config = record.get("config") if isinstance(record.get("config"), dict) and not later_attempt else None
    source = "run.json" if config else None
    if config is None:
        config = validated_config(path)
        source = "validate-config" if config else None
    steps, wall, when, step_times, metrics = _progress(path, record, summary, steps_record, logs, log_started,
                                                       finished_at, status == "finished")
    training_cfg = (config or {}).get("training") if isinstance((config or {}).get("training"), dict) else {}
    total = training_cfg.get("steps") if isinstance(training_cfg.get("steps"), int) and training_cfg.get("steps") else None
    if total is None and status == "finished":
        total = steps
    if when is None:
        when = dt.datetime.fromtimestamp(os.path.getmtime(path)).astimezone().isoformat(timespec="seconds")
    # the folder's own report (run.json names it at the path the run had: a --fresh copy was renamed since)
    report = os.path.join(path, records.REPORT_PAGE) if os.path.exists(os.path.join(path, records.REPORT_PAGE)) else None
    code = summary.get("code_version") if isinstance(summary.get("code_version"), dict) else {}
    trainer = summary.get("trainer_version") if isinstance(summary.get("trainer_version"), dict) else {}
    archive = ARCHIVE_RE.match(name)
    return Run(name=name, path=path, job=(config or {}).get("name") or summary.get("name"), status=status, note=note,
               archive_of=archive.group("base") if archive else None, steps=steps, total_steps=total,
               metrics=metrics, wall_s=wall, when=when, report=report, config=config, config_source=source,
               step_times=[s for s in step_times if isinstance(s, dict)],
               code_version=trainer_code(trainer) or code.get("text"),
               tool_version=code.get("text") if trainer_code(trainer) else None,
               study=study_outcome(path, record if status == "finished" else {}, docs[records.TUNING_RECORD]), gate=gate,
               cost=_cost(path, summary if status == "finished" else {}),
               cause=cause if status == "failed" else [])


def _cost(path: str, summary: dict[str, Any]) -> dict[str, Any] | None:
    """What the run cost (``jobs.run_records.run_cost``): its Vertex CustomJobs' (``vertex_jobs.json``), else the estimate a
    finished local run recorded."""
    attempts = records.read_at(path, records.VERTEX_JOBS_RECORD).get("attempts")
    if isinstance(attempts, list) and attempts:
        return run_cost.vertex_estimate(attempts)
    return summary.get("cost") if isinstance(summary.get("cost"), dict) else None


def _status(path: str, record: dict[str, Any], steps_record: dict[str, Any], logs: list[str],
            later_attempt: bool) -> tuple[str, str, list[str]]:
    """``(status, note, cause)`` of the run in ``path`` before the gate's verdict is read: live (its lock is held),
    finished (``run.json``, unless a later attempt started since), or as its last log ended (:func:`_ending`)."""
    cause: list[str] = []
    if lock_held(path):
        status, note = "running", "a live run holds this folder"
    elif record.get("status") == "succeeded" and not later_attempt:
        status, note = "finished", ""
    elif logs:
        status, note, cause = _ending(os.path.join(path, "logs", logs[-1]))
        if later_attempt:
            note += f" (an earlier run here finished {record.get('finished')})"
    else:
        status, note = "unfinished", "no log: it stopped before its first pipeline step"
    running = steps_record.get("running") or []
    if status != "finished" and running:
        note = f"in step {', '.join(running)}: {note}" if status != "running" else f"step {', '.join(running)} running"
    return status, note, cause


def _progress(path: str, record: dict[str, Any], summary: dict[str, Any], steps_record: dict[str, Any],
              logs: list[str], log_started: dt.datetime | None, finished_at: dt.datetime | None, finished: bool
              ) -> tuple[int | None, float | None, str | None, list[Any], dict[str, float]]:
    """``(steps, wall seconds, when, step times, metrics)``: a finished run's from its ``run.json``; another's
    from what its last attempt left (``metrics.json``, the last checkpoint, ``steps.json``, its logs' times)."""
    metrics_json = records.read_at(path, records.METRICS_RECORD)
    attempts = _attempt_seconds(path, logs)
    if finished:
        training = summary.get("training") if isinstance(summary.get("training"), dict) else {}
        steps = training.get("steps") if isinstance(training.get("steps"), int) else None
        wall = _finished_wall(attempts, number(summary.get("elapsed_s")), finished_at)
        if (summary.get("tuning") or {}).get("trials") and not isinstance(summary.get("model_scalars"), dict):
            summary = {**summary, "model_scalars": tuned_scalars(summary)}
        return steps, wall, record.get("finished"), record.get("steps") or [], run_metrics(summary, metrics_json)
    last = last_checkpoint(os.path.join(path, "checkpoints"))
    steps = metrics_json.get("steps") if isinstance(metrics_json.get("steps"), int) else (last[1] if last else None)
    wall = round(sum(s for _, s in attempts), 1) if attempts else None
    when = log_started.isoformat(timespec="seconds") if log_started else None
    step_times = steps_record.get("steps") or []
    verified = any(x.get("name") == "verify-model" and x.get("status") == "SUCCESS"
                   for x in step_times if isinstance(x, dict))  # this attempt's own verification
    metrics = run_metrics({"verification": records.read_at(path, records.VERIFICATION_RECORD)} if verified else {},
                          metrics_json)
    return steps, wall, when, step_times, metrics


def _attempt_seconds(path: str, logs: list[str]) -> list[tuple[dt.datetime, float]]:
    """(start, seconds) of every attempt of the run in this folder (a run resumed, rerun after a failure or with
    another config since its ``--fresh`` start), oldest first: each ``logs/run-<start>.log`` lasted from the
    time in its name to its last write."""
    out = []
    for name in logs:
        started = parse_time(LOG_RE.match(name).group(1))
        try:
            ended = os.path.getmtime(os.path.join(path, "logs", name))
        except OSError:
            continue
        if started is not None:
            out.append((started, max(0.0, ended - started.timestamp())))
    return out


def _finished_wall(attempts: list[tuple[dt.datetime, float]], elapsed: float | None,
                   finished: dt.datetime | None) -> float | None:
    """A finished run's wall time: the attempt that finished (its own ``elapsed_s``) plus every attempt before it
    (a study interrupted and resumed, a gate that refused the model and a rerun with other bars)."""
    if not attempts or finished is None:
        return elapsed
    done = [a for a in attempts if a[0] <= finished]
    if not done:
        return elapsed
    earlier = sum(seconds for _, seconds in done[:-1])
    return round(earlier + (elapsed if elapsed is not None else done[-1][1]), 1)


def list_runs(root: str) -> list[Run]:
    """Every run folder directly under ``root``, newest first. Raises UsageError for a bad root."""
    if not os.path.isdir(root):
        raise UsageError(str(problem("--root", f"{root} is not a folder; give the folder that holds the run folders "
                                               "(the parent of output.base_dir)", [DEFAULT_ROOT])))
    if is_run_folder(root) and os.path.exists(os.path.join(root, records.RUN_RECORD)):
        parent = os.path.dirname(os.path.abspath(root)) or "/"
        raise UsageError(str(problem("--root", f"{root} is a run folder itself; give the folder that holds runs",
                                     [parent])))
    found = [read_run(os.path.join(root, n)) for n in sorted(os.listdir(root))
             if not n.startswith(".") and not os.path.islink(os.path.join(root, n))
             and is_run_folder(os.path.join(root, n))]
    return sorted(found, key=_newest_first_key, reverse=True)


def _newest_first_key(run: Run) -> float:
    when = parse_time(run.when)
    return when.timestamp() if when else float("-inf")


def resolve(root: str, which: str, argument: str) -> Run:
    """``which`` as a run: a folder name under ``root`` or a path. Raises UsageError naming the runs there."""
    candidates = [which, os.path.join(root, which)] if not os.path.isabs(which) else [which]
    for path in candidates:
        if os.path.isdir(path) and os.path.abspath(path) != os.path.abspath(root):
            if not is_run_folder(path):
                raise UsageError(str(problem(argument, f"{path} is not a run folder (no run.json, steps.json, logs, "
                                                       "checkpoints or run lock)", _names(root))))
            return read_run(path)
    near = difflib.get_close_matches(which, _run_names(root), n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise UsageError(str(problem(argument, f"no run named {which!r} under {root}{hint}", _names(root))))


def _run_names(root: str) -> list[str]:
    """The run folders' names under ``root``, newest first ([] when it is no folder of runs)."""
    try:
        return [r.name for r in list_runs(root)]
    except UsageError:
        return []


def _names(root: str) -> list[str]:
    names = _run_names(root)
    return names[:8] + ([f"... {len(names) - 8} more (runs list)"] if len(names) > 8 else []) or \
        [f"(none: no run folder under {root})"]
