"""The Vertex branch's training step: one Vertex AI CustomJob whose worker pools keep their positions.

Why not GCPC's ``CustomTrainingJobOp``: Vertex reads a worker pool's role from its position (0 chief,
1 workers, 2 parameter servers or a reduction server, 3 evaluator), and its REST reference for
``CustomJobSpec.workerPoolSpecs`` says "All worker pools except the first one are optional and can be
skipped by providing an empty value" (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec).
So a job with an evaluator and no parameter server must send ``{}`` at index 2; only an empty value is
documented, no other form stands in for it. GCPC's launcher
(``google_cloud_pipeline_components/container/v1/gcp_launcher/job_remote_runner.py``,
``JobRemoteRunner.create_job``) passes the payload through ``json_util.recursive_remove_empty`` before
the create call, which deletes that ``{}``: the evaluator is sent at index 2 and Vertex runs it as a
parameter server (FACTS.md). This module makes the create call without that removal. The pipeline runs it
as a container component (``python3 -m jobs.cloud.vertex_jobs.custom_job``, :func:`main`), as GCPC runs its launcher.

This module is the CustomJob's spec -> request conversion; ``jobs.cloud.vertex_jobs.job_runner`` (THE runner of every
Vertex job) does the rest:

* :func:`custom_job` parses the spec that ``jobs.rules.job_spec`` assembles (the one builder: ``{}`` kept between used
  pools, trailing empty pools dropped, as the aiplatform SDK's ``worker_spec_utils`` does) into the
  ``aiplatform_v1.CustomJob`` strictly (``json_format.ParseDict``, unknown fields refused), the run's system
  labels (``VERTEX_AI_PIPELINES_RUN_LABELS``) added;
* :func:`run` creates it through the runner: created once (a create whose answer was lost is not repeated),
  ``gcp_resources`` written in GCPC's format, a retried task following the job it created, polled to a
  terminal state, cancelled on SIGTERM (the pipeline was cancelled), a failed job one line carrying its error
  after its failed replicas' last lines and a hint (``jobs.cloud.apis.job_logs``).

**Capacity fall-over, along the plan.** ``placement`` is the plan's judgement of the job's options (``vtp plan``'s,
or the same judgement made without the project when there was none: ``jobs.rules.ranking``): each option with its
price and the plan's verdict, and ``budget`` the bars. :func:`run` asks THE placement procedure
(``jobs.rules.ranking.rank``) for the option to create the job in; when Vertex ends the CustomJob for capacity
(``jobs.rules.vertex_failures``: a stockout, an expired FLEX_START wait, Spot capacity gone), that option is blocked
and the same procedure is asked again with what is left of ``scheduling.timeout``: the job is created again under its
answer with the same ``base_output_directory``, so the trainer resumes from its last checkpoint. So a fall-over never
creates a job in an option the plan refused (the hardware catalog, the quota), re-checks the budget with that
option's own price (an unknown price under a bar does not fit), and says in one line why each option it passes over
was skipped; with none left it stops with one error line and creates nothing. Never for the user's code, a bad
request or quota. Each fall-over is one console line (what failed, where it goes next and at what price, from which
checkpoint step: :func:`resume_point`). An option on a later rung of the job's hardware ladder (``placement.hardware``)
is created with that rung's worker pools (``hardware``: validate_config's, THE spec of the job on that rung;
:func:`rung_spec`), in the same output directory: the built-in trainer resumes with the global batch kept. ``gcp_resources`` names the job that runs now (GCPC cancels through it);
every attempt is recorded in ``<base>/vertex_jobs.json`` (:data:`JOBS_RECORD`) with its option, price an hour and
the job's start and end times, which the report, ``vtp logs`` and ``vtp runs list`` read (its estimated cost).
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable

from jobs.rules import ranking
from jobs.run_records import records
from jobs.cloud.vertex_jobs import job_runner
from jobs.rules.errors import CloudError
from jobs.rules.hardware.prices import money
from jobs.rules.job_spec import job_spec
from jobs.rules.placement import Option
from jobs.rules.vertex_failures import failed_tasks, replica_of
from trainers.cluster import output_dirs
from trainers import record_reader
from jobfile.paths import readable

#: the record of a Vertex run's CustomJob attempts, in its output folder
JOBS_RECORD = records.VERTEX_JOBS_RECORD
#: no new job is created with less of ``scheduling.timeout`` left than this
MIN_LEFT_S = 60.0

CUSTOM_JOB = job_runner.JobType(
    resource="CustomJob", collection="customJobs", method="custom_job", gcloud="custom-jobs",
    created=lambda job: f" with {len(job.job_spec.worker_pool_specs)} worker pools")


def custom_job(*, display_name: str, labels: dict[str, str] | None = None, **parts):
    """The ``aiplatform_v1.CustomJob`` to create: the spec assembled from ``parts`` by ``jobs.rules.job_spec.job_spec``
    (the one builder: pools by position, empty parts left out), the run's system labels added, parsed
    strictly (unknown fields refused)."""
    try:
        spec = job_spec(**parts)
    except ValueError as exc:
        raise CloudError(str(exc)) from None
    return job_runner.request(CUSTOM_JOB, {"display_name": display_name, "job_spec": spec, "labels": labels or {}})


def duration_s(text: str) -> float | None:
    """``"3600s"`` (a protobuf Duration as JSON) -> 3600.0; None for empty."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)s\s*", text or "")
    return float(m.group(1)) if m else None


def resume_point(base_output_directory: str) -> str:
    """From which checkpoint the next job's trainer resumes, in words: the built-in trainer's latest step
    (``ckpt-<step>.index``, or TensorFlow's ``checkpoint`` state file), a Keras ``BackupAndRestore`` backup's
    epoch, or why it cannot be told (a ``gs://`` folder read where there is no ``/gcs`` mount, no checkpoint)."""
    folder = readable(output_dirs(None, base_output_directory)["checkpoints"])
    if "://" in folder:
        return f"its last checkpoint (the step cannot be read here: {folder} has no /gcs mount in this container)"
    try:
        names = os.listdir(folder)
    except OSError:
        return f"step 0 (no checkpoint in {folder})"
    steps = [int(m.group(1)) for n in names if (m := re.fullmatch(r"ckpt-(\d+)\.index", n))]
    if not steps and "checkpoint" in names:
        try:
            with open(os.path.join(folder, "checkpoint"), encoding="utf-8") as f:
                steps = [int(m.group(1)) for m in re.finditer(r'model_checkpoint_path:\s*"[^"]*?(\d+)"', f.read())]
        except (OSError, ValueError):
            steps = []
    if steps:
        return f"checkpoint step {max(steps)}"
    for dirpath, _, files in os.walk(folder):
        if "training_metadata.json" in files:  # Keras 3 BackupAndRestore
            try:
                with open(os.path.join(dirpath, "training_metadata.json"), encoding="utf-8") as f:
                    meta = json.load(f)
                return f"the Keras backup of epoch {int(meta['epoch'])} (batch {int(meta.get('batch') or 0)})"
            except (OSError, ValueError, KeyError, TypeError):
                break
    return f"its last checkpoint (no step could be read from {folder}: your trainer's own format)"


def _record(base: str, attempts: list[dict[str, Any]]) -> None:
    """``<base>/vertex_jobs.json``, atomically, where this container can write the folder (local, or ``gs://``
    through Vertex's ``/gcs`` mount); elsewhere the console lines are the record."""
    import sys

    if not base or "://" in readable(base):
        return
    try:
        os.makedirs(readable(base), exist_ok=True)
        records.write_at(base, JOBS_RECORD, {"attempts": attempts})
    except OSError as exc:  # the record is a convenience: the console lines said it all
        print(f"warning: could not write {JOBS_RECORD} in {base}: {exc.strerror or exc}", file=sys.stderr, flush=True)


def record_failure(base: str, run_id: str, exc: CloudError) -> None:
    """Why the CustomJob step failed, for the run's end message (``jobs.run_records.records.write_failure``): the job's
    error, the cause ``jobs.rules.vertex_failures`` classified, the failed replica and its last lines from Cloud
    Logging (the runner's :class:`~jobs.cloud.vertex_jobs.job_runner.JobFailed`, raised as it is or as the context of the
    one line :func:`run` says); a failure before any job ended (a create refused, the policy's give-up) is its one
    line."""
    context = exc.__context__
    failed = exc if isinstance(exc, job_runner.JobFailed) else context if isinstance(context, job_runner.JobFailed) else None
    cause = getattr(failed, "cause", None)
    replica = None
    if failed is not None:
        tasks = failed_tasks(failed.message)
        replica = replica_of(tasks[0]) if tasks else ("chief-0" if failed.lines else None)
    records.write_failure(base, run_id, "custom-training-job", str(exc),
                          cause={"kind": cause.kind, "what": cause.what, "hint": cause.hint} if cause else None,
                          replica=replica, lines=getattr(failed, "lines", ()), job=getattr(failed, "name", None))


def rung_spec(spec: dict[str, Any], option: Option, hardware: list | tuple) -> dict[str, Any]:
    """The step's spec parts under ``option``: its scheduling strategy (FLEX_START's ``max_wait_duration`` only under
    FLEX_START) and, on a later rung of the hardware ladder, that rung's worker pools (``hardware``, validate_config's:
    THE spec of the job on each rung). A rung the step has no pools for is a CloudError: never the wrong hardware."""
    this = dict(spec, scheduling_strategy=option.strategy,
                max_wait_duration=spec.get("max_wait_duration") if option.strategy == "FLEX_START" else "")
    if option.rung:
        pools = hardware[option.rung] if option.rung < len(hardware) else None
        if not isinstance(pools, list) or not pools:
            raise CloudError(f"placement: {option} is on rung {option.rung + 1} of the hardware ladder, and the step "
                             f"was given the worker pools of {len(hardware)} rung(s) (--hardware): nothing was created "
                             "for it; compile the pipeline again from the job file")
        this["worker_pool_specs"] = pools
    return this


def run(*, project: str, location: str, gcp_resources: str, api_endpoint: str = "", logging_endpoint: str = "",
        placement: list | tuple = (), budget: dict | None = None, hardware: list | tuple = (),
        log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic, **spec) -> str:
    """Create (or resume) the CustomJob in the option THE placement procedure ranks first and follow it to the end
    (``jobs.cloud.vertex_jobs.job_runner.run``); when Vertex ends it for capacity, block that option and ask the procedure again
    (module docstring). ``hardware``: the worker pools of every rung of the job's hardware ladder
    (:func:`rung_spec`). Returns the name of the job that succeeded. A failed, cancelled or expired job, no option
    left, or a give-up of the policy, is a CloudError with one line."""
    judged = ranking.carried(placement, location, spec.get("scheduling_strategy") or "STANDARD")
    bars = ranking.Bars.from_dict(budget)
    total_s = duration_s(spec.get("timeout") or "")
    started = clock()
    base = spec.get("base_output_directory") or ""
    blocked: dict[Option, str] = {}
    said: set[Option] = set()
    attempts: list[dict[str, Any]] = []
    earlier = job_runner.existing_job(gcp_resources)
    if earlier and base:  # a retried task: the attempts before it stay in the record, their options blocked
        try:  # THE reader: a damaged record is started again, never a failed step
            attempts = [a for a in records.vertex_attempts(base) if a.get("job") != earlier]
        except record_reader.Unreadable as exc:
            log(f"warning: {exc}; the attempts before this one are not repeated in it")
        blocked.update({_attempted(a): f"CustomJob {a.get('job')} ended {a.get('state')} ({a.get('cause')})"
                        for a in attempts if a.get("state") != "SUCCEEDED"})
    follow = earlier.split("/")[3] if earlier else ""
    left = total_s  # of scheduling.timeout, after each failed job
    while True:
        ranked = ranking.rank(judged, bars, blocked, None if left is None else left / 3600)
        option = ranked.pick
        if follow:  # a retried task: go on with the job it created, in the option it runs in
            if option is None or option.option.region != follow:
                option = next((j for j in judged if j.option.region == follow), option)
            follow = ""
        if option is None:
            _record(base, attempts)
            why = "; ".join(f"{j.option}: {w}" for j, w in ranked.skipped)
            raise CloudError(f"placement: no option is left to create the CustomJob in ({why})")
        try:
            this = rung_spec(spec, option.option, hardware)
        except CloudError:
            _record(base, attempts)
            raise
        if left is not None and attempts:  # a job after a fall-over gets what is left of the timeout
            this["timeout"] = f"{max(int(left), 1)}s"
        attempt: dict[str, Any] = {"region": option.option.region, "strategy": option.option.strategy,
                                   "per_hour": option.price.job_per_hour}
        if option.option.hardware:  # a rung of the hardware ladder: which one
            attempt.update(rung=option.option.rung, hardware=option.option.hardware)
        try:
            job = job_runner.run(CUSTOM_JOB, custom_job(**this), project=project, location=option.option.region,
                                 gcp_resources=gcp_resources, api_endpoint=api_endpoint, log=log, sleep=sleep,
                                 logging_endpoint=logging_endpoint)
        except job_runner.JobFailed as failed:
            cause = failed.cause
            attempts.append({**attempt, "job": failed.name, "state": failed.state.replace("JOB_STATE_", ""),
                             "error": failed.message[:500], "cause": cause.kind if cause else None,
                             **_times(failed.job)})
            left = None if total_s is None else total_s - (clock() - started)
            if cause is None or not cause.falls_over:
                _record(base, attempts)
                raise CloudError(str(failed)) from None
            if left is not None and left < MIN_LEFT_S:
                _record(base, attempts)
                raise CloudError(f"{failed}; scheduling.timeout leaves {max(int(left), 0)} s, too little to start "
                                 "again") from None
            job_id = failed.name.rsplit("/", 1)[-1]
            blocked[option.option] = f"CustomJob {job_id} ended for {cause.what}"
            ranked = ranking.rank(judged, bars, blocked, None if left is None else left / 3600)
            for j, why in ranked.skipped:  # one line for each option passed over, said once
                if j.option not in blocked and j.option not in said:
                    said.add(j.option)
                    log(f"fall-over: skipped {j.option}: {ranking.brief(why)}")
            nxt = ranked.pick
            if nxt is None:
                _record(base, attempts)
                rest = "; ".join(f"{j.option}: {why}" for j, why in ranked.skipped if j.option not in blocked)
                raise CloudError(f"{failed}; no placement option is left to fall over to"
                                 + (f" ({rest})" if rest else "")) from None
            point = resume_point(base)
            attempts[-1]["fell_over_to"] = str(nxt.option)
            attempts[-1]["resumes_from"] = point
            _record(base, attempts)
            price = f" ({money(nxt.price.job_per_hour)} an hour)" if nxt.price.job_per_hour is not None else ""
            log(f"fall-over: CustomJob {job_id} in {option.option} ended for {cause.what}; creating it again in "
                f"{nxt.option}{price} with the same output directory: the trainer resumes from {point}")
            _forget(gcp_resources)
            continue
        attempts.append({**attempt, "job": job.name, "state": "SUCCEEDED", **_times(job)})
        _record(base, attempts)
        return job.name


def _attempted(attempt: dict[str, Any]) -> Option:
    """The option an attempt of ``vertex_jobs.json`` ran in."""
    return Option(str(attempt.get("region")), str(attempt.get("strategy")), int(attempt.get("rung") or 0),
                  str(attempt.get("hardware") or ""))


def _times(job) -> dict[str, str]:
    """A job's own start and end times (RFC 3339), as Vertex gives them: what its cost is estimated from."""
    out = {}
    for field in ("start_time", "end_time"):
        value = getattr(job, field, None) if job is not None else None
        if value:
            try:
                out[field] = value.isoformat() if hasattr(value, "isoformat") else str(value)
            except (TypeError, ValueError):
                continue
    return out


def _forget(gcp_resources: str) -> None:
    """The failed job no longer runs: ``gcp_resources`` will name the next one when it is created."""
    try:
        os.remove(gcp_resources)
    except FileNotFoundError:
        pass


def main(argv: list[str] | None = None) -> int:
    """``python3 -m jobs.cloud.vertex_jobs.custom_job --display_name ... --gcp_resources PATH``: what the pipeline's
    ``custom_training_job`` container runs (``components/custom_training_job``), its arguments filled in by Vertex (lists
    as JSON, booleans as true/false). Every failure is one ``error:`` line and exit 1; a cancelled pipeline
    (SIGTERM) exits 143 after cancelling the job; never a traceback."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python3 -m jobs.cloud.vertex_jobs.custom_job")
    for flag in ("display_name", "worker_pool_specs", "base_output_directory", "tensorboard",
                 "restart_job_on_worker_restart", "scheduling_strategy", "timeout", "max_wait_duration",
                 "persistent_resource_id", "service_account", "network", "location", "project", "gcp_resources",
                 "api_endpoint", "disable_retries", "enable_web_access", "enable_dashboard_access",
                 "reserved_ip_ranges", "psc_network_attachment", "logging_endpoint", "placement", "budget", "labels",
                 "hardware"):
        p.add_argument(f"--{flag}", default="", required=flag in ("display_name", "worker_pool_specs", "location",
                                                                 "project", "gcp_resources"))
    args = p.parse_args(argv)

    def json_list(flag: str, what: str, optional: bool = False) -> list | None:
        """A list argument (kfp passes lists as JSON; ``optional``: empty is []); None after its one error line."""
        text = getattr(args, flag)
        try:
            value = json.loads(text) if text or not optional else []
        except ValueError:
            value = None
        if value is None and optional and text in ("null", ""):  # kfp resolves an optional list left unset to null
            value = []
        if not isinstance(value, list):
            print(f"error: --{flag}: {text[:80]!r} is not a JSON list of {what}", file=sys.stderr, flush=True)
            return None
        return value

    def json_object(text: str, flag: str) -> dict | None:
        """A dict argument (kfp passes dicts as JSON; empty or null: {}); None after its one error line."""
        try:
            value = json.loads(text) if text and text != "null" else {}
        except ValueError:
            value = None
        if not isinstance(value, dict):
            print(f"error: {flag}: {text[:80]!r} is not a JSON object", file=sys.stderr, flush=True)
            return None
        return value

    pools = json_list("worker_pool_specs", "worker pools")
    ranges = json_list("reserved_ip_ranges", "range names", optional=True) if pools is not None else None
    placement = json_list("placement", "{region, strategy} options", optional=True) if ranges is not None else None
    hardware = json_list("hardware", "worker pools per rung", optional=True) if placement is not None else None
    if hardware is None:
        return 1
    wrong = ranking.doc_problems({"options": placement})
    if wrong:
        print(f"error: --placement: {args.placement[:80]!r}: {wrong}", file=sys.stderr, flush=True)
        return 1
    budget, labels = json_object(args.budget, "--budget"), json_object(args.labels, "--labels")
    if budget is None or labels is None:
        return 1
    given = dict(
        display_name=args.display_name, worker_pool_specs=pools, base_output_directory=args.base_output_directory,
        tensorboard=args.tensorboard, restart_job_on_worker_restart=args.restart_job_on_worker_restart.lower()
        == "true", scheduling_strategy=args.scheduling_strategy, timeout=args.timeout,
        max_wait_duration=args.max_wait_duration, persistent_resource_id=args.persistent_resource_id,
        service_account=args.service_account, network=args.network, location=args.location, project=args.project,
        gcp_resources=args.gcp_resources, api_endpoint=args.api_endpoint, logging_endpoint=args.logging_endpoint,
        placement=placement, budget=budget, hardware=hardware, labels=labels or None, disable_retries=args.disable_retries.lower() == "true", enable_web_access=args.enable_web_access.lower() == "true",
        enable_dashboard_access=args.enable_dashboard_access.lower() == "true", reserved_ip_ranges=ranges,
        psc_network_attachment=args.psc_network_attachment)

    def step() -> None:
        try:
            run(**given)
        except CloudError as exc:  # why, for the run's end message (by its time: the step has no run id, so that
            record_failure(args.base_output_directory, "", exc)  # Vertex's cache of an unchanged step still holds)
            raise

    return job_runner.step_status(step)


if __name__ == "__main__":
    raise SystemExit(main())
