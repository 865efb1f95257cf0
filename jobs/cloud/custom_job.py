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

* :func:`custom_job` parses the spec that ``jobs.job_spec`` assembles (the one builder: ``{}`` kept between used
  pools, trailing empty pools dropped, as the aiplatform SDK's ``worker_spec_utils`` does) into the
  ``aiplatform_v1.CustomJob`` strictly (``json_format.ParseDict``, unknown fields refused), the run's system
  labels (``VERTEX_AI_PIPELINES_RUN_LABELS``) added;
* :func:`run` creates it through the runner: created once (a create whose answer was lost is not repeated),
  ``gcp_resources`` written in GCPC's format, a retried task following the job it created, polled to a
  terminal state, cancelled on SIGTERM (the pipeline was cancelled), a failed job one line carrying its error.
"""
from __future__ import annotations

import json
import time
from typing import Callable

from jobs.cloud import clients, job_runner

CUSTOM_JOB = job_runner.JobType(
    resource="CustomJob", collection="customJobs", method="custom_job", gcloud="custom-jobs",
    created=lambda job: f" with {len(job.job_spec.worker_pool_specs)} worker pools")


def custom_job(*, display_name: str, labels: dict[str, str] | None = None, **parts):
    """The ``aiplatform_v1.CustomJob`` to create: the spec assembled from ``parts`` by ``jobs.job_spec.job_spec``
    (the one builder: pools by position, empty parts left out), the run's system labels added, parsed
    strictly (unknown fields refused)."""
    from jobs.job_spec import job_spec

    try:
        spec = job_spec(**parts)
    except ValueError as exc:
        raise clients.CloudError(str(exc)) from None
    return job_runner.request(CUSTOM_JOB, {"display_name": display_name, "job_spec": spec, "labels": labels or {}})


def run(*, project: str, location: str, gcp_resources: str, api_endpoint: str = "",
        log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep, **spec) -> str:
    """Create (or resume) the CustomJob and follow it to the end (``jobs.cloud.job_runner.run``); returns its
    name. A failed, cancelled or expired job, or a give-up of the policy, is a CloudError with one line."""
    return job_runner.run(CUSTOM_JOB, custom_job(**spec), project=project, location=location,
                          gcp_resources=gcp_resources, api_endpoint=api_endpoint, log=log, sleep=sleep).name


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

    def json_list(flag: str, what: str, optional: bool = False) -> list | None:
        """A list argument (kfp passes lists as JSON; ``optional``: empty is []); None after its one error line."""
        text = getattr(args, flag)
        try:
            value = json.loads(text) if text or not optional else []
        except ValueError:
            value = None
        if not isinstance(value, list):
            print(f"error: --{flag}: {text[:80]!r} is not a JSON list of {what}", file=sys.stderr, flush=True)
            return None
        return value

    pools = json_list("worker_pool_specs", "worker pools")
    ranges = json_list("reserved_ip_ranges", "range names", optional=True) if pools is not None else None
    if ranges is None:
        return 1
    return job_runner.step_status(lambda: run(
        display_name=args.display_name, worker_pool_specs=pools, base_output_directory=args.base_output_directory,
        tensorboard=args.tensorboard, restart_job_on_worker_restart=args.restart_job_on_worker_restart.lower()
        == "true", scheduling_strategy=args.scheduling_strategy, timeout=args.timeout,
        max_wait_duration=args.max_wait_duration, persistent_resource_id=args.persistent_resource_id,
        service_account=args.service_account, network=args.network, location=args.location, project=args.project,
        gcp_resources=args.gcp_resources, api_endpoint=args.api_endpoint,
        disable_retries=args.disable_retries.lower() == "true", enable_web_access=args.enable_web_access.lower() == "true",
        enable_dashboard_access=args.enable_dashboard_access.lower() == "true", reserved_ip_ranges=ranges,
        psc_network_attachment=args.psc_network_attachment))


if __name__ == "__main__":
    raise SystemExit(main())
