"""Pipeline templates in Artifact Registry: ``run.py upload-template`` through the real
``kfp.registry.RegistryClient`` to a local stand-in of a Kubeflow Pipelines repository, and ``run.py
--template URI`` through the real aiplatform client, whose https download of the template is carried
to the same stand-in by a TLS-terminating proxy (tests/standins/tls_proxy.py)."""
from __future__ import annotations

import os
import hashlib
import re
from pathlib import Path

import pytest

from tests.conftest import without_plan
import yaml

from tests.standins.kfp_registry import KfpRegistryStandIn, multipart_fields
from tests.standins.tls_proxy import TlsProxy
from tests.standins.vertex import VertexStandIn
from tests.test_submit import GOOD, _cli, clean_env, run_main
from jobfile import config as config_lib

# what submit accepts (an image pinned by digest, gs:// output) in the image's region
TEMPLATE = [*GOOD, "--set", "topology.region=europe-west4"]


@pytest.fixture
def registry():
    standin = KfpRegistryStandIn("my-proj", "pipelines").start()
    yield standin
    standin.stop()


def test_upload_sends_the_compiled_pipeline_with_its_tags(registry, capsys, tmp_path):
    from pipelines.training_pipeline import compile_pipeline

    rc = run_main("upload-template", "--config", "local", "--set", "training.steps=7", *TEMPLATE, "--host", registry.host,
                  "--tag", "v1", "--tag", "latest")
    out, err = capsys.readouterr()
    assert rc == 0, err
    (upload,) = registry.requests
    assert (upload.method, upload.path) == ("POST", "/my-proj/pipelines")
    headers = {k.lower(): v for k, v in upload.headers.items()}
    assert headers["authorization"].startswith("Bearer ")
    assert headers["content-type"].startswith("multipart/form-data; boundary=")
    fields = multipart_fields(upload)
    assert set(fields) == {"content", "tags"}
    assert fields["tags"] == b"v1,latest"
    uploaded = yaml.safe_load(fields["content"])
    judged = uploaded["root"]["inputDefinitions"]["parameters"]["placement_plan"]["defaultValue"]
    assert judged["source"].startswith("vtp plan of project my-proj")  # the plan's judgement, made with the project
    expected = Path(compile_pipeline(config_lib.load("local", ["training.steps=7", *TEMPLATE[1::2]]), str(tmp_path / "p.yaml"),
                                     placement=judged))
    assert uploaded == yaml.safe_load(expected.read_text())
    # started from the template gallery with its defaults, the template creates the CustomJob
    from tests.pipeline_dag import tasks_started_with_defaults

    started = tasks_started_with_defaults(yaml.safe_load(fields["content"]))
    assert "comp-custom-training-job" in started and "comp-train" not in started
    digest = hashlib.sha256(fields["content"]).hexdigest()
    assert out.strip() == f"flowers-local/sha256:{digest}"
    assert f"--template {registry.host}/flowers-local/v1" in err


def test_keep_writes_exactly_the_bytes_uploaded_and_never_over_a_file_that_is_not_a_pipeline(registry, capsys, tmp_path):
    kept = tmp_path / "local.yaml"
    rc = run_main("upload-template", "--config", "local", *TEMPLATE, "--host", registry.host, "--keep", str(kept))
    out, err = capsys.readouterr()
    assert rc == 0, err
    content = multipart_fields(registry.requests[0])["content"]
    assert kept.read_bytes() == content and out.strip().endswith(hashlib.sha256(kept.read_bytes()).hexdigest())
    assert run_main("upload-template", "--config", "local", *TEMPLATE, "--host", registry.host, "--keep", str(kept)) == 0
    capsys.readouterr()  # its own earlier artifact (a compiled pipeline) is replaced
    notes = tmp_path / "notes.yaml"
    notes.write_text("mine: true\n")
    before = len(registry.requests)
    assert run_main("upload-template", "--config", "local", *TEMPLATE, "--host", registry.host, "--keep", str(notes)) == 2
    err = capsys.readouterr().err
    assert (f"error: --keep: {notes} exists and is not a file upload-template wrote" in err and "Traceback" not in err
            and notes.read_text() == "mine: true\n" and len(registry.requests) == before)  # refused before any upload


@pytest.mark.parametrize("status,message,expected", [
    (400, "Invalid package name", "400 Invalid package name"),
    (403, "Permission 'artifactregistry.repositories.uploadArtifacts' denied",
     "403 Permission 'artifactregistry.repositories.uploadArtifacts' denied (the account needs "
     "roles/artifactregistry.writer on the repository)"),
])
def test_registry_errors_are_one_line(registry, capsys, status, message, expected):
    registry.fail_next(status, message)
    assert run_main("upload-template", *TEMPLATE, "--host", registry.host) == 1
    assert without_plan(capsys.readouterr().err).strip().splitlines() == [
        f"error: uploading the template to {registry.host}: {expected}"]
    assert len(registry.requests) == 1, "a definite refusal is not retried"


@pytest.mark.parametrize("answer", ["ok", "queued", "flowers-local/sha256:" + "0" * 64])
def test_a_200_that_is_not_the_upload_is_refused(registry, capsys, answer):
    """The registry must answer <package>/sha256:<sha256 of the bytes sent>; anything else is no upload."""
    registry.routes.insert(0, ("POST", r"/my-proj/pipelines/?", lambda req, m: (200, answer)))
    assert run_main("upload-template", *TEMPLATE, "--host", registry.host) == 1
    (line,) = without_plan(capsys.readouterr().err).strip().splitlines()
    assert line.startswith(f"error: uploading the template to {registry.host}: the registry answered 200 '{answer}', "
                           "not flowers-local/sha256:") and "the upload is not confirmed" in line


@pytest.mark.parametrize("args,expected", [
    (["--host", "https://example.com/kfp"], "error: --host: 'https://example.com/kfp' is not a Kubeflow Pipelines "
                                            "repository in Artifact Registry"),
    (["--tag", "sha256:abc"], "error: --tag: 'sha256:abc' is not a tag"),
    (["--set", "training.stepz=3"], "error: training.stepz: unknown field"),
    # what submit refuses, a template refuses too (one preflight: jobs.rules.preflight.job_problems)
    (["--set", "container.image_uri="], "error: container.image_uri: europe-west4-docker.pkg.dev/my-proj/training/"
                                        "tf-trainer:latest is not pinned by digest"),
    (["--set", "container.image_uri=europe-west4-docker.pkg.dev/my-proj/t/tf:latest"],
     "error: container.image_uri: europe-west4-docker.pkg.dev/my-proj/t/tf:latest is not pinned by digest"),
    (["--set", "container.image_uri=", "--set", "container.image_repository=us-central1-docker.pkg.dev/my-project/t/x"],
     "still names the presets' placeholder project 'my-project'"),
    (["--set", "output.base_dir=gs://my-bucket/runs"], "error: output.base_dir: 'gs://my-bucket/runs' still names the "
                                                       "presets' placeholder bucket 'my-bucket'"),
    (["--set", "output.base_dir=./runs/local"], f"error: output.base_dir: '{os.path.abspath('runs/local')}': only Cloud Storage (gs://)"),
    (["--image", "python:3.11"], "error: --image: python:3.11 is not pinned by digest"),
])
def test_bad_arguments_stop_before_any_upload(registry, capsys, args, expected):
    argv = (["upload-template", *TEMPLATE, "--host", registry.host, *args] if args[0] != "--host"
            else ["upload-template", *TEMPLATE, *args])
    assert run_main(*argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert registry.requests == []


def test_a_real_host_without_credentials_is_one_line(tmp_path):
    proc, took = _cli(["upload-template", *TEMPLATE, "--host", "https://europe-west4-kfp.pkg.dev/my-proj/pipelines"], clean_env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert without_plan(proc.stderr).strip().splitlines() == [
        "error: no Google Cloud credentials found for Artifact Registry: run `gcloud auth application-default "
        "login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file"]
    assert took < 60


def test_submit_from_an_uploaded_template(registry, tmp_path):
    """Upload, then ``--template https://europe-west4-kfp.pkg.dev/...``: aiplatform downloads the template over
    https (through the proxy, certificate verified) and the job carries it and its templateUri."""
    assert run_main("upload-template", "--host", registry.host, "--tag", "v1", *TEMPLATE) == 0
    uploaded = registry.packages["flowers-local"]
    (content,) = [v["content"] for v in uploaded.values() if "v1" in v["tags"]]
    template = "https://europe-west4-kfp.pkg.dev/my-proj/pipelines/flowers-local/v1"
    proxy = TlsProxy(registry, ["europe-west4-kfp.pkg.dev"], tmp_path).start()
    try:
        with VertexStandIn() as vertex:
            proc, took = _cli(["--project", "my-proj", "--region", "europe-west4", "--pipeline-root",
                               "gs://my-pipelines/root", *GOOD, "--api-endpoint", vertex.url, "--poll-seconds", "0.05",
                               "--template", template], clean_env(tmp_path, **proxy.env()))
            assert proc.returncode == 0, proc.stderr
            (create,) = vertex.calls("POST", "/pipelineJobs$")
    finally:
        proxy.stop()
    assert proxy.connects == ["europe-west4-kfp.pkg.dev:443"]
    assert registry.calls("GET", "/my-proj/pipelines/flowers-local/v1")
    body = create.json()
    assert body["templateUri"] == template
    assert body["pipelineSpec"] == yaml.safe_load(content)
    assert "target" not in body["runtimeConfig"]["parameterValues"]  # a Vertex template runs the Vertex pipeline
    assert config_lib.load_json(body["runtimeConfig"]["parameterValues"]["config_json"]).output.base_dir.startswith("gs://")
    assert re.search(r"^\d\d:\d\d:\d\d  SUCCEEDED$", proc.stdout, re.M) and took < 60
