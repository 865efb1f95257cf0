"""The Cloud Build backend (jobs.images.cloudbuild over jobs.cloud.apis.cloudbuild, jobs.cloud.apis.gcs) against local stand-ins of
the real HTTP APIs.

Every call goes through the real google-cloud-storage / google-cloud-build clients (REST) to
tests/standins on 127.0.0.1, so what is asserted here is what the product would send to Google.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from jobs import images
from jobs.rules import job_spec
from jobs.steps import calls as steps
from jobs.cloud.apis import cloudbuild, gcs
from jobs.images import cloudbuild as cloudbuild_builder
from jobs.rules.errors import CloudError
from tests.conftest import ROOT
from tests.standins.base import StandIn
from tests.standins.cloudbuild import CloudBuild
from tests.standins.gcs import Gcs
from jobfile import config as config_lib

IMAGE = "us-central1-docker.pkg.dev/proj/training/tf-trainer:ctx-0123456789abcdef"
FAST = (0.02, 0.05)  # poll intervals for the stand-in


@pytest.fixture
def cloud():
    """One loopback server holding both APIs, as the product points both at one --api-endpoint."""
    with StandIn() as server:
        storage = Gcs(server, buckets={"stage"})
        yield server, storage, CloudBuild(server, gcs=storage)


@pytest.fixture
def context_tar(tmp_path) -> Path:
    path = tmp_path / "context.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in {"Dockerfile": b"FROM scratch\nCOPY hello /\n", "hello": b"hi\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _build(server, tar, lines=None, **kwargs):
    kwargs = {"project": "proj", "staging_bucket": "gs://stage/builds", "endpoint": server.url,
              "log": (lines.append if lines is not None else lambda _: None), "poll": FAST, **kwargs}
    return cloudbuild_builder.build_and_push(tar, IMAGE, "containers/Dockerfile", **kwargs)


def test_build_and_push_uploads_the_context_builds_and_returns_the_digest(cloud, context_tar):
    server, storage, builds = cloud
    lines: list[str] = []
    ref = _build(server, context_tar, lines, build_args={"VARIANT": "gpu"})

    assert ref == f"{IMAGE}@{CloudBuild.digest_for(IMAGE)}"
    # 1. the context went to the staging bucket, gzip'd, under a content-addressed name
    (bucket, name), = storage.objects
    assert bucket == "stage" and name.startswith("builds/ctx-") and name.endswith(".tgz")
    assert gzip.decompress(storage.objects[(bucket, name)][1]) == context_tar.read_bytes()
    assert storage.objects[(bucket, name)][0]["contentType"] == "application/gzip"
    # 2. one build, from exactly that object, one docker build step, image pushed via `images`
    body, = builds.requests
    assert body["source"] == {"storageSource": {"bucket": "stage", "object": name}}
    assert body["steps"] == [{"id": "docker-build", "name": "gcr.io/cloud-builders/docker",
                              "args": ["build", "-f", "containers/Dockerfile", "--build-arg", "VARIANT=gpu",
                                       "-t", IMAGE, "."]}]
    assert body["images"] == [IMAGE]
    assert body["timeout"] == "3600s" and "ctx-0123456789abcdef" in body["tags"]
    # 3. the requests, in order, as the real clients make them
    paths = [(r.method, r.path) for r in server.requests if not r.path.startswith("/storage/v1/b/")]
    assert paths[:2] == [("POST", "/upload/storage/v1/b/stage/o"), ("POST", "/v1/projects/proj/builds")]
    assert {m for m, _ in paths[2:]} == {"GET"} and all(p.startswith("/v1/projects/proj/builds/") for _, p in paths[2:])
    assert len(paths) - 2 == builds.polls_to_finish
    # 4. state changes, one line each
    states = [line.rsplit(": ", 1)[1] for line in lines if line.startswith("cloud build ") and "created" not in line]
    assert states == ["QUEUED", "WORKING", "SUCCESS"]
    assert any("logs: https://console.cloud.google.com/cloud-build/builds/" in line for line in lines)


def test_a_gzipped_context_is_sent_as_is_and_the_same_context_gets_the_same_object(cloud, context_tar, tmp_path):
    server, storage, builds = cloud
    gz = tmp_path / "ctx-aaaabbbbccccdddd.tar.gz"
    gz.write_bytes(gzip.compress(context_tar.read_bytes(), mtime=0))
    _build(server, gz)
    assert storage.objects[("stage", "builds/ctx-aaaabbbbccccdddd.tgz")][1] == gz.read_bytes()
    _build(server, context_tar)
    _build(server, context_tar)
    assert len(storage.objects) == 2, "a repeat build of the same tar reuses its object name"


@pytest.mark.parametrize("outcome, detail", [
    ("FAILURE", 'Build step failure: build step 0 "gcr.io/cloud-builders/docker" failed: step exited with '
                "non-zero status: 1"),
    ("TIMEOUT", "Build timeout"),
    ("INTERNAL_ERROR", "internal error in the build worker"),
])
def test_a_failed_build_is_one_line_with_cloud_builds_detail(cloud, context_tar, outcome, detail):
    server, _, builds = cloud
    builds.outcome, builds.status_detail = outcome, detail
    lines: list[str] = []
    with pytest.raises(CloudError) as err:
        _build(server, context_tar, lines)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"cloud build 00000000-0000-4000-8000-000000000001 {outcome}: {detail}; logs: https://")
    assert lines[-1].endswith(f": {outcome}")


@pytest.mark.parametrize("status, message, expected", [
    (403, "The caller does not have permission",
     "creating a Cloud Build build in project proj: 403 The caller does not have permission (the caller needs "
     "roles/cloudbuild.builds.editor"),
    (400, "invalid build: invalid image name", "creating a Cloud Build build in project proj: 400 invalid build"),
    (500, "Internal error encountered.", "creating a Cloud Build build in project proj: 500 Internal error encountered.; "
                                         "a build may have been created even so: gcloud builds list --ongoing --project proj"),
    (503, "The service is currently unavailable.", "creating a Cloud Build build in project proj: 503 The service"),
])
def test_an_api_error_on_create_is_one_line_and_creates_no_second_build(cloud, context_tar, status, message, expected):
    server, _, builds = cloud
    server.fail_next(status, message, r"/builds$")
    with pytest.raises(CloudError) as err:
        _build(server, context_tar)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)
    assert "http://" not in str(err.value), "the REST URL prefix is dropped; the line says what was being done"
    assert len(server.calls("POST", r"/builds$")) == 1, "create_build is not idempotent: never retried"
    assert builds.builds == {}


def test_a_transient_error_while_polling_is_ridden_out(cloud, context_tar):
    server, _, builds = cloud
    server.fail_next(503, "backend unavailable", r"/builds/")
    assert _build(server, context_tar).endswith(CloudBuild.digest_for(IMAGE))
    assert len(server.calls("GET", r"/builds/")) == builds.polls_to_finish + 1


def test_a_success_without_the_images_digest_is_not_taken_for_one(cloud, context_tar):
    server, _, builds = cloud
    builds.report_digests = False
    with pytest.raises(CloudError, match=r"^cloud build \S+ succeeded but reported no digest for "
                                         + re.escape(IMAGE) + r" \(pushed: none\)$"):
        _build(server, context_tar)


def test_waiting_is_bounded_by_the_builds_timeout(cloud, monkeypatch):
    server, _, builds = cloud
    builds.polls_to_finish = 10 ** 6  # never finishes
    monkeypatch.setattr(cloudbuild, "QUEUE_MARGIN_S", 0)
    build = cloudbuild.build_request("gs://stage/x.tgz", IMAGE, "Dockerfile", timeout_s=1)
    started = time.monotonic()
    with pytest.raises(CloudError, match=r": still WORKING after 1s .*stopped waiting, the build may still finish"):
        cloudbuild.run_build(build, project="proj", endpoint=server.url, log=lambda _: None, poll=FAST)
    assert time.monotonic() - started < 10


def test_a_lost_operation_is_one_line(cloud, context_tar):
    server, _, _ = cloud
    server.fail_next(404, "build not found", r"/builds/")
    with pytest.raises(CloudError, match=r"^following Cloud Build build 00000000-\S+: 404 build not found$"):
        _build(server, context_tar)


def test_a_missing_staging_bucket_stops_before_any_build(cloud, context_tar):
    server, _, builds = cloud
    with pytest.raises(CloudError) as err:
        _build(server, context_tar, staging_bucket="gs://nope/builds")
    assert str(err.value).startswith(f"uploading {context_tar} to gs://nope/builds/ctx-")
    assert ": 404 bucket gs://nope does not exist" in str(err.value)
    assert "gcloud storage buckets create gs://nope" in str(err.value) and "\n" not in str(err.value)
    assert builds.builds == {}


def test_no_permission_on_the_staging_bucket_is_one_line(cloud, context_tar):
    server, _, builds = cloud
    server.fail_next(403, "x@y.iam.gserviceaccount.com does not have storage.objects.create access", r"^/upload/")
    with pytest.raises(CloudError, match=r": 403 x@y\.iam\.gserviceaccount\.com does not have storage\.objects\."
                                         r"create access \(the caller needs roles/storage\.objectCreator on gs://stage\)$"):
        _build(server, context_tar)
    assert builds.builds == {}


def test_a_large_context_goes_as_a_resumable_upload(cloud, tmp_path):
    server, storage, _ = cloud
    big = tmp_path / "big.tgz"
    big.write_bytes(b"\x1f\x8b" + os.urandom(9 * 1024 * 1024))  # > 8 MiB: the client switches to resumable
    gcs.upload(big, "gs://stage/big.tgz", project="proj", endpoint=server.url)
    assert storage.objects[("stage", "big.tgz")][1] == big.read_bytes()
    assert [r.query["uploadType"] for r in server.calls("POST", "^/upload/")] == [["resumable"]]
    assert server.calls("PUT", "^/upload/")


def test_storage_emulator_host_moves_storage_alone(cloud, tmp_path, monkeypatch):
    """STORAGE_EMULATOR_HOST (the storage client's own variable) wins; a non-loopback endpoint (e.g. a
    regional Cloud Build endpoint) is never used for storage."""
    server, storage, _ = cloud
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    assert gcs.storage_endpoint("https://us-central1-cloudbuild.googleapis.com") == server.url
    (tmp_path / "f").write_bytes(b"x")
    gcs.upload(tmp_path / "f", "gs://stage/f", project="proj")
    assert storage.objects[("stage", "f")][1] == b"x"
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    assert gcs.storage_endpoint("https://us-central1-cloudbuild.googleapis.com") is None
    assert gcs.storage_endpoint(server.url) == server.url


def test_a_context_that_was_never_uploaded_fails_in_fetchsource(cloud):
    server, _, _ = cloud
    with pytest.raises(CloudError, match=r"FAILURE: fetching storage source: object gs://stage/ctx-x\.tgz does "
                                         r"not exist; logs: "):
        cloudbuild.build_from_storage("gs://stage/ctx-x.tgz", IMAGE, "Dockerfile", project="proj",
                                      endpoint=server.url, log=lambda _: None, poll=FAST)


@pytest.mark.parametrize("image", ["example.com/x/y", "example.com/x/y@sha256:" + "0" * 64])
def test_an_image_without_a_tag_is_refused_before_any_request(cloud, context_tar, image):
    server, _, _ = cloud
    with pytest.raises(CloudError, match="tag|digest"):
        cloudbuild_builder.build_and_push(context_tar, image, "Dockerfile", project="p", staging_bucket="gs://stage",
                                  endpoint=server.url)
    assert server.requests == []


# ---- the pipeline's build step (jobs.steps.calls.trainer_image, components.build_image) ----------------

def _job(**sets):
    """The multiworker preset (2 T4 per replica: the gpu variant) with a project of its own."""
    sets = {"container.image_repository": "us-central1-docker.pkg.dev/team-proj/training/tf-trainer", **sets}
    return config_lib.load("multiworker", [f"{k}={v}" for k, v in sets.items()])


def test_without_a_build_context_the_configs_image_is_used_and_nothing_is_called(cloud):
    server, _, _ = cloud
    cfg = _job()
    assert steps.trainer_image(cfg, "", endpoint=server.url) == images.job_image(cfg) != ""
    assert steps.trainer_image(_job(**{"container.image_uri": "example.com/x/y:1"}), "") == "example.com/x/y:1"
    assert server.requests == []


def test_with_a_build_context_cloud_build_builds_the_jobs_variant_by_digest(cloud):
    server, storage, builds = cloud
    storage.objects[("stage", "ctx/ctx-feedfacefeedface.tgz")] = ({}, b"")
    cfg = _job()  # 2 T4 per replica -> the gpu variant's repository (container.image_repository + "-gpu")
    ref = steps.trainer_image(cfg, "gs://stage/ctx/ctx-feedfacefeedface.tgz", endpoint=server.url,
                               log=lambda _: None)
    image = "us-central1-docker.pkg.dev/team-proj/training/tf-trainer-gpu:ctx-feedfacefeedface"
    assert ref == f"{image}@{CloudBuild.digest_for(image)}"
    body, = builds.requests
    assert builds.builds[next(iter(builds.builds))]["project"] == "team-proj", "the registry's project builds"
    assert "VARIANT=gpu" in body["steps"][0]["args"]
    validated = job_spec.parts(job_spec.custom_job_spec(cfg.with_image(ref)))
    assert {p["container_spec"]["image_uri"] for p in validated["worker_pool_specs"] if p} == {ref}


def test_a_staged_context_goes_through_the_builder_interface_and_only_cloud_build_takes_it(cloud):
    """The pipeline's build step builds through the one builder interface: the Docker engine's builder refuses a
    context in Cloud Storage in one line, before anything is called."""
    from jobs.images.builders import builder_for
    from jobs.images.cloudbuild import StagedContext

    server, _, _ = cloud
    staged = StagedContext("gs://stage/ctx/ctx-feedfacefeedface.tgz")
    assert staged.tag == "ctx-feedfacefeedface" and staged.dockerfile == "containers/Dockerfile"
    with pytest.raises(images.BuildError, match=r"^build context gs://stage/ctx/ctx-feedfacefeedface\.tgz: a Docker "
                                                r"engine builds a local context; .* \(backend cloudbuild\)$"):
        builder_for("docker", log=lambda _: None).build(staged, "example.com/x/y", staged.tag, {})
    with pytest.raises(CloudError, match="cannot tell which project runs the build for example.com/x/y"):
        builder_for("cloudbuild", endpoint=server.url, log=lambda _: None).build(staged, "example.com/x/y",
                                                                                   staged.tag, {})
    assert server.requests == []


@pytest.mark.process
def test_the_build_component_runs_under_kfp_local_against_the_stand_in(cloud, tmp_path):
    """The real lightweight component, executed by kfp.local's SubprocessRunner (its own process)."""
    from kfp import local

    import components

    server, storage, _ = cloud
    storage.objects[("stage", "ctx-feedfacefeedface.tgz")] = ({}, b"")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    c = components.published("python:3.11")
    cfg = _job()
    task = c.build_image(config_json=cfg.to_json(), build_context_uri="gs://stage/ctx-feedfacefeedface.tgz",
                         api_endpoint=server.url)
    image = "us-central1-docker.pkg.dev/team-proj/training/tf-trainer-gpu:ctx-feedfacefeedface"
    assert task.output == f"{image}@{CloudBuild.digest_for(image)}"
    before = len(server.requests)
    offline = c.build_image(config_json=cfg.to_json())
    assert offline.output == images.job_image(cfg) and len(server.requests) == before


# ---- the command line (helper A's `run.py build`, this backend) ---------------------------------------

def _run_build(tmp_path, *extra, env=None, timeout=120):
    ctx = tmp_path / "ctx"
    ctx.mkdir(exist_ok=True)
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    cmd = [sys.executable, str(ROOT / "pipelines" / "run.py"), "build", "--backend", "cloudbuild",
           "--context", str(ctx), "--dockerfile", "Dockerfile", "--image", "us-docker.pkg.dev/proj/repo/tf-trainer",
           "--variant", "cpu", *extra]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - started


def test_run_py_build_with_the_cloudbuild_backend_prints_the_image_by_digest(cloud, tmp_path):
    server, storage, builds = cloud
    proc, _ = _run_build(tmp_path, "--project", "my-proj", "--staging-bucket", "gs://stage/staging",
                         "--api-endpoint", server.url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    body, = builds.requests
    image = body["images"][0]
    assert image.startswith("us-docker.pkg.dev/proj/repo/tf-trainer:ctx-")
    assert last == f"{image}@{CloudBuild.digest_for(image)}"
    (_, name), = storage.objects
    assert body["source"]["storageSource"] == {"bucket": "stage", "object": name} and name.startswith("staging/")
    assert "SUCCESS" in proc.stdout


def test_run_py_build_cloud_failure_is_one_error_line(cloud, tmp_path):
    server, _, builds = cloud
    builds.outcome, builds.status_detail = "FAILURE", "step exited with non-zero status: 1"
    proc, _ = _run_build(tmp_path, "--project", "my-proj", "--staging-bucket", "gs://stage/s", "--api-endpoint", server.url)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("error: cloud build ") and "FAILURE: step exited with non-zero status: 1" in proc.stderr


def test_run_py_build_without_credentials_or_endpoint_is_one_line_and_quick(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG")}
    env.update(HOME=str(home), NO_GCE_CHECK="true", CLOUDSDK_CONFIG=str(home / "gcloud"))
    proc, took = _run_build(tmp_path, "--project", "my-proj", "--staging-bucket", "gs://stage/s", env=env, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # the first API the command needs (the registry's "is this tag there already?", or storage) says it
    assert re.fullmatch(r"error: no Google Cloud credentials found for (Artifact Registry|Cloud Storage): run "
                        r"`gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
                        r"service-account key file", proc.stderr.strip()), proc.stderr
    assert took < 30


def test_run_py_build_of_a_users_trainer_builds_the_trainer_image_then_the_users_over_it(cloud, tmp_path):
    """`run.py build --config my-project/job.yaml --image REPO --backend cloudbuild`: two builds, each from
    its own staged context; the second one's generated Dockerfile is FROM the first image's digest."""
    import shutil

    server, storage, builds = cloud
    project = tmp_path / "elsewhere" / "my-project"
    shutil.copytree(ROOT / "examples" / "tabular-regressor", project, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    (project / ".env").write_text("TOKEN=never-sent\n")
    trainer_ctx = tmp_path / "trainer-ctx"
    trainer_ctx.mkdir()
    (trainer_ctx / "Dockerfile").write_text("FROM scratch\n")
    cmd = [sys.executable, str(ROOT / "pipelines" / "run.py"), "build", "--backend", "cloudbuild",
           "--config", str(project / "job.yaml"), "--image", "us-docker.pkg.dev/proj/repo/regressor",
           "--context", str(trainer_ctx), "--dockerfile", "Dockerfile",
           "--project", "team-proj", "--staging-bucket", "gs://stage/s", "--api-endpoint", server.url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    trainer, user = builds.requests
    trainer_image, user_image = trainer["images"][0], user["images"][0]
    assert trainer_image.startswith("us-docker.pkg.dev/proj/repo/tf-trainer:ctx-")  # beside --image, cpu variant
    assert user_image.startswith("us-docker.pkg.dev/proj/repo/regressor:ctx-")
    assert user["steps"][0]["args"] == ["build", "-f", "Dockerfile", "-t", user_image, "."]
    source = user["source"]["storageSource"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(storage.objects[(source["bucket"], source["object"])][1]))) as tar:
        names = tar.getnames()
        dockerfile = tar.extractfile("Dockerfile").read().decode()
    assert f"FROM us-docker.pkg.dev/proj/repo/tf-trainer@{CloudBuild.digest_for(trainer_image)}\n" in dockerfile
    assert {"code/trainer/task.py", "code/eval.jsonl", "requirements/requirements.txt"} <= set(names)
    assert not [n for n in names if ".env" in n or n.endswith(("job.yaml", "tune.yaml"))]  # job files are not code
    out = proc.stdout.strip().splitlines()
    assert "excluded .env (always: credential: .env file)" in "\n".join(out)
    assert f"trainer image: {trainer_image}@{CloudBuild.digest_for(trainer_image)}" in out
    assert out[-1] == f"{user_image}@{CloudBuild.digest_for(user_image)}"


# ---- the compiled pipeline: the build step's output reaches every worker pool ------------------------

def _source(compiled: dict, component: str, task: str, param: str) -> tuple[str, str]:
    """Follow a task input up through the condition components to its producer:
    ("task", "<producer>.<output>") or ("parameter", "<pipeline parameter>")."""
    spec = compiled["root"] if component == "root" else compiled["components"][component]
    ref = spec["dag"]["tasks"][task]["inputs"]["parameters"][param]
    if "taskOutputParameter" in ref:
        out = ref["taskOutputParameter"]
        return "task", f"{out['producerTask']}.{out['outputParameterKey']}"
    name = ref["componentInputParameter"]
    if component == "root":
        return "parameter", name
    for parent_name, parent in [("root", compiled["root"]), *compiled["components"].items()]:
        for parent_task, body in parent.get("dag", {}).get("tasks", {}).items():
            if body["componentRef"]["name"] == component:
                return _source(compiled, parent_name, parent_task, name)
    raise AssertionError(f"no task runs {component}")


def test_the_compiled_pipeline_feeds_the_built_image_into_the_worker_pools(tmp_path):
    import yaml

    from components.validate_config.component import validate_config
    from pipelines.training_pipeline import compile_pipeline

    cfg = _job(**{"data.source": "synthetic"})  # validate_config checks a local data path; /gcs/ is not here
    compiled = yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"))).read_text())
    params = compiled["root"]["inputDefinitions"]["parameters"]
    assert params["build_context_uri"] == {"defaultValue": "", "isOptional": True, "parameterType": "STRING"}
    assert _source(compiled, "root", "build-image", "build_context_uri") == ("parameter", "build_context_uri")
    assert _source(compiled, "root", "validate-config", "image_uri") == ("task", "build-image.Output")
    assert _source(compiled, "root", "custom-training-job", "worker_pool_specs") == \
        ("task", "validate-config.worker_pool_specs")
    # ...and validate-config puts that image into every pool (the component function itself, run here)
    built = "us-central1-docker.pkg.dev/team-proj/training/tf-trainer-gpu:ctx-1@sha256:" + "a" * 64
    out = validate_config.python_func(cfg.to_json(), image_uri=built)
    assert [p["container_spec"]["image_uri"] for p in out.worker_pool_specs if p] == [built, built]
    assert config_lib.load_json(out.config_json).container.image_uri == built
    default = validate_config.python_func(cfg.to_json())
    assert {p["container_spec"]["image_uri"] for p in default.worker_pool_specs if p} == {images.job_image(cfg)}


def test_a_vertex_tensorboard_reaches_the_custom_job(tmp_path):
    """output.tensorboard -> validate-config's ``tensorboard`` output -> CustomTrainingJobOp(tensorboard=...)."""
    import yaml

    from components.validate_config.component import validate_config
    from pipelines.training_pipeline import compile_pipeline

    tb = "projects/team-proj/locations/us-central1/tensorboards/42"
    cfg = _job(**{"data.source": "synthetic", "output.tensorboard": tb})
    compiled = yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"))).read_text())
    assert _source(compiled, "root", "custom-training-job", "tensorboard") == ("task", "validate-config.tensorboard")
    assert validate_config.python_func(cfg.to_json()).tensorboard == tb
    assert validate_config.python_func(_job(**{"data.source": "synthetic"}).to_json()).tensorboard == ""
