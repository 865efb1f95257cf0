"""A local stand-in of the Vertex AI v1 REST API: pipeline jobs and Model Registry uploads.

Answers what ``google.cloud.aiplatform`` (PipelineJob) and ``aiplatform_v1.ModelServiceClient`` send
over the REST transport:

* ``POST /v1/projects/P/locations/L/pipelineJobs?pipelineJobId=ID`` -> the job, state PENDING;
* ``GET  /v1/projects/P/locations/L/pipelineJobs/ID`` -> the job, its state advancing one step of
  ``states`` per GET (e.g. RUNNING, RUNNING, SUCCEEDED); a FAILED end carries ``error.message`` and a
  failed task in ``jobDetail.taskDetails``;
* ``POST /v1/projects/P/locations/L/models:upload`` -> a long-running operation, not done (done at
  once with ``upload_done=True``);
* ``GET  /v1/projects/P/locations/L/models/M/operations/O`` -> done, ``UploadModelResponse``.

Everything is recorded in ``requests`` (see ``tests.standins.base``).
"""
from __future__ import annotations

import itertools
from typing import Any

from tests.standins.base import Request, StandIn

_PREFIX = r"/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"


class VertexStandIn(StandIn):
    def __init__(self, states=("RUNNING", "SUCCEEDED"), error_message: str = "The DAG failed because some tasks failed.",
                 failed_task: str = "train-vertex", task_message: str = "Replica workerpool0-0 exited with a non-zero status of 1.",
                 upload_done: bool = False):
        super().__init__()
        self.upload_done = upload_done  # answer models:upload with a finished operation (no polling)
        self.states = list(states)
        self.error_message, self.failed_task, self.task_message = error_message, failed_task, task_message
        self.jobs: dict[str, dict[str, Any]] = {}
        self.gets: dict[str, int] = {}
        self.models: list[dict[str, Any]] = []
        self._ids = itertools.count(1000)
        self.route("POST", _PREFIX + r"/pipelineJobs", self._create_job)
        self.route("GET", _PREFIX + r"/pipelineJobs/(?P<job>[^/]+)", self._get_job)
        self.route("POST", _PREFIX + r"/models:upload", self._upload_model)
        # aiplatform_v1's REST transport reads operations under /ui/ (its first HTTP rule); /v1/ also works.
        self.route("GET", r"/(?:v1|ui)" + _PREFIX[3:] + r"/models/(?P<model>[^/]+)/operations/(?P<op>[^/]+)",
                   self._get_operation)

    # -- pipeline jobs ---------------------------------------------------------------------------
    def _create_job(self, req: Request, m) -> tuple[int, Any]:
        job_id = (req.query.get("pipelineJobId") or [f"job-{next(self._ids)}"])[0]
        name = f"projects/{m['project']}/locations/{m['location']}/pipelineJobs/{job_id}"
        job = dict(req.json(), name=name, state="PIPELINE_STATE_PENDING", createTime="2026-11-22T08:00:00Z")
        self.jobs[job_id] = job
        return 200, job

    def _get_job(self, req: Request, m) -> tuple[int, Any]:
        job = self.jobs.get(m["job"])
        if job is None:
            return 404, {"error": {"code": 404, "message": f"pipeline job {m['job']} not found", "status": "NOT_FOUND"}}
        n = self.gets[m["job"]] = self.gets.get(m["job"], 0) + 1
        state = self.states[min(n, len(self.states)) - 1]
        job = dict(job, state=f"PIPELINE_STATE_{state}")
        if state == "FAILED":
            job["error"] = {"code": 9, "message": self.error_message}
            job["jobDetail"] = {"taskDetails": [
                {"taskName": "validate-config", "state": "SUCCEEDED"},
                {"taskName": self.failed_task, "state": "FAILED", "error": {"code": 9, "message": self.task_message}},
            ]}
        self.jobs[m["job"]] = job
        return 200, job

    # -- models ----------------------------------------------------------------------------------
    def _upload_model(self, req: Request, m) -> tuple[int, Any]:
        model_id = str(next(self._ids))
        self.models.append(req.json())
        op = f"projects/{m['project']}/locations/{m['location']}/models/{model_id}/operations/{next(self._ids)}"
        if self.upload_done:
            return 200, self._done(op, f"projects/{m['project']}/locations/{m['location']}/models/{model_id}")
        return 200, {"name": op, "metadata": {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelOperationMetadata"}}

    def _get_operation(self, req: Request, m) -> tuple[int, Any]:
        model = f"projects/{m['project']}/locations/{m['location']}/models/{m['model']}"
        return 200, self._done(req.path.split("/", 2)[2], model)

    @staticmethod
    def _done(operation: str, model: str) -> dict[str, Any]:
        return {"name": operation, "done": True, "response": {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
            "model": model, "modelVersionId": "1"}}
