"""The one client module for the Vertex AI API: pipeline jobs (submit, follow), Model Registry uploads and model
evaluations (read for ``serving.gate``'s better_than_parent, recorded after registration).

Everything goes through the real client libraries (``google.cloud.aiplatform`` for pipeline jobs,
``aiplatform_v1.ModelServiceClient`` for uploads); endpoint and credentials come from ``jobs.cloud.apis.clients``, so
``--api-endpoint http://127.0.0.1:P`` talks to a local stand-in with no credentials and nothing else.

Following a job is a bounded poll loop of our own rather than ``PipelineJob.wait()``: that wait left
the process alive after the job ended (FACTS.md), and a loop of ours prints one line per state change.

:func:`model_upload_request` is the single definition of what is sent to ``models:upload``: the
pipeline's local branch writes it beside the model, its Vertex branch feeds the same fields to GCPC's
``ModelUploadOp``, and ``upload_model`` sends it as is.
"""
from __future__ import annotations

import re
import time
from typing import Any, Callable

from jobs.cloud.apis import clients
from jobs.cloud.apis.policy import CREATE_OWN_ID, CREATE_SERVER_ID, policy
from jobs.cloud.apis.lines import describe, ended, failure_line, keeps_running
from jobs.cloud.apis.credentials import client_kwargs
from jobs.rules.errors import CloudError
from jobs.rules import saved_model
from jobs.rules.hardware.catalog import load_catalog
from jobfile import config as config_lib

CONSOLE_URL = ("https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/runs/{job_id}"
               "?project={project}")
#: Newest TensorFlow for which Google publishes prebuilt prediction containers (and the installed
#: aiplatform SDK lists: tf2-cpu/tf2-gpu up to 2.15). The trainer exports with TF 2.21; its serving
#: signatures use only core ops (decode_image, resize, map_fn, matmul/conv), which a 2.15 server loads.
SERVING_TF_VERSION = "2.15"
_TERMINAL_OK = "PIPELINE_STATE_SUCCEEDED"
_TERMINAL = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED"}


def endpoint_for(location: str, api_endpoint: str | None = None) -> str:
    """The regional Vertex AI endpoint (pipeline jobs and models are regional), or the given one."""
    return api_endpoint or f"{location}-aiplatform.googleapis.com"


def console_url(project: str, location: str, job_id: str) -> str:
    return CONSOLE_URL.format(project=project, location=location, job_id=job_id)


def job_hint(name: str) -> str:
    """How to see (and cancel) pipeline job ``name``: gcloud has no pipeline-jobs command; the console and
    the REST API do it."""
    _, project, _, location, _, job_id = name.split("/")[:6]
    return (f"see or cancel it at {console_url(project, location, job_id)} (REST: GET https://{location}-"
            f"aiplatform.googleapis.com/v1/{name}, POST ...:cancel)")


def pipeline_client(location: str, api_endpoint: str | None = None):
    from google.cloud import aiplatform_v1

    return aiplatform_v1.PipelineServiceClient(**client_kwargs(endpoint_for(location, api_endpoint),
                                                                       "Vertex AI"))


def pipeline_job_request(template_path: str, *, project: str, location: str, job_id: str, display_name: str,
                         pipeline_root: str, parameter_values: dict[str, Any], labels: dict[str, str] | None = None,
                         service_account: str | None = None, network: str | None = None,
                         enable_caching: bool | None = None, template_uri: str = ""):
    """The ``PipelineJob`` to create, built by ``aiplatform.PipelineJob`` (it loads the compiled template,
    types the parameter values, runtime config, labels) from a local file: its own https download of a
    template (urllib, no timeout, the token kept across redirects) is never used."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform, aiplatform_v1
    from google.protobuf import json_format

    try:
        job = aiplatform.PipelineJob(display_name=display_name, template_path=template_path, job_id=job_id,
                                     pipeline_root=pipeline_root, parameter_values=parameter_values,
                                     labels=labels or None, enable_caching=enable_caching, project=project,
                                     location=location, credentials=AnonymousCredentials())
        message = aiplatform_v1.PipelineJob.pb()()
        json_format.ParseDict(job.to_dict(), message)
    except Exception as exc:  # a template aiplatform cannot read, a parameter it cannot type
        raise CloudError(failure_line(exc, "preparing the pipeline job")) from None
    request = aiplatform_v1.PipelineJob.wrap(message)
    if service_account:
        request.service_account = service_account
    if network:
        request.network = network
    if template_uri:
        request.template_uri = template_uri
    return request


def submit_pipeline(request, *, project: str, location: str, job_id: str, api_endpoint: str | None = None,
                    log: Callable[[str], None] = print) -> tuple[Any, Any]:
    """Create the pipeline job (POST ``pipelineJobs?pipelineJobId=ID``); returns (client, created job).

    The id is ours, so a create whose answer was lost (dropped connection, 5xx, no answer) is repeated by
    the policy; if the lost attempt did create it, the repeat answers ALREADY_EXISTS and the job is read
    back instead. ``PipelineJob.submit()`` is not used: it first probes the pipeline root's bucket through
    the Storage and Resource Manager APIs (creating it and granting IAM roles when missing), endpoints that
    cannot be redirected, logging a traceback on failure. The bucket must exist (docs/vertex.md)."""
    from google.api_core import exceptions as core

    client = pipeline_client(location, api_endpoint)
    name = f"projects/{project}/locations/{location}/pipelineJobs/{job_id}"
    doing = f"creating pipeline job {name}"
    look = f"it may exist even so: {job_hint(name)}"
    try:
        try:
            created = clients.call(client.create_pipeline_job, parent=f"projects/{project}/locations/{location}",
                                   pipeline_job=request, pipeline_job_id=job_id, kind=CREATE_OWN_ID,
                                   doing=doing, unsure=look, reraise=(core.Conflict,))
        except core.Conflict as conflict:  # 409 ALREADY_EXISTS (REST: Conflict): an attempt whose answer was lost
            log(f"pipeline job {name} was created by an attempt whose answer was lost; following it")
            created = _read_back(client, name, doing, conflict)
    except KeyboardInterrupt:
        keeps_running(f"pipeline job {name} (if the create reached Vertex AI)", job_hint(name))
        raise
    if created.name != name:  # never print (or follow) a job the answer did not name
        raise CloudError(f"{doing}: the answer named {created.name or 'no job'!r}, not that job; it may exist "
                                 f"even so: {job_hint(name)}")
    return client, created


def _read_back(client, name: str, doing: str, conflict: Exception):
    """The job a create answered 409 ALREADY_EXISTS for; a failed read says both answers, so a person never
    sees the read's 404 alone and wonders why the create was not repeated."""
    from google.api_core import exceptions as core

    already = f"the create answered 409 ALREADY_EXISTS ({_message(conflict)})"
    try:
        return clients.call(client.get_pipeline_job, name=name, doing=f"reading pipeline job {name}",
                            unsure=f"it may exist: {job_hint(name)}", reraise=(core.NotFound,))
    except core.NotFound as exc:
        raise CloudError(f"{doing}: {already}, but reading it back answered 404 NOT_FOUND ({_message(exc)}); "
                                 f"it may exist even so, look for it: {job_hint(name)}") from None
    except CloudError as exc:
        raise CloudError(f"{doing}: {already}, then {exc}") from None


def _message(exc: Exception) -> str:
    """The API's own message of a 4xx, without the status the caller names."""
    text = describe(exc)
    return re.sub(r"^\d{3} ", "", text) or type(exc).__name__


def _state_name(state: Any) -> str:
    name = getattr(state, "name", None) or str(state)
    return name if name.startswith("PIPELINE_STATE_") else f"PIPELINE_STATE_{name}"


def failure_message(job_resource: Any) -> str:
    """The job's ``error.message`` plus each failed task's name and message (``jobDetail.taskDetails``)."""
    parts = []
    message = getattr(getattr(job_resource, "error", None), "message", "")
    if message:
        parts.append(message)
    for task in getattr(getattr(job_resource, "job_detail", None), "task_details", []) or []:
        if getattr(task.state, "name", str(task.state)) == "FAILED":
            parts.append(f"task {task.task_name} failed: {task.error.message or 'no message'}")
    return " | ".join(" ".join(p.split()) for p in parts) or "no error message was given"


def follow(client, name: str, poll_s: float = 20.0, log: Callable[[str], None] = print,
           timeout_s: float | None = None, sleep: Callable[[float], None] = time.sleep) -> tuple[str, str]:
    """Poll job ``name`` until it ends; log one line per state change (with the time). Returns (final
    state, failure message). The interval starts at 1 s and doubles up to ``poll_s``. Each read is
    retried by the policy (503, dropped connections, no answer); a give-up is one line saying the job
    may still be running and where to see it."""
    last, interval, started = None, min(1.0, poll_s), time.monotonic()
    while True:
        resource = clients.call(client.get_pipeline_job, name=name, doing=f"reading pipeline job {name}",
                                unsure=f"the job may still be running: {job_hint(name)}")
        state = _state_name(resource.state)
        if state != last:
            log(f"{time.strftime('%H:%M:%S')}  {state.replace('PIPELINE_STATE_', '')}")
            last = state
        if state in _TERMINAL:
            return state, ("" if state == _TERMINAL_OK else failure_message(resource))
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            return state, f"still {state} after {timeout_s:.0f} s; the job goes on (see the console link)"
        sleep(interval)
        interval = min(poll_s, interval * 2)


# --------------------------------------------------------------------------------------------------
# Model Registry


def _uses_gpu(cfg: config_lib.JobConfig) -> bool:
    cat = load_catalog()
    return any(p.replica_count and cat.is_gpu(p.accelerator_type) for p in cfg.topology.pools())


def serving_image(cfg: config_lib.JobConfig, location: str) -> str:
    """``serving.image_uri``, else Google's prebuilt TensorFlow container for ``location`` (GPU when a pool
    trains on GPUs)."""
    return cfg.serving.image_uri or prebuilt_serving_image(location, _uses_gpu(cfg))


def model_artifact_uri(model_dir: str) -> str:
    """Vertex wants the directory holding ``saved_model.pb``: the SavedModel the trainer wrote to ``AIP_MODEL_DIR``
    or one folder below it (``jobs.rules.saved_model.artifact_location``: THE rule, the verify step's too)."""
    return saved_model.artifact_location(model_dir)


def model_labels(cfg: config_lib.JobConfig) -> dict[str, str]:
    """``job`` and ``model`` (the built-in architecture, or a user trainer's module), plus ``serving.labels``."""
    model = cfg.trainer.module or cfg.model.name
    return {"job": cfg.name[:63], "model": re.sub(r"[^a-z0-9_-]", "-", model.lower())[:63], **cfg.serving.labels}


def model_upload_request(cfg: config_lib.JobConfig, model_dir: str, project: str, location: str) -> dict[str, Any]:
    """The ``models:upload`` request for a job's model: :func:`upload_request` with the job's serving fields."""
    return upload_request(model_dir, display_name=cfg.serving.display_name or cfg.name,
                          serving_image=serving_image(cfg, location), project=project, location=location,
                          labels=model_labels(cfg), parent_model=cfg.serving.parent_model)


def upload_model(request: dict[str, Any], location: str, api_endpoint: str | None = None,
                 log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> str:
    """Send a :func:`model_upload_request` and wait for its operation; returns ``models/ID@version``.

    The model's id is the server's, so the upload is not repeated after an answer that may have come too
    late (5xx, dropped connection): the line says a model may have been registered and how to look.
    Each poll of the operation is a read under the policy, at most every ``VTP_CLOUD_POLL_S``."""
    from google.cloud import aiplatform_v1
    from google.longrunning import operations_pb2
    from google.protobuf import json_format

    parent = request.get("parent", "")
    project = parent.split("/")[1] if parent.count("/") >= 3 else "PROJECT"
    display_name = request.get("model", {}).get("displayName", "")
    listing = (f"gcloud ai models list --region {location} --project {project} "
               f"--filter=display_name={display_name}")
    client = aiplatform_v1.ModelServiceClient(**client_kwargs(endpoint_for(location, api_endpoint),
                                                                      "Vertex AI Model Registry"))
    message = aiplatform_v1.UploadModelRequest.pb()()
    json_format.ParseDict(request, message)
    operation = clients.call(client.upload_model, request=aiplatform_v1.UploadModelRequest.wrap(message),
                             kind=CREATE_SERVER_ID, doing="uploading the model to the Model Registry",
                             unsure=f"a model may have been registered even so: {listing}")
    name = operation.operation.name
    see = f"gcloud ai operations describe {name.rsplit('/', 1)[-1]} --region {location} --project {project}"
    keeps_running(f"model upload operation {name}", see)
    log(f"model upload operation {name} started")
    interval, poll_s = 1.0, policy().poll_s
    state = operation.operation
    while not state.done:
        sleep(min(interval, poll_s))
        interval *= 2
        state = clients.call(client.get_operation, operations_pb2.GetOperationRequest(name=name),
                             doing=f"reading model upload operation {name}",
                             unsure=f"the upload may still finish: {see}")
    ended(f"model upload operation {name}")
    if state.HasField("error") and state.error.code:
        raise CloudError(f"model upload operation {name} failed: {state.error.code} "
                                 f"{' '.join(state.error.message.split())}")
    response = aiplatform_v1.UploadModelResponse.pb()()
    if not state.response.Unpack(response):
        raise CloudError(f"model upload operation {name} ended without an UploadModelResponse; {see}")
    return f"{response.model}@{response.model_version_id}" if response.model_version_id else response.model


# --------------------------------------------------------------------------------------------------
# Model Registry evaluations: what ``serving.gate``'s better_than_parent beats (``jobs.steps.gate``)


def _model_location(model_name: str) -> str:
    """``projects/P/locations/L/models/ID[@V]`` -> ``L`` (a model is read in its own region)."""
    parts = model_name.split("/")
    return parts[3] if len(parts) >= 6 and parts[2] == "locations" else "us-central1"


def model_client(model_name: str, api_endpoint: str | None = None):
    from google.cloud import aiplatform_v1

    return aiplatform_v1.ModelServiceClient(**client_kwargs(
        endpoint_for(_model_location(model_name), api_endpoint), "Vertex AI Model Registry"))


def _registry_see(model_name: str) -> str:
    location = _model_location(model_name)
    return f"GET https://{location}-aiplatform.googleapis.com/v1/{model_name}"


def default_version(parent_model: str, api_endpoint: str | None = None) -> str:
    """``models/ID@VERSION`` of ``parent_model``'s default version (``get_model`` on the name without a version
    answers with the default version)."""
    client = model_client(parent_model, api_endpoint)
    model = clients.call(client.get_model, name=parent_model, doing=f"reading the parent model {parent_model} from the "
                                                                    "Model Registry",
                         hints={404: "serving.parent_model names no model there; valid choices: a model of "
                                     "gcloud ai models list --region " + _model_location(parent_model),
                                403: "the pipeline's service account needs roles/aiplatform.user"})
    if not model.version_id:
        raise CloudError(f"reading the parent model {parent_model}: the answer names no version "
                                 f"(version_id); see {_registry_see(parent_model)}")
    return f"{model.name.split('@')[0] or parent_model}@{model.version_id}"


def model_evaluations(version: str, api_endpoint: str | None = None) -> list[dict[str, Any]]:
    """Every evaluation of model version ``version`` as plain data: ``name``, ``display_name``, ``create_time``
    (RFC 3339, UTC) and ``metrics`` (the JSON value, a mapping for the evaluations ``jobs.steps.gate`` records).
    Every page is read under the policy."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    client = model_client(version, api_endpoint)

    def every_page(**policy):  # the pager reads later pages with the retry and timeout given here
        return list(client.list_model_evaluations(parent=version, **policy))

    found = clients.call(every_page, doing=f"reading the evaluations of {version} from the Model Registry",
                         hints={404: "the parent model or its version is gone from the Model Registry"})
    out = []
    for evaluation in found:
        pb = aiplatform_v1.ModelEvaluation.pb(evaluation)
        out.append({"name": pb.name, "display_name": pb.display_name,
                    "create_time": pb.create_time.ToJsonString() if pb.HasField("create_time") else "",
                    "metrics": json_format.MessageToDict(pb.metrics) if pb.HasField("metrics") else None})
    return out


def import_model_evaluation(version: str, metrics: dict[str, float], *, schema_uri: str, display_name: str,
                            metadata: dict[str, Any] | None = None, api_endpoint: str | None = None) -> str:
    """Record ``metrics`` as an evaluation of model version ``version`` (``models/ID@V``); returns its name.

    The evaluation's id is the server's: a 5xx or a dropped answer is not repeated (a second evaluation would
    be recorded), the line says one may exist and where to look."""
    from google.cloud import aiplatform_v1

    client = model_client(version, api_endpoint)
    evaluation = aiplatform_v1.ModelEvaluation(display_name=display_name, metrics_schema_uri=schema_uri,
                                               metrics=dict(metrics), metadata=dict(metadata or {}))
    created = clients.call(client.import_model_evaluation, parent=version, model_evaluation=evaluation,
                           kind=CREATE_SERVER_ID, doing=f"recording the gate's metrics on {version} as a Model "
                                                                "Registry evaluation",
                           unsure=f"an evaluation may have been recorded even so: {_registry_see(version)}/evaluations")
    return created.name


# --------------------------------------------------------------------------------------------------
# The upload request, built without the client library (no aiplatform import: 2-5 s a step need not pay)

#: Region families with a copy of Google's prebuilt prediction containers (``<family>-docker.pkg.dev``).
PREDICTION_FAMILIES = ("us", "europe", "asia")


def prebuilt_serving_image(location: str, gpu: bool = False, tf_version: str = SERVING_TF_VERSION) -> str:
    """Google's prebuilt TensorFlow prediction container for ``location``'s family, the same URI the SDK's
    ``helpers.get_prebuilt_prediction_container_uri`` gives (a test holds the two together for every region
    family), without importing the SDK (3-5 s). Regions outside the families (``northamerica-*``, ``me-*``,
    ...) get the ``us`` copy."""
    family = location.split("-", 1)[0]
    family = family if family in PREDICTION_FAMILIES else "us"
    return (f"{family}-docker.pkg.dev/vertex-ai/prediction/tf2-{'gpu' if gpu else 'cpu'}."
            f"{tf_version.replace('.', '-')}:latest")


def upload_request(model_uri: str, *, display_name: str, serving_image: str, project: str, location: str,
                   labels: dict[str, str] | None = None, parent_model: str = "", pipeline_job: str = "") -> dict[str, Any]:
    """The ``models:upload`` request body (REST JSON, camelCase) for the SavedModel folder ``model_uri``:
    what a local run writes beside the model and what a Vertex run sends (``pipeline_job``: the pipeline
    job's resource name, for lineage). Built as plain data; a test parses it strictly as
    ``aiplatform_v1.UploadModelRequest`` (no unknown field, every value typed)."""
    model: dict[str, Any] = {"displayName": display_name, "artifactUri": model_artifact_uri(model_uri),
                             "containerSpec": {"imageUri": serving_image}}
    if labels:
        model["labels"] = dict(labels)
    if pipeline_job:  # the pipeline job that produced it: Vertex ML Metadata links the two
        model["pipelineJob"] = pipeline_job
    request: dict[str, Any] = {"parent": f"projects/{project or '-'}/locations/{location}", "model": model}
    if parent_model:
        request["parentModel"] = parent_model
    return request
