"""The fault suite: every cloud command against stand-ins that answer 503, drop the connection, never
answer, answer an HTML page, or are not there; Ctrl-C in the middle; bad credentials and bad endpoints.

Each case ends in one line and the right exit code, within a few seconds: the policy is shrunk through its
environment variables (connect/read 1 s, 2 s of retries), never by patching code. The README's cloud
section has the table of these cases. Who picks the id decides what is repeated: a pipeline job (our id),
a template (same bytes) and a staged context (content-addressed) are; a Cloud Build build, a CustomJob
and a model upload (the server's ids) are not, unless the answer proves nothing was created (429, or no
connection at all).
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, signal_when, without_plan
from tests.standins.base import StandIn
from tests.standins.cloudbuild import CloudBuild
from tests.standins.gcs import Gcs
from tests.standins.kfp_registry import KfpRegistryStandIn
from tests.standins.vertex import VertexStandIn
from tests.test_submit import GOOD, run_main, submit_args

TEMPLATE = [*GOOD, "--set", "topology.region=europe-west4"]
JOB = r"projects/my-proj/locations/europe-west4/pipelineJobs/flowers-local-\d{14}-[a-z0-9]{4}"


@pytest.fixture(autouse=True)
def fast_policy(monkeypatch):
    for key, value in {"VTP_CLOUD_CONNECT_TIMEOUT_S": "1", "VTP_CLOUD_READ_TIMEOUT_S": "1",
                       "VTP_CLOUD_RETRY_TOTAL_S": "2", "VTP_CLOUD_RETRY_FIRST_S": "0.05",
                       "VTP_CLOUD_RETRY_MAX_S": "0.2", "VTP_CLOUD_POLL_S": "0.05"}.items():
        monkeypatch.setenv(key, value)


def one_error(capsys, rc: int, expected_rc: int) -> str:
    out, err = capsys.readouterr()
    assert rc == expected_rc, (out[-1500:], err[-1500:])
    assert "Traceback" not in err
    lines = [line for line in without_plan(err).strip().splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1, err
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def interrupt_on(standin: StandIn, method: str, pattern: str) -> None:
    """Ctrl-C (a real SIGINT to this process) the moment the stand-in sees the request; it then answers."""
    for i, (m, p, handler) in enumerate(standin.routes):
        if m == method and re.search(pattern, p):
            def ctrl_c(req, match, _handler=handler):
                os.kill(os.getpid(), signal.SIGINT)
                return _handler(req, match)
            standin.routes[i] = (m, p, ctrl_c)
            return
    raise AssertionError(f"no route {method} {pattern}")


def run_guarded(*argv: str) -> int:
    try:
        return run_main(*argv)
    except KeyboardInterrupt:  # the product must catch it; never let it end the test session
        pytest.fail("KeyboardInterrupt escaped the command")


# ---- submit: create ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", [503, 429, "drop", "drop-after"])
def test_submit_create_is_retried_when_the_answer_is_lost(vertex, capsys, fault):
    """The job id is ours: a repeat is safe; a lost answer to a create that worked comes back 409 and the job
    is read back, never created twice."""
    vertex.fault(fault, r"/pipelineJobs$", method="POST")
    assert run_main(*submit_args(vertex)) == 0, capsys.readouterr().err
    assert len(vertex.calls("POST", r"/pipelineJobs$")) == 2 and len(vertex.jobs) == 1
    if fault == "drop-after":
        assert "was created by an attempt whose answer was lost; following it" in capsys.readouterr().out


@pytest.mark.parametrize("fault, what", [
    (503, "gave up after retrying for 2 s: 503 stand-in fault 503"),
    ("hang", r"gave up after retrying for 2 s: no answer from 127\.0\.0\.1:\d+ within 1 s"),
    ("drop", r"gave up after retrying for 2 s: the connection to 127\.0\.0\.1:\d+ dropped before an answer came"),
    ("html", r"the answer was not the API's JSON \(an HTML page or garbage: a proxy in the way, or a wrong endpoint\?\)"),
])
def test_submit_create_gives_up_with_one_line(vertex, capsys, fault, what):
    vertex.fault(fault, r"/pipelineJobs$", method="POST", times=None)
    started = time.monotonic()
    line = one_error(capsys, run_guarded(*submit_args(vertex)), 1)
    assert time.monotonic() - started < 20
    assert re.fullmatch(rf"error: creating pipeline job {JOB}: {what}; it may exist even so: see or cancel it at "
                        r"https://console\.cloud\.google\.com/\S+ \(REST: GET https://europe-west4-aiplatform\."
                        r"googleapis\.com/v1/projects/\S+, POST \.\.\.:cancel\)", line), line


def test_submit_to_an_endpoint_with_nothing_listening(capsys):
    port = closed_port()
    args = submit_args(type("S", (), {"url": f"http://127.0.0.1:{port}"}))
    line = one_error(capsys, run_guarded(*args), 1)
    assert re.match(rf"error: creating pipeline job {JOB}: gave up after retrying for 2 s: cannot connect to "
                    rf"127\.0\.0\.1:{port} \(connection refused\); it may exist even so", line), line


def test_an_answer_naming_no_job_is_not_printed_as_one(vertex, capsys):
    from google.cloud import aiplatform_v1

    from tests.standins.base import typed

    vertex.routes.insert(0, ("POST", r"/v1/projects/[^/]+/locations/[^/]+/pipelineJobs",
                             lambda req, m: (200, typed(req, aiplatform_v1.PipelineJob()))))
    line = one_error(capsys, run_guarded(*submit_args(vertex)), 1)
    assert re.fullmatch(rf"error: creating pipeline job {JOB}: the answer named 'no job', not that job; .*", line), line
    assert "submitted pipeline job" not in capsys.readouterr().out


# ---- submit: follow ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", [503, 429, "drop", "hang"])
def test_following_rides_out_a_passing_fault(vertex, capsys, fault):
    vertex.fault(fault, r"/pipelineJobs/", method="GET")
    assert run_main(*submit_args(vertex)) == 0, capsys.readouterr().err
    assert "SUCCEEDED" in capsys.readouterr().out


@pytest.mark.parametrize("fault, what", [
    (503, "gave up after retrying for 2 s: 503 stand-in fault 503"),
    ("hang", r"gave up after retrying for 2 s: no answer from 127\.0\.0\.1:\d+ within 1 s"),
    ("html", r"the answer was not the API's JSON .*"),
])
def test_following_gives_up_saying_the_job_may_still_be_running(vertex, capsys, fault, what):
    vertex.fault(fault, r"/pipelineJobs/", method="GET", times=None)
    line = one_error(capsys, run_guarded(*submit_args(vertex)), 1)
    assert re.fullmatch(rf"error: reading pipeline job {JOB}: {what}; the job may still be running: see or cancel it "
                        r"at https://console\.cloud\.google\.com/vertex-ai/locations/europe-west4/pipelines/runs/\S+ "
                        r"\(REST: .*\)", line), line


def test_ctrl_c_while_following_names_the_job_that_keeps_running(vertex, capsys):
    interrupt_on(vertex, "GET", "pipelineJobs/")
    line = one_error(capsys, run_guarded(*submit_args(vertex)), 130)
    assert re.fullmatch(rf"interrupted \(Ctrl-C\): pipeline job {JOB} keeps running \(see or cancel it at .*\)", line)


def test_ctrl_c_in_a_real_process_while_following(tmp_path):
    from tests.test_submit import clean_env

    with VertexStandIn(states=("RUNNING",) * 10_000) as vertex:
        proc = subprocess.Popen([sys.executable, str(ROOT / "pipelines" / "run.py"), *submit_args(vertex)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                                env=clean_env(tmp_path))
        _, err = signal_when(proc, lambda: vertex.calls("GET", "/pipelineJobs/"), signal.SIGINT)
    assert proc.returncode == 130, err
    (line,) = without_plan(err).strip().splitlines()
    assert re.fullmatch(rf"interrupted \(Ctrl-C\): pipeline job {JOB} keeps running \(see or cancel it at .*\)", line)


# ---- upload-template ------------------------------------------------------------------------------

@pytest.fixture
def registry():
    with KfpRegistryStandIn("my-proj", "pipelines") as standin:
        yield standin


@pytest.mark.parametrize("fault", [503, "drop", "drop-after"])
def test_upload_template_is_retried_the_same_bytes_are_safe(registry, capsys, fault):
    registry.fault(fault, method="POST")
    assert run_main("upload-template", *TEMPLATE, "--host", registry.host) == 0, capsys.readouterr().err
    from tests.standins.kfp_registry import multipart_fields

    first, second = registry.calls("POST", "/my-proj/pipelines")
    assert multipart_fields(first) == multipart_fields(second) and len(registry.packages["flowers-local"]) == 1


@pytest.mark.parametrize("fault, what", [
    ("hang", r"gave up after retrying for 2 s: no answer from 127\.0\.0\.1:\d+ within 1 s; the same bytes can be "
             r"uploaded again safely"),
    (503, r"gave up after retrying for 2 s: 503 stand-in fault 503; the same bytes can be uploaded again safely"),
    ("html", r"the registry answered 200 '\(an HTML page or long text\)', not flowers-local/sha256:[0-9a-f]{64}: the "
             r"upload is not confirmed; .*"),
])
def test_upload_template_gives_up_with_one_line(registry, capsys, fault, what):
    registry.fault(fault, method="POST", times=None)
    line = one_error(capsys, run_guarded("upload-template", *TEMPLATE, "--host", registry.host), 1)
    assert re.fullmatch(rf"error: uploading the template to {re.escape(registry.host)}: {what}", line), line


def test_ctrl_c_during_an_upload_leaves_nothing_running(registry, capsys):
    interrupt_on(registry, "POST", "pipelines")
    line = one_error(capsys, run_guarded("upload-template", *TEMPLATE, "--host", registry.host), 130)
    assert line == "interrupted (Ctrl-C); nothing was left running in the cloud"


# ---- register-model ------------------------------------------------------------------------------

REGISTER = ["register-model", "--project", "my-proj", "--region", "europe-west4", "--model-dir",
            "gs://my-pipelines/runs/flowers/model"]
LISTING = ("a model may have been registered even so: gcloud ai models list --region europe-west4 --project my-proj "
           "--filter=display_name=flowers-local")


@pytest.mark.parametrize("fault, what", [
    ("drop-after", r"the connection to 127\.0\.0\.1:\d+ dropped before an answer came"),
    ("hang", r"no answer from 127\.0\.0\.1:\d+ within 1 s"),
    (503, "503 stand-in fault 503"),
    ("html", r"the answer was not the API's JSON .*"),
])
def test_a_model_upload_whose_answer_is_lost_is_not_repeated(vertex, capsys, fault, what):
    vertex.fault(fault, "models:upload", method="POST")
    line = one_error(capsys, run_guarded(*REGISTER, "--api-endpoint", vertex.url), 1)
    assert re.fullmatch(rf"error: uploading the model to the Model Registry: {what}; {re.escape(LISTING)}", line), line
    assert len(vertex.calls("POST", "models:upload")) == 1


def test_a_throttled_model_upload_is_repeated_nothing_was_created(vertex, capsys):
    vertex.fault(429, "models:upload", method="POST")
    assert run_main(*REGISTER, "--api-endpoint", vertex.url) == 0, capsys.readouterr().err
    assert len(vertex.calls("POST", "models:upload")) == 2 and len(vertex.models) == 1


def test_waiting_for_the_upload_rides_out_a_503_and_ctrl_c_names_the_operation(vertex, capsys):
    vertex.fault(503, "/operations/", method="GET")
    assert run_main(*REGISTER, "--api-endpoint", vertex.url) == 0, capsys.readouterr().err
    interrupt_on(vertex, "GET", "operations")
    line = one_error(capsys, run_guarded(*REGISTER, "--api-endpoint", vertex.url), 130)
    assert re.fullmatch(r"interrupted \(Ctrl-C\): model upload operation projects/my-proj/locations/europe-west4/models/"
                        r"\d+/operations/(\d+) keeps running \(gcloud ai operations describe \1 --region europe-west4 "
                        r"--project my-proj\)", line), line


# ---- build --backend cloudbuild -------------------------------------------------------------------

@pytest.fixture
def cloud(tmp_path):
    with StandIn() as server:
        storage = Gcs(server, buckets={"stage"})
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text("FROM scratch\n")
        yield server, storage, CloudBuild(server, gcs=storage), ctx


def build(server, ctx, *extra):
    return run_guarded("build", "--backend", "cloudbuild", "--context", str(ctx), "--dockerfile", "Dockerfile",
                       "--image", "us-docker.pkg.dev/my-proj/repo/tf-trainer", "--variant", "cpu", "--project",
                       "my-proj", "--staging-bucket", "gs://stage/builds", "--api-endpoint", server.url, *extra)


@pytest.mark.parametrize("fault, path, method", [(503, "^/upload/", "POST"), ("drop", "^/upload/", "POST"),
                                                 (429, r"/builds$", "POST"), (503, r"/builds/", "GET"),
                                                 ("hang", r"/builds/", "GET"), ("drop", r"/builds/", "GET")])
def test_cloud_build_rides_out_what_is_safe_to_repeat(cloud, capsys, fault, path, method):
    server, _, builds, ctx = cloud
    server.fault(fault, path, method=method)
    assert build(server, ctx) == 0, capsys.readouterr().err
    assert len(builds.builds) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("us-docker.pkg.dev/my-proj/repo/tf-trainer:ctx-")


@pytest.mark.parametrize("fault, what", [
    ("drop-after", r"the connection to 127\.0\.0\.1:\d+ dropped before an answer came"),
    (503, "503 stand-in fault 503"),
    ("hang", r"no answer from 127\.0\.0\.1:\d+ within 1 s"),
    ("html", r"the answer was not the API's JSON .*"),
])
def test_a_build_create_whose_answer_is_lost_is_not_repeated(cloud, capsys, fault, what):
    server, _, builds, ctx = cloud
    server.fault(fault, r"/builds$", method="POST")
    line = one_error(capsys, build(server, ctx), 1)
    assert re.fullmatch(rf"error: creating a Cloud Build build in project my-proj: {what}; a build may have been "
                        r"created even so: gcloud builds list --ongoing --project my-proj", line), line
    assert len(server.calls("POST", r"/builds$")) == 1


def test_following_a_build_gives_up_saying_it_may_still_run(cloud, capsys):
    server, _, builds, ctx = cloud
    server.fault("hang", r"/builds/", method="GET", times=None)
    line = one_error(capsys, build(server, ctx), 1)
    assert re.fullmatch(r"error: following Cloud Build build (\S+): gave up after retrying for 2 s: no answer from "
                        r"127\.0\.0\.1:\d+ within 1 s; the build may still be running: gcloud builds describe \1 "
                        r"--project my-proj; cancel: gcloud builds cancel \1 --project my-proj", line), line


def test_ctrl_c_while_following_a_build_names_it(cloud, capsys):
    server, _, builds, ctx = cloud
    interrupt_on(server, "GET", "builds/")
    line = one_error(capsys, build(server, ctx), 130)
    assert re.fullmatch(r"interrupted \(Ctrl-C\): Cloud Build build (\S+) keeps running \(gcloud builds describe \1 "
                        r"--project my-proj; cancel: gcloud builds cancel \1 --project my-proj\)", line), line


def test_cloud_build_with_nothing_listening(cloud, capsys):
    server, _, _, ctx = cloud
    line = one_error(capsys, run_guarded("build", "--backend", "cloudbuild", "--context", str(ctx), "--dockerfile",
                                         "Dockerfile", "--image", "us-docker.pkg.dev/my-proj/repo/tf-trainer",
                                         "--variant", "cpu", "--project", "my-proj", "--staging-bucket",
                                         "gs://stage/builds", "--api-endpoint", f"http://127.0.0.1:{closed_port()}"), 1)
    assert re.fullmatch(r"error: uploading \S+ to gs://stage/builds/ctx-[0-9a-f]+\.tgz: gave up after retrying for "
                        r"2 s: cannot connect to .*; the same upload can be run again safely", line), line


@pytest.mark.parametrize("args, expected", [
    (["--staging-bucket", "s3://x/builds"], "error: --staging-bucket: 's3://x/builds': only Cloud Storage (gs://) "
                                            "works here, not s3://"),
    (["--project", ""], "error: --project: '' is not a project id"),
    (["--backend", "docker", "--staging-bucket", "gs://b/x"], "error: --project: only for --backend cloudbuild"),
])
def test_bad_build_flags_are_refused(cloud, capsys, args, expected):
    server, _, _, ctx = cloud
    argv = ["build", "--backend", "cloudbuild", "--context", str(ctx), "--dockerfile", "Dockerfile", "--image",
            "us-docker.pkg.dev/my-proj/repo/tf-trainer", "--project", "my-proj", "--staging-bucket", "gs://stage/b",
            "--api-endpoint", server.url, *args]
    assert run_main(*argv) == 2
    assert expected in capsys.readouterr().err
    assert server.requests == []


# ---- the docker engine ------------------------------------------------------------------------------

def test_a_docker_engine_that_never_answers_is_one_line(tmp_path, capsys, monkeypatch):
    with StandIn() as engine:
        engine.fault("hang", times=None)
        monkeypatch.setenv("DOCKER_HOST", engine.url.replace("http://", "tcp://"))
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "Dockerfile").write_text("FROM scratch\n")
        started = time.monotonic()
        line = one_error(capsys, run_guarded("build", "--context", str(ctx), "--dockerfile", "Dockerfile", "--image",
                                             "127.0.0.1:5000/x"), 1)
    assert time.monotonic() - started < 15
    assert line.startswith(f"error: no Docker engine reachable at {engine.url.replace('http://', 'tcp://')}: ")
    assert "(start dockerd or set DOCKER_HOST)" in line


# ---- credentials, endpoints, the policy's own variables -----------------------------------------

@pytest.mark.parametrize("content, why", [
    (None, "no such file"),
    ("{not json", "it is not JSON (a service-account key file is)"),
    ('{"client_email": "x"}', "it is JSON without a 'type'"),
    ('{"type": "service_account"}', "google-auth cannot use it (type 'service_account': "),
])
def test_a_broken_credentials_file_is_named_with_the_reason(tmp_path, capsys, monkeypatch, content, why):
    key = tmp_path / "key.json"
    if content is not None:
        key.write_text(content)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    line = one_error(capsys, run_guarded("register-model", "--project", "my-proj", "--region", "europe-west4",
                                         "--model-dir", "gs://my-pipelines/m"), 1)
    assert line.startswith(f"error: the credentials for Vertex AI Model Registry in GOOGLE_APPLICATION_CREDENTIALS={key} "
                           f"cannot be used: {why}"), line
    assert line.endswith("fix or unset it, or run `gcloud auth application-default login`")


def test_a_non_google_endpoint_never_gets_credentials(capsys, monkeypatch, tmp_path):
    key = tmp_path / "never-read.json"  # would be a broken file: it must not even be looked at
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    line = one_error(capsys, run_guarded(*REGISTER, "--api-endpoint", "https://evil.example.com"), 1)
    assert line == ("error: Vertex AI Model Registry endpoint 'https://evil.example.com' is not a Google host over https "
                    "(*.googleapis.com, *.pkg.dev, gcr.io, *.gcr.io): the Google token is sent nowhere else; leave the "
                    "endpoint out, or give a loopback stand-in such as http://127.0.0.1:PORT")


def test_a_bad_policy_variable_is_one_line(vertex, capsys, monkeypatch):
    monkeypatch.setenv("VTP_CLOUD_READ_TIMEOUT_S", "soon")
    line = one_error(capsys, run_guarded(*REGISTER, "--api-endpoint", vertex.url), 2)
    assert line == "error: VTP_CLOUD_READ_TIMEOUT_S='soon': expected a number of seconds > 0, e.g. 10"
    assert vertex.requests == []


def test_policy_defaults_and_bounds(monkeypatch):
    from jobs.cloud.apis.policy import POLICY_ENV, Policy, policy
    from jobs.rules.errors import CloudError

    for key in POLICY_ENV:
        monkeypatch.delenv(key, raising=False)
    assert policy() == Policy(connect_s=10, read_s=10, total_s=120, first_s=1, max_s=30, poll_s=20)
    for bad in ("0", "-1", "nan", "inf", "x"):
        monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", bad)
        with pytest.raises(CloudError, match="VTP_CLOUD_RETRY_TOTAL_S"):
            policy()


# ---- run.py: a cloud run never silently becomes a local one ------------------------------------------

@pytest.mark.parametrize("args, expected", [
    (["--project", ""], "error: --project: is empty: give the Google Cloud project to submit to, or leave --project "
                        "out to run on this machine"),
    (["--pipeline-root", "gs://b/x"], "error: --pipeline-root: only for Vertex runs; add --project PROJECT or remove it"),
    (["--api-endpoint", "http://127.0.0.1:9"], "error: --api-endpoint: only for Vertex runs"),
    (["--region", "europe-west4"], "error: --region: only for Vertex runs"),
    (["--no-wait"], "error: --no-wait: only for Vertex runs"),
    (["--labels", "a=b"], "error: --labels: only for Vertex runs"),
    (["--project", "my-proj", "--poll-seconds", "-1"], "error: --poll-seconds: must be a finite number of seconds above 0 and at most 3600, got -1; valid choices: 20"),
    (["--project", "my-proj", "--poll-seconds", "0"], "error: --poll-seconds: must be a finite number of seconds above 0 and at most 3600, got 0"),
])
def test_cloud_flags_without_a_project_are_refused_and_nothing_runs(tmp_path, capsys, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    assert run_main(*args) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == [], "nothing may be created (no runs/, no folder named gs:)"
