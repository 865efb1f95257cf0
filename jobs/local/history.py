"""Run history: the local runs under an output root read back (shown by ``jobs.local.history_views``).

    python pipelines/run.py runs list [--root runs] [--json]
    python pipelines/run.py runs compare A B [--root runs] [--json]
    python pipelines/run.py runs prune [--keep N] [--older-than DAYS] [--dry-run] [--root runs]

(the command line: ``jobs.local.runs_cli``; ``prune``, the one command that deletes: ``jobs.local.prune``)

The one home of reading a run folder back as a row of history: the three commands share that one reader,
which decides a run's status from whatever records it left, and refuses a record of the wrong shape as
``unreadable`` (never a traceback). Everything comes from the records a run already leaves (``jobs.local.runs``), nothing new is written by a run for this:

* ``run.json`` (a run that succeeded): config, summary (metrics, wall time, report, code version), steps;
* ``steps.json`` (every run, from its first pipeline step): the steps' wall times so far and the one running;
* ``logs/run-<time>.log`` (every run that got past validation): when it started and how it ended: run.py's
  own ``interrupted ...`` line (Ctrl-C) or ``error: ...`` line (a failed step), or neither (killed, crashed);
* ``pipeline_root/<pipeline>-<time>/validate-config/executor_output.json``: the validated config of a run
  that never finished (``config_json``), ``checkpoints/checkpoint``: how far it trained, ``metrics.json``;
* ``.run.lock``: held while a run is live (``running``); ``prune`` takes it before removing a folder, so a
  live run is never removed, and a run cannot start in a folder while it is being removed;
* ``tuning.json`` and ``gate.json`` (``jobs.records``, which names every record): the study's trials and best trial, the gate's verdict.
  A gate that refused the model fails the run before run.json is written: its ``gate.json`` makes the run
  ``failed`` with the bar it missed as the note, whatever the log's last line says.

A run folder is a direct child of the root holding any of those; ``<base>.<YYYYmmdd-HHMMSS>[-n]`` is named like
a copy ``--fresh`` kept (``jobs.local.runs.archive``, which also writes ``.fresh-copy.json`` into it); ``prune``
removes only folders known to be such copies (``jobs.local.prune.copy_of``). A record that is there and cannot be
read back (not JSON, cut short, too big, too deep, a null or a field of the wrong type) makes the run
``unreadable``, never "no record" (:func:`read_record_strictly`). No TensorFlow, no kfp: a
listing takes well under a second.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import stat
from typing import Any

from jobs import gate_spec, records, tuning_rules
from jobs.local import runs
from jobs.local.runs import config_diff, flatten  # noqa: F401  (history's readers import them from here)
from trainers.errors import problem
from trainers.fileio import NotARegularFile, open_regular

PROG = "python pipelines/run.py runs"
DEFAULT_ROOT = "runs"
#: --fresh copies `runs prune` keeps per run folder when --keep is not given
DEFAULT_KEEP = 3
ARCHIVE_RE = re.compile(r"^(?P<base>.+)\.(?P<stamp>\d{8}-\d{6})(?:-(?P<n>\d+))?$")
LOG_RE = re.compile(r"^run-(\d{8}-\d{6})\.log$")
STAMP = "%Y%m%d-%H%M%S"
MARKERS = (records.RUN_RECORD, records.STEPS_RECORD, records.PROVENANCE_RECORD, runs.LOCK_NAME, records.METRICS_RECORD, records.TRAINING_RECORD, "checkpoints",
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
    lock = os.path.join(path, runs.LOCK_NAME)
    try:
        st = os.stat(lock)
    except OSError:
        return False
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        import fcntl

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


def _ending(log_path: str) -> tuple[str, str]:
    """How the run that wrote ``log_path`` ended, from run.py's own (unindented) last words (kfp.local colours
    the names in its failure line: the colour codes are dropped)."""
    for line in reversed([_ANSI.sub("", x) for x in _tail(log_path)]):
        if line.startswith("interrupted"):
            return "interrupted", line.split("; resume with:")[0]
        if line.startswith("error: "):
            return "failed", line[len("error: "):]
    return "unfinished", "stopped without a word (killed, or the machine went down); a rerun resumes it"


def validated_config(path: str) -> dict[str, Any] | None:
    """The validated config of the newest pipeline run in the folder (kfp.local's record of validate-config's
    outputs): the config as the steps got it, with the image the build step chose filled in."""
    root = os.path.join(path, "pipeline_root")
    try:
        attempts = sorted(os.listdir(root), key=lambda n: os.path.getmtime(os.path.join(root, n)), reverse=True)
    except OSError:
        return None
    for name in attempts:
        try:
            with open(os.path.join(root, name, "validate-config", "executor_output.json"), encoding="utf-8") as f:
                text = json.load(f)["parameterValues"]["config_json"]
            return json.loads(text)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            continue
    return None


def parse_time(text: Any) -> dt.datetime | None:
    """An ISO time from a record, or a log name's ``YYYYmmdd-HHMMSS`` (local time), as an aware datetime."""
    if not isinstance(text, str):
        return None
    try:
        when = dt.datetime.strptime(text, STAMP)
    except ValueError:
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    return when if when.tzinfo else when.astimezone()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _metrics(summary: dict[str, Any], metrics: dict[str, Any]) -> dict[str, float]:
    """The final figures, the same keys for every run: train_loss, train_accuracy, val_accuracy, val_loss
    (held out: the verify step's on the exported model, else the chief's or the evaluator's last pass),
    examples_per_second; a user trainer's last TensorBoard values under their series names."""
    training = summary.get("training") if isinstance(summary.get("training"), dict) else metrics
    verification = summary.get("verification") if isinstance(summary.get("verification"), dict) else {}
    evaluation = summary.get("evaluation") if isinstance(summary.get("evaluation"), dict) else {}
    out: dict[str, float | None] = {
        "train_loss": _number(training.get("train_loss")), "train_accuracy": _number(training.get("train_accuracy")),
        "val_accuracy": next((v for v in (_number(verification.get("accuracy")), _number(training.get("val_accuracy")),
                                          _number(evaluation.get("accuracy"))) if v is not None), None),
        "val_loss": next((v for v in (_number(verification.get("loss")), _number(training.get("val_loss")),
                                      _number(evaluation.get("loss"))) if v is not None), None),
        "examples_per_second": _number(training.get("examples_per_second")),
    }
    trainer = summary.get("trainer") if isinstance(summary.get("trainer"), dict) else {}
    from jobs.evaluation import figures

    out.update(figures(verification.get("eval")))  # serving.eval_data's verdict on the model that went on
    out.update(_study_metric(summary))
    scalars = summary.get("model_scalars") if isinstance(summary.get("model_scalars"), dict) else \
        trainer.get("scalars") if isinstance(trainer.get("scalars"), dict) else {}
    for name, value in scalars.items():
        if _number(value) is not None:
            out[str(name)] = _number(value)
    return {k: v for k, v in out.items() if v is not None}


def _study_metric(summary: dict[str, Any]) -> dict[str, float]:
    """A tuned run's study metric (its tag: ``val_rmse``) of the trial whose model went on (verified)."""
    study = summary.get("tuning") if isinstance(summary.get("tuning"), dict) else {}
    if not study.get("metric") or not isinstance(study.get("trials"), list):
        return {}
    verification = summary.get("verification") if isinstance(summary.get("verification"), dict) else {}
    verified = summary.get("verified_trial")
    trial = next((t for t in tuning_rules.study_runs(study) if verified is not None
                  and str(t.get("id")) == str(verified)), None) \
        or tuning_rules.verified_trial(study, str(verification.get("model_dir") or ""))
    value = _number((trial or {}).get("metric"))
    return {str(study["metric"]): value} if value is not None else {}


def _tuned_scalars(summary: dict[str, Any]) -> dict[str, float]:
    """The last TensorBoard values of a tuned run's verified trial (its logs folder: the summary's ``dirs``), for
    a record written before ``model_scalars`` was kept."""
    from jobs.tensorboard import last_values, read_scalars

    dirs = summary.get("dirs") if isinstance(summary.get("dirs"), dict) else {}
    logs = dirs.get("logs")
    return last_values(read_scalars(logs)) if isinstance(logs, str) and logs and "://" not in logs else {}


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

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _trainer_code(trainer: dict[str, Any]) -> str | None:
    """A user trainer's code in a few characters (``sha256 0a4a166fa39f``, with its git commit when in a repository),
    as ``jobs.images.user.trainer_version`` recorded it."""
    sha, commit = trainer.get("content_sha256"), trainer.get("git_commit")
    if not isinstance(sha, str) or not sha:
        return trainer.get("text") if isinstance(trainer.get("text"), str) else None
    text = f"sha256 {sha[:12]}"
    if isinstance(commit, str) and commit:
        text += f" (git {commit[:12]}{', changed' if trainer.get('git_dirty') else ''})"
    return text


#: run.json's fields and the types its readers rely on (a record edited by hand, or by another version, may
#: hold anything: such a run is listed as unreadable, never a traceback)
RECORD_TYPES = {"status": str, "finished": str, "config": dict, "summary": dict, "steps": list,
                "verification": dict, "tuning": dict, "gate": dict}
#: run.json's fields every record written by ``jobs.local.runs.write_record`` has (null or missing: unreadable)
RECORD_REQUIRED = ("status", "finished", "config", "summary")
#: a record's limits: bigger, or nested deeper, is no record a run wrote (listed as unreadable, never read whole)
MAX_RECORD_BYTES = 16 * 1024 * 1024
MAX_RECORD_DEPTH = 64


def _depth(doc: Any) -> int:
    """How deeply lists and objects nest in ``doc`` (iterative: a deep record must not exhaust the stack)."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        value, level = todo.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_RECORD_DEPTH:
                return level
            todo.extend((v, level + 1) for v in (value.values() if isinstance(value, dict) else value))
    return deepest


def read_record_strictly(path: str, name: str) -> tuple[dict[str, Any], str | None]:
    """The record ``name`` in the run folder ``path``: ``(record, None)``; ``({}, None)`` when there is none;
    ``({}, why)`` when a file is there and is not a record a run wrote (not a regular file, too big, not JSON,
    cut short, nested too deep, not an object). ``jobs.records.read_at`` reads a missing and a broken record
    alike as {}: a run's step may, but history must not show a broken record as "no record"."""
    where = os.path.join(path, name)
    try:
        st = os.stat(where)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{name}: cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return {}, f"{name}: not a regular file"
    if st.st_size > MAX_RECORD_BYTES:
        return {}, f"{name}: {st.st_size:,} bytes, more than a record holds ({MAX_RECORD_BYTES:,} at most)"
    try:
        with open(where, "rb") as f:
            text = f.read(MAX_RECORD_BYTES + 1).decode("utf-8")
        doc = json.loads(text)
    except OSError as exc:
        return {}, f"{name}: cannot be read ({exc.strerror or exc})"
    except UnicodeDecodeError:
        return {}, f"{name}: not UTF-8 text"
    except RecursionError:
        return {}, f"{name}: nested deeper than {MAX_RECORD_DEPTH} levels"
    except json.JSONDecodeError as exc:
        cut = "" if text.rstrip().endswith(("}", "]")) else ", cut short"
        return {}, f"{name}: not JSON ({exc.msg}: line {exc.lineno} column {exc.colno}{cut})"
    if not isinstance(doc, dict):
        return {}, f"{name}: a JSON {type(doc).__name__}, not an object"
    if _depth(doc) > MAX_RECORD_DEPTH:
        return {}, f"{name}: nested deeper than {MAX_RECORD_DEPTH} levels"
    return doc, None


def _short(value: Any) -> str:
    try:
        return json.dumps(value, default=str)[:40]
    except (ValueError, RecursionError):
        return type(value).__name__
SUMMARY_TYPES = {"name": str, "elapsed_s": (int, float), "training": dict, "trainer": dict, "verification": dict,
                 "evaluation": dict, "tuning": dict, "gate": dict, "steps": list, "code_version": dict, "dirs": dict,
                 "model_scalars": dict}
NESTED_TYPES = {"trials": list, "best_trial": dict, "bars": list, "lines": list, "scalars": dict, "eval": dict,
                "latency_ms": dict, "per_class": list, tuning_rules.BASELINE: dict, tuning_rules.HANDED_ON: dict}


def _type_problem(doc: dict[str, Any], types: dict[str, Any], where: str) -> str | None:
    for key, kind in types.items():
        value = doc.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind != bool):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            return f"{where}{key} is {type(value).__name__} {_short(value)}, not {names}"
    return None


def record_problem(record: dict[str, Any], name: str = records.RUN_RECORD) -> str | None:
    """Why a run record cannot be read back (the first field of a wrong type: ``run.json: finished is str
    "yesterday", not a time``), or None."""
    found = _type_problem(record, RECORD_TYPES, f"{name}: ")
    if found:
        return found
    if record:
        missing = [key for key in RECORD_REQUIRED if record.get(key) is None]
        if missing:
            return f"{name}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing or null"
        if record["status"] != "succeeded":
            return f"{name}: status is {_short(record['status'])}, not \"succeeded\" (the only status a run records)"
    if isinstance(record.get("finished"), str) and parse_time(record["finished"]) is None:
        return f"{name}: finished is {json.dumps(record['finished'])[:40]}, not a time (ISO 8601)"
    summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
    found = _type_problem(summary, SUMMARY_TYPES, f"{name}: summary.")
    if found:
        return found
    for where, doc in (("", record), ("summary.", summary)):
        for key in ("tuning", "gate", "verification", "trainer"):
            part = doc.get(key)
            if isinstance(part, dict):
                found = _type_problem(part, NESTED_TYPES, f"{name}: {where}{key}.")
                if found:
                    return found
    for where, items in (("steps", record.get("steps")), ("tuning.trials", (record.get("tuning") or {}).get("trials"))):
        bad = next((x for x in items or [] if not isinstance(x, dict)), None)
        if bad is not None:
            return f"{name}: {where} holds {type(bad).__name__} {_short(bad)}, not an object"
    return None


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
        why = why or _type_problem(doc, {**NESTED_TYPES, "steps": list, "running": list}, f"{name}: ")
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
    metrics_json = records.read_at(path, records.METRICS_RECORD)
    logs = _logs(path)
    last_log = os.path.join(path, "logs", logs[-1]) if logs else None
    log_started = parse_time(LOG_RE.match(logs[-1]).group(1)) if logs else None
    finished_at = parse_time(record.get("finished"))
    succeeded = record.get("status") == "succeeded"
    # a finished folder run again later (more steps: an unfinished second attempt) is as that attempt left it
    later_attempt = bool(succeeded and log_started and finished_at and log_started > finished_at)
    if lock_held(path):
        status, note = "running", "a live run holds this folder"
    elif succeeded and not later_attempt:
        status, note = "finished", ""
    elif last_log:
        status, note = _ending(last_log)
        if later_attempt:
            note += f" (an earlier run here finished {record.get('finished')})"
    else:
        status, note = "unfinished", "no log: it stopped before its first pipeline step"
    running = steps_record.get("running") or []
    if status != "finished" and running:
        note = f"in step {', '.join(running)}: {note}" if status != "running" else f"step {', '.join(running)} running"

    gate = _gate(path, record if succeeded and not later_attempt else {}, steps_record, log_started,
                 docs[records.GATE_RECORD])
    if gate and not gate["passed"] and status != "running":
        status, note = "failed", f"the gate refused the model: {gate['missed'] or 'see gate.json'}"

    config = record.get("config") if isinstance(record.get("config"), dict) and not later_attempt else None
    source = "run.json" if config else None
    if config is None:
        config = validated_config(path)
        source = "validate-config" if config else None
    attempts = _attempt_seconds(path, logs)
    if status == "finished":
        training = summary.get("training") if isinstance(summary.get("training"), dict) else {}
        steps = training.get("steps") if isinstance(training.get("steps"), int) else None
        wall = _finished_wall(attempts, _number(summary.get("elapsed_s")), finished_at)
        when = record.get("finished")
        step_times = record.get("steps") or []
        if (summary.get("tuning") or {}).get("trials") and not isinstance(summary.get("model_scalars"), dict):
            summary = {**summary, "model_scalars": _tuned_scalars(summary)}
        metrics = _metrics(summary, metrics_json)
    else:
        last = runs.last_checkpoint(os.path.join(path, "checkpoints"))
        steps = metrics_json.get("steps") if isinstance(metrics_json.get("steps"), int) else (last[1] if last else None)
        wall = round(sum(s for _, s in attempts), 1) if attempts else None
        when = log_started.isoformat(timespec="seconds") if log_started else None
        step_times = steps_record.get("steps") or []
        verified = any(x.get("name") == "verify-model" and x.get("status") == "SUCCESS"
                       for x in step_times if isinstance(x, dict))  # this attempt's own verification
        metrics = _metrics({"verification": records.read_at(path, records.VERIFICATION_RECORD)} if verified else {},
                           metrics_json)
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
               code_version=_trainer_code(trainer) or code.get("text"),
               tool_version=code.get("text") if _trainer_code(trainer) else None,
               study=_study(path, record if status == "finished" else {}, docs[records.TUNING_RECORD]), gate=gate)


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


def _study(path: str, record: dict[str, Any], folder_study: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The study's outcome: run.json's ``tuning`` for a finished run, else the folder's ``tuning.json``
    (``folder_study`` when it was read already)."""
    study = record.get("tuning") if isinstance(record.get("tuning"), dict) else None
    if not study:
        study = folder_study if folder_study is not None else records.read_at(path, records.TUNING_RECORD)
    if not study.get("trials"):
        return None
    best = tuning_rules.best_trial(study)
    handed = study.get(tuning_rules.HANDED_ON) if isinstance(study.get(tuning_rules.HANDED_ON), dict) else None
    return {"metric": study.get("metric"), "goal": study.get("goal"), **tuning_rules.study_counts(study),
            "best_trial": {k: best.get(k) for k in ("id", "parameters", "metric")} if best else None,
            "baseline": tuning_rules.baseline_metric(tuning_rules.baseline_of(study)),
            "handed_on": str(handed.get("id")) if handed else None}


def _gate(path: str, record: dict[str, Any], steps_record: dict[str, Any], log_started: dt.datetime | None,
          folder_gate: dict[str, Any]) -> dict[str, Any] | None:
    """The gate's verdict: run.json's ``gate`` for a finished run; else ``gate.json`` (``folder_gate``, as read)
    when this attempt's gate step wrote it (steps.json names the step; without steps.json, the file is newer than
    the attempt's log)."""
    gate = record.get("gate") if isinstance(record.get("gate"), dict) else None
    if not gate:
        where = os.path.join(path, records.GATE_RECORD)
        ran = any(isinstance(x, dict) and x.get("name") == "gate" for x in steps_record.get("steps") or [])
        try:
            newer = log_started is not None and os.path.getmtime(where) >= log_started.timestamp()
        except OSError:
            return None
        gate = folder_gate if ran or (not steps_record and newer) else None
    if not gate or "passed" not in gate:
        return None
    return {"passed": bool(gate["passed"]), "missed": gate_spec.gate_missed_bar(gate),
            "lines": [str(x) for x in gate.get("lines") or []]}


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
    raise UsageError(str(problem(argument, f"no run named {which!r} under {root}", _names(root))))


def _names(root: str) -> list[str]:
    try:
        names = [r.name for r in list_runs(root)]
    except UsageError:
        return ["(none: no run folder under " + root + ")"]
    return names[:8] + ([f"... {len(names) - 8} more (runs list)"] if len(names) > 8 else []) or \
        [f"(none: no run folder under {root})"]
