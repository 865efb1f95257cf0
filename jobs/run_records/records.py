"""What a run leaves beside it: every record's name, and how it is read and written, in one place.

One JSON file per step, written atomically by the step that knows it (:func:`write_at`), read back by name
(:func:`read_at`): ``training.json`` (what the train step ran, ``jobs.steps.calls``), ``metrics.json`` (the built-in
trainer's final figures, written by its chief), ``evaluation.json`` (the side-car evaluator),
``verification.json`` (the verify step), ``model_upload_request.json`` (the Model Registry request),
``tuning.json`` (the hyperparameter study, ``jobs.tuning.local``; Vertex's study in the same shape,
``jobs.cloud.vertex_jobs.tuning_job``), ``gate.json`` (the gate's verdict, ``jobs.steps.gate``), ``steps.json`` (the pipeline
steps' wall times so far), ``provenance.json`` (what made the run: config, trainer code hash, image; written when a
local run starts) and ``run.json`` (a run that finished, ``jobs.local.run``), beside the page
``report.html``; ``failure.json`` (why the run failed, written by the step that failed; the end message reads it).
The report, ``runs list`` and the gate read them here.

Beside it: a study's record and its rules, THE best-trial rule included (``jobs.rules.tuning_rules``), the trials'
folders and metric files (``jobs.run_records.trial_files``), which code ran (``jobs.run_records.provenance``), the gate's missed bar in
words (``jobs.rules.gate_section.gate_missed_bar``).
"""
from __future__ import annotations

import os
from typing import Any

from trainers import fileio, record_reader
from jobfile import config as config_lib
from jobfile.paths import join, readable

# -- the records' names --------------------------------------------------------------------------------------
TRAINING_RECORD = "training.json"
#: written by the built-in trainer's chief (``trainers.train``), which cannot import this module
METRICS_RECORD = "metrics.json"
#: written by the side-car evaluator (``trainers.evaluator.EVALUATION_FILE``)
EVALUATION_RECORD = "evaluation.json"
VERIFICATION_RECORD = "verification.json"
UPLOAD_REQUEST_RECORD = "model_upload_request.json"
TUNING_RECORD = "tuning.json"
GATE_RECORD = "gate.json"
#: the pipeline steps' wall times so far, rewritten as each step starts and ends (``jobs.local.run.step_timer.StepTimer``):
#: what the report step (inside the pipeline, before run.json exists) and ``runs list`` of an unfinished run read
STEPS_RECORD = "steps.json"
#: written when a local run succeeds (``jobs.local.run.folder.write_record``): its config and summary
RUN_RECORD = "run.json"
#: written when a local run starts in its folder (``jobs.local.run.folder.making``): the resolved config, the user
#: trainer's code hash and the image; what a later run in that folder is compared with
PROVENANCE_RECORD = "provenance.json"
#: a Vertex run's CustomJob attempts (``jobs.cloud.vertex_jobs.custom_job``): ``{"attempts": [{"region", "strategy", "job",
#: "state", "error", "cause", "fell_over_to", "resumes_from"}]}``, the last the job that ran last
VERTEX_JOBS_RECORD = "vertex_jobs.json"
#: why a run failed, written by the step that failed and knows why (the local train step, the Vertex CustomJob step,
#: the in-pipeline plan check; :func:`write_failure`): ``{"run", "step", "error", "cause": {"kind", "what", "hint"} |
#: null, "replica", "last_lines", "job", "written"}``, ``run`` the pipeline run's id where the step knows it, so that
#: the exit handler's message (``jobs.steps.notify_message``) reads only its own run's cause (:func:`read_failure`)
FAILURE_RECORD = "failure.json"
#: a failure record keeps the failing replica's last lines, at most this many, each at most this long
FAILURE_LINES, FAILURE_LINE_CHARS = 20, 300
REPORT_PAGE = "report.html"


# -- reading and writing -----------------------------------------------------------------------------------------
def artifact_json(path: str, field: str, what: str, choices: str) -> Any:
    """The JSON record an upstream step's artifact holds (``verification``, ``study``...), for a component that
    takes one; ValueError with the one line to say (``FIELD: PATH is not WHAT (why); valid choices: CHOICES``)
    when it cannot be read or is not JSON (``trainers.record_reader``)."""
    try:
        found = record_reader.read(path, kind=object)
    except record_reader.Unreadable as exc:
        why = exc.why
    else:
        if found is not None:
            return found
        why = "no such file"
    raise ValueError(f"{field}: {path} is not {what} ({why[:200]}); valid choices: {choices}")


def read_at(base: str, name: str) -> dict[str, Any]:
    """The record ``name`` in the run folder ``base`` ({} when it is missing, unreadable or not an object): for a
    run's steps, which may do without a record (the report of a KFP user's run). A ``gs://`` folder is read through
    Vertex's ``/gcs`` mount where there is one. Readers that must tell a damaged record from none (history, a rerun,
    ``vtp logs``) call :func:`read_checked`."""
    found = record_reader.read_or_none(readable(join(base, name)))
    return found if isinstance(found, dict) else {}


def read_checked(base: str, name: str, types: dict[str, Any] | None = None, required: tuple[str, ...] = ()
                 ) -> dict[str, Any] | None:
    """The record ``name`` in the run folder ``base`` read by THE reader (``trainers.record_reader.read``): None when
    there is none; ``record_reader.Unreadable`` (``unreadable: PATH: why``) when it is there and damaged (too big,
    too deep, a pipe, not an object, a field of ``types`` of another type, a ``required`` one missing)."""
    return record_reader.read(readable(join(base, name)), types=types, required=required)


def write_at(base: str, name: str, record: Any) -> str:
    """Write the record ``name`` into the run folder ``base`` atomically (a ``gs://`` folder through Vertex's
    ``/gcs`` mount where there is one); returns the path written."""
    path = join(readable(base), name)
    fileio.write_json_atomic(path, record)
    return path


#: an attempt's fields in ``vertex_jobs.json`` and their types (``jobs.cloud.vertex_jobs.custom_job`` writes them)
VERTEX_ATTEMPT_TYPES = {"region": str, "strategy": str, "job": str, "state": str, "error": str, "cause": str,
                        "fell_over_to": str, "rung": int, "hardware": str}
#: at most this many attempts are read back (one per placement option, each option at most once)
MAX_VERTEX_ATTEMPTS = 1000


def vertex_attempts(base: str) -> list[dict[str, Any]]:
    """The CustomJob attempts a Vertex run's ``vertex_jobs.json`` in ``base`` records ([] when there is none), read
    by THE reader; ``record_reader.Unreadable`` when the record is damaged (``attempts`` not a list, an attempt
    not an object or a field of another type, too many)."""
    doc = read_checked(base, VERTEX_JOBS_RECORD, types={"attempts": list}, required=("attempts",))
    if doc is None:
        return []
    attempts = doc["attempts"]
    where = readable(join(base, VERTEX_JOBS_RECORD))
    if len(attempts) > MAX_VERTEX_ATTEMPTS:
        raise record_reader.Unreadable(where, f"{len(attempts):,} attempts, more than a run makes "
                                              f"({MAX_VERTEX_ATTEMPTS:,} at most)")
    for i, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise record_reader.Unreadable(where, f"attempts[{i}] is {type(attempt).__name__} "
                                                  f"{record_reader.short(attempt)}, not an object")
        why = record_reader.shape_problem(attempt, VERTEX_ATTEMPT_TYPES, where=f"attempts[{i}].")
        if why:
            raise record_reader.Unreadable(where, why)
    return attempts


def _read_json(cfg: config_lib.JobConfig, name: str) -> dict[str, Any]:
    return read_at(config_lib.resolved_base_dir(cfg), name)


def read_training(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.calls.train_local`` recorded (``<base>/training.json``)."""
    return _read_json(cfg, TRAINING_RECORD)


def read_metrics(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the chief wrote at the end of training (``<base>/metrics.json``)."""
    return _read_json(cfg, METRICS_RECORD)


def read_evaluation(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the side-car evaluator wrote (``<base>/evaluation.json``; empty without an evaluator pool)."""
    return _read_json(cfg, EVALUATION_RECORD)


def read_verification(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What ``jobs.steps.calls.verify_model`` found (``<base>/verification.json``)."""
    return _read_json(cfg, VERIFICATION_RECORD)


def is_gated(cfg: config_lib.JobConfig) -> bool:
    """Whether the job has a gate step (``serving.gate`` sets a bar)."""
    gate = cfg.serving.gate
    return bool(gate.thresholds or gate.better_than_parent or gate.better_than_baseline)


def read_tuning(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The study's record (``<base>/tuning.json``: ``{"metric", "goal", "trials": [{"id", "parameters",
    "metric", "state", "seconds", ...}], "best_trial"}``); {} when the job has no ``tuning:`` section (a record
    left in the folder by an earlier tuned job is not this run's)."""
    return _read_json(cfg, TUNING_RECORD) if cfg.tuning.enabled else {}


def read_gate(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The gate's record (``<base>/gate.json``: ``passed, lines, missed, notes, bars, metrics, parent``); {}
    when the job sets no bar."""
    return _read_json(cfg, GATE_RECORD) if is_gated(cfg) else {}


def read_study(base: str) -> dict[str, Any]:
    """The study's record in ``base`` (``tuning.json``; {} when there is none), whatever the job's config says."""
    return read_at(base, TUNING_RECORD)


def write_failure(base: str, run: str, step: str, error: str, *, cause: dict[str, Any] | None = None,
                  replica: str | None = None, lines: Any = (), job: str | None = None) -> str | None:
    """``<base>/failure.json`` for run ``run`` (:data:`FAILURE_RECORD`): the step that failed, its one error line, the
    classified cause, the failing replica and its last lines (bounded: :data:`FAILURE_LINES` of at most
    :data:`FAILURE_LINE_CHARS`) and the Vertex job that failed (``job``, its resource name). A convenience for the run's end message: a folder that cannot be written here (a
    ``gs://`` folder without Vertex's ``/gcs`` mount: no TensorFlow is imported to reach it) is no second failure
    (returns None)."""
    import datetime

    if "://" in readable(base):
        return None
    kept = [str(x)[:FAILURE_LINE_CHARS] for x in list(lines)[-FAILURE_LINES:]]
    record = {"run": run, "step": step, "error": " ".join(str(error).split())[:2000], "cause": cause,
              "replica": replica, "last_lines": kept, "job": job,
              "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        os.makedirs(readable(base), exist_ok=True)
        return write_at(base, FAILURE_RECORD, record)
    except OSError:
        return None


def read_failure(base: str, run: str, since: str = "") -> dict[str, Any]:
    """The failure record in ``base`` of the run ``run`` (its id), or written at or after ``since`` (the run's
    creation time, RFC 3339: a step that records no id, the Vertex CustomJob step, whose inputs stay those Vertex's
    cache knows); {} when there is none, it is another run's, or the folder cannot be read here (a ``gs://`` folder
    without the ``/gcs`` mount)."""
    import datetime

    found = read_at(base, FAILURE_RECORD) if "://" not in readable(base) else {}
    if run and found.get("run") == run:
        return found

    def when(text: Any) -> datetime.datetime | None:
        try:
            moment = datetime.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)

    start, written = when(since), when(found.get("written"))
    return found if start and written and not found.get("run") and written >= start else {}


def in_run_folder(cfg: config_lib.JobConfig, pipeline_job_name: str) -> config_lib.JobConfig:
    """``cfg`` writing into a folder of this run's own, ``<output.base_dir>/<pipeline job name>``: every run a
    schedule starts trains from step 0 there (one shared folder would resume the last night's finished checkpoint).
    The one rule, for ``validate_config`` (every step after it) and the exit handler's message."""
    import dataclasses
    import re

    name = re.sub(r"[^A-Za-z0-9._-]+", "-", str(pipeline_job_name or "").rstrip("/").rsplit("/", 1)[-1]).strip("-.")
    if not name:
        return cfg
    base = f"{cfg.output.base_dir.rstrip('/')}/{name}"
    return dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, base_dir=base))


def read_run(base: str) -> dict[str, Any]:
    """The record of the run that last finished in ``base`` (``run.json``; {} when none did)."""
    return read_at(base, RUN_RECORD)
