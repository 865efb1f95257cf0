"""``vtp plan`` (jobs/cloud/planning.py, said by jobs/commands/plan_cli.py): the request equals what the compiled pipeline's training step sends; the
placement choice with a fake project; unchecked items (the price table and the budget: tests/test_prices.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs.cloud import planning
from jobs.commands.plan_cli import options_table
from jobs.rules.placement import Finding, Option, Project
from tests.standins.vertex import VertexStandIn
from tests.vertex_steps import finish, start_step, task_inputs
from jobfile import config as config_lib

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "us-central1-docker.pkg.dev/acme-ml/training/tf-trainer-gpu:ctx-1@sha256:" + "b" * 64
JOB = [f"container.image_uri={IMAGE}", "output.base_dir=gs://acme-runs/mw", "data.path=gs://acme-data/flower_photos"]
H200_JOB = str(ROOT / "examples" / "h200-flex" / "job.yaml")
A3 = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}


class FakeProject(Project):
    """Quota per region (None: not readable), a bucket location, set-up findings."""

    def __init__(self, quota=None, bucket="US-CENTRAL1", setup_ok=True):
        self.limits = quota or {}
        self.bucket = bucket
        self.setup_ok = setup_ok
        self.asked: list[Option] = []

    def quota(self, cfg, option):
        self.asked.append(option)
        limit = self.limits.get(option.region, 64)
        name = "custom_model_training_" + ("preemptible_" if option.strategy == "SPOT" else "") + "nvidia_t4_gpus"
        if limit is None:
            return [Finding(f"quota {name}", None, f"quota {name} in {option.region}: no permission "
                                                    "cloudquotas.quotas.get")]
        need = 8
        return [Finding(f"quota {name}", need <= limit, f"quota {name} in {option.region}: need {need}, limit {limit}",
                        fix="gcloud ... quota increase")]

    def bucket_location(self, uri):
        return self.bucket, [Finding("bucket", True, f"bucket of {uri} in {self.bucket}")]

    def setup(self, cfg, option):
        return [Finding("aiplatform.googleapis.com", True if self.setup_ok else None, "Vertex AI API enabled"
                        if self.setup_ok else "Service Usage not checked: no credentials")]


# ---- the request -------------------------------------------------------------------------------

@pytest.mark.timeout(240)
@pytest.mark.parametrize("config,sets", [
    ("multiworker", ["vertex.enable_web_access=true", "vertex.service_account=trainer@acme-ml.iam.gserviceaccount.com",
                     "topology.worker.disk_spec={boot_disk_type: pd-ssd, boot_disk_size_gb: 200}",
                     "trainer.env={A: b}"]),
    (H200_JOB, []),
])
@pytest.mark.process
def test_the_plans_request_is_what_the_compiled_pipelines_step_sends(tmp_path, config, sets):
    """The compiled Vertex pipeline started with its defaults: build_image and validate_config as Vertex runs them,
    then the custom-training-job step's container against the Vertex stand-in (which decodes the body strictly as
    an aiplatform_v1.CustomJob). The plan's request is equal to what the stand-in received, field for field."""
    import components
    from google.protobuf import json_format

    from jobs.rules import preflight
    from pipelines.training_pipeline import compile_pipeline

    cfg = config_lib.load(config, [*JOB, *sets] if config == "multiworker" else sets)
    cfg = preflight.placeholder_free(cfg)
    compiled = yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"))).read_text())
    params = compiled["root"]["inputDefinitions"]["parameters"]
    config_json = params["config_json"]["defaultValue"]
    image = components.definition("build_image").python_func(config_json=config_json)
    validated = components.definition("validate_config").python_func(config_json=config_json, image_uri=image,
                                                       location=params["location"]["defaultValue"])
    container = compiled["deploymentSpec"]["executors"]["exec-custom-training-job"]["container"]
    (request,) = planning.requests(cfg, image=planning.image_problem(cfg)[0])  # (aiplatform_v1 imported first)
    with VertexStandIn() as vertex:
        run = finish(start_step(container, "custom-training-job",
                                task_inputs(compiled, "custom-training-job", validated, vertex.url, "acme-ml"), tmp_path,
                                parameters=("gcp_resources",)))
        assert run.returncode == 0, run.stderr[-2000:]
        (create,) = vertex.calls("POST", r"/customJobs$")
        (sent,) = vertex.custom_jobs.values()
    assert create.path == f"/v1/projects/acme-ml/locations/{cfg.topology.region}/customJobs"
    assert request.url("acme-ml", cfg.topology.region).endswith(create.path)
    received = json_format.MessageToDict(type(sent).pb(sent), preserving_proto_field_name=False)
    for server_side in ("name", "state", "createTime", "startTime", "endTime"):
        received.pop(server_side, None)
    assert request.body() == received
    assert request.message == type(sent).from_json(json.dumps(received))


def test_the_config_argument_is_shortened_and_decoded():
    cfg = config_lib.load("multiworker", JOB)
    (request,) = planning.requests(cfg)
    body = request.body()
    full = planning.config_argument(body)
    assert json.loads(full)["name"] == "flowers-multiworker"
    short = json.dumps(planning.shortened(body))
    assert full not in short and "characters of JSON, decoded below" in short
    changes = planning.config_changes(full)
    assert changes["topology.worker.replica_count"] == 3 and changes["scheduling.strategy"] == "SPOT"
    assert "training.seed" not in changes  # a default is not repeated


def test_an_empty_image_is_named_what_it_is():
    built = config_lib.load("multiworker", ["container.image_repository=us-central1-docker.pkg.dev/acme/t/tf"])
    shown, error = planning.image_problem(built)
    assert error is None and shown.startswith("us-central1-docker.pkg.dev/acme/t/tf-gpu:") and "vtp build" in shown
    nothing = config_lib.load("multiworker", ["container.image_repository="])
    shown, error = planning.image_problem(nothing)
    assert shown == "" and error.field == "container.image_uri" and "nothing builds an image" in error.message


# ---- placement ---------------------------------------------------------------------------------

def _gpu_regions():
    """A region the catalog offers T4s in, and one it knows and does not."""
    from jobs.rules import validate
    from jobs.rules.preflight import vertex_regions
    from jobs.rules.placement import with_option

    cfg = config_lib.load("multiworker", JOB)
    served = set(vertex_regions())  # a region Vertex serves at all, whose catalog entry lacks the GPU
    lacking = [r for r in ("us-west3", "us-south1", "europe-southwest1", "me-west1", "europe-west10", "us-east5",
                           "africa-south1", "europe-north1", "asia-south2")
               if r in served and validate.validate(with_option(cfg, Option(r, "SPOT")), check_data=False).errors]
    return lacking[0] if lacking else None


def test_placement_takes_the_cheaper_of_two_feasible_regions_and_says_why_each_was_skipped():
    lacking = _gpu_regions()
    regions = ["europe-west4", "us-east4", "us-central1"] + ([lacking] if lacking else [])
    cfg = config_lib.load("multiworker", [*JOB, f"placement.regions={json.dumps(regions)}",
                                          "placement.strategies=[STANDARD]"])
    project = FakeProject(quota={"us-east4": 0})  # no T4 quota in us-east4
    plan = planning.decide(cfg, "acme-ml", project=project)
    by = {str(v.option): v for v in plan.verdicts}
    assert plan.option == Option("us-central1", "STANDARD")  # cheaper than europe-west4 (x 1.10)
    assert by["us-central1 STANDARD"].taken and by["us-central1 STANDARD"].why == "the cheapest that fits"
    assert by["europe-west4 STANDARD"].fits and not by["europe-west4 STANDARD"].taken
    assert not by["us-east4 STANDARD"].fits and "need 8, limit 0" in by["us-east4 STANDARD"].why
    if lacking:
        assert not by[f"{lacking} STANDARD"].fits and "hardware catalog" in by[f"{lacking} STANDARD"].why
    assert (plan.cfg.topology.region, plan.cfg.scheduling.strategy) == ("us-central1", "STANDARD")
    assert plan.errors == [] and plan.unchecked == []
    table = "\n".join(options_table(plan))
    assert "taken: the cheapest that fits" in table and "skipped: quota" in table


def test_spot_is_checked_against_the_preemptible_quota_and_a_far_bucket_is_a_warning():
    cfg = config_lib.load("multiworker", [*JOB, "placement.regions=[europe-west4]"])
    project = FakeProject(bucket="US")
    plan = planning.decide(cfg, "acme-ml", project=project)
    assert project.asked == [Option("europe-west4", "SPOT")]
    assert "preemptible" in plan.findings[0].what
    (far,) = [w for w in plan.warnings if "crosses continents" in w]
    assert "egress" in far and "europe-west4" in far and "US" in far


def test_nothing_fits_is_one_error_naming_each_option():
    cfg = config_lib.load("multiworker", [*JOB, "placement.regions=[us-central1]"])
    plan = planning.decide(cfg, "acme-ml", project=FakeProject(quota={"us-central1": 0}))
    (error,) = plan.errors
    assert plan.pick is None and error.startswith("placement: no option fits (us-central1 SPOT: quota")


def test_over_budget_everywhere_names_what_would_fit():
    cfg = config_lib.load("multiworker", [*JOB, "budget.max_total=10"])
    plan = planning.decide(cfg, "acme-ml", project=FakeProject())
    (error,) = plan.errors
    assert "over budget" in error and "budget.max_total=" in error


def test_without_credentials_each_unchecked_item_is_one_line_and_require_checks_makes_them_errors():
    cfg = config_lib.load("multiworker", JOB)
    project = FakeProject(quota={"us-central1": None}, setup_ok=False)
    plan = planning.decide(cfg, "acme-ml", project=project)
    assert plan.pick is not None and plan.errors == []
    assert len(plan.unchecked) == 2 and all(line.startswith("not checked: ") for line in plan.unchecked)
    assert any("cloudquotas.quotas.get" in line for line in plan.unchecked)
    strict = planning.decide(cfg, "acme-ml", project=project, require_checks=True)
    assert len(strict.errors) == 2 and all("(--require-checks)" in e for e in strict.errors)


# ---- the command -------------------------------------------------------------------------------

def _run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "pipelines/run.py", "plan", *args], cwd=str(cwd), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.timeout(300)
def test_vtp_plan_prints_the_request_and_writes_the_plan_atomically(tmp_path):
    out = tmp_path / "plan.json"
    proc = _run("--config", "multiworker", *[a for s in JOB for a in ("--set", s)], "--project", "acme-ml",
                "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "POST https://us-central1-aiplatform.googleapis.com/v1/projects/acme-ml/locations/us-central1/customJobs" \
        in proc.stdout
    assert '"strategy": "SPOT"' in proc.stdout and "taken: the only one that fits" in proc.stdout
    assert "cost: $" in proc.stdout and "prices.yaml of" in proc.stdout
    assert "warning: not checked:" in proc.stderr and "Traceback" not in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["pick"] == "us-central1 SPOT" and doc["requests"][0]["body"]["jobSpec"]["scheduling"]["strategy"] == "SPOT"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left
    strict = _run("--config", "multiworker", *[a for s in JOB for a in ("--set", s)], "--require-checks",
                  "--max-cost", "10")
    assert strict.returncode == 2
    errors = [line for line in strict.stderr.splitlines() if line.startswith("error: ")]
    assert any("--max-cost" in e for e in errors) or any("over budget" in e for e in errors)
    assert "Traceback" not in strict.stderr


@pytest.mark.timeout(300)
def test_a_studys_plan_is_the_tuning_job_and_the_baseline_the_compiled_pipeline_sends(tmp_path):
    """A study: the HyperparameterTuningJob and the baseline CustomJob beside it, each equal to what the compiled
    pipeline's two steps send to the stand-in when it starts with its defaults."""
    import components
    from google.protobuf import json_format

    from jobs.rules import preflight
    from pipelines.training_pipeline import compile_pipeline

    cfg = preflight.placeholder_free(config_lib.load("tuning", [
        "container.image_uri=" + IMAGE.replace("-gpu", ""), "output.base_dir=gs://acme-runs/t",
        "data.path=gs://acme-data/flower_photos"]))
    compiled = yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / "p.yaml"))).read_text())
    params = compiled["root"]["inputDefinitions"]["parameters"]
    config_json = params["config_json"]["defaultValue"]
    validated = components.definition("validate_config").python_func(
        config_json=config_json, image_uri=components.definition("build_image").python_func(config_json=config_json),
        location=params["location"]["defaultValue"])
    executors = compiled["deploymentSpec"]["executors"]
    (tmp_path / "t").mkdir()
    (tmp_path / "b").mkdir()
    trials = [{"id": "1", "parameters": {"training.learning_rate": 0.001, "training.optimizer": "adam",
                                         "training.per_replica_batch_size": 8}, "metric": 0.5}]
    study_request, base_request = planning.requests(cfg)  # (aiplatform_v1 imported before the stand-in decodes)
    with VertexStandIn(tuning_trials=trials) as vertex:
        tuning = finish(start_step(executors["exec-hyperparameter-tuning-job"]["container"], "hyperparameter-tuning-job",
                                   task_inputs(compiled, "hyperparameter-tuning-job", validated, vertex.url, "acme-ml"),
                                   tmp_path / "t", parameters=("gcp_resources", "best_trial", "best_model_dir"),
                                   artifacts={"model": ("system.Model", "gs://acme-runs/t/x/model"),
                                              "study": ("system.Artifact", str(tmp_path / "t" / "study"))}))
        assert tuning.returncode == 0, tuning.stderr[-2000:]
        baseline = finish(start_step(executors["exec-custom-training-job"]["container"], "custom-training-job",
                                     task_inputs(compiled, "custom-training-job", validated, vertex.url, "acme-ml"),
                                     tmp_path / "b", parameters=("gcp_resources",)))
        assert baseline.returncode == 0, baseline.stderr[-2000:]
        (study,) = vertex.tuning_jobs.values()
        (base,) = vertex.custom_jobs.values()
    assert (study_request.collection, base_request.collection) == ("hyperparameterTuningJobs", "customJobs")
    for request, sent in ((study_request, study), (base_request, base)):
        received = json_format.MessageToDict(type(sent).pb(sent))
        for server_side in ("name", "state", "createTime", "trials", "startTime", "endTime", "updateTime"):
            received.pop(server_side, None)
        assert request.body() == received, request.title


# ---- submit runs the plan first ------------------------------------------------------------------

US_IMAGE = "us-docker.pkg.dev/my-proj/training/tf-trainer:ctx-1@sha256:" + "a" * 64
SUBMIT = ["--project", "my-proj", "--pipeline-root", "gs://my-pipelines/root",
          "--set", "output.base_dir=gs://my-pipelines/runs/flowers", "--set", f"container.image_uri={US_IMAGE}",
          "--set", "placement.regions=[europe-west4, us-central1]", "--set", "placement.strategies=[SPOT]"]


def test_submit_sends_the_plans_pick_and_a_plan_over_budget_sends_nothing(vertex, capsys):
    from pipelines.run import main

    assert main([*SUBMIT, "--api-endpoint", vertex.url, "--poll-seconds", "0.05"]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    (create,) = vertex.calls("POST", "/pipelineJobs$")
    assert create.path == "/v1/projects/my-proj/locations/us-central1/pipelineJobs"  # cheaper than europe-west4
    params = create.json()["runtimeConfig"]["parameterValues"]
    assert params["location"] == "us-central1"
    sent = json.loads(params["config_json"])
    assert (sent["topology"]["region"], sent["scheduling"]["strategy"]) == ("us-central1", "SPOT")
    assert "plan: us-central1 SPOT taken (the cheapest that fits)" in err
    assert "plan: europe-west4 SPOT fits too" in err

    assert main([*SUBMIT, "--api-endpoint", vertex.url, "--max-cost", "0.01"]) == 2
    err = capsys.readouterr().err
    assert len(vertex.calls("POST", "/pipelineJobs$")) == 1  # nothing more was sent
    (error,) = [line for line in err.splitlines() if line.startswith("error: ")]
    assert error.startswith("error: placement: no option fits") and "over budget" in error and "--max-cost" in error


@pytest.mark.parametrize("location,where", [("US-CENTRAL1", "North America"), ("US", "North America"),
                                            ("NAM4", "North America"), ("EU", "Europe"), ("EUR4", "Europe"),
                                            ("europe-west4", "Europe"), ("ASIA1", "Asia Pacific"),
                                            ("australia-southeast1", "Asia Pacific"), ("me-west1", "Middle East")])
def test_the_continent_of_a_bucket_location_or_a_region(location, where):
    assert planning.continent(location) == where


def test_validate_ends_with_where_to_see_the_plan(capsys):
    from jobs.commands.validate_cli import validate_main

    assert validate_main([H200_JOB]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("see the exact Vertex request, its price and where it can run: ") and \
        last.endswith(f"plan --config {H200_JOB}")
