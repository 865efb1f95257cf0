"""A job's worker pools on this machine, as Vertex runs the job's CustomJob: THE local launch.

Every local run of a job's replicas comes through :func:`launch`: the pipeline's train step
(``jobs.steps.calls.run_local``), every trial of a local study (``jobs.tuning.trial.trial_launch``), and whatever
runs a job next beside them. What the replicas run is read from the one builder of the Vertex job
(``jobs.rules.job_spec``): the worker command every pool's ``container_spec`` carries (:func:`job_spec.worker_command`)
and the variables the job declares (``trainer.env``, :func:`job_spec.declared_env`). The variables stay a
mapping all the way into each replica's environment (``jobs.rules.replica_env.replica_environment``), the same
mapping Vertex gets as ``container_spec.env``. A caller adds arguments after the job's own (a trial's
``--NAME=VALUE`` flags) and variables of its own, for every replica (``env``: ``CLOUD_ML_TRIAL_ID``) or per
replica (``replica_env``: a trial's ``CLOUD_ML_HP_METRIC_FILE``).

Two runners, as ``python pipelines/run.py --runner`` chose:

* the process runner (default): every replica a process here, ``python`` in the command being this
  interpreter (as the image's python is the container's); a user trainer's replica in a working folder of its own
  holding a copy of the code the image's WORKDIR holds, discarded when it ends (``jobs.local.launch.workdir``: what
  a trainer writes "here" never lands in ``trainer.source_dir``, as on Vertex it stays in the container);
* the docker runner (``jobs.local.launch.containers.Settings`` in the environment: the train step runs in the job's
  image): every replica a container of its pool's ``container_spec``, started by a stand-in process that
  reads the job spec from a file beside the replicas' logs. That file is the spec as Vertex gets it, so
  arguments and variables of the caller's own, which it would not carry, are refused there (ValueError).

The launcher (``jobs.local.launch``) does the rest: Vertex's environment for every replica, restarts
(``scheduling.max_restarts``; none with ``scheduling.disable_retries``), the strategy's done and worker-failure rules (``job_spec.launch_rules``), the
timeout (``scheduling.timeout``), Ctrl-C and ``stop``.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Callable, Mapping, Sequence

from jobs.rules import job_spec
from jobs.local.launch import containers, supervisor
from jobs.local.launch.outcome import JobResult
from jobs.local.launch.workdir import ReplicaWorkdirs
from jobfile import config as config_lib


def launch(cfg: config_lib.JobConfig, base: str, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
           replica_env: Callable[[str, int], Mapping[str, str]] | None = None, job_id: str | None = None,
           timeout_s: float | None = None, check: bool = True, stop: threading.Event | None = None,
           log: Callable[[str], None] = print) -> JobResult:
    """Run the job's worker pools with ``base`` as their base output directory (``AIP_MODEL_DIR`` is
    ``<base>/model/``...); returns the launcher's ``JobResult``.

    ``args``: appended to the worker command; ``env``: variables for every replica, over the job's declared
    ones; ``replica_env(role, index)``: variables for one replica, over both (Vertex's own still win);
    ``job_id``: ``CLOUD_ML_JOB_ID`` (default the job's name); ``timeout_s``: the whole job's bound, restarts
    included (default ``scheduling.timeout``); ``check``: a failed job raises ``JobFailed`` (else it is
    in the result); ``stop``: an event another thread sets to stop every replica the preemption way
    (``Stopped`` is raised). Raises ValueError when the command cannot be started as given."""
    timeout = timeout_s if timeout_s is not None else float(cfg.scheduling.timeout.rstrip("s"))
    docker = containers.Settings.from_env()
    if docker is not None:
        if args or env or replica_env:
            raise ValueError("the docker runner starts each replica from the job spec as Vertex gets it; arguments "
                             "and variables of the caller's own need the process runner (--runner process)")
        specs = containers.worker_pool_specs_file(
            base, job_spec.parts(job_spec.custom_job_spec(cfg))["worker_pool_specs"])
        command, declared, cwd, workdirs = containers.launcher_command(specs), {}, None, None
        base_env = containers.stand_in_environment()
        runner = "docker"
        engine = containers.engine_client(docker.timeout_s)

        def after_attempt() -> None:
            containers.remove_labelled(engine, {containers.LABEL_RUN: docker.run_id,
                                                containers.LABEL_KIND: "replica"}, log)
    else:
        command = [str(c) for c in job_spec.worker_command(cfg)] + [str(a) for a in args]
        if command[0] in ("python", "python3"):  # the container's python is this interpreter here
            command[0] = sys.executable
        declared = {**job_spec.declared_env(cfg), **{str(k): str(v) for k, v in (env or {}).items()}}
        cwd, after_attempt, base_env, runner = None, None, None, "process"
        workdirs = ReplicaWorkdirs(cfg.trainer.source_dir, base) if cfg.user_trainer and cfg.trainer.source_dir else None
        if workdirs is not None:
            log(f"[launcher] {workdirs.describe()}")
    requirements = (os.path.join(cfg.trainer.source_dir or ".", cfg.trainer.requirements)
                    if cfg.trainer.requirements else None)
    return supervisor.launch(
        command, cfg.topology.replica_counts(), base, job_id=job_id or cfg.name,
        max_restarts=job_spec.local_max_restarts(cfg), timeout_s=timeout, log=log, env=declared, cwd=cwd, check=check,
        after_attempt=after_attempt, base_env=base_env, replica_env=replica_env, stop=stop, workdirs=workdirs,
        failure_context={"requirements": requirements, "runner": runner}, **job_spec.launch_rules(cfg))
