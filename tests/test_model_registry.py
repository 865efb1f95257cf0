"""Vertex AI Model Registry: one request definition (``jobs.cloud.apis.vertex.upload_request``, parsed strictly as
``aiplatform_v1.UploadModelRequest`` here), written beside the model by the local branch (the
``upload_model`` component's dry run), sent by ``run.py register-model`` and by the same component in the
pipeline's Vertex branch, against the stand-in."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.test_submit import run_main
from jobfile import config as config_lib

MODEL_DIR = "gs://my-pipelines/runs/flowers/model"


def test_upload_request_is_a_valid_api_message_with_the_regions_container():
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from jobs.cloud.apis import vertex

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


def test_the_request_is_built_without_the_client_library_but_parses_as_its_type():
    """The light builder (no aiplatform import) against the real type, strictly; and its container table
    against the SDK's own for every region family, CPU and GPU."""
    from google.cloud import aiplatform_v1
    from google.cloud.aiplatform.helpers import get_prebuilt_prediction_container_uri
    from google.protobuf import json_format

    from jobs.cloud.apis import vertex

    request = vertex.upload_request(MODEL_DIR, display_name="m", serving_image="us-docker.pkg.dev/x/y:1", project="p",
                                    location="us-central1", labels={"a": "b"}, parent_model="projects/p/locations/"
                                    "us-central1/models/7", pipeline_job="projects/p/locations/us-central1/pipelineJobs/j")
    message = aiplatform_v1.UploadModelRequest.pb()()
    json_format.ParseDict(request, message)  # ignore_unknown_fields=False
    assert message.model.pipeline_job.endswith("/pipelineJobs/j") and message.parent_model.endswith("/models/7")
    for region in ("us-central1", "us-east4", "europe-west4", "asia-east1"):
        for gpu in (False, True):
            assert vertex.prebuilt_serving_image(region, gpu) == get_prebuilt_prediction_container_uri(
                "tensorflow", vertex.SERVING_TF_VERSION, region, "gpu" if gpu else "cpu")
    assert vertex.prebuilt_serving_image("northamerica-northeast1").startswith("us-docker.pkg.dev/")


def test_local_branch_writes_the_request_beside_the_model_and_sends_nothing(tmp_path):
    """The upload_model component's dry run (the local branch) in a process without aiplatform imported."""
    code = (
        "import json, sys\n"
        "from components.upload_model.component import upload_model\n"
        "from kfp.dsl import Model\n"
        "from google_cloud_pipeline_components.types.artifact_types import VertexModel\n"
        f"m = Model(uri={str(tmp_path / 'run' / 'model')!r}, metadata={{'job': 'flowers-local'}})\n"
        "out = VertexModel(uri='', metadata={})\n"
        f"upload_model.python_func(model=m, vertex_model=out, location='us-central1', dry_run=True, record_dir={str(tmp_path / 'run')!r},"
        " labels={'job': 'flowers-local'})\n"
        "print(json.dumps({'aiplatform': 'google.cloud.aiplatform' in sys.modules or 'google.cloud.aiplatform_v1' in sys.modules,"
        " 'meta': out.metadata}))\n")
    (tmp_path / "run" / "model").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["aiplatform"] is False, "a dry run must not import the client library"
    written = json.loads((tmp_path / "run" / "model_upload_request.json").read_text())
    assert written == seen["meta"]["request"] and seen["meta"]["dry_run"] is True
    assert written == {"parent": "projects/-/locations/us-central1", "model": {
        "displayName": "flowers-local", "artifactUri": str(tmp_path / "run" / "model"), "labels": {"job": "flowers-local"},
        "containerSpec": {"imageUri": "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"}}}


def test_the_upload_component_registers_a_model_against_the_stand_in(vertex, tmp_path):
    """The same component, not a dry run: one models:upload (strictly parsed), the operation followed, the
    VertexModel artifact names the registered model; a parent model makes it a new version."""
    from google_cloud_pipeline_components.types.artifact_types import VertexModel
    from kfp.dsl import Model

    from components.upload_model.component import upload_model

    parent = "projects/my-proj/locations/europe-west4/models/42"
    out = VertexModel(name="vertex_model", uri="", metadata={})
    upload_model.python_func(model=Model(uri=MODEL_DIR + "/", metadata={"job": "flowers"}), vertex_model=out,
                             location="europe-west4", project="my-proj", parent_model=parent,
                             pipeline_job="projects/my-proj/locations/europe-west4/pipelineJobs/j-1",
                             api_endpoint=vertex.url, record_dir=str(tmp_path))
    (upload,) = vertex.calls("POST", "models:upload")
    assert upload.path == "/v1/projects/my-proj/locations/europe-west4/models:upload"
    body = upload.json()
    assert body["parentModel"] == parent and body["model"]["artifactUri"] == MODEL_DIR
    assert body["model"]["displayName"] == "flowers"
    assert body["model"]["containerSpec"] == {"imageUri": "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"}
    assert re.fullmatch(r"projects/my-proj/locations/europe-west4/models/\d+", out.metadata["resourceName"])
    assert out.uri.startswith("https://europe-west4-aiplatform.googleapis.com/v1/projects/my-proj/")
    assert json.loads((tmp_path / "model_upload_request.json").read_text())["parentModel"] == parent


def test_register_model_sends_the_request_and_waits_for_its_operation(vertex, capsys):
    from jobs.cloud.apis import vertex as vertex_lib

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


def _compiled(tmp_path, target, *overrides):
    from pipelines.training_pipeline import compile_pipeline

    cfg = config_lib.load("local", list(overrides))
    return yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / f"{target}.yaml"), target)).read_text())


def test_both_pipelines_register_the_verified_model_in_the_pipelines_location(tmp_path):
    parent = "projects/my-proj/locations/europe-west4/models/42"
    vertex_tasks = _compiled(tmp_path, "vertex", f"serving.parent_model={parent}")["root"]["dag"]["tasks"]
    local_tasks = _compiled(tmp_path, "local", f"serving.parent_model={parent}")["root"]["dag"]["tasks"]
    for tasks, dry_run in ((vertex_tasks, False), (local_tasks, True)):
        task = tasks["upload-model"]
        assert task["inputs"]["artifacts"]["model"]["taskOutputArtifact"] == {
            "outputArtifactKey": "verified_model", "producerTask": "verify-model"}
        params = task["inputs"]["parameters"]
        assert params["location"] == {"componentInputParameter": "location"}  # never a default
        assert params["dry_run"]["runtimeValue"]["constant"] is dry_run
        for key, output in (("display_name", "model_display_name"), ("labels", "model_labels"),
                            ("serving_image", "serving_image"), ("parent_model", "parent_model")):
            assert params[key] == {"taskOutputParameter": {"outputParameterKey": output,
                                                           "producerTask": "validate-config"}}, key
    vertex_params = vertex_tasks["upload-model"]["inputs"]["parameters"]
    assert vertex_params["project"]["runtimeValue"]["constant"] == "{{$.pipeline_google_cloud_project_id}}"
    assert vertex_params["pipeline_job"]["runtimeValue"]["constant"] == "{{$.pipeline_job_resource_name}}"
    # the model the Vertex pipeline verifies is what the CustomJob's chief wrote to AIP_MODEL_DIR
    importer = vertex_tasks["verify-model"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]["producerTask"]
    assert vertex_tasks[importer]["inputs"]["parameters"]["uri"] == {
        "taskOutputParameter": {"outputParameterKey": "model_dir", "producerTask": "validate-config"}}
    # and validate-config computes those fields from the job's config
    from components.validate_config.component import validate_config

    out = validate_config.python_func(config_lib.load("local", [f"serving.parent_model={parent}"]).to_json(),
                                      location="europe-west4")
    assert (out.parent_model, out.model_display_name) == (parent, "flowers-local")
    assert out.serving_image == "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    assert out.model_labels == {"job": "flowers-local", "model": "small_cnn"}
