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
as a container component (``python3 -m jobs.cloud.custom_job``, :func:`main`), as GCPC runs its launcher:
a lightweight component's ``sh -ec`` wrapper does not pass SIGTERM on to Python (seen here), and the
cancellation below needs it.

What it does, as GCPC's launcher does otherwise:

* :func:`custom_job` parses the spec that ``jobs.job_spec`` assembles (the one builder: ``{}`` kept between used
  pools, trailing empty pools dropped, as the aiplatform SDK's ``worker_spec_utils`` does) into the
  ``aiplatform_v1.CustomJob`` strictly (``json_format.ParseDict``, unknown fields refused), the run's system
  labels (``VERTEX_AI_PIPELINES_RUN_LABELS``) added;
* :func:`run` creates it through ``JobServiceClient`` under the client policy of ``jobs.cloud.clients``:
  the job's id is Vertex's, so a create whose answer was lost is not repeated (the error line says a job
  may exist and the command that lists them); writes the ``gcp_resources`` output in GCPC's format (the
  Vertex console links the job); on a retried task whose ``gcp_resources`` already names a job, polls
  that job instead of creating another; polls to a terminal state; on SIGTERM (the pipeline was
  cancelled) cancels the CustomJob; a failed job is one line carrying the job's error.
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Callable

from jobs.cloud import clients

SYSTEM_LABELS_ENV = "VERTEX_AI_PIPELINES_RUN_LABELS"  # set by Vertex AI Pipelines in every task (GCPC reads it)
_RUNNING = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING",
            "JOB_STATE_UPDATING", "JOB_STATE_UNSPECIFIED")


class Terminated(BaseException):
    """SIGTERM reached the task: the pipeline was cancelled. A BaseException, like KeyboardInterrupt, so that
    no ``except Exception`` on the way (a call in flight) turns it into an ordinary failure."""


def system_labels() -> dict[str, str]:
    raw = os.environ.get(SYSTEM_LABELS_ENV)
    try:
        labels = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def custom_job(*, display_name: str, labels: dict[str, str] | None = None, **parts):
    """The ``aiplatform_v1.CustomJob`` to create: the spec assembled from ``parts`` by ``jobs.job_spec.job_spec``
    (the one builder: pools by position, empty parts left out), the run's system labels added, parsed
    strictly (unknown fields refused)."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from jobs.job_spec import job_spec

    try:
        spec = job_spec(**parts)
    except ValueError as exc:
        raise clients.CloudError(str(exc)) from None
    body = {"display_name": display_name, "job_spec": spec, "labels": {**system_labels(), **(labels or {})}}
    message = aiplatform_v1.CustomJob.pb()()
    try:
        json_format.ParseDict(body, message)
    except json_format.ParseError as exc:
        raise clients.CloudError(f"the CustomJob for {display_name!r} is not valid: {' '.join(str(exc).split())}") \
            from None
    return aiplatform_v1.CustomJob.wrap(message)


def resource_uri(name: str, location: str, api_endpoint: str = "") -> str:
    base = api_endpoint.rstrip("/") if api_endpoint else f"https://{location}-aiplatform.googleapis.com"
    return f"{base if '://' in base else 'https://' + base}/v1/{name}"


def write_gcp_resources(path: str, name: str, location: str, api_endpoint: str = "",
                        resource_type: str = "CustomJob") -> None:
    """GCPC's ``gcp_resources`` output (a ``GcpResources`` proto as JSON): what links the job in the console."""
    from google.protobuf import json_format
    from google_cloud_pipeline_components.proto.gcp_resources_pb2 import GcpResources

    resources = GcpResources()
    resource = resources.resources.add()
    resource.resource_type = resource_type
    resource.resource_uri = resource_uri(name, location, api_endpoint)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json_format.MessageToJson(resources))


def existing_job(path: str, resource_type: str = "CustomJob", collection: str = "customJobs") -> str | None:
    """The job (a CustomJob, or ``resource_type`` in ``collection``) a previous attempt of this task created
    (its ``gcp_resources``), or None."""
    from google.protobuf import json_format
    from google_cloud_pipeline_components.proto.gcp_resources_pb2 import GcpResources

    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    try:
        resources = json_format.Parse(Path(path).read_text(), GcpResources())
    except json_format.ParseError as exc:
        raise clients.CloudError(f"gcp_resources {path} is not GCPC's format: {exc}") from None
    uris = [r.resource_uri for r in resources.resources if r.resource_type == resource_type]
    match = re.search(rf"/v1/(projects/[^/]+/locations/[^/]+/{collection}/[^/]+)$", uris[0]) if len(uris) == 1 else None
    if not match:
        raise clients.CloudError(f"gcp_resources {path} names no single {resource_type}: {uris}")
    return match.group(1)


def hint(name: str) -> str:
    _, project, _, location, _, job_id = name.split("/")[:6]
    return (f"gcloud ai custom-jobs describe {job_id} --region {location} --project {project}; cancel: "
            f"gcloud ai custom-jobs cancel {job_id} --region {location} --project {project}")


def run(*, project: str, location: str, gcp_resources: str, api_endpoint: str = "",
        log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep, **spec) -> str:
    """Create (or resume) the CustomJob and follow it to the end; returns its name. A failed, cancelled or
    expired job, or a give-up of the policy, is a CloudError with one line."""
    from google.cloud import aiplatform_v1

    job = custom_job(**spec)
    client = aiplatform_v1.JobServiceClient(**clients.client_kwargs(
        api_endpoint or f"{location}-aiplatform.googleapis.com", "Vertex AI"))
    parent = f"projects/{project}/locations/{location}"
    name = existing_job(gcp_resources)
    if name:
        log(f"resuming: CustomJob {name} was created by an earlier attempt of this task; following it")
    else:
        listing = (f"gcloud ai custom-jobs list --region {location} --project {project} "
                   f"--filter=displayName={job.display_name}")
        created = clients.call(client.create_custom_job, parent=parent, custom_job=job, kind=clients.CREATE_SERVER_ID,
                               doing=f"creating CustomJob {job.display_name!r} in {parent}",
                               unsure=f"a CustomJob may have been created even so: {listing}")
        name = created.name
        write_gcp_resources(gcp_resources, name, location, api_endpoint)
        log(f"created CustomJob {name} with {len(job.job_spec.worker_pool_specs)} worker pools")
    clients.keeps_running(f"CustomJob {name}", hint(name))
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _follow(client, name, log, sleep)
    except Terminated:
        clients.call(client.cancel_custom_job, name=name, doing=f"cancelling CustomJob {name}",
                     unsure=f"it may still be running: {hint(name)}")
        log(f"the pipeline was cancelled: cancelled CustomJob {name}")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate(signum, frame):
    raise Terminated()


def _follow(client, name: str, log: Callable[[str], None], sleep: Callable[[float], None]) -> str:
    last, interval = None, 1.0
    while True:
        job = clients.call(client.get_custom_job, name=name, doing=f"reading CustomJob {name}",
                           unsure=f"the job may still be running: {hint(name)}")
        state = job.state.name
        if state != last:
            log(f"{time.strftime('%H:%M:%S')}  CustomJob {name.rsplit('/', 1)[-1]}: {state.replace('JOB_STATE_', '')}")
            last = state
        if state == "JOB_STATE_SUCCEEDED":
            return name
        if state not in _RUNNING:
            message = " ".join((job.error.message or "no error message was given").split())
            raise clients.CloudError(f"CustomJob {name} ended {state.replace('JOB_STATE_', '')}: {message}")
        sleep(min(interval, clients.policy().poll_s))
        interval *= 2


def main(argv: list[str] | None = None) -> int:
    """``python3 -m jobs.cloud.custom_job --display_name ... --gcp_resources PATH``: what the pipeline's
    ``custom_training_job`` container runs (``components.steps``), its arguments filled in by Vertex (lists
    as JSON, booleans as true/false). Every failure is one ``error:`` line and exit 1; a cancelled pipeline
    (SIGTERM) exits 143 after cancelling the job; never a traceback."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python3 -m jobs.cloud.custom_job")
    for flag in ("display_name", "worker_pool_specs", "base_output_directory", "tensorboard",
                 "restart_job_on_worker_restart", "scheduling_strategy", "timeout", "max_wait_duration",
                 "persistent_resource_id", "service_account", "network", "location", "project", "gcp_resources",
                 "api_endpoint", "disable_retries", "enable_web_access", "enable_dashboard_access",
                 "reserved_ip_ranges", "psc_network_attachment"):
        p.add_argument(f"--{flag}", default="", required=flag in ("display_name", "worker_pool_specs", "location",
                                                                 "project", "gcp_resources"))
    args = p.parse_args(argv)
    try:
        pools = json.loads(args.worker_pool_specs)
    except ValueError:
        pools = None
    if not isinstance(pools, list):
        print(f"error: --worker_pool_specs: {args.worker_pool_specs[:80]!r} is not a JSON list of worker pools",
              file=sys.stderr, flush=True)
        return 1
    try:
        ranges = json.loads(args.reserved_ip_ranges) if args.reserved_ip_ranges else []
    except ValueError:
        ranges = None
    if not isinstance(ranges, list):
        print(f"error: --reserved_ip_ranges: {args.reserved_ip_ranges[:80]!r} is not a JSON list of range names",
              file=sys.stderr, flush=True)
        return 1
    return step_status(lambda: run(
        display_name=args.display_name, worker_pool_specs=pools, base_output_directory=args.base_output_directory,
        tensorboard=args.tensorboard, restart_job_on_worker_restart=args.restart_job_on_worker_restart.lower()
        == "true", scheduling_strategy=args.scheduling_strategy, timeout=args.timeout,
        max_wait_duration=args.max_wait_duration, persistent_resource_id=args.persistent_resource_id,
        service_account=args.service_account, network=args.network, location=args.location, project=args.project,
        gcp_resources=args.gcp_resources, api_endpoint=args.api_endpoint,
        disable_retries=args.disable_retries.lower() == "true", enable_web_access=args.enable_web_access.lower() == "true",
        enable_dashboard_access=args.enable_dashboard_access.lower() == "true", reserved_ip_ranges=ranges,
        psc_network_attachment=args.psc_network_attachment))


def step_status(step: Callable[[], object]) -> int:
    """A Vertex job step's container (this one, ``jobs.cloud.tuning_job``): ``step()``'s exit status. A
    CloudError is one ``error:`` line and 1; a cancelled pipeline (SIGTERM, the job already cancelled) 143;
    Ctrl-C one line naming what keeps running, 130; never a traceback."""
    import sys

    try:
        step()
    except clients.CloudError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except Terminated:
        return 143
    except KeyboardInterrupt:
        print(clients.interrupted_line(), file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
