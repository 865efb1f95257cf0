"""``vtp logs RUN_FOLDER|JOB_RESOURCE_NAME [--replica chief-0] [--follow]``: a job's replica logs, one command for
both places.

* A Vertex job (its resource name ``projects/P/locations/L/customJobs/ID`` or ``.../hyperparameterTuningJobs/ID``;
  a run folder whose ``vertex_jobs.json`` names the CustomJob(s) the training step created; a ``gcp_resources``
  file): its entries from Cloud Logging (``jobs.cloud.apis.job_logs``: ``resource.type="ml_job"``, the job's id, the
  replica's ``task_name``), printed as ``gcloud ai custom-jobs stream-logs`` prints them (severity, time, task,
  message), the newest ``--lines`` oldest first; ``--follow`` polls for newer ones until the job has ended.
* A local run (a run folder with ``logs/replicas/``): each attempt's replica logs (``attempt-<k>/<role>-<i>.log``,
  or any other ``*.log`` under ``logs/replicas``), each line prefixed with its attempt and replica as the Vertex lines
  are with their task; ``--follow`` prints what the replicas append until the run holding the folder ends.

Bad input is one ``error:`` line and exit status 2; a cloud failure one line and 1; Ctrl-C ends ``--follow`` with
130 and no traceback. A job's name, typed or read from a file, is used only once it has a job name's form
(``trainers.resource_names.JOB_NAME_RE``); ``vertex_jobs.json`` is read by THE record reader (a damaged one is one
``unreadable:`` line); a replica log that is not a regular file (a named pipe) is skipped with one line, never
waited on.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Callable

from jobs.rules import vertex_failures
from jobs.run_records import records
from jobs.rules.command_line import shown
from jobs.cloud.apis import clients, job_logs
from jobs.cloud.vertex_jobs import job_runner
from jobs.cloud.apis.credentials import client_kwargs
from jobs.rules.errors import CloudError
from jobs.local.history.reader import UsageError, lock_held
from trainers import record_reader
from jobfile.regular_file import NotARegularFile, open_regular
from trainers.resource_names import JOB_NAME_RE, fits

PROG = "python pipelines/run.py logs"
JOB_FORM = "projects/PROJECT/locations/REGION/customJobs/NUMBER (or hyperparameterTuningJobs/NUMBER)"
#: how often --follow looks again: a local file, Cloud Logging
LOCAL_POLL_S, CLOUD_POLL_S = 0.5, 10.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse's hook: one error line, not usage + exit 2
        raise UsageError(f"{self.prog}: {message}; see {self.prog} --help")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog=shown(PROG), description="A job's replica logs: a local run folder's, or a Vertex AI job's "
                                              "from Cloud Logging (as gcloud ai custom-jobs stream-logs prints them).")
    p.add_argument("target", metavar="RUN_FOLDER|JOB_RESOURCE_NAME",
                   help="a run folder (output.base_dir), or projects/P/locations/L/customJobs/ID")
    p.add_argument("--replica", help="one replica: chief-0, worker-1, ps-0, evaluator-0 (or Vertex's workerpool1-0)")
    p.add_argument("--follow", action="store_true", help="keep printing new lines until the job or run ends")
    p.add_argument("--lines", type=int, default=200, help="Vertex: the newest N lines (default 200)")
    p.add_argument("--logging-endpoint", default="", help=argparse.SUPPRESS)  # a stand-in's, in tests
    p.add_argument("--api-endpoint", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.replica is not None and vertex_failures.task_of(args.replica) is None:
        raise UsageError(f"--replica: {args.replica!r} is not a replica name; valid forms: "
                         f"{', '.join(vertex_failures.replica_names())}")
    if args.lines < 1:
        raise UsageError(f"--lines must be a whole number >= 1, got {args.lines} (e.g. --lines 200)")
    return args


def main(argv: list[str] | None = None, out: Callable[[str], None] | None = None,
         sleep: Callable[[float], None] = time.sleep) -> int:
    out = out or (lambda line: print(line, flush=True))
    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv))
        target = args.target.rstrip("/")
        jobs = _vertex_jobs(target)
        if jobs:
            return _vertex(jobs, args, out, sleep)
        replicas = os.path.join(target, "logs", "replicas")
        if os.path.isdir(replicas):
            return _local(target, args, out, sleep)
        raise UsageError(f"{target}: not a run folder with replica logs ({replicas}) or with a Vertex run's record "
                         f"({records.VERTEX_JOBS_RECORD}), and not a job's resource name; e.g. runs/local or "
                         "projects/my-proj/locations/us-central1/customJobs/123")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except CloudError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


# -- Vertex ----------------------------------------------------------------------------------------------------
def _vertex_jobs(target: str) -> list[str]:
    """The Vertex jobs ``target`` names, oldest first: itself (a resource name), a run folder's CustomJob attempts,
    a ``gcp_resources`` file's job. Each of its form, or UsageError."""
    if fits(JOB_NAME_RE, target):
        return [target]
    if target.startswith("projects/") and not os.path.exists(target):
        raise UsageError(f"{target[:200]!r} is not a Vertex job's resource name; the form: {JOB_FORM}")
    if os.path.isdir(target):
        try:
            attempts = records.vertex_attempts(target)
        except record_reader.Unreadable as exc:
            raise UsageError(f"{exc}; the run's Vertex jobs cannot be named from it (give a job's resource name: "
                             f"{JOB_FORM})") from None
        for i, a in enumerate(attempts):
            if a.get("job") is not None and not fits(JOB_NAME_RE, a["job"]):
                raise UsageError(f"unreadable: {os.path.join(target, records.VERTEX_JOBS_RECORD)}: attempts[{i}].job "
                                 f"{str(a['job'])[:120]!r} is not a job's resource name ({JOB_FORM})")
        return [a["job"] for a in attempts if a.get("job")]
    if os.path.isfile(target) and os.path.getsize(target) < 65536:
        try:
            with open_regular(target, target, limit=65536) as f:
                text = f.read()
        except (OSError, ValueError) as exc:  # NotARegularFile is a ValueError
            raise UsageError(f"{target}: cannot be read ({' '.join(str(exc).split())[:200]})") from None
        for kind, collection in (("CustomJob", "customJobs"), ("HyperparameterTuningJob", "hyperparameterTuningJobs")):
            if kind in text:
                return [job_runner.named_job(text, kind, collection, where=target)]
    return []


def _vertex(jobs: list[str], args, out: Callable[[str], None], sleep: Callable[[float], None]) -> int:
    task = vertex_failures.task_of(args.replica) if args.replica else None
    name = jobs[-1]
    project = name.split("/")[1]
    for earlier in jobs[:-1]:
        out(f"(an earlier attempt: {earlier}; vtp logs {earlier})")
    entries = job_logs.read(name, project=project, task=task, endpoint=args.logging_endpoint, limit=args.lines,
                            max_bytes=1 << 20)
    for e in entries:
        out(e.line())
    if not entries:
        out(f"(Cloud Logging holds no lines of {name}{' ' + args.replica if args.replica else ''} yet)")
    if not args.follow:
        return 0
    last = entries[-1].timestamp if entries else None
    while True:
        ended = _ended(name, args.api_endpoint)
        after = last.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if last else None
        newer = job_logs.read(name, project=project, task=task, endpoint=args.logging_endpoint, limit=1000,
                              max_bytes=1 << 20, after=after, newest=False)
        for e in newer:
            out(e.line())
        last = newer[-1].timestamp if newer else last
        if ended:
            out(f"({name.rsplit('/', 1)[-1]} ended {ended})")
            return 0
        sleep(CLOUD_POLL_S)


def _ended(name: str, api_endpoint: str) -> str | None:
    """The job's terminal state (``SUCCEEDED``...), or None while it runs."""
    # lazy: heavy: google-cloud-aiplatform
    from google.cloud import aiplatform_v1

    location = name.split("/")[3]
    client = aiplatform_v1.JobServiceClient(**client_kwargs(
        api_endpoint or f"{location}-aiplatform.googleapis.com", "Vertex AI"))
    method = "get_custom_job" if "/customJobs/" in name else "get_hyperparameter_tuning_job"
    job = clients.call(getattr(client, method), name=name, doing=f"reading {name}")
    state = job.state.name
    return None if state in job_runner.RUNNING else state.replace("JOB_STATE_", "")


# -- local -----------------------------------------------------------------------------------------------------
def _local_files(base: str, replica: str | None) -> list[tuple[str, str, str]]:
    """``(attempt, replica, path)`` of every replica log under ``<base>/logs/replicas``, attempts in order."""
    root = os.path.join(base, "logs", "replicas")
    found = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            if not n.endswith(".log"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, n), root)
            m = re.search(r"attempt-(\d+)", rel)
            attempt = int(m.group(1)) if m else 0
            who = re.sub(r"(\.attempt-\d+)?\.log$", "", n)
            if replica and vertex_failures.task_of(who) != vertex_failures.task_of(replica):
                continue
            found.append((attempt, who, os.path.join(dirpath, n)))
    found.sort(key=lambda f: (f[0], f[1]))
    return [(f"attempt {a}" if a else "-", who, path) for a, who, path in found]


def _local(base: str, args, out: Callable[[str], None], sleep: Callable[[float], None]) -> int:
    offsets: dict[str, int] = {}
    if args.replica and not _local_files(base, args.replica) and not (args.follow and lock_held(base)):
        names = sorted({who for _, who, _ in _local_files(base, None)})
        raise UsageError(f"--replica {args.replica}: {base} has no replica {args.replica} "
                         + (f"(its replicas: {', '.join(names)}); e.g. --replica {names[0]}" if names else
                            "(no replica has written a log there yet); leave --replica out to see every replica"))
    skipped: set[str] = set()

    def show() -> int:
        shown = 0
        for attempt, who, path in _local_files(base, args.replica):
            try:
                with open_regular(path, path, limit=1 << 62, text=False) as f:  # read from where it was left
                    f.seek(offsets.get(path, 0))
                    data = f.read()
            except NotARegularFile:  # a named pipe or a device: never waited on, said once
                if path not in skipped:
                    skipped.add(path)
                    out(f"(skipped {path}: not a regular file, so not a replica's log)")
                continue
            except OSError:
                continue
            complete = data[:data.rfind(b"\n") + 1] if args.follow else data  # a half-written line waits
            offsets[path] = offsets.get(path, 0) + len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                out(f"{attempt}\t{who}\t{line}")
                shown += 1
        return shown

    if not show() and not args.follow:
        out(f"(no replica has written a line in {os.path.join(base, 'logs', 'replicas')} yet)")
    if not args.follow:
        return 0
    while lock_held(base):
        sleep(LOCAL_POLL_S)
        show()
    show()
    out(f"(no run holds {base} now: nothing more will come)")
    return 0
