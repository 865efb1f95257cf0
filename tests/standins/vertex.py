"""A local stand-in of the Vertex AI v1 REST API: pipeline jobs, CustomJobs and Model Registry uploads.

Answers what ``aiplatform_v1`` clients (and GCPC's model-upload launcher) send over the REST transport.
Every body is decoded with the real API type, strictly (``tests.standins.base.decode``: an unknown field
is a 400, as the real API answers), and every answer is a real response type:

* ``POST /v1/projects/P/locations/L/pipelineJobs?pipelineJobId=ID`` (a ``PipelineJob``) -> the job, state
  PENDING; the same id again -> 409 ALREADY_EXISTS (the id is the client's);
* ``GET  .../pipelineJobs/ID`` -> the job, its state advancing one step of ``states`` per GET (e.g.
  RUNNING, RUNNING, SUCCEEDED); a FAILED end carries ``error.message`` and a failed task in
  ``jobDetail.taskDetails``;
* ``POST .../customJobs`` (a ``CustomJob``) -> the job with a server-assigned id, state PENDING; kept in
  ``custom_jobs`` (what would be sent to Vertex: the worker pools by position);
* ``GET  .../customJobs/ID`` -> its state advancing through ``custom_states`` (or ``custom_by_job(job)``'s states
  and error when it answers for the job, e.g. by its accelerator; else ``custom_by_location[L]``'s for a job created in
  L); a FAILED end carries ``custom_error``; ``on_custom_state(job,
  state)`` is called as a job enters a state (a test "runs" the job: writes its checkpoint); ``start_time`` is set as
  it first runs and ``end_time`` 30 minutes later as it ends, as Vertex sets them; ``POST .../customJobs/ID:cancel`` -> CANCELLED (recorded in ``cancelled``);
* ``POST .../hyperparameterTuningJobs`` (a ``HyperparameterTuningJob``) -> the job with a server-assigned id,
  state PENDING; kept in ``tuning_jobs``; ``GET .../hyperparameterTuningJobs/ID`` -> its state advancing through
  ``tuning_states``, its ``trials`` filled from ``tuning_trials`` as they end (each ``{"id", "parameters",
  "metric", "state"}``, the metric under the study's metric id as the final measurement, start and end times):
  one more ended per read while RUNNING, all at a SUCCEEDED end; a FAILED end carries ``tuning_error``; ``POST .../hyperparameterTuningJobs/ID:cancel`` -> CANCELLED (in ``cancelled``);
* ``POST .../models:upload`` (an ``UploadModelRequest`` without its parent) -> a long-running operation,
  not done (done at once with ``upload_done=True``); ``GET .../models/M/operations/O`` -> done, with an
  ``UploadModelResponse``. With a ``parentModel`` the stand-in's registry holds (:meth:`add_model`), the
  upload is that model's next version and becomes its default; otherwise a new model (version 1);
* ``GET .../models/ID`` -> the ``Model`` as its default version (``versionId``); ``.../models/ID@V`` -> that
  version; an unknown model or version -> 404;
* ``GET .../models/ID[@V]/evaluations`` -> a ``ListModelEvaluationsResponse``, ``eval_page_size`` per page
  (``nextPageToken`` for the rest); ``POST .../models/ID[@V]/evaluations:import`` (an
  ``ImportModelEvaluationRequest`` without its parent) -> the ``ModelEvaluation`` with a server-assigned
  name, kept in ``evaluations`` (model -> version -> list).

Everything is recorded in ``requests`` (see ``tests.standins.base``).
"""
from __future__ import annotations

import datetime
import itertools
import json
from typing import Any

from urllib.parse import unquote

from tests.standins.base import Request, StandIn, decode, google_error, typed

_PREFIX = r"/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
_MODEL = r"/models/(?P<model>[^/:@%]+)(?:(?:@|%40)(?P<version>[^/:]+))?"


class VertexStandIn(StandIn):
    def __init__(self, states=("RUNNING", "SUCCEEDED"), error_message: str = "The DAG failed because some tasks failed.",
                 failed_task: str = "train-vertex", task_message: str = "Replica workerpool0-0 exited with a non-zero status of 1.",
                 upload_done: bool = False, custom_states=("RUNNING", "SUCCEEDED"),
                 custom_error: str = "The replica workerpool0-0 exited with a non-zero status of 1.",
                 eval_page_size: int = 2, tuning_states=("RUNNING", "SUCCEEDED"), tuning_trials=(),
                 tuning_error: str = "3 trials failed; the maximum number of failed trials is 3.",
                 custom_by_location: dict | None = None, on_custom_state=None, custom_by_job=None):
        super().__init__()
        # the handlers decode with aiplatform_v1: imported now, not on the first request, where its import (seconds
        # on a loaded machine) ran past the client's read timeout
        from google.cloud import aiplatform_v1  # noqa: F401
        # location -> (states, error): a CustomJob created there advances through these instead (a stockout in one
        # region, success in the next); on_custom_state(job, state): called as a job's read enters a state (the
        # stand-in "runs" the job: a test writes what its trainer would, e.g. a checkpoint)
        self.custom_by_location = dict(custom_by_location or {})
        # job -> (states, error) or None: a CustomJob's outcome by what it asks for (a stockout of one machine, success
        # on the next rung of a hardware ladder); None: by its location
        self.custom_by_job = custom_by_job
        self.on_custom_state = on_custom_state
        self.eval_page_size = eval_page_size
        # the Model Registry: model name -> {"versions": [ids], "default": id, "display_name": ...}
        self.registry: dict[str, dict[str, Any]] = {}
        # model name -> version id -> [aiplatform_v1.ModelEvaluation]
        self.evaluations: dict[str, dict[str, list[Any]]] = {}
        self._operations: dict[str, tuple[str, str]] = {}  # operation name -> (model, version)
        self.upload_done = upload_done  # answer models:upload with a finished operation (no polling)
        self.states = list(states)
        self.error_message, self.failed_task, self.task_message = error_message, failed_task, task_message
        self.custom_states, self.custom_error = list(custom_states), custom_error
        self.jobs: dict[str, dict[str, Any]] = {}
        self.gets: dict[str, int] = {}
        self.custom_jobs: dict[str, Any] = {}  # id -> the aiplatform_v1.CustomJob as received (+ name/state)
        self.tuning_states, self.tuning_trials, self.tuning_error = list(tuning_states), list(tuning_trials), tuning_error
        self.tuning_jobs: dict[str, Any] = {}  # id -> the aiplatform_v1.HyperparameterTuningJob as received
        self.cancelled: list[str] = []
        self.models: list[dict[str, Any]] = []
        self._ids = itertools.count(1000)
        self.route("POST", _PREFIX + r"/pipelineJobs", self._create_job)
        self.route("GET", _PREFIX + r"/pipelineJobs/(?P<job>[^/:]+)", self._get_job)
        self.route("POST", _PREFIX + r"/customJobs", self._create_custom_job)
        self.route("GET", _PREFIX + r"/customJobs/(?P<job>[^/:]+)", self._get_custom_job)
        self.route("POST", _PREFIX + r"/customJobs/(?P<job>[^/:]+):cancel", self._cancel_custom_job)
        self.route("POST", _PREFIX + r"/hyperparameterTuningJobs", self._create_tuning_job)
        self.route("GET", _PREFIX + r"/hyperparameterTuningJobs/(?P<job>[^/:]+)", self._get_tuning_job)
        self.route("POST", _PREFIX + r"/hyperparameterTuningJobs/(?P<job>[^/:]+):cancel", self._cancel_tuning_job)
        self.route("POST", _PREFIX + r"/models:upload", self._upload_model)
        # aiplatform_v1's REST transport reads operations under /ui/ (its first HTTP rule); /v1/ also works.
        self.route("GET", r"/(?:v1|ui)" + _PREFIX[3:] + r"/models/(?P<model>[^/]+)/operations/(?P<op>[^/]+)",
                   self._get_operation)
        self.route("GET", _PREFIX + _MODEL, self._get_model)
        self.route("GET", _PREFIX + _MODEL + r"/evaluations", self._list_evaluations)
        self.route("POST", _PREFIX + _MODEL + r"/evaluations:import", self._import_evaluation)

    # -- pipeline jobs ---------------------------------------------------------------------------
    def _create_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        job = decode(req, aiplatform_v1.PipelineJob)
        job_id = (req.query.get("pipelineJobId") or [f"job-{next(self._ids)}"])[0]
        if job_id in self.jobs:
            return 409, google_error(409, f"PipelineJob {job_id} already exists")
        job.name = f"projects/{m['project']}/locations/{m['location']}/pipelineJobs/{job_id}"
        job.state = aiplatform_v1.PipelineState.PIPELINE_STATE_PENDING
        job.create_time = "2026-11-22T08:00:00Z"
        self.jobs[job_id] = typed(req, job) | {"_message": job}
        return 200, typed(req, job)

    def _get_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        entry = self.jobs.get(m["job"])
        if entry is None:
            return 404, google_error(404, f"pipeline job {m['job']} not found")
        n = self.gets[m["job"]] = self.gets.get(m["job"], 0) + 1
        state = self.states[min(n, len(self.states)) - 1]
        job = entry["_message"]
        job.state = aiplatform_v1.PipelineState[f"PIPELINE_STATE_{state}"]
        if state == "FAILED":
            job.error = {"code": 9, "message": self.error_message}
            job.job_detail = {"task_details": [
                {"task_name": "validate-config", "state": "SUCCEEDED"},
                {"task_name": self.failed_task, "state": "FAILED", "error": {"code": 9, "message": self.task_message}},
            ]}
        return 200, typed(req, job)

    # -- custom jobs -----------------------------------------------------------------------------
    def _create_custom_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        job = decode(req, aiplatform_v1.CustomJob)
        if not job.job_spec.worker_pool_specs or not job.job_spec.worker_pool_specs[0].machine_spec.machine_type:
            return 400, google_error(400, "job_spec.worker_pool_specs[0] must specify a machine type")
        job_id = str(next(self._ids))
        job.name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{job_id}"
        job.state = aiplatform_v1.JobState.JOB_STATE_PENDING
        job.create_time = "2026-11-22T08:00:00Z"
        self.custom_jobs[job_id] = job
        self.gets[job_id] = 0
        return 200, typed(req, job)

    def _get_custom_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        job = self.custom_jobs.get(m["job"])
        if job is None:
            return 404, google_error(404, f"CustomJob {m['job']} not found")
        if job.name.rsplit("/", 1)[-1] not in self.cancelled:
            n = self.gets[m["job"]] = self.gets.get(m["job"], 0) + 1
            states, error = ((self.custom_by_job(job) if self.custom_by_job is not None else None)
                             or self.custom_by_location.get(m["location"], (self.custom_states, self.custom_error)))
            state = states[min(n, len(states)) - 1]
            entered = job.state.name != f"JOB_STATE_{state}"
            job.state = aiplatform_v1.JobState[f"JOB_STATE_{state}"]
            if state == "FAILED":
                job.error = {"code": 3, "message": error}
            if entered and state == "RUNNING":  # as Vertex: the first time it runs, and when it ends (30 min later)
                job.start_time = "2026-11-22T08:01:00Z"
            if entered and state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                job.end_time = "2026-11-22T08:31:00Z"
            if entered and self.on_custom_state is not None:
                self.on_custom_state(job, state)
        return 200, typed(req, job)

    def _cancel_custom_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        decode(req, aiplatform_v1.CancelCustomJobRequest, body=req.json() or {})
        job = self.custom_jobs.get(m["job"])
        if job is None:
            return 404, google_error(404, f"CustomJob {m['job']} not found")
        self.cancelled.append(m["job"])
        job.state = aiplatform_v1.JobState.JOB_STATE_CANCELLED
        return 200, {}

    # -- hyperparameter tuning jobs ----------------------------------------------------------------
    def _create_tuning_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        job = decode(req, aiplatform_v1.HyperparameterTuningJob)
        pools = job.trial_job_spec.worker_pool_specs
        if not pools or not pools[0].machine_spec.machine_type:
            return 400, google_error(400, "trial_job_spec.worker_pool_specs[0] must specify a machine type")
        if not job.study_spec.metrics or not job.study_spec.parameters or job.max_trial_count < 1:
            return 400, google_error(400, "study_spec needs a metric and a parameter; max_trial_count must be > 0")
        job_id = str(next(self._ids))
        job.name = f"projects/{m['project']}/locations/{m['location']}/hyperparameterTuningJobs/{job_id}"
        job.state = aiplatform_v1.JobState.JOB_STATE_PENDING
        job.create_time = "2026-11-22T08:00:00Z"
        self.tuning_jobs[job_id] = job
        self.gets[job_id] = 0
        return 200, typed(req, job)

    def _get_tuning_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        job = self.tuning_jobs.get(m["job"])
        if job is None:
            return 404, google_error(404, f"HyperparameterTuningJob {m['job']} not found")
        if m["job"] not in self.cancelled:
            n = self.gets[m["job"]] = self.gets.get(m["job"], 0) + 1
            state = self.tuning_states[min(n, len(self.tuning_states)) - 1]
            job.state = aiplatform_v1.JobState[f"JOB_STATE_{state}"]
            if state == "FAILED":
                job.error = {"code": 9, "message": self.tuning_error}
            job.trials = self._trials_by(job, state, n)
        return 200, typed(req, job)

    def _trials_by(self, job, state: str, n: int) -> list[dict[str, Any]]:
        """The job's trials as its ``n``-th read shows them, as Vertex fills ``trials`` while the study runs: while
        RUNNING, the first ``n - 2`` of ``tuning_trials`` ended and the next one ACTIVE (so each read adds one
        ended trial); SUCCEEDED: every trial ended. An ended trial has its final measurement (the metric under the
        study's metric id) and its start and end times (8.5 s apart)."""
        metric_id = job.study_spec.metrics[0].metric_id
        ended = len(self.tuning_trials) if state == "SUCCEEDED" else max(0, n - 2)
        out = []
        for i, t in enumerate(self.tuning_trials[:ended + (state != "SUCCEEDED")]):
            start = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=10 * i)
            trial = {"id": t["id"], "start_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "parameters": [{"parameter_id": k, "value": v} for k, v in t["parameters"].items()]}
            if i < ended:
                trial.update(state=t.get("state", "SUCCEEDED"),
                             end_time=(start + datetime.timedelta(seconds=8.5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                             final_measurement={"step_count": 3, "metrics": (
                                 [{"metric_id": metric_id, "value": t["metric"]}] if t.get("metric") is not None
                                 else [])})
            else:
                trial["state"] = "ACTIVE"
            out.append(trial)
        return out

    def _cancel_tuning_job(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        decode(req, aiplatform_v1.CancelHyperparameterTuningJobRequest, body=req.json() or {})
        job = self.tuning_jobs.get(m["job"])
        if job is None:
            return 404, google_error(404, f"HyperparameterTuningJob {m['job']} not found")
        self.cancelled.append(m["job"])
        job.state = aiplatform_v1.JobState.JOB_STATE_CANCELLED
        return 200, {}

    # -- models ----------------------------------------------------------------------------------
    def _upload_model(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1
        from google.longrunning import operations_pb2

        request = decode(req, aiplatform_v1.UploadModelRequest)
        self.models.append(req.json())
        parent = request.parent_model
        if parent in self.registry:  # a new version of a model the registry holds; it becomes the default
            entry = self.registry[parent]
            version = str(max(int(v) for v in entry["versions"]) + 1)
            entry["versions"].append(version)
            entry["default"] = version
            model = parent
        else:
            model = f"projects/{m['project']}/locations/{m['location']}/models/{next(self._ids)}"
            version = "1"
            self.registry[model] = {"versions": [version], "default": version,
                                    "display_name": request.model.display_name}
        op = f"{model}/operations/{next(self._ids)}"
        self._operations[op] = (model, version)
        if self.upload_done:
            return 200, self._done(req, op, model, version)
        operation = operations_pb2.Operation(name=op)
        operation.metadata.Pack(aiplatform_v1.UploadModelOperationMetadata.pb()())
        return 200, typed(req, operation)

    def _get_operation(self, req: Request, m) -> tuple[int, Any]:
        op = req.path.split("/", 2)[2]
        model = f"projects/{m['project']}/locations/{m['location']}/models/{m['model']}"
        model, version = self._operations.get(op, (model, "1"))
        return 200, self._done(req, op, model, version)

    # -- the Model Registry's versions and evaluations ---------------------------------------------
    def add_model(self, name: str, versions=("1",), default: str = "", display_name: str = "parent",
                  evaluations: dict[str, list[dict[str, Any]]] | None = None) -> None:
        """Seed the registry with model ``name`` (``projects/P/locations/L/models/ID``): its ``versions``, the
        ``default`` one (the last when empty) and per version the evaluations, each plain data
        (``displayName``, ``metrics``, ``createTime``, ... as the REST API spells a ``ModelEvaluation``)."""
        from google.cloud import aiplatform_v1

        self.registry[name] = {"versions": list(versions), "default": default or list(versions)[-1],
                               "display_name": display_name}
        for version, items in (evaluations or {}).items():
            for item in items:
                evaluation = aiplatform_v1.ModelEvaluation.from_json(json.dumps(item))
                evaluation.name = f"{name}/evaluations/{next(self._ids)}"
                self.evaluations.setdefault(name, {}).setdefault(version, []).append(evaluation)

    def _now(self) -> str:
        """A creation time later than every earlier one (RFC 3339, UTC)."""
        self._clock = getattr(self, "_clock", 0) + 1
        start = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.timezone.utc)
        return (start + datetime.timedelta(seconds=self._clock)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _version(self, m) -> tuple[str, str, dict[str, Any] | None]:
        """(model name, version id, registry entry) for a ``models/ID[@V]`` path; entry None: unknown."""
        model = f"projects/{m['project']}/locations/{m['location']}/models/{unquote(m['model'])}"
        entry = self.registry.get(model)
        version = unquote(m["version"]) if m["version"] else (entry or {}).get("default", "")
        if entry is None or version not in entry["versions"]:
            return model, version, None
        return model, version, entry

    def _get_model(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        model, version, entry = self._version(m)
        if entry is None:
            return 404, google_error(404, f"Model {model}{'@' + version if m['version'] else ''} not found.")
        aliases = ["default"] if version == entry["default"] else []
        return 200, typed(req, aiplatform_v1.Model(name=model, version_id=version, version_aliases=aliases,
                                                   display_name=entry["display_name"]))

    def _list_evaluations(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        model, version, entry = self._version(m)
        if entry is None:
            return 404, google_error(404, f"Model {model}@{version} not found.")
        items = self.evaluations.get(model, {}).get(version, [])
        start = int((req.query.get("pageToken") or ["0"])[0] or 0)
        page = items[start:start + self.eval_page_size]
        more = start + self.eval_page_size < len(items)
        return 200, typed(req, aiplatform_v1.ListModelEvaluationsResponse(
            model_evaluations=page, next_page_token=str(start + self.eval_page_size) if more else ""))

    def _import_evaluation(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud import aiplatform_v1

        request = decode(req, aiplatform_v1.ImportModelEvaluationRequest)
        model, version, entry = self._version(m)
        if entry is None:
            return 404, google_error(404, f"Model {model}@{version} not found.")
        evaluation = request.model_evaluation
        if not evaluation.metrics_schema_uri.startswith("gs://"):
            return 400, google_error(400, "model_evaluation.metrics_schema_uri must be a Cloud Storage URI")
        evaluation.name = f"{model}/evaluations/{next(self._ids)}"
        evaluation.create_time = self._now()
        self.evaluations.setdefault(model, {}).setdefault(version, []).append(evaluation)
        return 200, typed(req, evaluation)

    @staticmethod
    def _done(req: Request, operation: str, model: str, version: str = "1") -> dict[str, Any]:
        from google.cloud import aiplatform_v1
        from google.longrunning import operations_pb2

        done = operations_pb2.Operation(name=operation, done=True)
        done.response.Pack(aiplatform_v1.UploadModelResponse.pb(aiplatform_v1.UploadModelResponse(
            model=model, model_version_id=version)))
        return typed(req, done)
