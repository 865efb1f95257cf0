"""The pipeline's steps as plain library calls (the KFP components in ``components/`` are thin wrappers).

``prepare`` -> ``train_local`` (or a Vertex CustomJob of ``jobs.rules.job_spec``) -> ``verify_model`` ->
the Model Registry request -> the report. Each step that has something to say about the run writes it
beside the run (``<base>/training.json``, ``verification.json``, ``model_upload_request.json``,
``report.html``: ``jobs.run_records.records`` names them and writes them), which ``run.py`` gathers into ``<base>/run.json``.

Every component's process imports this module, so each step imports its own modules inside its function
(``# lazy: one step: NAME``): a step's process loads that step's code only. With every step's modules at the head,
``import jobs.steps.calls`` took 0.44 s on a 2-core EPYC (the job side's cloud, images, local and report modules),
against 0.07 s this way, paid by each of the pipeline's six steps. Nothing here imports TensorFlow at module level;
only the steps that need it (prepare, verify) do.
"""
from __future__ import annotations

import time
from typing import Any

from jobs.rules import saved_model
from jobs.run_records import records
from jobfile import config as config_lib
from trainers import record_reader
from jobfile.paths import join

def prepare(cfg: config_lib.JobConfig) -> tuple[str, dict[str, Any]]:
    """Make the TFRecord shards the trainer reads; returns (data_dir, manifest)."""
    # lazy: one step: prepare
    from trainers import data as data_lib
    from trainers import prepare as prepare_lib

    d = cfg.data
    data_dir = config_lib.prepared_data_dir(cfg)
    if d.source == "tfrecord":
        return data_dir, data_lib.load_manifest(data_dir)
    images = config_lib.image_dir(cfg)
    if d.source == "synthetic":
        prepare_lib.synthesize_image_folder(images, num_classes=d.synthetic_classes,
                                            images_per_class=d.synthetic_images_per_class,
                                            image_size=max(d.image_size, 32), seed=cfg.training.seed)
    # data.prepare_runner: local threads, or Apache Beam (DirectRunner / Dataflow) writing the same files
    manifest = prepare_lib.prepare_tfrecords(images, data_dir, image_size=d.image_size, num_shards=d.num_shards,
                                             validation_fraction=d.validation_fraction, seed=cfg.training.seed,
                                             encoding=d.encoding, jpeg_quality=d.jpeg_quality,
                                             runner=d.prepare_runner, beam_options=d.dataflow,
                                             progress=_shard_progress(time.monotonic()))
    return data_dir, manifest


def _shard_progress(started: float):
    """One line per shard written (the console shows them as progress; the log keeps them all)."""
    def report(shards_done: int, shards: int, images_done: int, images: int) -> None:
        rate = images_done / max(time.monotonic() - started, 1e-9)
        console_log(f"shard {shards_done}/{shards} written ({images_done}/{images} images, {rate:.0f} images/s)")
    return report


def console_log(line: str) -> None:
    """print() that outlives its reader: after Ctrl-C, kfp.local's parent closes the task's stdout pipe
    while the launcher is still stopping replicas (SIGTERM, checkpoint at the next step). A write error
    there must not cut that short; every replica's full log is on disk anyway."""
    try:
        print(line, flush=True)
    except (BrokenPipeError, OSError, ValueError):
        pass


def run_local(cfg: config_lib.JobConfig, log=console_log, timeout_s: float | None = None):
    """Run the job's worker pools on this machine, exactly as Vertex would run them (``jobs.local.launch.custom_job``,
    the one local launch): every replica runs THE job spec's worker command with the job's declared variables
    (``trainer.env``) and Vertex's environment, nothing else of this shell; a user's trainer in its own copy of
    ``trainer.source_dir`` (the image's WORKDIR: ``jobs.local.launch.workdir``). Under ``run.py --runner docker`` this
    step runs in the job's image and each replica is a container of its pool's ``container_spec``.

    On KeyboardInterrupt (Ctrl-C reaches the task with the terminal's process group) the launcher stops
    every replica the way Vertex preempts one (SIGTERM: save at the next step boundary, exit 42; SIGKILL
    after the grace period) before the interrupt propagates."""
    # lazy: one step: run_local
    from jobs.local.launch import custom_job

    return custom_job.launch(cfg, config_lib.resolved_base_dir(cfg), timeout_s=timeout_s, log=log)


def earlier_checkpoints(cfg: config_lib.JobConfig) -> dict[str, Any] | None:
    """What a user's trainer may resume from without being told: the checkpoints already in the output folder
    before this run starts (``None``: none, or a ``gs://`` folder, which Vertex's job owns).

    ``{"checkpoints": dir, "files": N, "earlier_run": None | {"finished", "config_differences"}}``: the
    differences (dotted keys, ``{"earlier", "now"}``) between this config and the one in the folder's
    ``run.json`` (the last run that finished there), when the checkpoints are that run's; ``None`` when the
    run that wrote them did not finish (its config is recorded nowhere), including checkpoints written after
    ``run.json`` was. Why here and not in the trainer: the built-in trainer refuses a checkpoint past its
    steps itself (``trainers.train.refuse_checkpoint_past_the_end``); a user's trainer is a black box, so
    the record and one ``warning:`` line say it instead."""
    import json
    import os

    # lazy: one step: earlier_checkpoints
    from jobs.local.run.folder import config_diff
    from trainers.cluster import output_dirs

    base = config_lib.resolved_base_dir(cfg)
    folder = output_dirs(None, base)["checkpoints"]
    if "://" in base or not os.path.isdir(folder):
        return None
    files = [os.path.join(d, name) for d, _, names in os.walk(folder) for name in names]
    if not files:
        return None
    found: dict[str, Any] = {"checkpoints": folder, "files": len(files), "earlier_run": None}
    previous = records.read_run(base)
    record = os.path.join(base, records.RUN_RECORD)
    if (previous.get("status") != "succeeded" or not isinstance(previous.get("config"), dict)
            or max(os.path.getmtime(f) for f in files) > os.path.getmtime(record)):
        return found
    diffs = config_diff(previous["config"], json.loads(cfg.to_json()))
    found["earlier_run"] = {"finished": previous.get("finished"),
                            "config_differences": {d["key"]: {"earlier": d["a"], "now": d["b"]} for d in diffs}}
    return found


def _earlier_checkpoints_warning(found: dict[str, Any]) -> str | None:
    """One ``warning:`` line when the checkpoints are an earlier run's of another config."""
    import json

    diffs = ((found.get("earlier_run") or {}).get("config_differences")) or {}
    if not diffs:
        return None
    shown = "; ".join(f"{key}: {json.dumps(d['earlier'])} → {json.dumps(d['now'])}" for key, d in list(diffs.items())[:4])
    more = f"; and {len(diffs) - 4} more" if len(diffs) > 4 else ""
    return (f"warning: {found['checkpoints']} holds checkpoints of an earlier run with another config ({shown}{more}); "
            "your trainer may resume from them and its model then is not this config's alone (training.json records "
            "it); --fresh keeps the earlier run aside and starts from step 0")


class NoModel(RuntimeError):
    """The job ended (every replica exit 0) without a SavedModel where ``jobs.rules.saved_model`` looks (in
    ``AIP_MODEL_DIR`` or one folder below): the train step fails itself (one line listing what the folder holds, and
    the way to write one for the trainer's Keras), rather than passing a folder verify refuses."""


def require_model(cfg: config_lib.JobConfig, model_dir: str) -> saved_model.FoundModel:
    """The job's model under ``model_dir`` (``AIP_MODEL_DIR``: THE rule, ``jobs.rules.saved_model``); raises
    :class:`NoModel` (one line) when the chief ended without one. A ``gs://`` folder is Vertex's job's: as given."""
    # lazy: one step: require_model
    from jobs.rules import job_spec
    from jobs.local.launch.hints import no_model_hint

    if "://" in model_dir:
        return saved_model.FoundModel(model_dir.rstrip("/"), model_dir.rstrip("/"), checked=False)
    try:
        return saved_model.find_saved_model(model_dir)
    except saved_model.NoSavedModel as exc:
        raise NoModel(f"the chief ended (exit 0) without writing a model: {exc}; "
                      f"{no_model_hint(cfg.trainer.source_dir or None, job_spec.declared_env(cfg))}") from None


def train_local(cfg: config_lib.JobConfig, log=console_log) -> dict[str, Any]:
    """Train locally (:func:`run_local`) and write ``<base>/training.json``: what ran (strategy, replicas,
    attempts, restarts, seconds) and the final figures: the built-in trainer's ``metrics.json``, else the
    last value of every TensorBoard scalar the trainer wrote (Keras: ``train/epoch_loss``, ...). For a user's
    trainer, checkpoints already in the folder are recorded as ``resumed_from_existing_checkpoints``
    (:func:`earlier_checkpoints`), with one ``warning:`` line when they are an earlier run's of another config.
    ``model``: the SavedModel folder (``AIP_MODEL_DIR`` or one folder below it: :func:`require_model`, said in one
    line when below). Raises :class:`NoModel` when the job ended without one."""
    # lazy: one step: train_local
    from jobs.rules.job_spec import shown_command
    from jobs.run_records.tensorboard import last_values, read_scalars
    from trainers.cluster import output_dirs

    started = time.monotonic()
    earlier = earlier_checkpoints(cfg) if cfg.user_trainer else None
    warning = _earlier_checkpoints_warning(earlier) if earlier else None
    if warning:
        log(warning)
    result = run_local(cfg, log=log)
    for note in result.notes:  # replicas that never joined, or several that wrote the model: said before it is used
        log(f"warning: {note}")
    dirs = output_dirs(None, config_lib.resolved_base_dir(cfg))
    found = require_model(cfg, dirs["model"])
    if found.line:
        log(found.line)
    record: dict[str, Any] = {
        "trainer": cfg.trainer.module or "trainers.task (built-in)",
        "command": shown_command(cfg),
        "strategy": cfg.topology.strategy, "replica_counts": cfg.topology.replica_counts(), "attempts": result.attempts,
        "restarts": [{"attempt": r.attempt, "replica": r.failure.name, "exit_status": r.failure.exit_status,
                      "resumed_from_step": r.resumed_step} for r in result.restarts],
        "seconds": round(time.monotonic() - started, 1), "dirs": dirs, "model": found.path,
        "warnings": list(result.notes),
    }
    if earlier:
        record["resumed_from_existing_checkpoints"] = earlier
    builtin = records.read_metrics(cfg)
    if not cfg.user_trainer and builtin:
        record["metrics"] = builtin
    else:
        record["scalars"] = last_values(read_scalars(dirs["logs"]))
    records.write_at(config_lib.resolved_base_dir(cfg), records.TRAINING_RECORD, record)
    return record


def trainer_image(cfg: config_lib.JobConfig, build_context_uri: str = "", dockerfile: str = "containers/Dockerfile",
                  project: str = "", endpoint: str | None = None, log=print) -> str:
    """The image the job's replicas run. No build context: the config's image, with no cloud call (so
    kfp.local runs stay offline). A ``gs://`` context tarball: built and pushed through the one builder
    interface (``jobs.images.builders``, Cloud Build's: a context already staged) into the job's variant
    repository, tagged with the object's name, returned by digest (``REPO:TAG@sha256:...``)."""
    # lazy: one step: trainer_image
    from jobs.rules import job_image

    if not build_context_uri:
        return job_image.job_image(cfg)
    # lazy: one step: trainer_image
    from jobs.images.builders import builder_for
    from jobs.images.cloudbuild import StagedContext

    variant = job_image.variant_for(cfg)
    context = StagedContext(build_context_uri, dockerfile)
    builder = builder_for("cloudbuild", project=project, endpoint=endpoint or None, log=log)
    return builder.build(context, job_image.build_repository(cfg, variant), context.tag, {"VARIANT": variant})


def verify_model(model_dir: str, sample_request: str = "", data_dir: str = "", record_dir: str = "", *,
                 eval_data: str = "", eval_task: str = "auto", eval_output: str = "") -> dict[str, Any]:
    """Load the SavedModel in this process, run ``serving_default`` on ``sample_request`` (the JSON text
    ``{"instances": [...]}``) or a generated input, time it, evaluate it on ``eval_data`` (``serving.eval_data``)
    when given, and for the built-in classifier evaluate ``data_dir``'s held-out split (``jobs.steps.verify``); written
    to ``<record_dir>/verification.json`` when given. Raises ``jobs.steps.verify.VerifyError`` (one line)."""
    # lazy: one step: verify_model
    from jobs.steps import verify

    record = verify.verify(model_dir, sample_request, data_dir, eval_data=eval_data, eval_task=eval_task,
                           eval_output=eval_output)
    if record_dir:
        records.write_at(record_dir, records.VERIFICATION_RECORD, record)
    return record


def serving_fields(cfg: config_lib.JobConfig, location: str) -> dict[str, Any]:
    """The Model Registry fields of a job: display name, labels, prediction container for ``location``,
    parent model."""
    # lazy: one step: serving_fields
    from jobs.cloud.apis import vertex

    return {"display_name": cfg.serving.display_name or cfg.name, "labels": vertex.model_labels(cfg),
            "serving_image": vertex.serving_image(cfg, location), "parent_model": cfg.serving.parent_model}


def upload_model(model_uri: str, *, location: str, project: str = "", display_name: str, serving_image: str = "",
                 labels: dict[str, str] | None = None, parent_model: str = "", pipeline_job: str = "",
                 api_endpoint: str = "", dry_run: bool = False, record_dir: str = "") -> tuple[str, dict[str, Any]]:
    """Build the ``models:upload`` request for the SavedModel at ``model_uri``; write it to
    ``<record_dir>/model_upload_request.json`` when given; send it unless ``dry_run``. Returns
    (``models/ID@version`` or ``""``, the request)."""
    # lazy: one step: upload_model
    from jobs.cloud.apis import vertex

    request = vertex.upload_request(model_uri, display_name=display_name, project=project, location=location,
                                    serving_image=serving_image or vertex.prebuilt_serving_image(location),
                                    labels=labels, parent_model=parent_model, pipeline_job=pipeline_job)
    if record_dir:
        records.write_at(record_dir, records.UPLOAD_REQUEST_RECORD, request)
    if dry_run:
        return "", request
    return vertex.upload_model(request, location, api_endpoint or None), request


def record_train_failure(cfg: config_lib.JobConfig, run_id: str, exc: BaseException) -> None:
    """Why the local train step failed, for this run's end message (``jobs.run_records.records.write_failure``): the failed
    replica, its own error line, the hint for a known failure (``jobs.local.launch.hints``), its last lines."""
    # lazy: one step: record_train_failure
    from jobs.local.launch.hints import hint_for

    failure = getattr(getattr(exc, "result", None), "failure", None)
    if failure is None:  # NoModel, or a launcher that ended without a replica's failure
        records.write_failure(config_lib.resolved_base_dir(cfg), run_id, "train", str(exc).split("\n")[0])
        return
    hint = hint_for([failure.error_line or "", *failure.last_lines], failure.source_dir, failure.env)
    head = str(exc).split("\n")[0]
    cause = {"kind": "user_code" if failure.error_line else "replica",
             "what": f"{failure.name} exited with status {failure.exit_status}", "hint": hint}
    records.write_failure(config_lib.resolved_base_dir(cfg), run_id, "train",
                          f"{failure.name}'s error: {failure.error_line}" if failure.error_line else head,
                          cause=cause, replica=failure.name, lines=failure.last_lines)


def check_plan(cfg: config_lib.JobConfig, project: str, location: str, *, run_id: str = "",
               require_checks: bool = False, api_endpoint: str = "", log=console_log) -> list[str]:
    """The plan's checks made inside the pipeline, before anything is created (``jobs.cloud.planning.decide`` with the
    run's project and region, the job's budget): its lines, then one ``warning:`` per warning or check not made and
    one ``error:`` per problem; returns the problems, recorded for run ``run_id``'s end message when there are any."""
    # lazy: one step: check_plan
    from jobs.cloud import planning

    plan = planning.decide(cfg, project, location, require_checks=require_checks, api_endpoint=api_endpoint)
    for line in planning.short_lines(plan):
        log(line)
    for line in [*plan.unchecked, *plan.warnings]:
        log(f"warning: {line}")
    for line in plan.errors:
        log(f"error: {line}")
    if plan.errors:
        cause = {"kind": "plan", "what": "the plan's checks failed before any job was created",
                 "hint": "vtp plan --config JOB --project PROJECT shows every check; the run created nothing"}
        records.write_failure(config_lib.resolved_base_dir(cfg), run_id, "check-plan", plan.errors[0], cause=cause,
                              lines=plan.errors[1:])
    else:
        log(f"the plan's checks passed: {plan.option}")
    return list(plan.errors)


def notify(config_json: str, state: str, *, error: str = "", pipeline_job: str = "", run_id: str = "",
           run_created: str = "", on_vertex: bool = False, folder_per_run: bool = False, pipeline_job_name: str = "",
           api_endpoint: str = "") -> bool:
    """The exit handler's step: the run's end sent where ``notify:`` says (``jobs.steps.notify_message``). Never
    raises: a config that cannot be read is one ``warning:`` line, like any failure to send."""
    import sys

    # lazy: one step: notify
    from jobs.steps import notify_message
    from jobfile.errors import ConfigError

    try:
        cfg = config_lib.load_json(config_json)
    except ConfigError as exc:
        print(f"warning: notify: the run's end was not sent: its config cannot be read ({exc.problems[0]})",
              file=sys.stderr, flush=True)
        return False
    if folder_per_run:
        cfg = records.in_run_folder(cfg, pipeline_job_name)
    return notify_message.notify_run_end(cfg, state, error=error, run_id=run_id, run_created=run_created,
                                         pipeline_job=pipeline_job, on_vertex=on_vertex, api_endpoint=api_endpoint)


def notify_cancelled(cfg: config_lib.JobConfig) -> bool:
    """A local run stopped with Ctrl-C (kfp.local runs no exit handler then): its end, CANCELLED, sent as the exit
    handler would send it."""
    # lazy: one step: notify
    from jobs.steps import notify_message

    return notify_message.notify_run_end(cfg, "CANCELLED")


def report(config_json: str = "", verification_file: str = "", logs_uri: str = "", checkpoints_uri: str = "",
           record_dir: str = "", study_file: str = "") -> tuple[dict[str, Any], str]:
    """The run report (``jobs.steps.reporting.page``) from whatever is given (a run folder ``record_dir`` fills in what is
    not); written to ``<record_dir>/report.html`` when given. Returns (content, the path written or ``""``)."""
    # lazy: one step: report
    from jobs.steps.reporting import page as report_lib
    from jobs.steps.reporting import data as report_data

    cfg = config_lib.load_json(config_json) if config_json else None
    verification = (record_reader.read_or_none(verification_file) or {}) if verification_file else None
    study = (record_reader.read_or_none(study_file) or {}) if study_file else None
    content = report_data.gather(cfg, record_dir, verification=verification, logs_uri=logs_uri,
                                checkpoints_uri=checkpoints_uri, study=study)
    if not record_dir:
        return content, ""
    return content, report_lib.write(join(record_dir, records.REPORT_PAGE), content)
