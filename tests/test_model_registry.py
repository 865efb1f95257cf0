"""Vertex AI Model Registry: one request definition (``jobs.cloud.vertex.model_upload_request``, typed by
``aiplatform_v1``), written beside the model by the local branch, sent by ``run.py register-model``
through ``ModelServiceClient``, and sent by the pipeline's Vertex branch through GCPC's ``ModelUploadOp``
whose real launcher is run here against the stand-in (https carried by a TLS-terminating proxy)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.standins.tls_proxy import TlsProxy
from tests.standins.vertex import VertexStandIn
from tests.test_submit import clean_env, run_main
from trainers import config as config_lib

MODEL_DIR = "gs://my-pipelines/runs/flowers/model"


def test_upload_request_is_a_valid_api_message_with_the_regions_container():
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from jobs.cloud import vertex

    cfg = config_lib.load("local", ["serving.labels={team: vision}"])
    request = vertex.model_upload_request(cfg, MODEL_DIR + "/", "my-proj", "europe-west4")
    json_format.ParseDict(request, aiplatform_v1.UploadModelRequest.pb()())  # unknown fields would raise
    assert request == {
        "parent": "projects/my-proj/locations/europe-west4",
        "model": {"displayName": "flowers-local", "artifactUri": MODEL_DIR,
                  "containerSpec": {"imageUri": "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"},
                  "labels": {"job": "flowers-local", "model": "small_cnn", "team": "vision"}}}
    gpu = vertex.model_upload_request(config_lib.load("gpu-1x4"), MODEL_DIR, "p", "us-central1")
    assert gpu["model"]["containerSpec"]["imageUri"] == "us-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest"
    own = config_lib.load("local", ["serving.image_uri=europe-west4-docker.pkg.dev/p/serve/tf:1",
                                    "serving.display_name=Flowers", "serving.parent_model=projects/p/locations/"
                                                                    "europe-west4/models/42"])
    request = vertex.model_upload_request(own, MODEL_DIR, "p", "europe-west4")
    assert request["model"]["containerSpec"]["imageUri"] == "europe-west4-docker.pkg.dev/p/serve/tf:1"
    assert request["model"]["displayName"] == "Flowers"
    assert request["parentModel"] == "projects/p/locations/europe-west4/models/42"


def test_local_branch_writes_the_request_beside_the_model(tmp_path):
    from components import steps
    from jobs.cloud import vertex

    model_dir = tmp_path / "run" / "model"
    model_dir.mkdir(parents=True)
    cfg = config_lib.load("local")
    out = steps.model_upload_request(cfg.to_json(), str(model_dir), "us-central1")
    written = json.loads((tmp_path / "run" / "model_upload_request.json").read_text())
    assert written == json.loads(out.request_json) == vertex.model_upload_request(cfg, str(model_dir), "", "us-central1")
    assert written["parent"] == "projects/-/locations/us-central1"  # no project locally
    assert (out.artifact_uri, out.serving_image, out.display_name) == (
        str(model_dir), "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest", "flowers-local")


def test_register_model_sends_the_request_and_waits_for_its_operation(vertex, capsys):
    from jobs.cloud import vertex as vertex_lib

    rc = run_main("register-model", "--project", "my-proj", "--region", "europe-west4", "--model-dir", MODEL_DIR,
                  "--api-endpoint", vertex.url)
    out, err = capsys.readouterr()
    assert rc == 0, err
    (upload,) = vertex.calls("POST", "models:upload")
    assert upload.path == "/v1/projects/my-proj/locations/europe-west4/models:upload"
    expected = vertex_lib.model_upload_request(config_lib.load("local"), MODEL_DIR, "my-proj", "europe-west4")
    assert upload.json() == {"model": expected["model"]}  # the parent travels in the path
    assert vertex.calls("GET", r"/models/\d+/operations/\d+$")
    assert re.fullmatch(r"model upload operation projects/my-proj/locations/europe-west4/models/\d+/operations/\d+ "
                        r"started\nregistered projects/my-proj/locations/europe-west4/models/\d+@1 \(container "
                        r"europe-docker\.pkg\.dev/vertex-ai/prediction/tf2-cpu\.2-15:latest\)\n", out)


@pytest.mark.parametrize("status,message,tail", [
    (400, "Model artifact_uri has no saved_model.pb", ""),
    (403, "Permission 'aiplatform.models.upload' denied", ""),
    # the model's id is the server's: a 5xx is not repeated (it may have been registered) and says how to look
    (500, "Internal error encountered.", "; a model may have been registered even so: gcloud ai models list --region "
                                         "europe-west4 --project my-proj --filter=display_name=flowers-local"),
])
def test_register_model_errors_are_one_line(vertex, capsys, status, message, tail):
    vertex.fail_next(status, message, "models:upload")
    assert run_main("register-model", "--project", "my-proj", "--region", "europe-west4", "--model-dir", MODEL_DIR,
                    "--api-endpoint", vertex.url) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: uploading the model to the Model Registry: {status} {message}{tail}"]
    assert len(vertex.calls("POST", "models:upload")) == 1


def test_register_model_refuses_a_local_folder(vertex, capsys):
    assert run_main("register-model", "--project", "my-proj", "--model-dir", "runs/local/model",
                    "--api-endpoint", vertex.url) == 2
    assert ("error: --model-dir: 'runs/local/model': only Cloud Storage (gs://) works here, not a path on this machine"
            in capsys.readouterr().err)
    assert vertex.requests == []


def _compiled(tmp_path, *overrides):
    from pipelines.training_pipeline import compile_pipeline

    cfg = config_lib.load("local", list(overrides))
    return yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"))).read_text())


def _branch(compiled, task):
    (dag,) = [c["dag"]["tasks"] for n, c in compiled["components"].items() if n.startswith("comp-condition")
              and task in c.get("dag", {}).get("tasks", {})]
    return dag


def test_vertex_branch_uploads_the_verified_model_in_the_pipelines_location(tmp_path):
    compiled = _compiled(tmp_path)
    tasks = _branch(compiled, "model-upload")
    upload = tasks["model-upload"]
    params = upload["inputs"]["parameters"]
    assert params["location"] == {"componentInputParameter": "pipelinechannel--location"}  # never GCPC's us-central1
    assert "project" not in params  # GCPC's default: the pipeline's own project
    request_task = "model-upload-request-2"
    assert params["display_name"]["taskOutputParameter"] == {"outputParameterKey": "display_name",
                                                             "producerTask": request_task}
    assert params["labels"]["taskOutputParameter"] == {"outputParameterKey": "labels", "producerTask": request_task}
    importer = upload["inputs"]["artifacts"]["unmanaged_container_model"]["taskOutputArtifact"]["producerTask"]
    assert "parent_model" not in upload["inputs"]["artifacts"]
    assert tasks[importer]["inputs"]["parameters"]["uri"]["taskOutputParameter"]["outputParameterKey"] == "artifact_uri"
    spec = compiled["deploymentSpec"]["executors"][tasks[importer]["componentRef"]["name"].replace("comp-", "exec-")]
    assert spec["importer"]["typeSchema"]["schemaTitle"] == "google.UnmanagedContainerModel"
    assert spec["importer"]["metadata"] == {"containerSpec": {"imageUri": "{{$.inputs.parameters['metadata']}}"}}
    assert tasks[importer]["inputs"]["parameters"]["metadata"]["taskOutputParameter"]["outputParameterKey"] == "serving_image"
    assert tasks[request_task]["dependentTasks"] == ["verify-model-2"]
    assert tasks[request_task]["inputs"]["parameters"]["model_dir"] == {
        "componentInputParameter": "pipelinechannel--validate-config-model_dir"}
    local = _branch(compiled, "model-upload-request")
    assert local["model-upload-request"]["dependentTasks"] == ["train-local", "verify-model"]
    assert not any(t["componentRef"]["name"] == "comp-model-upload" for t in local.values())


def test_parent_model_adds_a_new_version(tmp_path):
    parent = "projects/my-proj/locations/europe-west4/models/42"
    compiled = _compiled(tmp_path, f"serving.parent_model={parent}")
    tasks = _branch(compiled, "model-upload")
    producer = tasks["model-upload"]["inputs"]["artifacts"]["parent_model"]["taskOutputArtifact"]["producerTask"]
    assert tasks[producer]["inputs"]["parameters"]["uri"]["runtimeValue"]["constant"] == \
        f"https://europe-west4-aiplatform.googleapis.com/v1/{parent}"
    spec = compiled["deploymentSpec"]["executors"][tasks[producer]["componentRef"]["name"].replace("comp-", "exec-")]
    assert spec["importer"]["metadata"] == {"resourceName": parent}
    assert spec["importer"]["typeSchema"]["schemaTitle"] == "google.VertexModel"


def _resolve(arg, values: dict) -> str:
    """What the Vertex backend does to a compiled argument: Concat and input placeholders."""
    if arg.startswith('{"Concat"'):
        return "".join(_resolve(a, values) for a in json.loads(arg)["Concat"])
    if arg.startswith('{"IfPresent"'):
        return ""
    out = re.sub(r"\{\{\$\.inputs\.parameters\['(\w+)'\]\}\}",
                 lambda m: values[m[1]] if isinstance(values[m[1]], str) else json.dumps(values[m[1]]), arg)
    return out.replace("{{$.pipeline_job_uuid}}", "job-1")


def test_gcpc_model_upload_launcher_sends_the_same_request(tmp_path):
    """Run GCPC's own ModelUploadOp launcher with the compiled arguments, resolved from what our component
    outputs, against the stand-in: its models:upload body carries our request's model, in region R."""
    from jobs.cloud import vertex as vertex_lib

    region, project = "europe-west4", "my-proj"
    cfg = config_lib.load("local", ["serving.labels={team: vision}"])
    request = vertex_lib.model_upload_request(cfg, MODEL_DIR, project, region)
    model = request["model"]
    compiled = _compiled(tmp_path, "serving.labels={team: vision}")
    inputs = compiled["components"]["comp-model-upload"]["inputDefinitions"]["parameters"]
    values = {k: v.get("defaultValue") for k, v in inputs.items()}
    values.update(display_name=model["displayName"], labels=model["labels"], location=region, project=project)
    args = compiled["deploymentSpec"]["executors"]["exec-model-upload"]["container"]["args"]
    executor_input = {
        "inputs": {"artifacts": {"unmanaged_container_model": {"artifacts": [
            {"name": "m", "uri": model["artifactUri"], "metadata": {"containerSpec": {
                "imageUri": model["containerSpec"]["imageUri"]}}}]}}},
        "outputs": {"artifacts": {"model": {"artifacts": [{"name": "model", "type": {"schemaTitle": "google.VertexModel"}}]}},
                    "outputFile": str(tmp_path / "out" / "executor_output.json")}}
    values_args = [_resolve(a, values) for a in args]
    values_args = [json.dumps(executor_input) if a == "{{$}}" else
                   str(tmp_path / "gcp_resources") if "gcp_resources" in a and a.startswith("{{") else a
                   for a in values_args if a]
    vertex = VertexStandIn(upload_done=True).start()  # GCPC polls an unfinished operation every 20 s
    vertex.route("POST", "/token", lambda req, m: (200, {"access_token": "t", "expires_in": 3600, "token_type": "Bearer"}))
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r",
                               "token_uri": "https://oauth2.googleapis.com/token"}))
    # google-auth refreshes the token at oauth2.googleapis.com: the proxy carries it to the stand-in too.
    proxy = TlsProxy(vertex, [f"{region}-aiplatform.googleapis.com", "oauth2.googleapis.com"], tmp_path).start()
    try:
        env = clean_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(adc), **proxy.env())
        proc = subprocess.run([sys.executable, "-m", "google_cloud_pipeline_components.container.v1.model."
                               "upload_model.launcher", *values_args], capture_output=True, text=True, env=env,
                              timeout=120, cwd=str(ROOT))
    finally:
        proxy.stop()
        vertex.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    (upload,) = vertex.calls("POST", "models:upload")
    assert upload.path == f"/v1/projects/{project}/locations/{region}/models:upload"
    sent = upload.json()["model"]
    assert sent["artifact_uri"] == model["artifactUri"]
    assert sent["container_spec"] == {"image_uri": model["containerSpec"]["imageUri"]}
    assert sent["display_name"] == model["displayName"]
    assert model["labels"].items() <= sent["labels"].items()
    assert sent["pipeline_job"] == f"projects/{project}/locations/{region}/pipelineJobs/job-1"
    written = json.loads((tmp_path / "out" / "executor_output.json").read_text())
    assert written["artifacts"]["model"]["artifacts"][0]["metadata"]["resourceName"].startswith(
        f"projects/{project}/locations/{region}/models/")
