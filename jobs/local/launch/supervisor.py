"""Local launcher: run a job's Vertex AI worker pools as real processes on 127.0.0.1.

Any command is the worker command (``python -m trainer.task --user_arg value`` runs unchanged);
every replica gets the environment Vertex AI custom training would give it, so the same trainer
runs locally and on Vertex.

    python -m jobs.local.launch --replicas 1,1,0,0 --base-output-dir runs/x -- python -m trainer.task
    result = launch([sys.executable, "-m", "trainer.task"], [1, 1], "runs/x", max_restarts=2)

This module is the supervisor (:func:`launch`: the restarts, the timeout, the result) and the contracts below; one
attempt of every replica (start, pump their output, reap, apply the done and failure rules, stop) is
``jobs.local.launch.attempt``, what a job came to ``jobs.local.launch.outcome``, and the command line
``jobs.local.launch.__main__``.

Environment contract (``jobs.rules.replica_env``: :func:`replica_environment` builds it)
    Each replica gets only: ``base_env`` (default :func:`process_base`: ``PATH``, ``HOME``, locale,
    ``TMPDIR``, the virtualenv, what the trainer image's ``ENV`` sets and ``PYTHONPATH`` = this checkout;
    nothing else of the launcher's environment, credentials above all), plus ``env=`` (the job's declared
    variables, ``trainer.env``), plus (these win):

    * ``CLUSTER_SPEC`` = ``{"cluster": {"workerpool0": ["127.0.0.1:P"], "workerpool1": [...], ...},
      "environment": "cloud", "task": {"type": "workerpool<p>", "index": i}}``; only non-empty pools.
    * ``TF_CONFIG`` = ``{"cluster": {"chief": [...], "worker": [...], "ps": [...]}, "task": {"type":
      "chief"|"worker"|"ps"|"evaluator", "index": i}, "environment": "cloud"}``; empty roles left
      out; the evaluator (pool 3) is never in ``cluster``, as TensorFlow requires.  A single-replica
      job also gets a chief-only TF_CONFIG (Vertex sets none there); that is harmless:
      MultiWorkerMirroredStrategy runs as one worker, MirroredStrategy ignores it.
    * ``AIP_MODEL_DIR=<base>/model/``, ``AIP_CHECKPOINT_DIR=<base>/checkpoints/``,
      ``AIP_TENSORBOARD_LOG_DIR=<base>/logs/`` (``<base>`` absolute, same for every replica; the
      three dirs are created, as GCS needs no mkdir), ``CLOUD_ML_JOB_ID=<job_id>``,
      ``PYTHONUNBUFFERED=1``.  No ``AIP_JOB_ID`` (not a documented Vertex variable).
    * A fresh free port per replica on 127.0.0.1 for every attempt.

    The launcher never modifies its own ``os.environ`` (a CLUSTER_SPEC leaking into a KFP task
    process breaks the kfp executor).

Log contract
    stdout and stderr of a replica are merged; every line goes to ``log`` as ``[<role>-<i>] line``
    (``[chief-0]``, ``[worker-1]``, ``[ps-0]``, ``[evaluator-0]``) and, raw, to
    ``<base>/logs/replicas/attempt-<k>/<role>-<i>.log`` (k = 1, 2, ...), each attempt's lines after a
    separator line naming the time, the attempt and the launcher's pid (:func:`separator`): a run resumed in
    the same folder appends to the same files, and its lines never read as the earlier run's.  The
    launcher's own lines are ``[launcher] ...``.  The last 20 lines of each replica are kept for failure reports.

Done rule (``done_when``, CLI ``--done-when``)
    ``"all"`` (default: all-reduce strategies): the job succeeds when every chief, worker and evaluator
    replica has exited 0; parameter servers never exit on their own and are then stopped.  A chief
    exiting 0 while workers run is fine.
    ``"chief"`` (parameter-server training, where workers are servers too): the job succeeds when the
    chief and every evaluator have exited 0; workers and parameter servers are then killed at once
    (SIGKILL, no grace: a server holds nothing that must be saved once the chief is gone), with one
    ``[launcher] stopping ... (SIGKILL: ...)`` line.

Worker-failure rule (``on_worker_failure``, CLI ``--on-worker-failure``)
    ``"restart"`` (default): any replica's failure fails the attempt (below).
    ``"tolerate"`` (parameter-server training; needs ``done_when="chief"``): a worker exiting non-zero
    or dying of a signal is logged (``[launcher] worker-1 exited with status -9 (SIGKILL); tolerated:
    ...``) and the others go on, since the chief reschedules that worker's steps on the rest; only
    when no worker is left does it fail the attempt.  Chief, parameter-server and evaluator failures
    always fail it.

Restart contract (Vertex's ``restart_job_on_worker_restart``)
    When a replica fails (as above), all others are stopped (SIGTERM to each process group,
    ``grace_s``, then SIGKILL: MWMS workers ignore SIGTERM; under ``done_when="chief"`` the grace
    ends as soon as only workers and parameter servers are left) and, while restarts are
    left, the WHOLE job starts again on new ports (``[launcher] restart 1/2: worker-0 exited with
    status -9 (SIGKILL); restarting all replicas``).  A trainer that resumes from a checkpoint
    should print ``resumed from step <N>`` (any case, anywhere in a line): the first such line of
    the new attempt becomes ``RestartRecord.resumed_step``.  ``timeout_s`` bounds the whole job,
    restarts included.  No process is left behind: every process group started is killed and
    reaped on return, on exceptions and on KeyboardInterrupt; the CLI also turns SIGTERM/SIGHUP
    into the same clean-up; a replica whose launcher is killed outright (kill -9) is killed with it
    (``PR_SET_PDEATHSIG``).  A replica exiting with a status in ``permanent_statuses`` (default 2: bad
    config or data, ``trainers.task``'s code, and a command-line usage error by convention) is never
    restarted: the same input would fail the same way (``[launcher] not restarting: ...``).  Replicas
    run in their own sessions, so a terminal's Ctrl-C reaches only the launcher, which then stops them
    (SIGTERM, grace, SIGKILL).

Exit codes (``JobResult.returncode`` and the CLI's status)
    0 success; the failing replica's status when it exited non-zero; 128+N when it died of
    signal N; 124 on timeout; CLI only: 2 usage error, 127 command cannot start, 130 interrupted,
    128+N when the launcher got signal N.
"""
from __future__ import annotations

import os
import re
import threading
import time
from typing import Callable, Collection, Mapping, Sequence

from jobs.local.launch.attempt import Attempt, Replica
from jobs.local.launch.outcome import JobFailed, JobResult, ReplicaFailure, RestartRecord, status_text
from jobs.rules.replica_env import aip_variables, process_base, validate_replica_counts

RESUMED_RE = re.compile(r"resumed from step (\d+)", re.IGNORECASE)
#: done_when -> the roles that are servers (never exit on their own; stopped once the others are done).
DONE_RULES = {"all": ("ps",), "chief": ("ps", "worker")}
WORKER_FAILURE_RULES = ("restart", "tolerate")
#: Exit statuses never restarted (``launch(permanent_statuses=)``): 2 is ``trainers.task``'s "bad config or
#: data" (one ``error:`` line per problem) and argparse's usage error; a restart would fail the same way.
PERMANENT_STATUSES = frozenset({2})


def _job_returncode(status: int) -> int:
    return 128 - status if status < 0 else status


def launch(command: Sequence[str], replica_counts: Sequence[int], base_output_dir: str, *,
           env: Mapping[str, str] | None = None, job_id: str = "local", max_restarts: int = 0,
           timeout_s: float | None = None, grace_s: float = 5.0, cwd: str | None = None,
           log: Callable[[str], None] = print, check: bool = True, done_when: str = "all",
           on_worker_failure: str = "restart", after_attempt: Callable[[], None] | None = None,
           base_env: Mapping[str, str] | None = None, replica_env: Callable[[str, int], Mapping[str, str]] | None = None,
           stop: threading.Event | None = None, permanent_statuses: Collection[int] = PERMANENT_STATUSES,
           workdirs=None, failure_context: Mapping[str, str] | None = None) -> JobResult:
    """Run ``command`` as every replica of the worker pools ``replica_counts`` (pools 0..3).

    Returns a :class:`JobResult`; with ``check=True`` a failed or timed-out job raises
    :class:`JobFailed` instead.  ``done_when`` ("all" | "chief") and ``on_worker_failure``
    ("restart" | "tolerate"): see the module docstring, as for the other contracts.
    ``after_attempt``: called once every replica of an attempt is reaped, on every path (the docker
    runner removes the attempt's containers there: a replica process killed with SIGKILL cannot).
    ``base_env``: what every replica process starts from (default :func:`process_base`; the docker runner's
    replica processes are its own container stand-ins, which need the engine's settings).
    ``replica_env(role, index)``: variables for one replica only, over ``env`` (a tuning trial gives each
    replica its own ``CLOUD_ML_HP_METRIC_FILE``); the Vertex variables still win.
    ``stop``: a ``threading.Event`` another thread sets to end the job as a KeyboardInterrupt would (every
    replica SIGTERM, ``grace_s``, SIGKILL; then :class:`Stopped` is raised): the main thread alone gets Ctrl-C,
    and a job run in a worker thread must still stop the preemption way.
    ``permanent_statuses``: exit statuses that end the job at once, restarts left or not (see the module doc).
    ``workdirs``: a ``jobs.local.launch.workdir.ReplicaWorkdirs``: every replica of every attempt runs in its own
    working folder holding the trainer's code, as a Vertex replica in its container (``cwd`` is then unused).
    ``failure_context``: what a failed replica's hint reads beside its code (``ReplicaFailure``'s ``requirements``
    and ``runner``).
    """
    counts = validate_replica_counts(replica_counts)
    _check_arguments(command, base_output_dir, cwd, max_restarts, timeout_s, grace_s, done_when, on_worker_failure)
    base = os.path.abspath(str(base_output_dir))
    for d in aip_variables(base).values():
        os.makedirs(d, exist_ok=True)
    base_env = process_base() if base_env is None else dict(base_env)
    log_dir = os.path.join(base, "logs", "replicas")
    start = time.monotonic()
    deadline = None if timeout_s is None else start + timeout_s
    restarts: list[RestartRecord] = []
    tolerated: list[ReplicaFailure] = []
    number = 0

    def on_line(_r: Replica, text: str) -> None:
        if restarts and restarts[-1].attempt == number and restarts[-1].resumed_step is None:
            m = RESUMED_RE.search(text)
            if m:
                restarts[-1].resumed_step = int(m.group(1))

    def result(rc: int, failure: ReplicaFailure | None, notes: list[str] | None = None) -> JobResult:
        res = JobResult(rc, failure, restarts, number, log_dir, time.monotonic() - start, tolerated, list(notes or []))
        if failure is not None:
            log(f"[launcher] job failed: {failure.describe().splitlines()[0]}")
            if check:
                raise JobFailed(res)
        else:
            log(f"[launcher] {res.message}")
        return res

    while True:
        number += 1
        attempt = Attempt(number, counts, command, base, env, job_id, cwd, log, on_line, base_env, replica_env, stop,
                          workdirs, failure_context)
        outcome, failure = _run_attempt(attempt, deadline, timeout_s, grace_s, done_when, on_worker_failure,
                                        after_attempt, log)
        tolerated.extend(attempt.tolerated)
        if outcome == "ok":
            return result(0, None, attempt.watch.findings())
        if outcome == "timeout":
            failure.exit_status = 124
            return result(124, failure)
        over_time = deadline is not None and time.monotonic() >= deadline
        permanent = failure.exit_status in permanent_statuses
        if number > max_restarts or over_time or permanent:
            if over_time and number <= max_restarts:
                log("[launcher] not restarting: timeout reached")
            elif permanent and number <= max_restarts:
                log(f"[launcher] not restarting: {failure.name} exited with status {failure.exit_status} (bad config "
                    "or input): a restart would fail the same way")
            return result(_job_returncode(failure.exit_status), failure)
        log(f"[launcher] restart {number}/{max_restarts}: {failure.name} exited with status "
            f"{status_text(failure.exit_status)}; restarting all replicas")
        restarts.append(RestartRecord(attempt=number + 1, failure=failure, resumed_step=None))


def _check_arguments(command: Sequence[str], base_output_dir: str, cwd: str | None, max_restarts: int,
                     timeout_s: float | None, grace_s: float, done_when: str, on_worker_failure: str) -> None:
    """ValueError naming the first of :func:`launch`'s arguments that cannot be run as given."""
    if isinstance(command, (str, bytes)) or not list(command):
        raise ValueError("command must be a non-empty list of arguments, e.g. "
                         "['python', '-m', 'trainer.task', '--user_arg', 'value']")
    if "://" in str(base_output_dir):
        raise ValueError(f"base_output_dir must be a local directory for the local launcher, "
                         f"got {base_output_dir!r}")
    if cwd is not None and not os.path.isdir(cwd):
        raise ValueError(f"cwd {cwd!r} is not a directory")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
    if grace_s < 0:
        raise ValueError(f"grace_s must be >= 0, got {grace_s!r}")
    if done_when not in DONE_RULES:
        raise ValueError(f"done_when must be one of {', '.join(DONE_RULES)}, got {done_when!r}")
    if on_worker_failure not in WORKER_FAILURE_RULES:
        raise ValueError(f"on_worker_failure must be one of {', '.join(WORKER_FAILURE_RULES)}, "
                         f"got {on_worker_failure!r}")
    if on_worker_failure == "tolerate" and done_when != "chief":
        raise ValueError("on_worker_failure='tolerate' needs done_when='chief': a worker that must finish "
                         "cannot be tolerated when it dies")


def _run_attempt(attempt: Attempt, deadline: float | None, timeout_s: float | None, grace_s: float, done_when: str,
                 on_worker_failure: str, after_attempt: Callable[[], None] | None, log: Callable[[str], None]
                 ) -> tuple[str, ReplicaFailure | None]:
    """Wait for one attempt to end and stop what is left of it (the servers after success; everything otherwise):
    ``("ok", None)``, ``("failed", failure)`` or ``("timeout", failure)``; ``after_attempt`` runs on every path."""
    servers = DONE_RULES[done_when]
    failure = None
    try:
        outcome, what = attempt.wait(deadline, servers, on_worker_failure == "tolerate")
        if outcome == "failed":
            failure = attempt.failure(what)
            log(f"[launcher] {what.name} exited with status {status_text(what.returncode)}; "
                "stopping all replicas")
        elif outcome == "timeout":
            first = next((r for r in what if r.role != "ps"), what[0])
            failure = attempt.failure(first, timed_out_after=timeout_s, still_running=[r.name for r in what])
            log(f"[launcher] timed out after {timeout_s:g} s; still running: " + ", ".join(r.name for r in what))
    finally:
        try:
            attempt.close(grace_s, servers if done_when == "chief" else ())
        finally:
            if after_attempt is not None:
                after_attempt()
    return outcome, failure
