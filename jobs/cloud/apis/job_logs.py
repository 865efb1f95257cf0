"""A Vertex AI job's replica logs from Cloud Logging, as ``gcloud ai custom-jobs stream-logs`` reads and prints them.

Where Vertex puts them: entries of ``resource.type="ml_job"`` whose ``resource.labels.job_id`` is the job's id and
``resource.labels.task_name`` the replica (``workerpool0-0``: pool 0, replica 0); a tuning job's trial also carries
``labels."ml.googleapis.com/trial_id"`` (gcloud's ``googlecloudsdk/command_lib/ai/log_util.py`` ``_LogFilters`` and
``command_lib/ml_engine/log_utils.py`` ``GetLabelAttributes``). A line is ``jsonPayload.message``, else
``textPayload`` (gcloud's ``_EntryToDict``), printed as gcloud's ``LOG_FORMAT`` does: severity, time, task, message.

* :func:`read`: one replica's (or the whole job's) entries, newest first from the API, bounded in number
  (``limit``) and bytes (``max_bytes``), returned oldest first;
* :func:`explain_failure`: what the runner prints when a job failed: per failed replica its last lines and one
  hint line (``jobs.rules.vertex_failures``), the job's console link; a Cloud Logging that cannot be read (403, 5xx
  beyond the policy, a dropped connection, silence, garbage) is one line saying so and how to see the logs;
* :func:`console_url`: the job's page in the console (the installed aiplatform SDK's ``_dashboard_uri``).

The client is google-cloud-logging's ``Client(_use_grpc=False)``: its generated client speaks gRPC only, the
HTTP JSON client (``POST /v2/entries:list``) gets the policy's connect and read timeouts (FACTS.md). Every call
goes through ``jobs.cloud.apis.clients`` (one ``warning:`` line per retry), credentials through
``jobs.cloud.apis.credentials``.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import itertools
import re
from typing import Any, Callable

from jobs.rules import vertex_failures
from jobs.cloud.apis import clients
from jobs.cloud.apis.lines import failure_line
from jobs.cloud.apis.credentials import credentials
from jobs.rules.errors import CloudError
from trainers.resource_names import JOB_NAME_RE, fits

SERVICE = "Cloud Logging"
#: how many of a failed replica's last lines the runner shows, and at most how many bytes of them
FAILURE_LINES, FAILURE_BYTES = 30, 6000
#: how many failed replicas (or trials) the runner reads the logs of
FAILED_REPLICAS = 3


@dataclasses.dataclass(frozen=True)
class Entry:
    severity: str
    timestamp: datetime.datetime | None
    task: str
    message: str
    trial: str = ""

    def line(self) -> str:
        """As gcloud's ``stream-logs`` prints it (``LOG_FORMAT``: severity, time, task, message), the task also
        named as this product names the replica."""
        when = self.timestamp.strftime("%Y-%m-%d %H:%M:%S %z") if self.timestamp else "-"
        task = f"{vertex_failures.replica_of(self.task)} ({self.task})" if self.task else "unknown_task"
        trial = f" trial {self.trial}" if self.trial else ""
        return f"{self.severity or 'DEFAULT'}\t{when}\t{task}{trial}\t{self.message}"


def job_id(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]


#: a replica's task name as Vertex logs it (``workerpool0-0``) and a trial's id: the forms a filter takes
TASK_RE = re.compile(r"workerpool[0-3]-[0-9]{1,6}")
TRIAL_RE = re.compile(r"[0-9]{1,20}")
TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z")


def quoted(value: str) -> str:
    """A string value in a Cloud Logging filter, as the logging query language writes one: in double quotes, a
    backslash or a double quote inside escaped with a backslash ("Logging query language", Values and conversions)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def log_filter(name: str, task: str | None = None, trial: str | None = None, after: str | None = None,
               since: str | None = None) -> str:
    """The Cloud Logging filter of a job's (``name``'s) entries: gcloud's, plus a trial and times: ``after``
    (exclusive: what ``--follow`` has not shown yet), ``since`` (inclusive: the job's creation time; without a time
    of its own google-cloud-logging adds ``timestamp>=`` 24 hours ago, which would hide an older job's lines).
    Every value is of its form (``trainers.resource_names.JOB_NAME_RE``, a task, a trial id, an RFC 3339 time) or
    a CloudError, and quoted (:func:`quoted`): nothing read from a file reaches the filter as syntax."""
    for what, form, value, shape in (
            ("job", JOB_NAME_RE, name, "projects/PROJECT/locations/REGION/customJobs/NUMBER"),
            ("task", TASK_RE, task, "workerpoolN-M"), ("trial", TRIAL_RE, trial, "a number"),
            ("time", TIME_RE, after, "YYYY-MM-DDTHH:MM:SSZ"), ("time", TIME_RE, since, "YYYY-MM-DDTHH:MM:SSZ")):
        if value is not None and not fits(form, value):
            raise CloudError(f"reading the logs: the {what} {str(value)[:120]!r} is not of its form ({shape})")
    parts = ['resource.type="ml_job"', f"resource.labels.job_id={quoted(job_id(name))}"]
    if task:
        parts.append(f"resource.labels.task_name={quoted(task)}")
    if trial:
        parts.append(f'labels."ml.googleapis.com/trial_id"={quoted(trial)}')
    if since:
        parts.append(f"timestamp>={quoted(since)}")
    if after:
        parts.append(f"timestamp>{quoted(after)}")
    return " AND ".join(parts)


def _client(project: str, endpoint: str):
    """google-cloud-logging's HTTP JSON client (not its gRPC GAPIC one: the policy's timeouts apply to HTTP)."""
    from google.cloud import logging as cloud_logging

    return cloud_logging.Client(project=project, credentials=credentials(endpoint or None, SERVICE),
                                _use_grpc=False, client_options={"api_endpoint": endpoint} if endpoint else None)


def _entry(item: Any) -> Entry:
    payload = getattr(item, "payload", None)
    if isinstance(payload, dict):
        message = str(payload.get("message") or "")
    elif payload is None:
        message = ""
    else:
        message = str(payload)
    resource = getattr(item, "resource", None)
    task = str(((getattr(resource, "labels", None) or {}).get("task_name")) or "")
    labels = getattr(item, "labels", None) or {}
    trial = str(labels.get("ml.googleapis.com/trial_id") or labels.get("trial_id") or "")
    return Entry(str(getattr(item, "severity", "") or "DEFAULT"), getattr(item, "timestamp", None), task, message, trial)


def read(name: str, *, project: str, task: str | None = None, trial: str | None = None, endpoint: str = "",
         limit: int = FAILURE_LINES, max_bytes: int = FAILURE_BYTES, after: str | None = None,
         since: str | None = None, newest: bool = True) -> list[Entry]:
    """The entries of the job ``name`` (a replica's with ``task``, a trial's with ``trial``, those after the
    RFC 3339 time ``after``): the newest ``limit`` (``newest``; else the oldest), at most ``max_bytes`` of
    messages, returned oldest first. A failure is one CloudError line.

    Each attempt is one page (``pageSize`` = ``limit``) under the policy: google-cloud-core's connection takes a
    ``timeout`` per request but the entries' iterator passes none (60 s by default), so the connection's
    ``api_request`` is bound to the attempt's ``(connect, read)`` timeout before the page is asked for."""
    from google.cloud.logging import DESCENDING, ASCENDING

    client = _client(project, endpoint)
    text = log_filter(name, task, trial, after, since or "1970-01-01T00:00:00Z")
    doing = f"reading the logs of {vertex_failures.replica_of(task) if task else 'job'} {job_id(name)}"

    def attempt(timeout):
        connection = client._connection
        connection.api_request = functools.partial(type(connection).api_request, connection, timeout=timeout)
        pages = client.list_entries(resource_names=[f"projects/{project}"], filter_=text,
                                    order_by=DESCENDING if newest else ASCENDING, page_size=limit, max_results=limit)
        return [_entry(e) for e in itertools.islice(pages, limit)]

    try:
        found = clients.retried(attempt, doing=doing, service=SERVICE)
    except (KeyboardInterrupt, CloudError):
        raise
    except Exception as exc:  # google.api_core / google.auth / requests / JSON errors
        raise CloudError(failure_line(exc, doing)) from None
    kept, size = [], 0
    for e in found:  # newest first: keep the newest that fit
        size += len(e.message.encode("utf-8", "replace"))
        if kept and size > max_bytes:
            break
        kept.append(e if len(e.message) <= max_bytes else dataclasses.replace(e, message=e.message[-max_bytes:]))
    return list(reversed(kept)) if newest else kept


def created(job: Any) -> str | None:
    """The job's creation time (RFC 3339), the start of its logs; None when the job does not say."""
    when = getattr(job, "create_time", None)
    try:
        return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when else None
    except (AttributeError, ValueError):
        return None


def console_url(name: str) -> str:
    """The job's page in the console, as the installed aiplatform SDK links it (``_dashboard_uri``)."""
    parts = name.split("/")
    project, location, job = parts[1], parts[3], parts[5]
    # aiplatform 1.165: CustomJob and HyperparameterTuningJob both have ``_job_type = "training"``
    return f"https://console.cloud.google.com/agent-platform/locations/{location}/training/{job}?project={project}"


def stream_logs_command(name: str, task: str | None = None) -> str:
    """The gcloud command that shows the same logs."""
    parts = name.split("/")
    group = "hp-tuning-jobs" if parts[4] == "hyperparameterTuningJobs" else "custom-jobs"
    task_flag = f" --task-name {task}" if task else ""
    return f"gcloud ai {group} stream-logs {parts[5]} --region {parts[3]} --project {parts[1]}{task_flag}"


def explain_failure(job: Any, name: str, *, project: str, location: str, endpoint: str = "",
                    log: Callable[[str], None] = print, seen: list[str] | None = None) -> vertex_failures.Cause | None:
    """What a failed job (``job``: the ``CustomJob`` or ``HyperparameterTuningJob`` as last read) says: per failed
    replica (those its message names, else the chief; a tuning job's: each failed trial's chief), its last lines
    from Cloud Logging, then one hint line where the cause is known, and the job's console link. Returns the
    cause (None: not known); the replicas' lines it showed are appended to ``seen`` when given. Never raises for
    Cloud Logging: a failure to read is one line."""
    message = " ".join((job.error.message or "").split())
    cause = vertex_failures.classify(message, (), location)
    targets: list[tuple[str | None, str | None]] = []
    if cause is None or cause.kind not in ("capacity", "quota"):  # capacity and quota: no replica ever ran
        trials = [t for t in getattr(job, "trials", ()) or () if t.state.name == "FAILED"][:FAILED_REPLICAS]
        if trials:
            targets = [("workerpool0-0", str(t.id)) for t in trials]
        else:
            targets = [(t, None) for t in vertex_failures.failed_tasks(message)[:FAILED_REPLICAS]] or [("workerpool0-0", None)]
    seen = [] if seen is None else seen
    for task, trial in targets:
        who = vertex_failures.replica_of(task) + (f" of trial {trial}" if trial else "")
        try:
            entries = read(name, project=project, task=task, trial=trial, endpoint=endpoint, since=created(job))
        except CloudError as exc:
            log(f"{who}'s logs could not be read from Cloud Logging: {exc}; see them with "
                f"{stream_logs_command(name, task)}")
            continue
        if not entries:
            log(f"{who}: Cloud Logging holds no lines of it (yet: entries arrive within a minute or two); "
                f"{stream_logs_command(name, task)}")
            continue
        log(f"{who}'s last {len(entries)} lines (Cloud Logging):")
        for e in entries:
            for text in (e.message.splitlines() or [""]):
                log(f"  {text}")
                seen.append(text)
    if cause is None:
        cause = vertex_failures.classify(message, seen, location)
    if cause is not None:
        log(f"hint: {cause.hint}")
    log(f"the job in the console: {console_url(name)}")
    return cause
