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
as a container component (``python3 -m jobs.cloud.custom_job``, :func:`main`), as GCPC runs its launcher.

This module is the CustomJob's spec -> request conversion; ``jobs.cloud.job_runner`` (THE runner of every
Vertex job) does the rest:

* :func:`custom_job` parses the spec that ``jobs.spec.job_spec`` assembles (the one builder: ``{}`` kept between used
  pools, trailing empty pools dropped, as the aiplatform SDK's ``worker_spec_utils`` does) into the
  ``aiplatform_v1.CustomJob`` strictly (``json_format.ParseDict``, unknown fields refused), the run's system
  labels (``VERTEX_AI_PIPELINES_RUN_LABELS``) added;
* :func:`run` creates it through the runner: created once (a create whose answer was lost is not repeated),
  ``gcp_resources`` written in GCPC's format, a retried task following the job it created, polled to a
  terminal state, cancelled on SIGTERM (the pipeline was cancelled), a failed job one line carrying its error
  after its failed replicas' last lines and a hint (``jobs.cloud.job_logs``).

**Capacity fall-over.** ``placement`` is the job file's options in order (``jobs.spec.placement.options``: region and
scheduling strategy). When Vertex ends the CustomJob for capacity (``jobs.spec.vertex_failures``: a stockout, an
expired FLEX_START wait, Spot capacity gone), :func:`run` creates it again under the next option with the same
``base_output_directory``, so the trainer resumes from its last checkpoint; each fall-over is one console line
(what failed, where it goes next, from which checkpoint step: :func:`resume_point`). Never for the user's code,
a bad request or quota; bounded by the list and by ``timeout`` (``scheduling.timeout``) in all: each new job gets
what is left of it. ``gcp_resources`` names the job that runs now (GCPC cancels through it); every attempt is
recorded in ``<base>/vertex_jobs.json`` (:data:`JOBS_RECORD`), which the report and ``vtp logs`` read.
"""
from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Callable

from jobs.spec import records
from jobs.cloud import job_runner
from jobs.spec.errors import CloudError
from jobs.spec.job_spec import job_spec
from jobs.spec.placement import STRATEGIES, Option
from trainers.cluster import output_dirs
from trainers import record_reader
from trainers.paths import readable

#: the record of a Vertex run's CustomJob attempts, in its output folder
JOBS_RECORD = records.VERTEX_JOBS_RECORD
#: no new job is created with less of ``scheduling.timeout`` left than this
MIN_LEFT_S = 60.0

CUSTOM_JOB = job_runner.JobType(
    resource="CustomJob", collection="customJobs", method="custom_job", gcloud="custom-jobs",
    created=lambda job: f" with {len(job.job_spec.worker_pool_specs)} worker pools")


def custom_job(*, display_name: str, labels: dict[str, str] | None = None, **parts):
    """The ``aiplatform_v1.CustomJob`` to create: the spec assembled from ``parts`` by ``jobs.spec.job_spec.job_spec``
    (the one builder: pools by position, empty parts left out), the run's system labels added, parsed
    strictly (unknown fields refused)."""
    try:
        spec = job_spec(**parts)
    except ValueError as exc:
        raise CloudError(str(exc)) from None
    return job_runner.request(CUSTOM_JOB, {"display_name": display_name, "job_spec": spec, "labels": labels or {}})


def options(location: str, strategy: str, placement: list | tuple = ()) -> list[Option]:
    """The options to try, in order: the given region and strategy first, then those of ``placement`` (the job
    file's, in its order) after it, each once."""
    first = Option(location, strategy or "STANDARD")
    given = [Option(str(o["region"]), str(o["strategy"])) for o in placement or ()]
    rest = given[given.index(first) + 1:] if first in given else given
    return list(dict.fromkeys([first, *rest]))


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


def run(*, project: str, location: str, gcp_resources: str, api_endpoint: str = "", logging_endpoint: str = "",
        placement: list | tuple = (), log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic, **spec) -> str:
    """Create (or resume) the CustomJob and follow it to the end (``jobs.cloud.job_runner.run``), falling over to
    the next option of ``placement`` when Vertex ends it for capacity (module docstring); returns the name of the
    job that succeeded. A failed, cancelled or expired job, or a give-up of the policy, is a CloudError with one
    line."""
    tried = options(location, spec.get("scheduling_strategy") or "STANDARD", placement)
    for o in tried:
        if o.strategy not in STRATEGIES:
            raise CloudError(f"placement: strategy {o.strategy!r} of {o.region} is not one of "
                                     f"{', '.join(STRATEGIES)}")
    start = 0
    earlier = job_runner.existing_job(gcp_resources)
    if earlier:  # a retried task: go on from the option its job runs in
        region = earlier.split("/")[3]
        start = next((i for i, o in enumerate(tried) if o.region == region), 0)
    total_s = duration_s(spec.get("timeout") or "")
    started = clock()
    base = spec.get("base_output_directory") or ""
    attempts: list[dict[str, Any]] = []
    if earlier and base:  # the attempts before this task was retried stay in the record
        try:  # THE reader: a damaged record is started again, never a failed step
            attempts = [a for a in records.vertex_attempts(base) if a.get("job") != earlier]
        except record_reader.Unreadable as exc:
            log(f"warning: {exc}; the attempts before this one are not repeated in it")
    for i in range(start, len(tried)):
        option = tried[i]
        this = dict(spec, scheduling_strategy=option.strategy)
        if total_s is not None and i > start:  # a job after a fall-over gets what is left of the timeout
            this["timeout"] = f"{max(int(total_s - (clock() - started)), 1)}s"
        attempt: dict[str, Any] = {"region": option.region, "strategy": option.strategy}
        try:
            job = job_runner.run(CUSTOM_JOB, custom_job(**this), project=project, location=option.region,
                                 gcp_resources=gcp_resources, api_endpoint=api_endpoint, log=log, sleep=sleep,
                                 logging_endpoint=logging_endpoint)
        except job_runner.JobFailed as failed:
            cause = failed.cause
            attempts.append({**attempt, "job": failed.name, "state": failed.state.replace("JOB_STATE_", ""),
                             "error": failed.message[:500], "cause": cause.kind if cause else None})
            left = None if total_s is None else total_s - (clock() - started)
            nxt = tried[i + 1] if i + 1 < len(tried) else None
            if cause is None or not cause.falls_over or nxt is None or (left is not None and left < MIN_LEFT_S):
                why = ("" if cause is None or not cause.falls_over else
                       "; no placement option is left to fall over to" if nxt is None else
                       f"; scheduling.timeout leaves {max(int(left or 0), 0)} s, too little to start again")
                _record(base, attempts)
                raise CloudError(f"{failed}{why}") from None
            point = resume_point(base)
            attempts[-1]["fell_over_to"] = f"{nxt.region} {nxt.strategy}"
            attempts[-1]["resumes_from"] = point
            _record(base, attempts)
            log(f"fall-over: CustomJob {failed.name.rsplit('/', 1)[-1]} in {option.region} {option.strategy} ended "
                f"for {cause.what}; creating it again in {nxt.region} {nxt.strategy} with the same output "
                f"directory: the trainer resumes from {point}")
            _forget(gcp_resources)
            continue
        attempts.append({**attempt, "job": job.name, "state": "SUCCEEDED"})
        _record(base, attempts)
        return job.name
    raise CloudError("no placement option to run the CustomJob in")  # unreachable: tried is never empty


def _forget(gcp_resources: str) -> None:
    """The failed job no longer runs: ``gcp_resources`` will name the next one when it is created."""
    try:
        os.remove(gcp_resources)
    except FileNotFoundError:
        pass


def main(argv: list[str] | None = None) -> int:
    """``python3 -m jobs.cloud.custom_job --display_name ... --gcp_resources PATH``: what the pipeline's
    ``custom_training_job`` container runs (``components/custom_training_job``), its arguments filled in by Vertex (lists
    as JSON, booleans as true/false). Every failure is one ``error:`` line and exit 1; a cancelled pipeline
    (SIGTERM) exits 143 after cancelling the job; never a traceback."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python3 -m jobs.cloud.custom_job")
    for flag in ("display_name", "worker_pool_specs", "base_output_directory", "tensorboard",
                 "restart_job_on_worker_restart", "scheduling_strategy", "timeout", "max_wait_duration",
                 "persistent_resource_id", "service_account", "network", "location", "project", "gcp_resources",
                 "api_endpoint", "disable_retries", "enable_web_access", "enable_dashboard_access",
                 "reserved_ip_ranges", "psc_network_attachment", "logging_endpoint", "placement"):
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

    pools = json_list("worker_pool_specs", "worker pools")
    ranges = json_list("reserved_ip_ranges", "range names", optional=True) if pools is not None else None
    placement = json_list("placement", "{region, strategy} options", optional=True) if ranges is not None else None
    if placement is None:
        return 1
    if not all(isinstance(o, dict) and {"region", "strategy"} <= set(o) for o in placement):
        print(f"error: --placement: {args.placement[:80]!r} is not a JSON list of {{region, strategy}} options, e.g. "
              '[{"region": "us-central1", "strategy": "STANDARD"}]', file=sys.stderr, flush=True)
        return 1
    return job_runner.step_status(lambda: run(
        display_name=args.display_name, worker_pool_specs=pools, base_output_directory=args.base_output_directory,
        tensorboard=args.tensorboard, restart_job_on_worker_restart=args.restart_job_on_worker_restart.lower()
        == "true", scheduling_strategy=args.scheduling_strategy, timeout=args.timeout,
        max_wait_duration=args.max_wait_duration, persistent_resource_id=args.persistent_resource_id,
        service_account=args.service_account, network=args.network, location=args.location, project=args.project,
        gcp_resources=args.gcp_resources, api_endpoint=args.api_endpoint, logging_endpoint=args.logging_endpoint,
        placement=placement, disable_retries=args.disable_retries.lower() == "true", enable_web_access=args.enable_web_access.lower() == "true",
        enable_dashboard_access=args.enable_dashboard_access.lower() == "true", reserved_ip_ranges=ranges,
        psc_network_attachment=args.psc_network_attachment))


if __name__ == "__main__":
    raise SystemExit(main())
