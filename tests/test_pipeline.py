"""The pipeline: compiled YAML per preset against expected files, pool derivation, kfp.local end to end,
and run.py's command line (bad input = one clear line per problem, exit 2)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, job_config
from tests.pipeline_dag import tasks_started_with_defaults
from jobfile import config as config_lib
from jobs.rules import job_spec
from jobs.run_records import records
EXPECTED = Path(__file__).parent / "expected"
PRESETS = ["local", "gpu-1x4", "multiworker", "parameter-server", "tpu"]


def structure(compiled: dict) -> dict:
    """What must not drift in a compiled pipeline: parameters, tasks, wiring, branch conditions, images."""
    def dag(spec):
        out = {}
        for name, task in sorted(spec.get("dag", {}).get("tasks", {}).items()):
            out[name] = {
                "component": task["componentRef"]["name"],
                "after": sorted(task.get("dependentTasks", [])),
                "condition": task.get("triggerPolicy", {}).get("condition"),
                "inputs": sorted(task.get("inputs", {}).get("parameters", {})) + sorted(task.get("inputs", {}).get("artifacts", {})),
            }
        return out

    comps = compiled["components"]
    executors = compiled["deploymentSpec"]["executors"]
    root_params = compiled["root"]["inputDefinitions"]["parameters"]
    return {
        "name": compiled["pipelineInfo"]["name"],
        "parameters": {k: v["parameterType"] for k, v in sorted(root_params.items())},
        "defaults": {k: v.get("defaultValue") for k, v in sorted(root_params.items()) if k != "config_json"},
        "root": dag(compiled["root"]),
        "branches": {name: dag(spec) for name, spec in sorted(comps.items()) if name.startswith("comp-condition")},
        "executors": {name: {"image": e["container"]["image"], "command": e["container"].get("command", [])[:3]}
                      if "container" in e else {"importer": e["importer"]["typeSchema"]["schemaTitle"]}
                      for name, e in sorted(executors.items())},
    }


@pytest.mark.parametrize("preset", PRESETS)
def test_compiled_pipeline_matches_expected_file(tmp_path, preset):
    from pipelines.training_pipeline import compile_pipeline

    cfg = config_lib.load(preset)
    out = compile_pipeline(cfg, str(tmp_path / f"{preset}.yaml"))
    compiled = yaml.safe_load(Path(out).read_text())
    got = structure(compiled)
    expected_file = EXPECTED / f"pipeline-{preset}.json"
    if os.environ.get("UPDATE_EXPECTED"):
        expected_file.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(expected_file.read_text())
    # The config travels as the default of config_json, as Vertex runs it (no path of this machine).
    default = compiled["root"]["inputDefinitions"]["parameters"]["config_json"]["defaultValue"]
    assert config_lib.load_json(default) == cfg.for_vertex()
    assert got["name"] == cfg.name
    # A Vertex YAML is a Vertex YAML: started with its defaults, it creates the CustomJob; no local step in it.
    started = tasks_started_with_defaults(compiled)
    assert "comp-custom-training-job" in started and "comp-train" not in started
    assert "target" not in got["parameters"] and not got["branches"]


def test_the_default_path_evaluator_sees_a_branch_taken_by_a_parameters_default(tmp_path):
    """The shape that once ran the local branch on Vertex (a ``target`` parameter defaulting to ``local``):
    the evaluator the tests above rely on follows the default into that branch."""
    from kfp import compiler, dsl

    @dsl.component
    def step(x: str) -> str:
        return x

    @dsl.pipeline(name="shape")
    def shape(target: str = "local"):
        with dsl.If(target == "local", name="train-locally"):
            step(x="here")
        with dsl.Else(name="train-on-vertex"):
            step(x="there")

    compiler.Compiler().compile(shape, str(tmp_path / "shape.yaml"))
    compiled = yaml.safe_load((tmp_path / "shape.yaml").read_text())
    started = tasks_started_with_defaults(compiled)
    assert started == ["comp-condition-branches-1", "comp-condition-2", "comp-step"], started  # the If, not the Else


def test_the_local_pipeline_trains_here_and_never_calls_vertex(tmp_path):
    from pipelines.training_pipeline import compile_pipeline

    compiled = yaml.safe_load(Path(compile_pipeline(config_lib.load("local"), str(tmp_path / "l.yaml"),
                                                    "local")).read_text())
    started = tasks_started_with_defaults(compiled)
    assert "comp-train" in started and "comp-custom-training-job" not in started
    assert "comp-build-image" not in started  # nothing to build for a local run
    upload = compiled["root"]["dag"]["tasks"]["upload-model"]["inputs"]["parameters"]
    assert upload["dry_run"]["runtimeValue"]["constant"] is True


def _machine_specs(cfg):
    return [s and (s["replica_count"], s["machine_spec"]) for s in job_spec.parts(job_spec.custom_job_spec(cfg))["worker_pool_specs"]]


def test_worker_pools_per_preset():
    assert _machine_specs(config_lib.load("local")) == [
        (1, {"machine_type": "n1-standard-4"}), (1, {"machine_type": "n1-standard-4"}), {}, {}]
    assert _machine_specs(config_lib.load("gpu-1x4")) == [
        (1, {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 4}), {}, {}, {}]
    t4x2 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2}
    assert _machine_specs(config_lib.load("multiworker")) == [(1, t4x2), (3, t4x2), {}, {}]
    assert _machine_specs(config_lib.load("tpu")) == [
        (1, {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 8}), {}, {}, {}]


def test_every_replica_runs_the_same_container_command_with_the_config():
    from jobs import images

    cfg = config_lib.load("multiworker")
    job = job_spec.parts(job_spec.custom_job_spec(cfg))
    for spec in job["worker_pool_specs"][:2]:
        c = spec["container_spec"]
        assert c["image_uri"] == images.job_image(cfg) == images.repository_for(
            cfg.container.image_repository, "gpu") + ":latest"  # T4 pools: the gpu variant
        command = c["command"] + c["args"]
        assert command[:3] == ["python", "-m", "trainers.task"] and command[3] == "--config-json"
        assert config_lib.load_json(command[4]) == cfg
    assert (job["scheduling_strategy"], job["restart_job_on_worker_restart"]) == ("SPOT", True)
    assert job["base_output_directory"] == "gs://my-bucket/runs/multiworker"


def test_a_users_own_trainer_gets_its_own_args():
    cfg = config_lib.load("local", ["container.command=[python, -m, trainer.task]",
                                    "container.args=[--user_arg_1, value_1]"])
    assert job_spec.worker_command(cfg) == ["python", "-m", "trainer.task", "--user_arg_1", "value_1"]


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_whole_pipeline_runs_with_kfp_local(tmp_path, prepared_data):
    from kfp import local

    from pipelines.training_pipeline import build_pipeline

    cfg = job_config(tmp_path / "run", prepared_data, "training.steps=10", "checkpoint.every_steps=5")
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    build_pipeline(cfg, "local")(config_json=cfg.to_json())
    base = Path(cfg.output.base_dir)
    verification = json.loads((base / "verification.json").read_text())
    assert verification["examples"] > 0 and 0 <= verification["accuracy"] <= 1
    assert records.read_metrics(cfg)["replicas"] == 2
    (verify_out,) = (tmp_path / "root").glob("*/verify-model/executor_output.json")
    artifacts = json.loads(verify_out.read_text())["artifacts"]
    assert set(artifacts) == {"verified_model", "metrics", "verification"}
    verified = artifacts["verified_model"]["artifacts"][0]
    assert verified["uri"] == str(base / "model"), "the Model artifact is the SavedModel folder itself"
    model_meta = verified["metadata"]
    assert model_meta["framework"] == "tensorflow" and model_meta["classes"] == ["daisy", "dandelion", "roses"]
    assert model_meta["signatures"] == ["serving_default", "serving_pixels"] and model_meta["verified"] is True
    assert model_meta["inputs"] == {"image_bytes": "string [None]"}
    (train_out,) = (tmp_path / "root").glob("*/train/executor_output.json")
    trained = json.loads(train_out.read_text())["artifacts"]
    assert trained["model"]["artifacts"][0]["uri"] == str(base / "model")
    assert trained["tensorboard"]["artifacts"][0]["uri"] == str(base / "logs")
    (prepare_out,) = (tmp_path / "root").glob("*/prepare-data/executor_output.json")
    dataset = json.loads(prepare_out.read_text())["artifacts"]["dataset"]["artifacts"][0]
    assert dataset["uri"] == prepared_data and dataset["metadata"]["format"] == "tfrecord"
    report_out = json.loads(next((tmp_path / "root").glob("*/report/executor_output.json")).read_text())["artifacts"]
    assert set(report_out) == {"report", "summary", "confusion"}
    confusion = report_out["confusion"]["artifacts"][0]["metadata"]["confusionMatrix"]
    assert [c["displayName"] for c in confusion["annotationSpecs"]] == ["daisy", "dandelion", "roses"]
    assert sum(sum(row["row"]) for row in confusion["rows"]) == verification["examples"]
    assert "id='confusion-matrix'" in (base / "report.html").read_text()
    # The Model Registry request a Vertex run sends, written beside the model (tests/test_model_registry.py).
    upload = json.loads((base / "model_upload_request.json").read_text())
    assert upload["model"]["artifactUri"] == str(base / "model") and (base / "model" / "saved_model.pb").exists()


def run_py(*args, timeout=120):
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True,
                          text=True, timeout=timeout)


def test_run_py_project_checks_before_submitting():
    """--project submits to Vertex (tests/test_submit.py); the presets' placeholders stop it first."""
    proc = run_py("--project", "my-proj", "--pipeline-root", "gs://my-pipelines/root")
    assert proc.returncode == 2
    assert "error: container.image_uri: us-central1-docker.pkg.dev/my-project/" in proc.stderr
    assert "Traceback" not in proc.stderr


PINNED = "us-central1-docker.pkg.dev/my-proj/training/tf-trainer:ctx-1@sha256:" + "a" * 64


def test_run_py_compile_only_for_vertex_refuses_what_submit_refuses(tmp_path):
    """The shipped presets name placeholders: compiled for Vertex they would be refused on submission, so
    --compile-only refuses them now, one line each, and writes nothing."""
    out = tmp_path / "tpu.yaml"
    proc = run_py("--config", "tpu", "--compile-only", str(out))
    assert proc.returncode == 2 and not out.exists()
    errors = proc.stderr.strip().splitlines()
    assert all(line.startswith(("error: ", "warning: ")) for line in errors) and "Traceback" not in proc.stderr
    assert any(line.startswith("error: container.image_uri: ") and "my-project" in line for line in errors)
    assert any(line.startswith("error: output.base_dir: ") and "my-bucket" in line for line in errors)
    local = run_py("--compile-only", str(out))  # the local preset: a local output folder
    assert local.returncode == 2 and "error: output.base_dir: " in local.stderr and "this machine" in local.stderr


def test_run_py_compile_only(tmp_path):
    out = tmp_path / "tpu.yaml"
    proc = run_py("--config", "tpu", "--compile-only", str(out), "--set", f"container.image_uri={PINNED}",
                  "--set", "output.base_dir=gs://bucket-1/runs/tpu", "--set", "data.path=gs://bucket-1/tfrecords")
    assert proc.returncode == 0, proc.stderr
    compiled = yaml.safe_load(out.read_text())
    assert compiled["pipelineInfo"]["name"] == "flowers-tpu"
    assert "comp-custom-training-job" in tasks_started_with_defaults(compiled)
    # a YAML for kfp.local, said so, needs no cloud settings
    local = run_py("--compile-only", str(tmp_path / "local.yaml"), "--target", "local")
    assert local.returncode == 0, local.stderr
    assert "comp-train" in tasks_started_with_defaults(yaml.safe_load((tmp_path / "local.yaml").read_text()))
    assert run_py("--target", "local").returncode == 2  # only with --compile-only


JOB_TEXT = "name: mine\ntraining: {steps: 5}\ntopology: {strategy: one_device, worker: {replica_count: 0}}\n"


def test_compile_only_never_overwrites_the_job_file_or_another_file(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(JOB_TEXT)
    sets = ["--set", f"container.image_uri={PINNED}", "--set", "output.base_dir=gs://bucket-1/runs/x"]
    proc = run_py("--config", str(job), "--compile-only", str(job), *sets)
    assert proc.returncode == 2 and "is the job file given to --config" in proc.stderr
    assert job.read_text() == JOB_TEXT
    notes = tmp_path / "notes.yaml"
    notes.write_text("my: notes\n")
    proc = run_py("--config", str(job), "--compile-only", str(notes), *sets)
    assert proc.returncode == 2 and "is not a compiled pipeline" in proc.stderr and notes.read_text() == "my: notes\n"
    target = tmp_path / "job.pipeline.yaml"
    for _ in range(2):  # a compiled pipeline is recompiled in place
        assert run_py("--config", str(job), "--compile-only", str(target), *sets).returncode == 0
    assert run_py("--config", str(job), "--compile-only", str(notes), "--overwrite", *sets).returncode == 0
    assert yaml.safe_load(notes.read_text())["pipelineInfo"]["name"] == "mine"
    assert not list(tmp_path.glob(".*.tmp.yaml")), "the temporary file is gone"


def test_run_py_bad_input_is_one_line_per_problem_before_anything_runs(tmp_path):
    empty = tmp_path / "flowers"
    (empty / "roses").mkdir(parents=True)
    (empty / "tulips").mkdir()
    (empty / "tulips" / "a.jpg").write_bytes(b"x")
    cases = {
        ("--set", "training.stepz=3"): "training.stepz: unknown field; did you mean 'steps'?",
        ("--set", "training.steps=many"): "training.steps: expected an integer, got str 'many'",
        ("--set", "data.source=images", "--set", f"data.path={tmp_path / 'nope'}"): "data.path:",
        ("--set", "data.source=images", "--set", f"data.path={empty}"): "has no .jpg/.jpeg/.png images",
        ("--set", "topology.strategy=mirrored"): "topology",
    }
    for args, expected in cases.items():
        proc = run_py(*args, "--set", f"output.base_dir={tmp_path / 'out'}")
        assert proc.returncode == 2, (args, proc.stdout[-500:], proc.stderr[-1000:])
        assert expected in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert all(line.startswith(("error: ", "warning: ")) for line in proc.stderr.strip().splitlines())
    assert not (tmp_path / "out").exists(), "nothing may be spent on an invalid job"
