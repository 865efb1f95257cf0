"""One local run per output folder: what made the run, whether a new run may go on in its folder, the completion
record, ``--fresh``.

Behaviour of ``python pipelines/run.py`` on an output folder (``output.base_dir``), decided here before the
run's first step (so nothing in the folder, ``data/`` included, is written before the folder is known to be
this job's):

* **finished before, same making** -> nothing runs: the run says the job is complete, prints that run's
  summary (from ``run.json``, written when a run succeeds) and exits 0. ``--fresh`` is one flag away.
* **finished before, made of another config or other trainer code** -> refused (exit 2) in one line naming
  what changed (the config keys; the trainer's files changed, removed or added, by name: ``provenance.json`` keeps
  each file's SHA-256; a record written before that list is read, and the line says it cannot name files) and the
  two ways on: ``--fresh`` (the finished run is kept whole as ``<base>.<time>``) or another
  ``output.base_dir``. A finished model is never overwritten, never deleted, without ``--fresh``.
* **unfinished** (killed, interrupted, failed) -> the run resumes from the last complete checkpoint (the
  checkpoint-resume feature) when it is made of the same config and code; made of another, it is refused the
  same way rather than resumed into a mix, unless the earlier attempt left nothing to mix with (no checkpoint,
  no model, no study), in which case this run simply starts there, or only the ``serving`` section changed
  (:data:`AFTER_TRAINING`: a gate that refused the model, rerun with other bars) or the built-in trainer's
  ``training.steps`` (:data:`BUILTIN_RESUMABLE`: the same model trained on to the new count).
* **trainer files only added** (a notes file, a data file) change nothing that run was made from: it stands (or
  resumes), and one line names the files (:func:`added_code`). The trainer's files are those its image takes
  (``jobs.images.user_code.collect_code``: never this product's own job files, compiled pipelines, plans, runs), and
  with a user's trainer the fields only the built-in trainer reads (``training.*``...) are not compared.
* ``--fresh`` -> the existing folder is renamed to ``<base>.<YYYYmmdd-HHMMSS>`` (kept whole, with a
  ``.fresh-copy.json`` saying so: ``runs prune`` removes only such copies) and the run starts from step 0 in
  an empty ``<base>``.
* **another live run holds the folder** -> refused at once with one line naming it, or, with ``--wait``, waits
  for it (the run lock: ``jobs.local.run.lock``).

What made a run (:func:`making`) is written to ``<base>/provenance.json`` when the run starts: the resolved
config (the image is its ``container.image_uri``), the user trainer's code hash
(``jobs.images.user_code.trainer_version``) and the image; a folder written before that record existed is judged
by its ``run.json``. Sections that say how a job is checked, planned, scheduled or announced (:data:`NOT_WHAT_IT_MAKES`)
are not compared: changing a timeout does not change the model.

Local folders only: a ``gs://`` base is a Vertex run's, and Vertex owns its job's lifecycle.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import Any, Callable

from jobs.run_records import records
from jobs.rules.trainer_section import reads_nothing
from jobs.images.user_code import trainer_version
from jobs.local.run.lock import LOCK_NAME, NotThisJob, now_iso
from trainers import fileio, record_reader
from trainers.cluster import output_dirs
from jobfile.config import BUILTIN_COMMAND
from jobfile.regular_file import open_regular

def read_record(base: str) -> dict[str, Any]:
    """The record of the run that last finished in ``base`` (``run.json``, ``jobs.run_records.records.read_run``)."""
    return records.read_run(base)


def write_record(base: str, config_json: str, summary: dict[str, Any]) -> None:
    """Written (atomically) only when a run succeeded: what makes a later rerun a no-op. Top level:
    ``status``, ``finished``, ``config``, ``summary``, ``steps`` (each pipeline step's wall time),
    ``verification`` (what the verify step found: signature, input/output specs, predictions, latency),
    ``tuning`` (the study's record, ``tuning.json``: every trial and the best; {} without a ``tuning:`` section)
    and ``gate`` (the gate's record, ``gate.json``: each bar's line and the verdict; {} without a gate)."""
    records.write_at(base, records.RUN_RECORD, {
        "status": "succeeded", "finished": now_iso(), "config": json.loads(config_json), "summary": summary,
        "steps": summary.get("steps") or [], "verification": summary.get("verification") or {},
        "tuning": summary.get("tuning") or {}, "gate": summary.get("gate") or {}})


# -- what made a run, and whether a new run may go on in its folder ---------------------------------------
#: A job's sections that say how it is checked, planned or scheduled, never what it trains: not compared.
NOT_WHAT_IT_MAKES = ("validation", "placement", "budget", "scheduling", "notify")
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
#: provenance.json's fields and their types (``making``)
PROVENANCE_TYPES = {"config": dict, "image": str, "trainer_code": dict, "written": str}
#: a --fresh copy's record's fields (``archive``); ``runs prune`` needs ``copy`` and ``copy_of``
COPY_TYPES = {"copy_of": str, "copy": str, "made": str, "by": str}


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
    "trainer_code": {"sha256", "files", "file_sha256", "text"} | None, "written"}``. The trainer code's hash is a
    user trainer's (``jobs.images.user_code.trainer_version``: the files its image would hold, each with its own
    SHA-256, so a later refusal names the files that changed); the built-in trainer is this tool's code."""
    config = json.loads(cfg.to_json())
    trainer = trainer_version(cfg)
    code = ({"sha256": trainer.get("content_sha256"), "files": trainer.get("files"),
             "file_sha256": trainer.get("file_sha256"), "text": trainer.get("text")}
            if trainer and trainer.get("content_sha256") else None)
    return {"config": config, "image": (config.get("container") or {}).get("image_uri") or None,
            "trainer_code": code, "written": now_iso()}


def _made_of(base: str, record: dict[str, Any]) -> dict[str, Any] | None:
    """What made the run in ``base``: its ``provenance.json``; for a finished run written before that record
    existed, its ``run.json`` (config, and the trainer code's hash from the summary); None when neither says.
    The one reader of ``provenance.json``: one written before the per-file list (``trainer_code`` with
    ``sha256`` and a count of ``files`` only) is read as it is, and a refusal then says it cannot name files. A
    ``provenance.json`` that is there and damaged (THE reader, ``trainers.record_reader``) is :class:`NotThisJob`: a
    folder whose making cannot be read is never taken for a new one."""
    try:
        made = records.read_checked(base, records.PROVENANCE_RECORD, types=PROVENANCE_TYPES, required=("config",))
    except record_reader.Unreadable as exc:
        raise NotThisJob(f"output.base_dir: {base}: {exc}; nothing in the folder was changed. {_ways_on(base)}") from None
    if made is not None:
        return made
    if isinstance(record.get("config"), dict):
        summary = record.get("summary") if isinstance(record.get("summary"), dict) else {}
        trainer = summary.get("trainer_version") if isinstance(summary.get("trainer_version"), dict) else {}
        sha = trainer.get("content_sha256")
        return {"config": record["config"], "trainer_code": {"sha256": sha, "text": trainer.get("text")}
                if isinstance(sha, str) else None}
    return None


#: at most this many files named per kind (changed, removed, added) in a line
NAMED_FILES = 3


def code_difference(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any] | None:
    """How the trainer code of two makings differs: None when it does not (or either has no hash: the built-in
    trainer); else ``{"changed", "removed", "added"}`` (sorted paths relative to ``trainer.source_dir``), each
    None when the earlier record lists no files (written before the per-file list)."""
    old, new = before.get("trainer_code"), now.get("trainer_code")
    if not (isinstance(old, dict) and isinstance(new, dict) and old.get("sha256") and new.get("sha256")) \
            or old["sha256"] == new["sha256"]:
        return None
    a, b = old.get("file_sha256"), new.get("file_sha256")
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return {"changed": None, "removed": None, "added": None}
    return {"changed": sorted(k for k in a if k in b and a[k] != b[k]), "removed": sorted(k for k in a if k not in b),
            "added": sorted(k for k in b if k not in a)}


def _named(paths: list[str], what: str) -> str:
    more = f" and {len(paths) - NAMED_FILES} more" if len(paths) > NAMED_FILES else ""
    return f"{', '.join(paths[:NAMED_FILES])}{more} {what}"


def _code_phrase(before: dict[str, Any], now: dict[str, Any], diff: dict[str, Any]) -> str:
    where = (now["config"].get("trainer") or {}).get("source_dir")
    inside = f" in {where}" if where else ""
    if diff["changed"] is None:
        return (f"trainer code sha256 {str(before['trainer_code']['sha256'])[:12]} -> "
                f"{str(now['trainer_code']['sha256'])[:12]}{inside}; that run's record predates the list of its "
                "files, so which files differ cannot be named")
    parts = [_named(diff[kind], kind) for kind in ("changed", "removed", "added") if diff[kind]]
    return f"trainer code{inside}: {'; '.join(parts)}"


def _changes(before: dict[str, Any], now: dict[str, Any], ignore: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """What differs between two makings: ``(dotted key, phrase)`` each, config keys first, then the trainer code
    (key ``trainer code``: files changed or removed; files only added change nothing the run was made from,
    :func:`added_code`); the dotted keys in ``ignore`` are not compared."""
    out = [(d["key"], f"{d['key']} {json.dumps(d['a'])} -> {json.dumps(d['b'])}")
           for d in config_diff(comparable(before["config"]), comparable(now["config"])) if d["key"] not in ignore
           and not reads_nothing(d["key"], now["config"])]  # a user trainer's job: training.* etc. make nothing
    diff = code_difference(before, now)
    if diff and (diff["changed"] is None or diff["changed"] or diff["removed"]):
        out.append(("trainer code", _code_phrase(before, now, diff)))
    return out


def added_code(before: dict[str, Any], now: dict[str, Any]) -> str | None:
    """The line for trainer files added since the folder's run when none it was made from changed: that run stands
    (every file it ran from is there, unchanged), and the line names the files it never saw."""
    diff = code_difference(before, now)
    if not diff or diff["changed"] is None or diff["changed"] or diff["removed"] or not diff["added"]:
        return None
    return (f"trainer code: {_named(diff['added'], 'added')} since the run in this folder; none of the files it was "
            "made from changed, so it stands (an added file is in the image: if it changes what your trainer does, "
            "--fresh trains with it; if it is not code, list it in .dockerignore)")


def _builtin(config: dict[str, Any]) -> bool:
    """Whether a config runs the built-in trainer (``jobfile.config.JobConfig.user_trainer``, on the dict)."""
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


def _has_model(base: str) -> bool:
    """Whether ``base`` holds an exported model (``model/saved_model.pb``, or a trial's)."""
    try:
        names = [""] + [n for n in os.listdir(base) if os.path.isdir(os.path.join(base, n))]
    except OSError:
        return False
    return any(os.path.isfile(os.path.join(base, n, "model", "saved_model.pb")) for n in names)


def other_base_dir(base: str) -> str:
    """A folder beside ``base`` that does not exist yet (``<base>-2``, ...), as the user would type it."""
    n = 2
    while os.path.exists(f"{base}-{n}"):
        n += 1
    target = f"{base}-{n}"
    rel = os.path.relpath(target)
    return rel if not rel.startswith("..") else target


def check_folder(base: str, now: dict[str, Any], ignore: tuple[str, ...] = (),
                 say: Callable[[str], None] = lambda line: None) -> dict[str, Any] | None:
    """Whether a run made of ``now`` (:func:`making`) may go on in ``base``; call it holding the run lock, before
    anything is written there. Returns the finished run's record when that run is this one (nothing to do), None
    when the run may start or resume; raises :class:`NotThisJob` with the one line when the folder holds another
    job's run (finished, or unfinished with something to mix with). ``ignore``: dotted config keys not known yet
    (``--runner docker``'s image before its build), not compared. ``say`` gets a line for what the user would
    otherwise not know: trainer files added since the folder's run (:func:`added_code`), and an unfinished run that
    left no checkpoint, so the new one starts from the beginning (:func:`starts_over`)."""
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
        if finished or _has_model(base):  # a finished model whose making no record says: never trained over
            raise NotThisJob(
                f"output.base_dir: {base} holds a {'finished run' if finished else 'trained model'} whose config no "
                f"record says ({records.PROVENANCE_RECORD} is missing and {records.RUN_RECORD} names no config): "
                f"it is not trained over in place; nothing in the folder was changed. {_ways_on(base)}")
        return None  # a new folder, or one no run of this version started in: it resumes as before
    changed = _changes(before, now, ignore)
    if not _may_go_on(base, now, changed, finished):
        kind = "a finished" if finished else "an unfinished"
        shown = "; ".join(p for _, p in changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise NotThisJob(
            f"output.base_dir: {base} holds {kind} run of another job ({shown}); nothing in it was changed. "
            f"{_ways_on(base)}")
    for line in (added_code(before, now), None if finished else starts_over(base, now["config"])):
        if line:
            say(line)
    return record if finished and not changed else None


def _may_go_on(base: str, now: dict[str, Any], changed: list[tuple[str, str]], finished: bool) -> bool:
    """Whether a run made of ``now`` may go on in ``base``, whose run differs from it by ``changed`` (see the module
    doc)."""
    if not changed:
        return True
    if not finished and not _has_training_state(base):
        return True  # the earlier attempt left no checkpoint, model or study: nothing to mix with
    if all(key.startswith(AFTER_TRAINING) for key, _ in changed):
        return True  # the same model, judged by other bars (a finished run too: its training is complete, only the
        #              steps after it run again: verify, gate, registration)
    # the built-in trainer's trained on to the new count
    return not finished and all(key.startswith(AFTER_TRAINING) or (key in BUILTIN_RESUMABLE and _builtin(now["config"]))
                                for key, _ in changed)


def starts_over(base: str, config: dict[str, Any]) -> str | None:
    """The line for an unfinished run that left no checkpoint: the run going on in its folder starts from the
    beginning (a study resumes from its own record: None)."""
    tuning = config.get("tuning") if isinstance(config.get("tuning"), dict) else {}
    checkpoints = output_dirs(None, base)["checkpoints"]
    trained = os.path.isdir(os.path.join(base, "logs", "replicas"))  # a replica of it started
    if tuning.get("parameters") or not trained or any(files for _, _, files in os.walk(checkpoints)):
        return None
    if _builtin(config):
        why = "it stopped before its first checkpoint (checkpoint.every_steps)"
        how = ""
    else:
        why = "your trainer left none there (AIP_CHECKPOINT_DIR)"
        how = ("; to resume after a stop, save checkpoints there: Keras fit: callbacks=[keras.callbacks."
               "BackupAndRestore(os.environ['AIP_CHECKPOINT_DIR'])]; a custom loop: tf.train.CheckpointManager over "
               "that folder, restored at start")
    return (f"the unfinished run in {base} left no checkpoint in {checkpoints}: {why}, so this run starts from the "
            f"beginning, not where that one stopped{how}")


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
        "copy_of": os.path.basename(base.rstrip("/")), "copy": os.path.basename(target), "made": now_iso(),
        "by": "--fresh (jobs.local.run.folder.archive)"})
    return target


def copy_record(path: str) -> dict[str, Any]:
    """A folder's :data:`COPY_RECORD` ({} when it has none, or it is damaged: THE reader's rules)."""
    try:
        return record_reader.read(os.path.join(path, COPY_RECORD), types=COPY_TYPES, limit=1 << 20) or {}
    except record_reader.Unreadable:
        return {}


_STATE_RE = re.compile(r'^model_checkpoint_path:\s*"([^"]+)"', re.MULTILINE)


def last_checkpoint(checkpoint_dir: str) -> tuple[str, int] | None:
    """(path, step) of the newest complete checkpoint, read from CheckpointManager's state file.

    Plain text parsing on purpose: it runs in the CLI after Ctrl-C, where importing TensorFlow would add
    seconds to stopping."""
    try:
        with open_regular(os.path.join(checkpoint_dir, "checkpoint"), "checkpoint", limit=1 << 20) as f:
            m = _STATE_RE.search(f.read())
    except (OSError, ValueError):  # NotARegularFile is a ValueError: a pipe is no checkpoint state, never waited on
        return None
    if not m:
        return None
    name = m.group(1)
    step = re.search(r"-(\d+)$", name)
    path = name if os.path.isabs(name) else os.path.join(checkpoint_dir, name)
    return (path, int(step.group(1))) if step else None
