"""THE runner of a Vertex AI job from a pipeline step: create it (or follow the one an earlier attempt of the
task created), follow it with one line per change, cancel it when the pipeline is cancelled, and end in one
line. Every Vertex job type goes through :func:`run`: the CustomJob of the training step
(``jobs.cloud.vertex_jobs.custom_job``), the HyperparameterTuningJob of the tuning step (``jobs.cloud.vertex_jobs.tuning_job``), and the
next one; a job type is a :class:`JobType` (its resource and collection names, its ``JobServiceClient``
methods, its gcloud command group, what its lines add), and a job module keeps only its spec -> request
conversion (a body in proto field names, parsed strictly by :func:`request`) and the reading of its outputs.

Modelled on GCPC's ``JobRemoteRunner`` (``google_cloud_pipeline_components/container/v1/gcp_launcher/
job_remote_runner.py``: one runner for every job type, its client methods found by the job type's name,
``gcp_resources`` written on create and read back on a retried task), without its
``json_util.recursive_remove_empty`` (which deletes the ``{}`` a CustomJob keeps for an unused pool between
used ones: ``jobs/cloud/vertex_jobs/custom_job.py`` says why that matters). What :func:`run` does:

* creates the job through ``JobServiceClient`` (REST) under the client policy of ``jobs.cloud.apis.clients``:
  the job's id is Vertex's, so a create whose answer was lost is not repeated (``CREATE_SERVER_ID``: the
  error line says a job may exist and the command that lists them);
* writes the ``gcp_resources`` output in GCPC's format (a ``GcpResources`` proto as JSON: the Vertex console
  links the job); on a retried task whose ``gcp_resources`` already names a job, follows that job instead of
  creating another;
* polls to a terminal state (a read under the policy, at most every ``VTP_CLOUD_POLL_S``), one line each time
  the state (or what the job type adds to it: a study's trial counts) changes;
* on SIGTERM (Vertex cancels a pipeline's running tasks so) cancels the job and raises :class:`Terminated`
  (GCPC's ``ExecutionContext`` does the same); on Ctrl-C (the step run in a terminal) cancels it too and
  re-raises: a job nobody follows must not run on; only when the cancel call itself is cut short does the
  interrupted line say how to see and cancel it (``keeps_running``);
* a failed, cancelled or expired job is one CloudError line carrying the job's own error.

:func:`step_status` is the exit status of a job step's container (``python3 -m jobs.cloud.vertex_jobs.custom_job``): a
lightweight component's ``sh -ec`` wrapper does not pass SIGTERM on to Python (seen here), so these steps run
as container components, as GCPC runs its launchers.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable

from jobs.cloud.apis import clients, job_logs
from jobs.cloud.apis.policy import CREATE_SERVER_ID, policy
from jobs.cloud.apis.lines import ended, interrupted_line, keeps_running
from jobs.cloud.apis.credentials import client_kwargs
from jobs.rules.errors import CloudError
from jobfile.regular_file import read_regular
from trainers.resource_names import JOB_NAME_RE

SYSTEM_LABELS_ENV = "VERTEX_AI_PIPELINES_RUN_LABELS"  # set by Vertex AI Pipelines in every task (GCPC reads it)
RUNNING = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING",
           "JOB_STATE_UPDATING", "JOB_STATE_UNSPECIFIED")


@dataclasses.dataclass(frozen=True)
class JobType:
    """One kind of Vertex AI job, as the runner needs it. ``method``: the ``JobServiceClient`` methods are
    ``create_<method>(parent=, <method>=)``, ``get_<method>(name=)``, ``cancel_<method>(name=)``;
    ``created(job)``: what the line on create adds after the job's name; ``progress(job)``: what a progress
    line adds after the state (a line is printed when the state or this changes)."""
    resource: str    # CustomJob: the proto message, the gcp_resources type, what lines call it
    collection: str  # customJobs: the REST collection of its resource names
    method: str      # custom_job
    gcloud: str      # custom-jobs: gcloud ai <group> list | describe | cancel
    created: Callable[[Any], str] = lambda job: ""
    progress: Callable[[Any], str] = lambda job: ""

    def hint(self, name: str) -> str:
        """How a person sees and cancels the job ``name``."""
        _, project, _, location, _, job_id = name.split("/")[:6]
        return (f"gcloud ai {self.gcloud} describe {job_id} --region {location} --project {project}; cancel: "
                f"gcloud ai {self.gcloud} cancel {job_id} --region {location} --project {project}")


class JobFailed(CloudError):
    """A job that ended FAILED, CANCELLED (not by this step) or EXPIRED: its one line, and what the runner found
    out (``cause``: ``jobs.rules.vertex_failures.Cause`` or None) for the step to decide on (a fall-over); ``job``: the
    job as last read (its start and end times)."""

    def __init__(self, line: str, *, name: str, state: str, message: str, cause=None, lines=(), job=None):
        super().__init__(line)
        self.name, self.state, self.message, self.cause, self.job = name, state, message, cause, job
        self.lines = list(lines)  # the failed replicas' last lines the runner showed (Cloud Logging)


class Terminated(BaseException):
    """SIGTERM reached the task: the pipeline was cancelled. A BaseException, like KeyboardInterrupt, so that
    no ``except Exception`` on the way (a call in flight) turns it into an ordinary failure."""


def system_labels() -> dict[str, str]:
    """The pipeline run's labels Vertex AI Pipelines gives every task, which every job it creates carries."""
    raw = os.environ.get(SYSTEM_LABELS_ENV)
    try:
        labels = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def request(job_type: JobType, body: dict[str, Any]):
    """The ``aiplatform_v1`` message of ``job_type`` from ``body`` (proto field names), parsed strictly
    (``json_format.ParseDict``: an unknown field is refused), the run's system labels added under the body's
    own; a problem is one CloudError line."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    cls = getattr(aiplatform_v1, job_type.resource)
    body = {**body, "labels": {**system_labels(), **(body.get("labels") or {})}}
    message = cls.pb()()
    try:
        json_format.ParseDict(body, message)
    except json_format.ParseError as exc:
        raise CloudError(f"the {job_type.resource} for {body.get('display_name')!r} is not valid: "
                                 f"{' '.join(str(exc).split())}") from None
    return cls.wrap(message)


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
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    try:
        text = read_regular(path, f"gcp_resources {path}", limit=1 << 20).decode("utf-8", "replace")
    except (OSError, ValueError) as exc:  # NotARegularFile is a ValueError: a pipe is refused, not waited on
        raise CloudError(f"gcp_resources {path} cannot be read: {' '.join(str(exc).split())[:200]}") from None
    return named_job(text, resource_type, collection, where=f"gcp_resources {path}")


def named_job(text: str, resource_type: str = "CustomJob", collection: str = "customJobs",
              where: str = "gcp_resources") -> str:
    """The one ``resource_type`` job a ``gcp_resources`` text (GCPC's ``GcpResources`` as JSON) names, as its
    resource name; a CloudError (one line) when the text is not that or names no single such job."""
    from google.protobuf import json_format
    from google_cloud_pipeline_components.proto.gcp_resources_pb2 import GcpResources

    try:
        resources = json_format.Parse(text, GcpResources())
    except (json_format.ParseError, ValueError, RecursionError) as exc:
        raise CloudError(f"{where} is not GCPC's format: {' '.join(str(exc).split())[:200]}") from None
    uris = [r.resource_uri for r in resources.resources if r.resource_type == resource_type]
    match = re.search(r"/v1/([^?#]+)\Z", uris[0]) if len(uris) == 1 else None
    name = match.group(1) if match else ""
    found = JOB_NAME_RE.fullmatch(name)
    if not found or found["collection"] != collection:  # read from a file: used only once it has a job name's form
        shown = [u[:120] for u in uris[:3]]
        raise CloudError(f"{where} names no single {resource_type} of the form projects/PROJECT/locations/REGION/"
                         f"{collection}/NUMBER: {shown}")
    return name


def _terminate(signum, frame):
    raise Terminated()


def run(job_type: JobType, job, *, project: str, location: str, gcp_resources: str, api_endpoint: str = "",
        log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
        on_poll: Callable[[Any], None] | None = None, logging_endpoint: str = ""):
    """Create ``job`` (a message of :func:`request`) in ``project``/``location``, or resume the one an earlier
    attempt created (``gcp_resources``), and follow it to the end; returns the finished job. A failed,
    cancelled or expired job, or a give-up of the policy, is a CloudError with one line; SIGTERM cancels the
    job and raises :class:`Terminated`; Ctrl-C cancels it and re-raises KeyboardInterrupt. ``on_poll``: called with the job as each read returns it, before its
    state line (a job module's own lines: the tuning job's trials as they end). A job that ends other than
    SUCCEEDED first shows why (``jobs.cloud.apis.job_logs.explain_failure``: each failed replica's last lines from
    Cloud Logging at ``logging_endpoint``, default Google's; one hint line; the console link), then raises
    :class:`JobFailed` carrying the cause."""
    from google.cloud import aiplatform_v1

    kind, method = job_type.resource, job_type.method
    client = aiplatform_v1.JobServiceClient(**client_kwargs(
        api_endpoint or f"{location}-aiplatform.googleapis.com", "Vertex AI"))
    parent = f"projects/{project}/locations/{location}"
    name = existing_job(gcp_resources, kind, job_type.collection)
    if name:
        log(f"resuming: {kind} {name} was created by an earlier attempt of this task; following it")
    else:
        listing = (f"gcloud ai {job_type.gcloud} list --region {location} --project {project} "
                   f"--filter=displayName={job.display_name}")
        created = clients.call(getattr(client, f"create_{method}"), parent=parent, **{method: job},
                               kind=CREATE_SERVER_ID, doing=f"creating {kind} {job.display_name!r} in {parent}",
                               unsure=f"a {kind} may have been created even so: {listing}")
        name = created.name
        write_gcp_resources(gcp_resources, name, location, api_endpoint, kind)
        log(f"created {kind} {name}{job_type.created(job)}")
    keeps_running(f"{kind} {name}", job_type.hint(name))
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _follow(job_type, client, name, log, sleep, on_poll, logging_endpoint)
    except (Terminated, KeyboardInterrupt) as stopped:
        # the pipeline was cancelled (SIGTERM), or a person pressed Ctrl-C where the step runs in a terminal:
        # either way the job must not run on, paid for, with nobody following it. A second Ctrl-C during the
        # cancel call leaves it registered as running, and the interrupted line says how to cancel it.
        clients.call(getattr(client, f"cancel_{method}"), name=name, doing=f"cancelling {kind} {name}",
                     unsure=f"it may still be running: {job_type.hint(name)}")
        ended(f"{kind} {name}")
        why = "the pipeline was cancelled" if isinstance(stopped, Terminated) else "interrupted (Ctrl-C)"
        log(f"{why}: cancelled {kind} {name}")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _follow(job_type: JobType, client, name: str, log: Callable[[str], None], sleep: Callable[[float], None],
            on_poll: Callable[[Any], None] | None = None, logging_endpoint: str = ""):
    kind = job_type.resource
    last, interval = None, 1.0
    while True:
        job = clients.call(getattr(client, f"get_{job_type.method}"), name=name, doing=f"reading {kind} {name}",
                           unsure=f"the job may still be running: {job_type.hint(name)}")
        if on_poll is not None:
            on_poll(job)
        state = job.state.name
        seen = (state, job_type.progress(job))
        if seen != last:
            log(f"{time.strftime('%H:%M:%S')}  {kind} {name.rsplit('/', 1)[-1]}: {state.replace('JOB_STATE_', '')}"
                f"{seen[1]}")
            last = seen
        if state not in RUNNING:
            ended(f"{kind} {name}")  # whatever its end, it no longer runs
        if state == "JOB_STATE_SUCCEEDED":
            return job
        if state not in RUNNING:
            message = " ".join((job.error.message or "no error message was given").split())
            _, project, _, location = name.split("/")[:4]
            seen: list[str] = []
            cause = job_logs.explain_failure(job, name, project=project, location=location,
                                             endpoint=logging_endpoint, log=log, seen=seen)
            raise JobFailed(f"{kind} {name} ended {state.replace('JOB_STATE_', '')}: {message}", name=name,
                            state=state, message=message, cause=cause, lines=seen, job=job)
        sleep(min(interval, policy().poll_s))
        interval *= 2


def step_status(step: Callable[[], object]) -> int:
    """A Vertex job step's container (``jobs.cloud.vertex_jobs.custom_job``, ``jobs.cloud.vertex_jobs.tuning_job``): ``step()``'s exit
    status. A CloudError is one ``error:`` line and 1; a cancelled pipeline (SIGTERM, the job already
    cancelled) 143; Ctrl-C (the job cancelled) one line saying what, if anything, keeps running, 130; never a
    traceback."""
    import sys

    try:
        step()
    except CloudError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except Terminated:
        return 143
    except KeyboardInterrupt:
        print(interrupted_line(), file=sys.stderr, flush=True)
        return 130
    return 0
