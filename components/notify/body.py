"""notify's work, behind ``components.entry`` (its inputs: ``component.py``): the message made by
``jobs.steps.notify_message`` and sent by ``jobs.steps.calls.notify``; never fails the run."""
from __future__ import annotations

from kfp import dsl

from jobs.steps import calls as steps


def notify(config_json: str, status: dsl.PipelineTaskFinalStatus, run_id: str = "", run_created: str = "",
           on_vertex: bool = False, folder_per_run: bool = False, pipeline_job_name: str = "", api_endpoint: str = ""):
    """Sends the run's end where the job's ``notify:`` section says; a message that cannot be sent is one ``warning:``."""
    steps.notify(config_json, status.state, error=status.error_message or "",
                 pipeline_job=status.pipeline_job_resource_name or "", run_id=run_id, run_created=run_created,
                 on_vertex=on_vertex,
                 folder_per_run=folder_per_run, pipeline_job_name=pipeline_job_name, api_endpoint=api_endpoint)
