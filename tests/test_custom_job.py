"""The Vertex branch's training step (jobs/cloud/vertex_jobs/custom_job.py), executed as Vertex executes it.

The compiled pipeline's executor for the ``custom-training-job`` task is run as a process (its own
container command, ``python3 -u -m components.entry custom_training_job`` with placeholders filled by kfp's own resolver
from the executor input the Vertex backend would give it: the task's inputs as the upstream
``validate-config`` outputs them, numbers as JSON floats), up to and through the CustomJob create call, against the Vertex stand-in, which decodes the body strictly
as an ``aiplatform_v1.CustomJob``. What is asserted is what Vertex would receive: the worker pools by
position, whatever GCPC's launcher would have stripped.
"""
from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import signal_when
from tests.standins.vertex import VertexStandIn
from tests.vertex_steps import as_json_numbers, finish, start_step
from jobfile import config as config_lib

IMAGE = "europe-west4-docker.pkg.dev/my-proj/training/tf-trainer:ctx-1@sha256:" + "a" * 64
JOB = ["container.image_uri=" + IMAGE, "output.base_dir=gs://my-pipelines/runs/x", "topology.region=europe-west4"]


def _compiled(tmp_path) -> dict:
    from pipelines.training_pipeline import compile_pipeline

    cfg = config_lib.load("local", JOB)
    return yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"))).read_text())


def _inputs(worker_pool_specs, endpoint: str, **extra) -> dict:
    return {"display_name": "flowers-local", "worker_pool_specs": as_json_numbers(worker_pool_specs),
            "base_output_directory": "gs://my-pipelines/runs/x", "tensorboard": "",
            "restart_job_on_worker_restart": True, "scheduling_strategy": "STANDARD", "timeout": "3600s",
            "max_wait_duration": "", "persistent_resource_id": "", "service_account": "", "network": "",
            "disable_retries": False, "enable_web_access": False, "enable_dashboard_access": False,
            "reserved_ip_ranges": [], "psc_network_attachment": "", "location": "europe-west4", "project": "my-proj", "api_endpoint": endpoint, **extra}


def start_executor(compiled: dict, inputs: dict, out: Path, env: dict | None = None) -> subprocess.Popen:
    """The task's container command, as the Vertex backend starts it (``{{$}}`` = the executor input)."""
    container = compiled["deploymentSpec"]["executors"]["exec-custom-training-job"]["container"]
    proc = start_step(container, "custom-training-job", inputs, out, parameters=("gcp_resources",), env=env)
    assert proc.args[:5] == ["python3", "-u", "-m", "components.entry", "custom_training_job"]
    return proc


def run_executor(compiled, inputs, out, env=None, timeout=120) -> subprocess.CompletedProcess:
    return finish(start_executor(compiled, inputs, out, env), timeout)


def _pools(cfg_sets=(), job_dict=None):
    from jobs.rules import job_spec
    from jobs.rules.job_spec import worker_pool_specs

    if job_dict is not None:
        return worker_pool_specs(job_dict, IMAGE, ["python"], ["-m", "trainers.task"])
    return job_spec.parts(job_spec.custom_job_spec(config_lib.load("local", [*JOB, *cfg_sets])))["worker_pool_specs"]


N4 = {"machine_type": "n1-standard-4"}
CASES = {
    # Vertex documents an empty spec at index 2 for "evaluator, no parameter server"; GCPC stripped it
    "chief + workers + evaluator": (["topology.evaluator.replica_count=1", "topology.evaluator.machine_type=n1-standard-4"],
                                    None, [1, 1, None, 1]),
    "chief + workers + parameter server + evaluator": ((), {"topology": {
        "chief": {"replica_count": 1, **N4}, "worker": {"replica_count": 2, **N4},
        "parameter_server": {"replica_count": 1, **N4}, "evaluator": {"replica_count": 1, **N4}}}, [1, 2, 1, 1]),
    "chief only": (["topology.strategy=one_device", "topology.worker.replica_count=0"], None, [1]),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.process
def test_the_compiled_step_sends_the_pools_by_position(tmp_path, case):
    sets, job_dict, replicas = CASES[case]
    compiled = _compiled(tmp_path)
    with VertexStandIn() as vertex:
        proc = run_executor(compiled, _inputs(_pools(sets, job_dict), vertex.url), tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (create,) = vertex.calls("POST", r"/customJobs$")
        (job,) = vertex.custom_jobs.values()
    assert create.path == "/v1/projects/my-proj/locations/europe-west4/customJobs"
    sent = create.json()["jobSpec"]["workerPoolSpecs"]
    assert [p.get("replicaCount") and int(p["replicaCount"]) or None for p in sent] == replicas
    assert [bool(p) for p in sent] == [r is not None for r in replicas]
    if case == "chief + workers + evaluator":
        assert sent[2] == {} and sent[3]["machineSpec"] == {"machineType": "n1-standard-4"}  # evaluator at 3
    assert len(job.job_spec.worker_pool_specs) == len(replicas)  # as Vertex parsed it
    assert all(p["containerSpec"]["imageUri"] == IMAGE for p in sent if p)
    spec = create.json()["jobSpec"]
    assert spec["baseOutputDirectory"] == {"outputUriPrefix": "gs://my-pipelines/runs/x"}
    scheduling = job.job_spec.scheduling  # as Vertex parsed it (the REST body carries the enum as a number)
    assert (scheduling.timeout.total_seconds(), scheduling.restart_job_on_worker_restart, scheduling.strategy.name) == \
        (3600, True, "STANDARD")
    # the gcp_resources output, in GCPC's format: the console links the job
    resources = json.loads((tmp_path / "gcp_resources").read_text())
    assert resources == {"resources": [{"resourceType": "CustomJob",
                                        "resourceUri": f"{vertex.url}/v1/{job.name}"}]}
    assert "CustomJob" in proc.stdout and "SUCCEEDED" in proc.stdout


def test_system_labels_of_the_run_are_added_like_gcpc_does(tmp_path):
    compiled = _compiled(tmp_path)
    with VertexStandIn() as vertex:
        proc = run_executor(compiled, _inputs(_pools(), vertex.url), tmp_path,
                            env={"VERTEX_AI_PIPELINES_RUN_LABELS": json.dumps({"vertex-ai-pipelines-run-billing-id": "42"})})
        assert proc.returncode == 0, proc.stderr[-2000:]
        (create,) = vertex.calls("POST", r"/customJobs$")
    assert create.json()["labels"] == {"vertex-ai-pipelines-run-billing-id": "42"}


@pytest.mark.integration
def test_a_retried_task_follows_the_job_it_created_instead_of_creating_another(tmp_path):
    from jobs.cloud.vertex_jobs import job_runner

    compiled = _compiled(tmp_path)
    with VertexStandIn() as vertex:
        first = run_executor(compiled, _inputs(_pools(), vertex.url), tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        again = run_executor(compiled, _inputs(_pools(), vertex.url), tmp_path)
        assert again.returncode == 0, again.stderr[-2000:]
        assert len(vertex.calls("POST", r"/customJobs$")) == 1
    (name,) = [j.name for j in vertex.custom_jobs.values()]
    assert job_runner.existing_job(str(tmp_path / "gcp_resources")) == name
    assert f"resuming: CustomJob {name} was created by an earlier attempt" in again.stdout


def test_a_failed_job_fails_the_task_with_one_line_carrying_its_error(tmp_path):
    compiled = _compiled(tmp_path)
    with VertexStandIn(custom_states=("RUNNING", "FAILED"), custom_error="Replica workerpool0-0 exited with 1") as vertex:
        proc = run_executor(compiled, _inputs(_pools(), vertex.url), tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: CustomJob projects/my-proj/locations/europe-west4/customJobs/")
    assert line.endswith(" ended FAILED: Replica workerpool0-0 exited with 1")


@pytest.mark.parametrize("when", ["between polls", "during a poll"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
@pytest.mark.process
def test_sigterm_and_ctrl_c_cancel_the_custom_job(tmp_path, when, sig):
    """The pipeline was cancelled (Vertex sends the task SIGTERM), or a person pressed Ctrl-C where the step runs
    in a terminal: either way the CustomJob must not run on."""
    compiled = _compiled(tmp_path)
    with VertexStandIn(custom_states=("RUNNING",)) as vertex:
        if when == "during a poll":
            vertex.fault("hang", r"/customJobs/\d+$", method="GET", times=None)
        proc = start_executor(compiled, _inputs(_pools(), vertex.url), tmp_path)
        stdout, stderr = signal_when(proc, lambda: vertex.calls("GET", r"/customJobs/\d+$"), getattr(signal, sig))
        (cancel,) = vertex.calls("POST", r"/customJobs/\d+:cancel$")
    assert cancel.path.endswith(f"{vertex.cancelled[0]}:cancel")
    assert "Traceback" not in stderr
    if sig == "SIGTERM":
        assert proc.returncode == 143, stderr[-2000:]
        assert "the pipeline was cancelled: cancelled CustomJob projects/my-proj/" in stdout
    else:
        assert proc.returncode == 130, stderr[-2000:]
        assert "interrupted (Ctrl-C): cancelled CustomJob projects/my-proj/" in stdout
        assert stderr.strip().splitlines()[-1] == "interrupted (Ctrl-C); nothing was left running in the cloud"


def test_a_create_whose_answer_is_lost_is_not_repeated(tmp_path):
    """The CustomJob's id is Vertex's: a repeat could start a second training job."""
    compiled = _compiled(tmp_path)
    with VertexStandIn() as vertex:
        vertex.fault("drop-after", r"/customJobs$", method="POST")
        proc = run_executor(compiled, _inputs(_pools(), vertex.url), tmp_path)
        assert len(vertex.calls("POST", r"/customJobs$")) == 1
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert line == ("error: creating CustomJob 'flowers-local' in projects/my-proj/locations/europe-west4: the "
                    f"connection to {vertex.url.removeprefix('http://')} dropped before an answer came; a CustomJob "
                    "may have been created even so: gcloud ai custom-jobs list --region europe-west4 --project my-proj "
                    "--filter=displayName=flowers-local")


def test_pools_by_position_unit():
    from jobs.rules import job_spec
    from jobs.cloud.vertex_jobs import custom_job
    from jobs.rules.errors import CloudError

    a, b = {"replica_count": 1}, {"replica_count": 2}
    assert job_spec.pools_by_position([a, {}, {}, {}]) == [a]
    assert job_spec.pools_by_position([a, b, {}, a]) == [a, b, {}, a]
    assert job_spec.pools_by_position([a, {}, {}, b]) == [a, {}, {}, b]
    with pytest.raises(ValueError, match="pool 0"):
        job_spec.pools_by_position([{}, b])
    with pytest.raises(CloudError, match="pool 0"):
        custom_job.custom_job(display_name="x", worker_pool_specs=[{}, b])
    with pytest.raises(CloudError, match="is not valid: .*machineTypo"):
        custom_job.custom_job(display_name="x", worker_pool_specs=[{"machineTypo": "n1"}])


def test_polls_ride_out_a_passing_fault_and_give_up_with_one_line(tmp_path, monkeypatch):
    """Each poll is a read under the policy: a 503 or a dropped connection is retried; a poll that keeps
    failing ends in one line saying the job may still run and how to see and cancel it."""
    from jobs.cloud.vertex_jobs import custom_job
    from jobs.rules.errors import CloudError

    monkeypatch.setenv("VTP_CLOUD_READ_TIMEOUT_S", "1")
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "2")
    spec = dict(display_name="flowers-local", worker_pool_specs=_pools(), project="my-proj", location="europe-west4")
    with VertexStandIn() as vertex:
        vertex.fault(503, r"/customJobs/\d+$", method="GET")
        vertex.fault("drop", r"/customJobs/\d+$", method="GET")
        name = custom_job.run(gcp_resources=str(tmp_path / "a"), api_endpoint=vertex.url, log=lambda _: None, **spec)
        assert name.startswith("projects/my-proj/locations/europe-west4/customJobs/")
        vertex.fault("hang", r"/customJobs/\d+$", method="GET", times=None)
        with pytest.raises(CloudError) as err:
            custom_job.run(gcp_resources=str(tmp_path / "b"), api_endpoint=vertex.url, log=lambda _: None, **spec)
    job_id = vertex.custom_jobs and sorted(vertex.custom_jobs)[-1]
    assert str(err.value) == (
        f"reading CustomJob projects/my-proj/locations/europe-west4/customJobs/{job_id}: gave up after retrying for "
        f"2 s: no answer from {vertex.url.removeprefix('http://')} within 1 s; the job may still be running: gcloud ai "
        f"custom-jobs describe {job_id} --region europe-west4 --project my-proj; cancel: gcloud ai custom-jobs cancel "
        f"{job_id} --region europe-west4 --project my-proj")


def test_disk_specs_web_access_service_account_and_disable_retries_reach_the_create(tmp_path):
    """Issue 33: a multi-worker job file's per-pool boot disks, NFS mount, vertex section and disable_retries,
    through the compiled step (its inputs as validate_config outputs them), in the create call Vertex decodes."""
    from jobs.rules import job_spec

    cfg = config_lib.load("multiworker", [*JOB, "topology.chief.disk_spec={boot_disk_type: pd-ssd, boot_disk_size_gb: 250}",
                                          "topology.worker.disk_spec={boot_disk_type: pd-standard, boot_disk_size_gb: 1000}",
                                          "topology.worker.nfs_mounts=[{server: 10.1.2.3, path: /vol1, mount_point: shared}]",
                                          "vertex.enable_web_access=true", "vertex.enable_dashboard_access=true",
                                          "vertex.service_account=trainer@my-proj.iam.gserviceaccount.com",
                                          "vertex.network=projects/123/global/networks/vpc",
                                          "vertex.reserved_ip_ranges=[vertex-range]",
                                          "scheduling.disable_retries=true", "scheduling.restart_job_on_worker_restart=false"])
    parts = job_spec.parts(job_spec.custom_job_spec(cfg))
    compiled = _compiled(tmp_path)
    inputs = _inputs(parts["worker_pool_specs"], "", **{k: as_json_numbers(v) for k, v in parts.items()
                                                         if k != "worker_pool_specs"})
    with VertexStandIn() as vertex:
        inputs["api_endpoint"] = vertex.url
        proc = run_executor(compiled, inputs, tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (job,) = vertex.custom_jobs.values()  # as Vertex parsed it (aiplatform_v1.CustomJob, unknown fields refused)
    spec = job.job_spec
    chief, worker = spec.worker_pool_specs
    assert (chief.disk_spec.boot_disk_type, chief.disk_spec.boot_disk_size_gb) == ("pd-ssd", 250)
    assert (worker.disk_spec.boot_disk_type, worker.disk_spec.boot_disk_size_gb) == ("pd-standard", 1000)
    assert worker.replica_count == 3 and worker.machine_spec.accelerator_type.name == "NVIDIA_TESLA_T4"
    assert [(m.server, m.path, m.mount_point) for m in worker.nfs_mounts] == [("10.1.2.3", "/vol1", "shared")]
    assert spec.enable_web_access and spec.enable_dashboard_access
    assert spec.service_account == "trainer@my-proj.iam.gserviceaccount.com"
    assert spec.network == "projects/123/global/networks/vpc" and list(spec.reserved_ip_ranges) == ["vertex-range"]
    assert spec.scheduling.disable_retries and not spec.scheduling.restart_job_on_worker_restart
    assert spec.scheduling.strategy.name == "SPOT"


@pytest.mark.parametrize("flag,value,what", [("worker_pool_specs", "{}", "worker pools"),
                                             ("worker_pool_specs", "", "worker pools"),
                                             ("reserved_ip_ranges", "range-1", "range names")])
def test_a_list_argument_that_is_not_a_json_list_is_one_line(capsys, flag, value, what):
    from jobs.cloud.vertex_jobs.custom_job import main

    argv = {"display_name": "x", "worker_pool_specs": "[{}]", "location": "europe-west4", "project": "p",
            "gcp_resources": "/nonexistent/gcp_resources", flag: value}
    assert main([a for k, v in argv.items() for a in (f"--{k}", v)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --{flag}: {value!r} is not a JSON list of {what}"]
