"""The Vertex branch's tuning step (jobs/cloud/vertex_jobs/tuning_job.py), executed as Vertex executes it.

The published component's container command (``python3 -u -m components.entry hyperparameter_tuning_job``, placeholders filled by kfp's
own resolver from the executor input the Vertex backend would give it, numbers as JSON floats) runs as a process
against the Vertex stand-in, which decodes the create body strictly as an ``aiplatform_v1.HyperparameterTuningJob``.
What is asserted is what Vertex would receive: the study spec of the job file's ``tuning`` section and, as the
trial job, exactly the CustomJob spec the training step sends (pools by position); then what the step gives the
rest of the pipeline: the best trial, its model folder, the Model artifact.
"""
from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import yaml

import components
from tests.conftest import ROOT, signal_when
from tests.standins.vertex import VertexStandIn
from tests.vertex_steps import as_json_numbers, finish, start_step
from jobfile import config as config_lib

IMAGE = "europe-west4-docker.pkg.dev/my-proj/training/tf-trainer:ctx-1@sha256:" + "a" * 64
JOB = str(ROOT / "tests" / "fakes" / "tuning_project" / "job.yaml")
SETS = ["container.image_uri=" + IMAGE, "output.base_dir=gs://my-pipelines/runs/tune", "topology.region=europe-west4"]
TRIALS = [{"id": "1", "parameters": {"learning_rate": 0.01, "units": 8.0, "optimizer": "adam", "batch_size": 32.0},
           "metric": 0.31},
          {"id": "2", "parameters": {"learning_rate": 0.002, "units": 21.0, "optimizer": "sgd", "batch_size": 16.0},
           "metric": 0.12},
          {"id": "3", "parameters": {"learning_rate": 0.05, "units": 4.0, "optimizer": "adam", "batch_size": 64.0},
           "metric": None, "state": "INFEASIBLE"}]


def job_config(*sets: str) -> config_lib.JobConfig:
    return config_lib.load(JOB, [*SETS, *sets])


def trial_spec(cfg: config_lib.JobConfig) -> dict:
    """The CustomJobSpec the training step would send, in proto field names: THE builder's (jobs.rules.job_spec), as
    the API type carries it (int64 counts as strings, as a decoded request has them)."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    from jobs.rules import job_spec

    message = json_format.ParseDict(job_spec.custom_job_spec(cfg), aiplatform_v1.CustomJobSpec.pb()())
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _inputs(cfg, endpoint: str) -> dict:
    return as_json_numbers({"display_name": cfg.name, "tuning": cfg.to_dict()["tuning"],
                             "trial_job_spec": trial_spec(cfg), "location": "europe-west4", "project": "my-proj",
                             "api_endpoint": endpoint})


def start_executor(inputs: dict, out: Path, env: dict | None = None) -> subprocess.Popen:
    """The published component's container command, as the Vertex backend starts it (``{{$}}`` = the executor
    input)."""
    doc = yaml.safe_load(components.yaml_path("hyperparameter_tuning_job").read_text())
    container = doc["deploymentSpec"]["executors"]["exec-hyperparameter-tuning-job"]["container"]
    proc = start_step(container, "hyperparameter-tuning-job", inputs, out,
                      parameters=("gcp_resources", "best_trial", "best_model_dir"),
                      artifacts={"model": ("system.Model", "gs://my-pipelines/root/x/model"),
                                 "study": ("system.Artifact", str(out / "study"))}, env=env)
    assert proc.args[:5] == ["python3", "-u", "-m", "components.entry", "hyperparameter_tuning_job"]
    return proc


def run_executor(inputs, out, env=None, timeout=120) -> subprocess.CompletedProcess:
    return finish(start_executor(inputs, out, env), timeout)


def test_the_study_spec_and_the_trial_job_are_the_job_files(tmp_path):
    cfg = job_config()
    with VertexStandIn(tuning_trials=TRIALS) as vertex:
        proc = run_executor(_inputs(cfg, vertex.url), tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (create,) = vertex.calls("POST", r"/hyperparameterTuningJobs$")
        (job,) = vertex.tuning_jobs.values()
    assert create.path == "/v1/projects/my-proj/locations/europe-west4/hyperparameterTuningJobs"
    study = job.study_spec  # as Vertex parsed it
    assert [(m.metric_id, m.goal.name) for m in study.metrics] == [("val_rmse", "MINIMIZE")]
    assert (study.algorithm.name, study.measurement_selection_type.name) == ("RANDOM_SEARCH", "LAST_MEASUREMENT")
    specs = {p.parameter_id: p for p in study.parameters}
    assert list(specs) == list(cfg.tuning.parameters)
    lr, units, opt, batch = (specs[n] for n in ("learning_rate", "units", "optimizer", "batch_size"))
    assert (lr.double_value_spec.min_value, lr.double_value_spec.max_value, lr.scale_type.name) == (
        0.0001, 0.1, "UNIT_LOG_SCALE")
    assert (units.integer_value_spec.min_value, units.integer_value_spec.max_value, units.scale_type.name) == (
        4, 32, "SCALE_TYPE_UNSPECIFIED")
    assert list(opt.categorical_value_spec.values) == ["adam", "sgd"]
    assert list(batch.discrete_value_spec.values) == [16, 32, 64]
    assert (job.max_trial_count, job.parallel_trial_count, job.max_failed_trial_count) == (4, 2, 0)
    # the trial job: exactly what the training step would send
    from google.protobuf import json_format

    sent = json_format.MessageToDict(type(job).pb(job).trial_job_spec, preserving_proto_field_name=True)
    assert sent == trial_spec(cfg)
    assert sent["base_output_directory"] == {"output_uri_prefix": "gs://my-pipelines/runs/tune"}
    assert sent["worker_pool_specs"][0]["container_spec"]["args"] == ["-m", "trainer.task", "--epochs", "3"]
    # gcp_resources, the best trial, its model
    assert json.loads((tmp_path / "gcp_resources").read_text()) == {"resources": [{
        "resourceType": "HyperparameterTuningJob", "resourceUri": f"{vertex.url}/v1/{job.name}"}]}
    best = json.loads((tmp_path / "best_trial").read_text())
    model_dir = "gs://my-pipelines/runs/tune/2/model"
    assert best == {"id": "2", "parameters": {"learning_rate": 0.002, "units": 21, "optimizer": "sgd",
                                              "batch_size": 16}, "metric": 0.12, "model_dir": model_dir}
    assert (tmp_path / "best_model_dir").read_text() == model_dir
    (artifact,) = json.loads((tmp_path / "executor_output.json").read_text())["artifacts"]["model"]["artifacts"]
    assert artifact["uri"] == model_dir and artifact["metadata"]["trial_id"] == "2"
    assert artifact["metadata"]["metric"] == {"val_rmse": 0.12}
    assert "HyperparameterTuningJob" in proc.stdout and "SUCCEEDED" in proc.stdout
    assert "best trial 2: " in proc.stdout
    study = json.loads((tmp_path / "study").read_text())  # the study artifact's path, not "null" in the cwd
    assert study["best_trial"] == best and [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED",
                                                                                    "INFEASIBLE"]


def test_an_evaluator_keeps_its_pool_position_in_the_trial_job(tmp_path):
    cfg = job_config("topology.evaluator.replica_count=1", "topology.evaluator.machine_type=n1-standard-4",
                     "tuning.algorithm=grid", "tuning.parameters.learning_rate.type=discrete",
                     "tuning.parameters.learning_rate.min=", "tuning.parameters.learning_rate.max=",
                     "tuning.parameters.learning_rate.values=[0.001, 0.01]")
    with VertexStandIn(tuning_trials=TRIALS) as vertex:
        proc = run_executor(_inputs(cfg, vertex.url), tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (create,) = vertex.calls("POST", r"/hyperparameterTuningJobs$")
    body = create.json()
    pools = body["trialJobSpec"]["workerPoolSpecs"]
    assert [bool(p) for p in pools] == [True, True, False, True] and pools[2] == {}
    assert body["studySpec"]["parameters"][0]["discreteValueSpec"] == {"values": [0.001, 0.01]}


@pytest.mark.parametrize("algorithm,sent", [(None, "ALGORITHM_UNSPECIFIED"), ("bayesian", "ALGORITHM_UNSPECIFIED"),
                                            ("random", "RANDOM_SEARCH")])
def test_algorithms_and_scales_map_to_vertex_names(algorithm, sent):
    from jobs.cloud.vertex_jobs import tuning_job

    tuning = job_config().to_dict()["tuning"]
    tuning["algorithm"] = algorithm
    tuning["parameters"]["units"]["scale"] = "reverse_log"
    tuning["parameters"]["batch_size"]["scale"] = "linear"
    spec = tuning_job.study_spec(tuning_job.study_of(tuning))
    assert spec["algorithm"] == sent
    scales = {p["parameter_id"]: p.get("scale_type") for p in spec["parameters"]}
    assert scales == {"learning_rate": "UNIT_LOG_SCALE", "units": "UNIT_REVERSE_LOG_SCALE", "optimizer": None,
                      "batch_size": "UNIT_LINEAR_SCALE"}


def test_a_bad_section_or_spec_is_one_line_before_any_call(tmp_path):
    cfg = job_config()
    inputs = _inputs(cfg, "http://127.0.0.1:9")  # nothing listens: no call may be made
    inputs["tuning"]["parameters"]["learning_rate"]["min"] = 0.0
    proc = run_executor(inputs, tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == ("error: tuning.parameters.learning_rate.min: a log scale needs a range above 0, got "
                                   "min 0; valid choices: a positive min, scale: linear")
    inputs = _inputs(cfg, "http://127.0.0.1:9")
    inputs["trial_job_spec"]["worker_pool_specs"][0]["machineTypo"] = "n1"
    proc = run_executor(inputs, tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith(
        "error: the HyperparameterTuningJob for 'tuning-fake' is not valid: ") and "machineTypo" in proc.stderr


def test_a_retried_task_follows_the_job_it_created(tmp_path):
    from jobs.cloud.vertex_jobs import job_runner

    cfg = job_config()
    with VertexStandIn(tuning_trials=TRIALS) as vertex:
        first = run_executor(_inputs(cfg, vertex.url), tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        again = run_executor(_inputs(cfg, vertex.url), tmp_path)
        assert again.returncode == 0, again.stderr[-2000:]
        assert len(vertex.calls("POST", r"/hyperparameterTuningJobs$")) == 1
    (name,) = [j.name for j in vertex.tuning_jobs.values()]
    assert job_runner.existing_job(str(tmp_path / "gcp_resources"), "HyperparameterTuningJob",
                                   "hyperparameterTuningJobs") == name
    assert f"resuming: HyperparameterTuningJob {name} was created by an earlier attempt" in again.stdout


def test_a_failed_job_or_one_without_a_result_is_one_line(tmp_path):
    cfg = job_config()
    with VertexStandIn(tuning_states=("RUNNING", "FAILED"), tuning_error="3 trials failed.") as vertex:
        proc = run_executor(_inputs(cfg, vertex.url), tmp_path / "a")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: HyperparameterTuningJob projects/my-proj/locations/europe-west4/"
                           "hyperparameterTuningJobs/") and line.endswith(" ended FAILED: 3 trials failed.")
    with VertexStandIn(tuning_trials=TRIALS[2:]) as vertex:
        proc = run_executor(_inputs(cfg, vertex.url), tmp_path / "b")
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.endswith(" succeeded but no trial has a final val_rmse: nothing to continue with")


@pytest.mark.parametrize("when", ["between polls", "during a poll"])
@pytest.mark.process
def test_sigterm_cancels_the_tuning_job(tmp_path, when):
    cfg = job_config()
    with VertexStandIn(tuning_states=("RUNNING",)) as vertex:
        if when == "during a poll":
            vertex.fault("hang", r"/hyperparameterTuningJobs/\d+$", method="GET", times=None)
        proc = start_executor(_inputs(cfg, vertex.url), tmp_path)
        stdout, stderr = signal_when(proc, lambda: vertex.calls("GET", r"/hyperparameterTuningJobs/\d+$"),
                                     signal.SIGTERM)
        (cancel,) = vertex.calls("POST", r"/hyperparameterTuningJobs/\d+:cancel$")
    assert proc.returncode == 143, stderr[-2000:]
    assert cancel.path.endswith(f"{vertex.cancelled[0]}:cancel")
    assert "the pipeline was cancelled: cancelled HyperparameterTuningJob projects/my-proj/" in stdout
    assert "Traceback" not in stderr


def test_a_create_whose_answer_is_lost_is_not_repeated(tmp_path):
    cfg = job_config()
    with VertexStandIn() as vertex:
        vertex.fault("drop-after", r"/hyperparameterTuningJobs$", method="POST")
        proc = run_executor(_inputs(cfg, vertex.url), tmp_path)
        assert len(vertex.calls("POST", r"/hyperparameterTuningJobs$")) == 1
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: creating HyperparameterTuningJob 'tuning-fake' in projects/my-proj/locations/"
                           "europe-west4: the connection to ")
    assert line.endswith("a HyperparameterTuningJob may have been created even so: gcloud ai hp-tuning-jobs list "
                         "--region europe-west4 --project my-proj --filter=displayName=tuning-fake")


def test_disk_specs_web_access_service_account_and_disable_retries_reach_every_trial_job(tmp_path):
    """Issue 33: the same job-file fields as the CustomJob step's, in the HyperparameterTuningJob's trial job
    (the spec validate_config outputs), decoded by the stand-in as the real API type."""
    cfg = job_config("topology.strategy=multi_worker", "topology.worker.replica_count=2",
                     "topology.worker.machine_type=n1-standard-4",
                     "topology.chief.disk_spec={boot_disk_type: pd-ssd, boot_disk_size_gb: 300}",
                     "topology.worker.disk_spec={boot_disk_type: pd-standard, boot_disk_size_gb: 150}",
                     "vertex.enable_web_access=true", "vertex.service_account=tuner@my-proj.iam.gserviceaccount.com",
                     "scheduling.disable_retries=true")
    with VertexStandIn(tuning_trials=TRIALS) as vertex:
        proc = run_executor(_inputs(cfg, vertex.url), tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        (job,) = vertex.tuning_jobs.values()
    trial = job.trial_job_spec
    chief, worker = trial.worker_pool_specs
    assert (chief.disk_spec.boot_disk_type, chief.disk_spec.boot_disk_size_gb) == ("pd-ssd", 300)
    assert (worker.replica_count, worker.disk_spec.boot_disk_type, worker.disk_spec.boot_disk_size_gb) == (
        2, "pd-standard", 150)
    assert trial.enable_web_access and trial.scheduling.disable_retries
    assert trial.service_account == "tuner@my-proj.iam.gserviceaccount.com"
