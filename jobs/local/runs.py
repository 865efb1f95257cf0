"""One local run per output folder: the run lock, what made the run, the completion record, ``--fresh``.

Behaviour of ``python pipelines/run.py`` on an output folder (``output.base_dir``), decided here before the
run's first step (so nothing in the folder, ``data/`` included, is written before the folder is known to be
this job's):

* **finished before, same making** -> nothing runs: the run says the job is complete, prints that run's
  summary (from ``run.json``, written when a run succeeds) and exits 0. ``--fresh`` is one flag away.
* **finished before, made of another config or other trainer code** -> refused (exit 2) in one line naming
  what changed and the two ways on: ``--fresh`` (the finished run is kept whole as ``<base>.<time>``) or another
  ``output.base_dir``. A finished model is never overwritten, never deleted, without ``--fresh``.
* **unfinished** (killed, interrupted, failed) -> the run resumes from the last complete checkpoint (the
  checkpoint-resume feature) when it is made of the same config and code; made of another, it is refused the
  same way rather than resumed into a mix, unless the earlier attempt left nothing to mix with (no checkpoint,
  no model, no study), in which case this run simply starts there, or only the ``serving`` section changed
  (:data:`AFTER_TRAINING`: a gate that refused the model, rerun with other bars) or the built-in trainer's
  ``training.steps`` (:data:`BUILTIN_RESUMABLE`: the same model trained on to the new count).
* ``--fresh`` -> the existing folder is renamed to ``<base>.<YYYYmmdd-HHMMSS>`` (kept whole, with a
  ``.fresh-copy.json`` saying so: ``runs prune`` removes only such copies) and the run starts from step 0 in
  an empty ``<base>``.
* **another live run holds the folder** -> refused at once with one line naming it (pid, start time,
  command), or, with ``--wait``, waits for it. The lock is ``fcntl.flock`` on ``<base>/.run.lock``: the
  kernel drops it when its holder dies, so a run killed with ``kill -9`` never blocks the next one. Why
  not a pid file: a pid file outlives a kill -9 and then needs pid-reuse guessing; flock needs none.

What made a run (:func:`making`) is written to ``<base>/provenance.json`` when the run starts: the resolved
config (the image is its ``container.image_uri``), the user trainer's code hash
(``jobs.images.user.trainer_version``) and the image; a folder written before that record existed is judged
by its ``run.json``. Sections that say how a job is checked, planned or scheduled (:data:`NOT_WHAT_IT_MAKES`)
are not compared: changing a timeout does not change the model.

Local folders only: a ``gs://`` base is a Vertex run's, and Vertex owns its job's lifecycle.
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
import sys
import time
from typing import Any

from jobs import gate_spec, provenance, records, trial_files, tuning_rules
from trainers import fileio
from trainers.config import BUILTIN_COMMAND
from trainers.fileio import open_regular
from trainers.paths import join

LOCK_NAME = ".run.lock"
#: run.py's exit status when another live run holds the output folder (EX_TEMPFAIL: try again later).
EXIT_BUSY = 75


class FolderBusy(Exception):
    """Another live run holds the output folder; ``str(exc)`` is one line naming it."""


class NotThisJob(Exception):
    """The folder holds a run made of another config or code (or a lock that is not ours): ``str(exc)`` is the
    one line to print (``error: ...``, exit status 2)."""


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


class RunLock:
    """Exclusive hold on an output folder for the life of one run (see the module docstring)."""

    def __init__(self, base: str):
        self.base = base
        self.path = os.path.join(base, LOCK_NAME)
        self._fd: int | None = None
        self._info: dict[str, Any] = {}

    def holder(self) -> dict[str, Any]:
        try:
            with open_regular(self.path, self.path, limit=1 << 20) as f:
                return json.loads(f.read() or "{}")
        except (OSError, ValueError):  # NotARegularFile is a ValueError: a lock that is a pipe holds nothing
            return {}

    def describe_holder(self) -> str:
        h = self.holder()
        if not h:
            return "another run"
        return f"run pid {h.get('pid')} started {h.get('started')} ({h.get('command', '?')})"

    def acquire(self, wait_s: float = 0.0, poll_s: float = 0.5, log=print) -> "RunLock":
        """Take the lock; wait up to ``wait_s`` seconds for a live holder (0: refuse at once)."""
        os.makedirs(self.base, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:  # a folder (or a dangling link) where the lock file goes: not this product's lock
            what = "a folder" if os.path.isdir(self.path) else f"not a lock file ({exc.strerror or exc})"
            raise NotThisJob(f"output.base_dir: {self.path} is {what}; the run lock is a plain file there: remove "
                             f"it (rmdir {self.path}), or run elsewhere with --set output.base_dir=OTHER_DIR") from None
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise FolderBusy(
                        f"output.base_dir: {self.base} is in use by {self.describe_holder()}; wait for it "
                        "(--wait), or run elsewhere with --set output.base_dir=OTHER_DIR") from None
                if not told:
                    log(f"waiting for {self.describe_holder()} to finish with {self.base}")
                    told = True
                time.sleep(poll_s)
        stop_leftovers(self.holder().get("children"), log)  # what a killed run left, before anything starts
        self._info = {"pid": os.getpid(), "started": _now(), "command": " ".join(["python"] + sys.argv),
                      "children": []}
        self._fd = fd
        self._write()
        RunLock.held = self
        return self

    #: the lock this process holds (its run's), for :func:`record_child`
    held: "RunLock | None" = None

    def _write(self) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(self._info).encode(), 0)

    def record_child(self, pid: int) -> None:
        """Note a process this run started (a pipeline step) in the lock, with its start time: a rerun after
        this run was killed stops it if it is still there (:func:`stop_leftovers`), though its parent-death
        signal (``jobs.local.lifeline``) should already have ended it."""
        from jobs.local.lifeline import start_time

        if self._fd is None:
            return
        self._info["children"] = [c for c in self._info["children"] if start_time(c["pid"]) == c["start"]]
        self._info["children"].append({"pid": pid, "start": start_time(pid)})
        self._write()

    def release(self) -> None:
        if RunLock.held is self:
            RunLock.held = None
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def record_child(pid: int) -> None:
    """:meth:`RunLock.record_child` on the lock this process holds (none held: nothing to record)."""
    if RunLock.held is not None:
        RunLock.held.record_child(pid)


def stop_leftovers(children: Any, log=print, grace_s: float = 5.0) -> list[int]:
    """Stop the processes a killed run recorded in its lock (``children``: ``[{"pid", "start"}]``) that are still
    the same processes (pid and start time): SIGTERM, SIGKILL after ``grace_s``; one line for those found.
    Returns their pids. A rerun calls it once it holds the lock, so no step of the old run runs beside the new."""
    import signal

    from jobs.local.lifeline import start_time

    alive = [c["pid"] for c in children or [] if isinstance(c, dict) and isinstance(c.get("pid"), int)
             and c["pid"] > 1 and c.get("start") is not None and start_time(c["pid"]) == c["start"]]
    if not alive:
        return []
    log(f"stopping {len(alive)} process(es) a killed run left in this folder: pid {', '.join(map(str, alive))}")
    starts = {pid: start_time(pid) for pid in alive}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in alive:
            if start_time(pid) == starts[pid]:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(start_time(p) == starts[p] for p in alive):
            time.sleep(0.05)
    return alive


def read_record(base: str) -> dict[str, Any]:
    """The record of the run that last finished in ``base`` (``run.json``, ``jobs.records.read_run``)."""
    return records.read_run(base)


def write_record(base: str, config_json: str, summary: dict[str, Any]) -> None:
    """Written (atomically) only when a run succeeded: what makes a later rerun a no-op. Top level:
    ``status``, ``finished``, ``config``, ``summary``, ``steps`` (each pipeline step's wall time),
    ``verification`` (what the verify step found: signature, input/output specs, predictions, latency),
    ``tuning`` (the study's record, ``tuning.json``: every trial and the best; {} without a ``tuning:`` section)
    and ``gate`` (the gate's record, ``gate.json``: each bar's line and the verdict; {} without a gate)."""
    records.write_at(base, records.RUN_RECORD, {
        "status": "succeeded", "finished": _now(), "config": json.loads(config_json), "summary": summary,
        "steps": summary.get("steps") or [], "verification": summary.get("verification") or {},
        "tuning": summary.get("tuning") or {}, "gate": summary.get("gate") or {}})


# -- what made a run, and whether a new run may go on in its folder ---------------------------------------
#: A job's sections that say how it is checked, planned or scheduled, never what it trains: not compared.
NOT_WHAT_IT_MAKES = ("validation", "placement", "budget", "scheduling")
#: The config's local paths, compared as absolute paths (``--runner docker`` makes them absolute).
LOCAL_PATHS = (("trainer", "source_dir"), ("data", "path"), ("data", "prepared_dir"), ("output", "base_dir"),
               ("serving", "sample_request"), ("serving", "eval_data"))
#: What an unfinished run of the built-in trainer may change and still resume: its checkpoint is the same model
#: at step N, trained on to the new count (the trainer refuses a count below N itself,
#: ``trainers.train.refuse_checkpoint_past_the_end``). A user's trainer is a black box: any change is refused.
BUILTIN_RESUMABLE = ("training.steps",)
#: What an unfinished run may change and still resume, for any trainer: the steps after training (verify, the
#: gate, the registry request) judge and describe the model, they do not make it; a gate that refused the model
#: and a rerun with other bars is the common case.
AFTER_TRAINING = ("serving.",)
#: what a --fresh copy holds to say it is one (``runs prune`` removes only folders holding it)
COPY_RECORD = ".fresh-copy.json"


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay whole: a config's lists are values)."""
    if not isinstance(doc, dict):
        return {prefix: doc}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        out.update(flatten(value, dotted) if isinstance(value, dict) and value else {dotted: value})
    return out


def config_diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``[{"key", "a", "b"}]`` for every dotted key whose value differs (missing on one side: None)."""
    fa, fb = flatten(a or {}), flatten(b or {})
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """A config as two runs of one folder are compared: without :data:`NOT_WHAT_IT_MAKES`, local paths absolute."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items() if k not in NOT_WHAT_IT_MAKES}
    for section, key in LOCAL_PATHS:
        value = out.get(section, {}).get(key) if isinstance(out.get(section), dict) else None
        if isinstance(value, str) and value and "://" not in value:
            out[section][key] = os.path.abspath(value)
    return out


def making(cfg) -> dict[str, Any]:
    """What makes a run of ``cfg`` (written to ``provenance.json`` when it starts): ``{"config", "image",
    "trainer_code": {"sha256", "files", "text"} | None, "written"}``. The trainer code's hash is a user
    trainer's (``jobs.images.user.trainer_version``); the built-in trainer is this tool's code."""
    from jobs.images.user import trainer_version

    config = json.loads(cfg.to_json())
    trainer = trainer_version(cfg)
    code = ({"sha256": trainer.get("content_sha256"), "files": trainer.get("files"), "text": trainer.get("text")}
            if trainer and trainer.get("content_sha256") else None)
    return {"config": config, "image": (config.get("container") or {}).get("image_uri") or None,
            "trainer_code": code, "written": _now()}


def _made_of(base: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """What made the run in ``base``: its ``provenance.json``; for a finished run written before that record
    existed, its ``run.json`` (config, and the trainer code's hash from the summary); None when neither says."""
    made = records.read_at(base, records.PROVENANCE_RECORD)
    if isinstance(made.get("config"), dict):
        return made
    if isinstance(record.get("config"), dict):
        summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
        trainer = summary.get("trainer_version") if isinstance(summary.get("trainer_version"), dict) else {}
        sha = trainer.get("content_sha256")
        return {"config": record["config"], "trainer_code": {"sha256": sha, "text": trainer.get("text")}
                if isinstance(sha, str) else None}
    return None


def _changes(before: dict[str, Any], now: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """What differs between two makings: ``(dotted key, phrase)`` each, config keys first, then the trainer code
    (key ``trainer code``); the dotted keys in ``ignore`` are not compared."""
    out = [(d["key"], f"{d['key']} {json.dumps(d['a'])} -> {json.dumps(d['b'])}")
           for d in config_diff(comparable(before["config"]), comparable(now["config"])) if d["key"] not in ignore]
    old, new = before.get("trainer_code") or {}, now.get("trainer_code") or {}
    if isinstance(old, dict) and isinstance(new, dict) and old.get("sha256") and new.get("sha256") \
            and old["sha256"] != new["sha256"]:
        where = (now["config"].get("trainer") or {}).get("source_dir")
        out.append(("trainer code", f"trainer code sha256 {str(old['sha256'])[:12]} -> {str(new['sha256'])[:12]}"
                    + (f" in {where}" if where else "")))
    return out


def _builtin(config: dict[str, Any]) -> bool:
    """Whether a config runs the built-in trainer (``trainers.config.JobConfig.user_trainer``, on the dict)."""
    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    container = config.get("container") if isinstance(config.get("container"), dict) else {}
    return not trainer.get("module") and list(container.get("command") or []) == list(BUILTIN_COMMAND)


def _has_training_state(base: str) -> bool:
    """Whether an unfinished run left something a new run would mix with: a checkpoint, a model, a study."""
    if os.path.exists(os.path.join(base, records.TUNING_RECORD)):
        return True
    folders = [os.path.join(base, n) for n in ("checkpoints", "model")]
    try:
        folders += [os.path.join(base, t, n) for t in os.listdir(base) if os.path.isdir(os.path.join(base, t))
                    for n in ("checkpoints", "model")]
    except OSError:
        pass
    return any(files for folder in folders for _, _, files in os.walk(folder))


def other_base_dir(base: str) -> str:
    """A folder beside ``base`` that does not exist yet (``<base>-2``, ...), as the user would type it."""
    n = 2
    while os.path.exists(f"{base}-{n}"):
        n += 1
    target = f"{base}-{n}"
    rel = os.path.relpath(target)
    return rel if not rel.startswith("..") else target


def check_folder(base: str, now: dict[str, Any], ignore: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """Whether a run made of ``now`` (:func:`making`) may go on in ``base``; call it holding the run lock, before
    anything is written there. Returns the finished run's record when that run is this one (nothing to do), None
    when the run may start or resume; raises :class:`NotThisJob` with the one line when the folder holds another
    job's run (finished, or unfinished with something to mix with). ``ignore``: dotted config keys not known yet
    (``--runner docker``'s image before its build), not compared."""
    if "://" in base or not os.path.isdir(base):
        return None
    record = read_record(base)
    finished = record.get("status") == "succeeded"
    if os.path.exists(os.path.join(base, records.RUN_RECORD)) and not finished:
        raise NotThisJob(
            f"output.base_dir: {base} holds a run record ({records.RUN_RECORD}) that cannot be read; nothing in the "
            f"folder was changed. {_ways_on(base)}")
    before = _made_of(base, record)
    if before is None:
        return None  # a new folder, or one no run of this version started in: it resumes as before
    changed = _changes(before, now, ignore)
    if not changed:
        return record if finished else None
    if not finished and not _has_training_state(base):
        return None  # the earlier attempt left no checkpoint, model or study: nothing to mix with
    if all(key.startswith(AFTER_TRAINING) for key, _ in changed):
        return None  # the same model, judged by other bars (a finished run too: its training is complete, only the
        #              steps after it run again: verify, gate, registration)
    if not finished and all(key.startswith(AFTER_TRAINING) or (key in BUILTIN_RESUMABLE and _builtin(now["config"]))
                            for key, _ in changed):
        return None  # the built-in trainer's trained on to the new count
    kind = "a finished" if finished else "an unfinished"
    shown = "; ".join(p for _, p in changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
    raise NotThisJob(
        f"output.base_dir: {base} holds {kind} run of another job ({shown}); nothing in it was changed. "
        f"{_ways_on(base)}")


def _ways_on(base: str) -> str:
    return (f"Add --fresh to start from step 0 (that run is kept whole as {os.path.basename(base)}.<time>), or run "
            f"elsewhere: --set output.base_dir={other_base_dir(base)}")


def write_making(base: str, made: dict[str, Any]) -> None:
    """Record what made the run starting in ``base`` (atomically), once :func:`check_folder` let it go on."""
    records.write_at(base, records.PROVENANCE_RECORD, made)


def archive(base: str) -> str | None:
    """``--fresh``: rename an existing, non-empty ``base`` aside (kept whole); returns where it went. The copy
    holds :data:`COPY_RECORD` (``{"copy_of", "made", "by"}``): what ``runs prune`` needs to know it is a copy,
    and not a run of the user's named like one. Written after the rename, into the copy: a failure between the
    two leaves a copy that prune keeps, never a live folder that prune would take for a copy."""
    if not os.path.isdir(base) or not [n for n in os.listdir(base) if n != LOCK_NAME]:
        return None
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = f"{base.rstrip('/')}.{stamp}"
    n = 1
    while os.path.exists(target):
        n += 1
        target = f"{base.rstrip('/')}.{stamp}-{n}"
    os.rename(base, target)
    fileio.write_json_atomic(os.path.join(target, COPY_RECORD), {
        "copy_of": os.path.basename(base.rstrip("/")), "copy": os.path.basename(target), "made": _now(),
        "by": "--fresh (jobs.local.runs.archive)"})
    return target


def copy_record(path: str) -> dict[str, Any]:
    """A folder's :data:`COPY_RECORD` ({} when it has none, or it is not an object)."""
    found = records.read_at(path, COPY_RECORD)
    return found if isinstance(found, dict) else {}


_STATE_RE = re.compile(r'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)


def last_checkpoint(checkpoint_dir: str) -> tuple[str, int] | None:
    """(path, step) of the newest complete checkpoint, read from CheckpointManager's state file.

    Plain text parsing on purpose: it runs in the CLI after Ctrl-C, where importing TensorFlow would add
    seconds to stopping."""
    try:
        with open(os.path.join(checkpoint_dir, "checkpoint")) as f:
            m = _STATE_RE.search(f.read())
    except OSError:
        return None
    if not m:
        return None
    name = m.group(1)
    step = re.search(r"-(\d+)$", name)
    path = name if os.path.isabs(name) else os.path.join(checkpoint_dir, name)
    return (path, int(step.group(1))) if step else None


# -- the steps' wall times (kfp.local logs each task's start and end) ----------------------------------
class StepTimer:
    """Records each pipeline task's wall time from kfp.local's own log records (``Executing task 'x'`` ...
    ``Task 'x' finished with status SUCCESS``, logged on the root logger), for the run's duration:
    ``steps`` is ``[{"name", "seconds", "status"}]`` in the order the tasks ended. A filter on the root
    logger, not a handler: kfp.local replaces the root logger's handlers while a pipeline runs.

    The one source of a step's duration: the console's ``✓ step (N s)`` line asks the active timer
    (:func:`step_seconds`) for the figure run.json keeps, rather than timing the line on its own clock.
    Each start and end also rewrites ``<record_dir>/steps.json`` (atomically): the report step, which runs
    inside the pipeline before run.json exists, and ``runs list`` of a run that never finished read it.
    ``record_dir`` defaults to the folder holding kfp.local's pipeline root (run.py's ``<base>``)."""

    _ANSI = re.compile(r"\x1b\[[0-9;]*m")
    _START = re.compile(r"^Executing task '([^']+)'")
    _END = re.compile(r"^Task '([^']+)' finished with status (\w+)")
    #: the timer of the pipeline running in this process (one at a time), for the console
    active: "StepTimer | None" = None

    def __init__(self, record_dir: str | None = None) -> None:
        import logging

        self.steps: list[dict[str, Any]] = []
        self.record_dir = record_dir
        self.started = _now()
        self._started: dict[str, float] = {}
        timer = self

        class _Filter(logging.Filter):
            def filter(self, record: logging.LogRecord) -> bool:
                timer.seen(record.getMessage(), record.created)
                return True

        self._filter = _Filter()

    def seen(self, message: str, at: float) -> None:
        text = self._ANSI.sub("", message)
        start, end = self._START.match(text), self._END.match(text)
        if start:
            self._started[start.group(1)] = at
            self._write()
        elif end and end.group(1) in self._started:
            self.steps.append({"name": end.group(1), "seconds": round(at - self._started.pop(end.group(1)), 2),
                               "status": end.group(2)})
            self._write()

    def seconds_of(self, name: str) -> float | None:
        """The recorded wall time of the last run of step ``name`` (None: not ended yet)."""
        return next((s["seconds"] for s in reversed(self.steps) if s["name"] == name), None)

    def _write(self) -> None:
        if not self.record_dir or "://" in self.record_dir:
            return
        try:
            fileio.write_json_atomic(os.path.join(self.record_dir, records.STEPS_RECORD), {
                "started": self.started, "steps": self.steps, "running": sorted(self._started)})
        except OSError:  # a record, never a reason for the run to fail
            pass

    def __enter__(self) -> "StepTimer":
        import logging

        if self.record_dir is None:
            self.record_dir = _pipeline_root_parent()
        logging.getLogger().addFilter(self._filter)
        StepTimer.active = self
        return self

    def __exit__(self, *exc) -> None:
        import logging

        logging.getLogger().removeFilter(self._filter)
        if StepTimer.active is self:
            StepTimer.active = None


def _pipeline_root_parent() -> str | None:
    """The folder holding kfp.local's pipeline root (``local.init(pipeline_root=<base>/pipeline_root)``)."""
    try:
        from kfp.local import config

        root = config.LocalExecutionConfig.instance.pipeline_root
    except Exception:  # kfp.local not initialised: nothing to write beside
        return None
    return os.path.dirname(os.path.abspath(root)) if root and "://" not in root else None


def step_seconds(name: str) -> float | None:
    """Step ``name``'s wall time as the active :class:`StepTimer` recorded it (None without one)."""
    timer = StepTimer.active
    return timer.seconds_of(name) if timer is not None else None


# -- the run's summary (printed at the end, kept in run.json, printed again by a rerun) -----------------
def run_summary(cfg, elapsed_s: float, log_file: str | None = None, steps: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    """What the run did, from its records (``jobs.records``). A tuned run trained in its trials' folders: its
    ``dirs`` and ``training`` figures are those of the trial whose model was verified (the study's best)."""
    from jobs.images.user import trainer_version
    from trainers.cluster import output_dirs
    from trainers.config import resolved_base_dir

    base = resolved_base_dir(cfg)
    started = dt.datetime.now().astimezone() - dt.timedelta(seconds=elapsed_s)
    verification = {k: v for k, v in records.read_verification(cfg).items() if k != "gallery"}
    tuning = records.read_tuning(cfg)
    trial = tuning_rules.verified_trial(tuning, verification.get("model_dir") or "") if tuning else None
    upload = join(base, records.UPLOAD_REQUEST_RECORD)
    extra: dict[str, Any] = {"upload_request": upload} if os.path.exists(upload) else {}
    trainer = trainer_version(cfg)
    if trainer:
        extra["trainer_version"] = trainer
    if trial:  # the model that went on is a trial's: its TensorBoard scalars are the run's (runs list, compare)
        from jobs.tensorboard import last_values, read_scalars

        extra["model_scalars"] = last_values(read_scalars(trial_files.trial_dirs(base, trial)["logs"]))
    return {**extra, "name": cfg.name, "elapsed_s": round(elapsed_s, 1), "started": started.isoformat(timespec="seconds"),
            "code_version": provenance.code_version(),
            "dirs": trial_files.trial_dirs(base, trial) if trial else output_dirs(None, base),
            "pipeline_root": join(base, "pipeline_root"), "steps": list(steps or []),
            "training": trial_files.read_trial_metrics(base, trial) if trial else records.read_metrics(cfg),
            "trainer": records.read_training(cfg), "verification": verification,
            "evaluation": records.read_evaluation(cfg), "tuning": tuning,
            "verified_trial": str(trial.get("id")) if trial else None, "gate": records.read_gate(cfg),
            "log_file": log_file, "report": join(base, records.REPORT_PAGE)}


def _num(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def _training_line(t: dict[str, Any], trainer: dict[str, Any]) -> str:
    steps = t.get("steps")
    if not isinstance(steps, int):
        if trainer:  # a user's trainer: what ran and the last value of every scalar it wrote
            scalars = trainer.get("scalars") or {}
            shown = ", ".join(f"{k} {_num(v, '.4g')}" for k, v in list(scalars.items())[:4])
            if not shown:  # what it can show, and how to get curves (one wording: jobs.tensorboard)
                from jobs.tensorboard import CURVES_HOW

                shown = ("no figures: the trainer wrote no TensorBoard scalars to AIP_TENSORBOARD_LOG_DIR (its own lines "
                         f"are in the log); {CURVES_HOW}")
            else:
                shown = f"final {shown}"
            return (f"{trainer.get('trainer', '?')}: {sum(trainer.get('replica_counts') or [])} replicas, "
                    f"{trainer.get('attempts', '?')} attempt(s), {_num(trainer.get('seconds'), '.0f')} s; {shown}")
        return "no training metrics were written (metrics.json missing)"
    resumed = t.get("resumed_from_step") if isinstance(t.get("resumed_from_step"), int) else 0
    job = (f"{t.get('replicas', '?')} replicas ({t.get('strategy', '?')}), "
           f"global batch {t.get('global_batch_size', '?')}")
    if steps - resumed <= 0:
        return f"0 steps this run: the checkpoint was already at step {steps} (nothing left to train); {job}"
    since = f" (resumed from step {resumed})" if resumed else ""
    line = (f"{steps} steps{since}, {job}, final train loss {_num(t.get('train_loss'), '.4f')}, "
            f"train accuracy {_num(t.get('train_accuracy'), '.3f')}")
    if t.get("val_accuracy") is not None:  # the chief's last validation pass
        line += (f"; validation accuracy {_num(t.get('val_accuracy'), '.3f')}, loss {_num(t.get('val_loss'), '.4f')} "
                 f"at step {t.get('val_step', '?')}")
    return line


def _trained_line(s: dict[str, Any], t: dict[str, Any]) -> str:
    """The training line; a tuned run's is the verified trial's (its ``metrics.json``; a user trainer writes none)."""
    trainer = s.get("trainer") if isinstance(s.get("trainer"), dict) else {}
    trial = s.get("verified_trial")
    if trial is None:
        return _training_line(t, trainer)
    which = ("the baseline (the job as it stands, run beside the study)" if str(trial) == tuning_rules.BASELINE
             else f"trial {trial}")
    if not isinstance(t.get("steps"), int) and not trainer:
        return (f"{which} (the verified model's; every trial under study below): no metrics.json (a user "
                "trainer's figures are its TensorBoard scalars and the metric it reported)")
    return f"{which}: {_training_line(t, trainer)}"


def _verification_line(v: dict[str, Any]) -> str:
    if not v:
        return "none recorded"
    latency = v.get("latency_ms") or {}
    line = (f"{v.get('signature', '?')}({', '.join(v.get('inputs') or {})}) ran on {v.get('instances', '?')} "
            f"instances ({v.get('input_source', '?')}), {_num(latency.get('median'), '.1f')} ms median, in a process "
            "that never trained")
    if "accuracy" in v:  # a classifier's held-out figures (n/a when missing)
        line += (f"; accuracy {_num(v.get('accuracy'), '.3f')}, loss {_num(v.get('loss'), '.4f')} on "
                 f"{v.get('examples', '?')} {v.get('split', '')} examples")
    return line + eval_text(v.get("eval"))


def eval_text(e: Any) -> str:
    """The held-out verdict on ``serving.eval_data`` for the summary line ("" without one)."""
    if not isinstance(e, dict) or not e.get("task"):
        return ""
    if e["task"] == "regression":
        return (f"; on {e.get('examples', '?')} held-out examples (serving.eval_data): RMSE {_num(e.get('rmse'), '.4g')}, "
                f"MAE {_num(e.get('mae'), '.4g')} (predicting the mean: RMSE {_num(e.get('baseline_rmse'), '.4g')})")
    return (f"; on {e.get('examples', '?')} held-out examples (serving.eval_data): accuracy "
            f"{_num(e.get('accuracy'), '.3f')} (the most common class: {_num(e.get('baseline_accuracy'), '.3f')})")


def study_line(study: dict[str, Any], verified: Any = None) -> str:
    """The study in one line: trials run and how they ended, the best trial's id, values and metric, and the
    trial the verified model came from when it is not the best."""
    n = tuning_rules.study_counts(study)
    ended = f"{n['succeeded']} succeeded" + (f", {n['failed']} failed" if n["failed"] else "") + (
        f", {n['other']} stopped or running" if n["other"] else "")
    wall = f" in {_num(study.get('seconds'), '.0f')} s" if study.get("seconds") is not None else ""
    line = f"{n['trials']} trial(s){wall} ({ended})"
    best = tuning_rules.best_trial(study)
    if not best:
        return line + "; no trial succeeded"
    line += (f"; best trial {best.get('id')}: {study.get('metric', 'metric')} {tuning_rules.format_value(best.get('metric'))}"
             f" ({study.get('goal', '?')}) with {tuning_rules.format_parameters(best.get('parameters') or {})}")
    handed = study.get(tuning_rules.HANDED_ON) if isinstance(study.get(tuning_rules.HANDED_ON), dict) else None
    if tuning_rules.baseline_of(study) is not None and handed and handed.get("reason"):
        line += f"; {handed['reason']}"  # the baseline beside the study: which model went on, and why
    if verified is not None and str(verified) not in (str(best.get("id")), str((handed or {}).get("id"))):
        line += f"; the verified model is {'the baseline' if str(verified) == tuning_rules.BASELINE else 'trial ' + str(verified)}'s"
    return line


def gate_line(gate: dict[str, Any]) -> str:
    """The gate's verdict in one line: passed (with every bar's line) or the bar it missed."""
    if gate.get("passed"):
        lines = [str(x) for x in gate.get("lines") or []]
        return f"passed ({len(lines)} bar(s)): " + "; ".join(lines) if lines else "passed (no bar set)"
    return f"missed: {gate_spec.gate_missed_bar(gate) or 'see gate.json'}; the model is not registered"


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The console summary; every field may be missing or null (an old or partial record)."""
    dirs, t, v = s.get("dirs") or {}, s.get("training") or {}, s.get("verification") or {}
    lines = ["=" * 72, f"pipeline {s.get('name', '?')} finished in {_num(s.get('elapsed_s'), '.0f')} s",
             f"  model (SavedModel)  {dirs.get('model', 'n/a')}",
             f"  checkpoints         {dirs.get('checkpoints', 'n/a')}",
             f"  TensorBoard logs    {dirs.get('logs', 'n/a')}    (tensorboard --logdir {dirs.get('logs', '.')})",
             f"  pipeline artifacts  {s.get('pipeline_root', 'n/a')}",
             *([f"  run report          {s['report']}"] if s.get("report") else []),
             *([f"  registry request    {s['upload_request']}    (the Model Registry models:upload request)"]
               if s.get("upload_request") else []),
             *([f"  full log            {s['log_file']}"] if s.get("log_file") else []),
             f"  training            {_trained_line(s, t)}"]
    e = s.get("evaluation") if isinstance(s.get("evaluation"), dict) else {}
    if e:
        evaluated = len(e["history"]) if isinstance(e.get("history"), list) else 0
        lines.append(f"  evaluator           accuracy {_num(e.get('accuracy'), '.3f')}, loss {_num(e.get('loss'), '.4f')} "
                     f"at step {e.get('step', '?')} on {e.get('examples', '?')} validation examples "
                     f"({evaluated} checkpoint(s) evaluated; scalars in <logs>/validation)")
    lines.append(f"  verification        {_verification_line(v)}")
    study = s.get("tuning") if isinstance(s.get("tuning"), dict) else {}
    if study.get("trials"):
        lines.append(f"  study               {study_line(study, s.get('verified_trial'))}")
    gate = s.get("gate") if isinstance(s.get("gate"), dict) else {}
    if gate:
        lines.append(f"  gate                {gate_line(gate)}")
    steps = s.get("steps") or []
    if steps:
        lines.append("  steps               " + ", ".join(f"{x.get('name')} {_num(x.get('seconds'), '.1f')} s" for x in steps))
    code = s.get("code_version") if isinstance(s.get("code_version"), dict) else {}
    trainer = s.get("trainer_version") if isinstance(s.get("trainer_version"), dict) else {}
    if trainer.get("text"):
        lines.append(f"  trainer code        {trainer['text']}")
    if code.get("text"):
        lines.append(f"  {'tool code' if trainer.get('text') else 'code':<20}{code['text']}")
    return lines + ["=" * 72]
