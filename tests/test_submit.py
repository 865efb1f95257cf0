"""Submitting to Vertex AI Pipelines (``run.py --project``), every request proven on a local stand-in of the
Vertex AI REST API driven through the real ``google.cloud.aiplatform`` client: what the job carries, how
it is followed, how each failure becomes one line, and every preflight rule before anything is sent."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from jobs.rules import labels
from tests.conftest import ROOT, without_plan
from tests.standins.vertex import VertexStandIn
from jobfile import config as config_lib

PROJECT, REGION, ROOT_URI = "my-proj", "europe-west4", "gs://my-pipelines/root"
IMAGE = "europe-west4-docker.pkg.dev/my-proj/training/tf-trainer:ctx-0123456789abcdef@sha256:" + "a" * 64
GOOD = ["--set", "output.base_dir=gs://my-pipelines/runs/flowers",
        "--set", "container.image_repository=europe-west4-docker.pkg.dev/my-proj/training/tf-trainer",
        "--set", f"container.image_uri={IMAGE}"]


def run_main(*argv: str) -> int:
    from pipelines.run import main

    return main(list(argv))


def submit_args(standin, *extra: str) -> list[str]:
    return ["--project", PROJECT, "--region", REGION, "--pipeline-root", ROOT_URI, *GOOD,
            "--api-endpoint", standin.url, "--poll-seconds", "0.05", *extra]


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No credentials anywhere: empty HOME (no gcloud ADC file), no GOOGLE_APPLICATION_CREDENTIALS."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GOOGLE_", "CLOUDSDK_")) and k not in ("HOME", "STORAGE_EMULATOR_HOST")}
    env.update(HOME=str(home), NO_GCE_CHECK="true", PYTHONPATH=str(ROOT), **extra)
    return env


def test_submit_sends_the_compiled_pipeline_and_runtime_config(vertex, capsys, tmp_path):
    from pipelines.training_pipeline import compile_pipeline

    rc = run_main(*submit_args(vertex, "--service-account", f"runner@{PROJECT}.iam.gserviceaccount.com",
                               "--network", "projects/123456789012/global/networks/vpc",
                               "--labels", "team=vision", "cost-center=ml-42"))
    out, err = capsys.readouterr()
    assert rc == 0, err
    (create,) = vertex.calls("POST", "/pipelineJobs$")
    assert create.path == f"/v1/projects/{PROJECT}/locations/{REGION}/pipelineJobs"
    job_id = create.query["pipelineJobId"][0]
    assert re.fullmatch(r"flowers-local-\d{14}-[a-z0-9]{4}", job_id)
    body = create.json()
    # The spec is the compiled YAML of the same config (with the job's region), as --compile-only writes it.
    cfg = config_lib.load("local", [*GOOD[1::2], f"topology.region={REGION}"])
    runtime = body["runtimeConfig"]
    params = runtime["parameterValues"]
    # the plan's judgement of the options travels as placement_plan (jobs.rules.ranking), the compiled default too
    assert params["placement_plan"]["source"].startswith(f"vtp plan of project {PROJECT}")
    expected = yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"),
                                                    placement=params["placement_plan"])).read_text())
    assert body["pipelineSpec"] == expected
    assert runtime["gcsOutputDirectory"] == ROOT_URI
    assert set(params) == {"config_json", "location", "service_account", "network", "placement_plan"}  # no target
    assert params["location"] == REGION
    # the training replicas run as the same account, in the same network (CustomTrainingJobOp's inputs)
    assert (params["service_account"], params["network"]) == (body["serviceAccount"], body["network"])
    train = expected["root"]["dag"]["tasks"]["custom-training-job"]  # in the root: the Vertex pipeline has no branch
    # the flag's values reach the CustomJob through validate-config (which falls back on the file's vertex section)
    checked = expected["root"]["dag"]["tasks"]["validate-config"]["inputs"]["parameters"]
    for key in ("service_account", "network"):
        assert checked[key] == {"componentInputParameter": key}
        assert train["inputs"]["parameters"][key] == {"taskOutputParameter": {"outputParameterKey": key,
                                                                              "producerTask": "validate-config"}}
    assert config_lib.load_json(params["config_json"]) == cfg
    assert body["serviceAccount"] == f"runner@{PROJECT}.iam.gserviceaccount.com"
    assert body["network"] == "projects/123456789012/global/networks/vpc"
    run_labels = {k: v for k, v in body["labels"].items() if k.startswith("vtp-")}  # the run's (jobs.rules.labels)
    assert {k: v for k, v in body["labels"].items() if k not in run_labels} == {"team": "vision", "cost-center": "ml-42"}
    assert run_labels == {"vtp-run": job_id, "vtp-config": labels.config_hash(cfg.for_vertex())}
    assert labels.problems(body["labels"]) == []
    assert body["displayName"] == "flowers-local"
    # Printed: the resource name, the console link, one line per state change, the outcome.
    name = f"projects/{PROJECT}/locations/{REGION}/pipelineJobs/{job_id}"
    assert name in out
    assert (f"https://console.cloud.google.com/vertex-ai/locations/{REGION}/pipelines/runs/{job_id}"
            f"?project={PROJECT}") in out
    states = re.findall(r"^\d\d:\d\d:\d\d  (\w+)$", out, re.M)
    assert states == ["RUNNING", "SUCCEEDED"]
    gets = vertex.calls("GET", "/pipelineJobs/")
    assert all(g.path == f"/v1/{name}" for g in gets) and len(gets) == 2


def test_no_wait_prints_the_job_and_does_not_follow(vertex, capsys):
    assert run_main(*submit_args(vertex, "--no-wait")) == 0
    out = capsys.readouterr().out
    assert "submitted pipeline job projects/" in out and "console.cloud.google.com" in out
    assert len(vertex.calls("POST", "/pipelineJobs$")) == 1 and vertex.calls("GET", "/pipelineJobs/") == []


def test_a_failed_job_is_one_line_with_the_failed_task_and_exit_1(capsys):
    with VertexStandIn(states=("RUNNING", "RUNNING", "FAILED"), error_message="The DAG failed because some tasks failed.",
                       failed_task="train-vertex", task_message="The replica workerpool0-0 exited with status 1: "
                       "ValueError: bad data") as standin:
        rc = run_main(*submit_args(standin))
    out, err = capsys.readouterr()
    assert rc == 1
    assert re.findall(r"^\d\d:\d\d:\d\d  (\w+)$", out, re.M) == ["RUNNING", "FAILED"]
    lines = without_plan(err).strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("error: pipeline job projects/my-proj/locations/europe-west4/pipelineJobs/flowers-local-")
    assert "ended FAILED" in lines[0]
    assert "The DAG failed because some tasks failed." in lines[0]
    assert "task train-vertex failed: The replica workerpool0-0 exited with status 1: ValueError: bad data" in lines[0]


@pytest.mark.parametrize("status,message", [
    (400, "Invalid pipeline spec: pipelineInfo.name must match ^[a-z0-9][a-z0-9-]{0,127}$"),
    (403, "Permission 'aiplatform.pipelineJobs.create' denied on resource (or it may not exist)."),
])
def test_api_errors_on_create_are_one_line_and_exit_1(vertex, capsys, status, message):
    vertex.fail_next(status, message, "/pipelineJobs$")
    rc = run_main(*submit_args(vertex))
    _, err = capsys.readouterr()
    assert rc == 1
    (line,) = without_plan(err).strip().splitlines()
    assert re.fullmatch(rf"error: creating pipeline job projects/my-proj/locations/europe-west4/pipelineJobs/"
                        rf"flowers-local-\d{{14}}-[a-z0-9]{{4}}: {status} {re.escape(message)}", line), line
    assert len(vertex.calls("POST", "/pipelineJobs$")) == 1, "a definite refusal is not retried"


def test_an_error_while_following_is_one_line(vertex, capsys):
    vertex.fail_next(403, "Permission 'aiplatform.pipelineJobs.get' denied", "/pipelineJobs/")
    assert run_main(*submit_args(vertex)) == 1
    err = without_plan(capsys.readouterr().err).strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: reading pipeline job projects/my-proj/")
    assert err[0].endswith("403 Permission 'aiplatform.pipelineJobs.get' denied")


BAD = {
    "bare bucket": (["--pipeline-root", "gs://my-pipelines"],
                    "error: --pipeline-root: 'gs://my-pipelines' is a whole bucket; give a folder in it; valid "
                    "choices: gs://my-pipelines/pipeline-root"),
    "no pipeline root": (["--pipeline-root", ""], "error: --pipeline-root: is required: a Cloud Storage folder; "
                                                  "valid choices: gs://<your bucket>/pipeline-root"),
    "s3 pipeline root": (["--pipeline-root", "s3://x/root"], "error: --pipeline-root: 's3://x/root': only Cloud "
                                                             "Storage (gs://) works here, not s3://"),
    "bad bucket name": (["--pipeline-root", "gs://My_Bucket/root"], "error: --pipeline-root: 'gs://My_Bucket/root': "
                                                                    "'My_Bucket' is not a bucket name"),
    "image never built": (["--set", "container.image_uri="],
                          "error: container.image_uri: europe-west4-docker.pkg.dev/my-proj/training/tf-trainer:latest "
                          "is not pinned by digest: a tag can move"),
    "image by tag only": (["--set", "container.image_uri=europe-west4-docker.pkg.dev/my-proj/t/tf:v1"],
                          "error: container.image_uri: europe-west4-docker.pkg.dev/my-proj/t/tf:v1 is not pinned by "
                          "digest"),
    "image with a short digest": (["--set", "container.image_uri=europe-west4-docker.pkg.dev/my-proj/t/tf@sha256:abc"],
                                  "error: container.image_uri: bad image reference "
                                  "'europe-west4-docker.pkg.dev/my-proj/t/tf@sha256:abc': digest must be sha256:<64"),
    "image with a space": (["--set", "container.image_uri=TF Trainer:v1"],
                           "error: container.image_uri: bad image reference 'TF Trainer:v1'"),
    "unknown region": (["--region", "mars-west1"], "error: --region: 'mars-west1' is not a Vertex AI region"),
    "placeholder bucket": (["--set", "output.base_dir=gs://my-bucket/runs/x"],
                           "error: output.base_dir: 'gs://my-bucket/runs/x' still names the presets' placeholder "
                           "bucket 'my-bucket'"),
    "preset image placeholder": (["--set", "container.image_uri=", "--set",
                                  "container.image_repository=us-central1-docker.pkg.dev/my-project/t/tf"],
                                 "container.image_uri: us-central1-docker.pkg.dev/my-project/t/tf:latest still names "
                                 "the presets' placeholder project 'my-project'"),
    "image in another region": (["--set", "container.image_uri=us-central1-docker.pkg.dev/my-proj/t/tf:1"],
                                "container.image_uri: us-central1-docker.pkg.dev is not in the region family of "
                                "europe-west4"),
    "image on this machine": (["--set", "container.image_uri=127.0.0.1:5000/tf:1"],
                              "error: container.image_uri: 127.0.0.1:5000/tf:1 is on this machine's registry, which "
                              "Vertex AI cannot reach"),
    "gpu not offered": (["--set", "topology.strategy=mirrored", "--set", "topology.chief.machine_type=n1-standard-8",
                         "--set", "topology.chief.accelerator_type=NVIDIA_TESLA_K80", "--set",
                         "topology.chief.accelerator_count=2", "--set", "topology.worker.replica_count=0"],
                        "error: topology.region: europe-west4 does not offer NVIDIA_TESLA_K80"),  # --region's
    "service account": (["--service-account", "runner"], "error: --service-account: 'runner' is not a service account"),
    "network": (["--network", "vpc"], "error: --network: 'vpc' is not a VPC network's full name (a short name"),
    "label": (["--labels", "Team=Vision"], "error: --labels: 'Team=Vision': a label is key=value"),
    "model label": (["--set", "serving.labels={Team: x}"], "error: serving.labels: 'Team=x': a label is key=value"),
    "job id": (["--set", "name=9flowers"], "error: name: the job id '9flowers-"),
    "local output": (["--set", "output.base_dir=./runs/x"],
                     f"error: output.base_dir: '{os.path.abspath('runs/x')}': only Cloud Storage (gs://) works here, not a path on this "
                     "machine (Vertex cannot see it); valid choices: gs://<your bucket>/runs/flowers-local"),
    "local data": (["--set", "data.source=images", "--set", "data.path=/tmp/flowers"], "error: data.path: '/tmp/flowers'"),
    "parent model elsewhere": (["--set", "serving.parent_model=projects/p/locations/us-central1/models/7"],
                               "error: serving.parent_model: 'projects/p/locations/us-central1/models/7' must be a model "
                               "of the job's region"),
    "template not in Artifact Registry": (["--template", "https://example.com/p.yaml"], "error: --template:"),
    "region name": (["--region", "Europe"], "error: --region: 'Europe' is not a Vertex AI region"),
    "tensorboard without a service account": (
        ["--set", "output.tensorboard=projects/my-proj/locations/europe-west4/tensorboards/1"],
        "error: --service-account: output.tensorboard (Vertex TensorBoard) needs the training job to run as a "
        "service account"),
    "tensorboard in another region": (
        ["--set", "output.tensorboard=projects/my-proj/locations/us-central1/tensorboards/1",
         "--service-account", "runner@my-proj.iam.gserviceaccount.com"],
        "error: output.tensorboard: TensorBoard 'projects/my-proj/locations/us-central1/tensorboards/1' is in "
        "us-central1, the job runs in europe-west4: Vertex needs both in one region"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_preflight_rejects_before_anything_is_sent(vertex, capsys, monkeypatch, case):
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "3")  # 127.0.0.1:5000 ("image on this machine"): nothing listens
    extra, expected = BAD[case]
    rc = run_main(*submit_args(vertex), *extra)
    _, err = capsys.readouterr()
    assert rc == 2, err
    assert expected in err, err
    assert vertex.requests == [], "nothing may be sent when the preflight fails"
    assert "Traceback" not in err
    assert all(line.startswith(("error: ", "warning: ")) for line in without_plan(err).strip().splitlines())


def test_gcr_io_and_other_registries_are_warnings(vertex, capsys, monkeypatch):
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "3")  # no stand-in serves these registries: each check gives up
    pin = "@sha256:" + "b" * 64
    assert run_main(*submit_args(vertex, "--no-wait"), "--set", f"container.image_uri=gcr.io/my-proj/tf:1{pin}") == 0
    assert f"warning: container.image_uri: gcr.io/my-proj/tf:1{pin} is on a gcr.io host" in capsys.readouterr().err
    assert run_main(*submit_args(vertex, "--no-wait"), "--set", f"container.image_uri=docker.io/me/tf:1{pin}") == 0
    assert "Vertex AI can pull it only if it is public" in capsys.readouterr().err


def test_follow_polls_with_a_bounded_growing_interval():
    from types import SimpleNamespace

    from jobs.cloud.apis import vertex

    states = iter(["PIPELINE_STATE_PENDING"] * 2 + ["PIPELINE_STATE_RUNNING"] * 5 + ["PIPELINE_STATE_SUCCEEDED"])

    class Client:
        def get_pipeline_job(self, name, retry=None, timeout=None):
            return SimpleNamespace(state=SimpleNamespace(name=next(states)))

    slept, lines = [], []
    state, message = vertex.follow(Client(), "projects/p/locations/l/pipelineJobs/j", poll_s=5, log=lines.append,
                                   sleep=slept.append)
    assert (state, message) == ("PIPELINE_STATE_SUCCEEDED", "")
    assert slept == [1, 2, 4, 5, 5, 5, 5]
    assert [line.split()[-1] for line in lines] == ["PENDING", "RUNNING", "SUCCEEDED"]


def _cli(args, env, timeout=90):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=str(ROOT))
    return proc, time.monotonic() - started


def test_cli_process_exits_promptly_after_the_job_ends(vertex, tmp_path):
    """aiplatform's own wait() left a process alive after the job ended (FACTS.md): this one must exit."""
    proc, took = _cli(submit_args(vertex), clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "SUCCEEDED" in proc.stdout and "Traceback" not in proc.stderr
    assert took < 60, f"the CLI took {took:.0f} s to exit"


def test_without_credentials_one_line_says_how_to_authenticate(tmp_path):
    args = ["--project", PROJECT, "--region", REGION, "--pipeline-root", ROOT_URI, *GOOD]
    proc, took = _cli(args, clean_env(tmp_path))
    assert proc.returncode == 1
    assert without_plan(proc.stderr).strip().splitlines() == [
        "error: no Google Cloud credentials found for Vertex AI: run `gcloud auth application-default login`, or "
        "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file"]
    assert "Traceback" not in proc.stderr and took < 60


def test_no_cache_turns_caching_off_for_every_task(vertex):
    assert run_main(*submit_args(vertex, "--no-wait", "--no-cache")) == 0
    spec = vertex.calls("POST", "/pipelineJobs$")[0].json()["pipelineSpec"]
    dags = [spec["root"], *spec["components"].values()]
    caching = [t["cachingOptions"] for d in dags for t in d.get("dag", {}).get("tasks", {}).values()]
    assert len(caching) > 5 and all(c == {"enableCache": False} for c in caching)


def test_preflight_checks_the_hardware_in_the_jobs_region_not_the_configs():
    from jobs.commands import submit

    cfg = config_lib.load("local", [*GOOD[1::2], "topology.strategy=mirrored", "topology.worker.replica_count=0",
                                    "topology.chief.machine_type=n1-standard-8",
                                    "topology.chief.accelerator_type=NVIDIA_TESLA_K80", "topology.chief.accelerator_count=2"])
    assert cfg.topology.region == "us-central1"
    errors, _, _ = submit.preflight(cfg, PROJECT, REGION, ROOT_URI)
    assert [str(e).split(";")[0] for e in errors] == [
        "--region: europe-west4 does not offer NVIDIA_TESLA_K80",
        "topology.chief.accelerator_type: NVIDIA_TESLA_K80 is retired: K80 reached end of support on Vertex AI and "
        "Compute Engine in 2024"]  # retired: refused with the reason (issue 33)
    errors, _, _ = submit.preflight(cfg, PROJECT, "us-central1", ROOT_URI)
    assert [e for e in errors if e.field == "--region"] == []


def test_image_flag_is_the_components_image_and_is_checked_too(vertex, capsys):
    rc = run_main(*submit_args(vertex, "--no-wait"), "--image", "us-central1-docker.pkg.dev/my-proj/t/base:1")
    err = capsys.readouterr().err
    assert rc == 2 and vertex.requests == []
    assert without_plan(err).strip().splitlines() == [
        "error: --image: us-central1-docker.pkg.dev is not in the region family of europe-west4: every replica would "
        "pull across regions (slow start, egress charges); push the image to a registry in europe-west4; valid "
        "choices: europe-west4-docker.pkg.dev/my-proj/t/base:1, europe-docker.pkg.dev/my-proj/t/base:1",
        "error: --image: us-central1-docker.pkg.dev/my-proj/t/base:1 is not pinned by digest: a tag can move between "
        "now and the replicas' pull; pass the reference `python pipelines/run.py build` prints; valid choices: "
        "us-central1-docker.pkg.dev/my-proj/t/base:1@sha256:<digest>"]


def test_ctrl_c_while_following_leaves_the_job_running_and_says_so(vertex, capsys, monkeypatch):
    from jobs.cloud.apis import vertex as vertex_lib

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(vertex_lib, "follow", interrupted)
    assert run_main(*submit_args(vertex)) == 130
    (line,) = without_plan(capsys.readouterr().err).strip().splitlines()
    job = r"flowers-local-\d{14}-[a-z0-9]{4}"
    assert re.fullmatch(rf"interrupted \(Ctrl-C\): pipeline job projects/my-proj/locations/europe-west4/pipelineJobs/"
                        rf"{job} keeps running \(see or cancel it at https://console\.cloud\.google\.com/vertex-ai/"
                        rf"locations/europe-west4/pipelines/runs/{job}\?project=my-proj \(REST: .*\)\)", line), line
    assert len(vertex.calls("POST", "/pipelineJobs$")) == 1


def test_job_ids_made_in_the_same_second_differ_and_keep_vertexs_rule():
    from jobs.commands import submit

    ids = {submit.job_id_for("flowers-local", now=1_800_000_000) for _ in range(50)}
    assert len(ids) > 45  # 36^4 suffixes: a collision in 50 draws is rare, never systematic
    assert all(re.fullmatch(r"flowers-local-20270115080000-[a-z0-9]{4}", i) and submit.JOB_ID_RE.match(i) for i in ids)
    longest = submit.job_id_for("a" * 108)
    assert len(longest) == 128 and submit.JOB_ID_RE.match(longest)
