"""A user's own trainer through the whole chain: the Vertex lab's way of writing one (tf_keras ``fit`` under
MultiWorkerMirroredStrategy, BackupAndRestore to AIP_CHECKPOINT_DIR, TensorBoard to AIP_TENSORBOARD_LOG_DIR,
the chief saves to AIP_MODEL_DIR, the other workers to a temp folder), as ``examples/tabular-regressor``
ships it, copied to a folder outside this repository as a user's project would be."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs.rules import job_spec
from jobs.steps import calls as steps
from tests.conftest import ROOT, Killer, assert_no_processes_left
from jobfile import config as config_lib

EXAMPLE = ROOT / "examples" / "tabular-regressor"
IMAGE = "us-central1-docker.pkg.dev/team/training/regressor:ctx-1@sha256:" + "c" * 64


@pytest.fixture
def project(tmp_path) -> Path:
    """The example project, outside the repository (its runs/ left behind)."""
    dest = tmp_path / "my-project"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest


def run_py(*args, cwd=None, timeout=600):
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


# -- the job file -----------------------------------------------------------------------------------------
def test_relative_paths_in_a_job_file_are_relative_to_the_file(project, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anywhere else
    cfg = config_lib.load(str(project / "job.yaml"))
    assert cfg.trainer.source_dir == str(project) and cfg.trainer.module == "trainer.task"
    assert cfg.serving.sample_request == str(project / "sample.json")
    assert cfg.output.base_dir == str(project / "runs" / "regressor")
    assert cfg.trainer.requirements == "requirements.txt"  # relative to source_dir, resolved when building
    assert cfg.user_trainer and cfg.data.source == "none"
    # --set is typed on the command line: relative to the current directory
    cfg = config_lib.load(str(project / "job.yaml"), ["output.base_dir=elsewhere"])
    assert cfg.output.base_dir == str(tmp_path / "elsewhere")
    # a job file that names only the module: its own folder is the code, and it reads its own data
    (project / "minimal.yaml").write_text("name: minimal\ntrainer: {module: trainer.task}\n")
    minimal = config_lib.load(str(project / "minimal.yaml"))
    assert (minimal.trainer.source_dir, minimal.data.source) == (str(project), "none")


def test_every_replica_runs_the_users_module_with_its_args():
    cfg = config_lib.load(str(EXAMPLE / "job.yaml"))
    assert job_spec.worker_command(cfg) == ["python", "-m", "trainer.task", "--epochs", "3"]
    container = job_spec.custom_job_spec(cfg)["worker_pool_specs"][0]["container_spec"]
    assert container["command"] + container["args"] == ["python", "-m", "trainer.task", "--epochs", "3"]
    assert container["env"] == [{"name": "TF_USE_LEGACY_KERAS", "value": "1"}]  # trainer.env: Vertex sets it too
    assert cfg.trainer.source_dir == str(EXAMPLE)  # the replicas' working directory here, the image's WORKDIR there


def test_the_compiled_pipeline_runs_the_users_command_in_its_image_and_has_no_prepare_step(project, tmp_path):
    out = tmp_path / "p.yaml"
    proc = run_py("--config", str(project / "job.yaml"), "--compile-only", str(out),
                  "--set", f"container.image_uri={IMAGE}")
    assert proc.returncode == 2 and "error: output.base_dir: " in proc.stderr  # a local folder: Vertex cannot see it
    assert "error: serving.eval_data: " in proc.stderr  # the held-out examples too: the verify step reads them there
    proc = run_py("--config", str(project / "job.yaml"), "--compile-only", str(out),
                  "--set", f"container.image_uri={IMAGE}", "--set", "output.base_dir=gs://team-bucket/runs/regressor",
                  "--set", "serving.eval_data=gs://team-bucket/eval/regressor.jsonl")
    assert proc.returncode == 0, proc.stderr
    compiled = yaml.safe_load(out.read_text())
    tasks = [t for c in [compiled["root"], *compiled["components"].values()] for t in c.get("dag", {}).get("tasks", {})]
    assert "prepare-data" not in tasks and "train" not in tasks and "custom-training-job" in tasks
    assert str(project) not in out.read_text(), "no path of this machine travels to Vertex (the code is the image's)"
    default = compiled["root"]["inputDefinitions"]["parameters"]["config_json"]["defaultValue"]
    from components.validate_config.component import validate_config

    job = validate_config.python_func(default)
    pools = [p for p in job.worker_pool_specs if p]
    assert len(pools) == 2
    for pool in pools:
        container = pool["container_spec"]
        assert container["image_uri"] == IMAGE
        assert container["command"] + container.get("args", []) == ["python", "-m", "trainer.task", "--epochs", "3"]
        assert container["env"] == [{"name": "TF_USE_LEGACY_KERAS", "value": "1"}]
    sample = compiled["root"]["inputDefinitions"]["parameters"]["sample_request"]["defaultValue"]
    assert json.loads(sample) == json.loads((project / "sample.json").read_text())  # it travels with the pipeline
    # the held-out examples travel as their gs:// path, a parameter a run started from the console may change
    assert compiled["root"]["inputDefinitions"]["parameters"]["eval_data"]["defaultValue"] == \
        "gs://team-bucket/eval/regressor.jsonl"
    verify = compiled["root"]["dag"]["tasks"]["verify-model"]["inputs"]["parameters"]
    assert verify["eval_data"] == {"componentInputParameter": "eval_data"}


BAD = {
    "source_dir missing": (["--set", "trainer.source_dir=/no/such/folder"], "error: trainer.source_dir: /no/such/folder "
                                                                            "is not a folder"),
    "module not importable": (["--set", "trainer.module=trainer.tsk"],
                              "error: trainer.module: trainer.tsk is not importable from trainer.source_dir"),
    "requirements missing": (["--set", "trainer.requirements=reqs.txt"],
                             "error: trainer.requirements: {project}/reqs.txt does not exist"),
    "sample not JSON": (["--set", "serving.sample_request={project}/bad.json"],
                        "error: serving.sample_request: {project}/bad.json is not valid JSON"),
    "sample without instances": (["--set", "serving.sample_request={project}/empty.json"],
                                 'error: serving.sample_request: {project}/empty.json must be an object with a non-empty'),
    "built-in trainer without data": (["--set", "trainer.module=", "--set", "trainer.args=[]",
                                       "--set", "trainer.requirements="],
                                      "error: data.source: none means the trainer reads its own data"),
}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.process
def test_bad_input_is_one_error_line_before_any_replica_starts(project, case):
    (project / "bad.json").write_text("{instances: [1]")
    (project / "empty.json").write_text('{"instances": []}')
    extra, expected = BAD[case]
    extra = [a.replace("{project}", str(project)) for a in extra]
    proc = run_py("--config", str(project / "job.yaml"), *extra, timeout=120)
    assert proc.returncode == 2, (proc.stdout[-1000:], proc.stderr)
    errors = proc.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(expected.replace("{project}", str(project))), errors
    assert not (project / "runs").exists(), "nothing may start on an invalid job"


# -- the whole chain, for real ------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_whole_pipeline_runs_a_users_keras_trainer_with_two_replicas(project):
    proc = run_py("--config", str(project / "job.yaml"), cwd=str(project.parent))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    base = project / "runs" / "regressor"
    record = json.loads((base / "run.json").read_text())
    v = record["verification"]
    assert v["signature"] == "serving_default" and v["inputs"] == {"features": "float32 [None, 8]"}
    assert v["input_source"] == "serving.sample_request" and len(v["predictions"]) == 3
    assert all(isinstance(p["value"][0], float) for p in v["predictions"]) and v["latency_ms"]["median"] > 0
    # the independent verdict: eval.jsonl's held-out examples, judged in the verify step's own process
    held_out = v["eval"]
    assert held_out["task"] == "regression" and held_out["examples"] == 256 and held_out["output"] == "value"
    assert 0 < held_out["rmse"] < held_out["baseline_rmse"], held_out  # better than predicting the mean
    assert "On 256 held-out examples (serving.eval_data" in (base / "report.html").read_text()
    assert "on 256 held-out examples (serving.eval_data): RMSE" in proc.stdout
    assert f"registry request    {base / 'model_upload_request.json'}" in proc.stdout
    names = [s["name"] for s in record["steps"]]
    assert names[:3] == ["validate-config", "train", "verify-model"]  # no prepare-data (nor a build locally)
    assert sorted(names[3:]) == ["report", "upload-model"]  # both after verify, in either order
    page = (base / "report.html").read_text()
    for series in ("train/epoch_loss", "validation/epoch_loss", "train/epoch_mae", "validation/epoch_mae"):
        assert f"<td>{series}</td>" in page, series
    assert "confusion-matrix" not in page
    upload = json.loads((base / "model_upload_request.json").read_text())
    assert upload["model"]["artifactUri"] == str(base / "model") and (base / "model" / "saved_model.pb").exists()
    assert upload["model"]["labels"] == {"job": "tabular-regressor", "model": "trainer-task"}
    training = json.loads((base / "training.json").read_text())
    assert training["trainer"] == "trainer.task" and training["scalars"]["validation/epoch_loss"] < 1.0
    assert "verification        serving_default(features) ran on 3 instances" in proc.stdout
    # once more: the run's own record says it is complete (Keras deleted its backup when fit ended)
    again = run_py("--config", str(project / "job.yaml"), timeout=120)
    assert again.returncode == 0 and "is already complete" in again.stdout, again.stdout + again.stderr


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_kill_9_of_a_replica_mid_run_restarts_the_job_and_keras_resumes_from_its_backup(project):
    """The worker dies at epoch 3 of 5; the launcher restarts both replicas; BackupAndRestore (in
    AIP_CHECKPOINT_DIR) makes the second attempt start after the last finished epoch, not at epoch 1."""
    from jobs.local.process.faults import attempt_lines

    base = project / "runs" / "killed"
    cfg = config_lib.load(str(project / "job.yaml"), [f"output.base_dir={base}", "trainer.args=[--epochs, '5']",
                                                      "scheduling.max_restarts=1"])
    killer = Killer(str(base), "workerpool1", "[worker-0] Epoch 3/5")
    try:
        result = steps.run_local(cfg, log=killer, timeout_s=500)
        assert killer.fired and result.returncode == 0, result.message
        assert result.attempts == 2 and result.restarts[0].failure.exit_status == -9
        second = [line for line in attempt_lines(killer.lines, 2) if line.startswith("[chief-0] Epoch ")]
        assert second and second[0] != "[chief-0] Epoch 1/5", second  # resumed, not started over
        assert second[-1] == "[chief-0] Epoch 5/5"
        assert (base / "model" / "saved_model.pb").exists()
    finally:
        assert_no_processes_left(str(base))


@pytest.fixture
def tutorial_project(project) -> Path:
    """The example, its trainer written as TensorFlow's multi-worker tutorial writes one: it does not set
    TF_USE_LEGACY_KERAS itself, the environment must (``trainer.env`` in the job file)."""
    task = project / "trainer" / "task.py"
    line = 'os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")\n'
    assert line in task.read_text()
    task.write_text(task.read_text().replace(line, ""))
    return project


KERAS3_ERROR = re.compile(r"^  (chief|worker)-0's error: ValueError: Attempt to convert a value \(PerReplica:\{ … \}\) "
                          r"with an unsupported type \(<class '[\w.]+PerReplica'>\) to a Tensor\.$")


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_tf_keras_trainer_gets_its_legacy_keras_from_trainer_env_not_from_the_shell(tutorial_project, monkeypatch):
    """The shell has TF_USE_LEGACY_KERAS=1; a replica never sees it. Without ``trainer.env`` the tutorial's code runs
    Keras 3 ``fit`` under MultiWorkerMirroredStrategy and fails (keras-team/keras#20585): the console's last lines
    are the failing replica's own error and the hint, not a tensor dump. With the job file as shipped
    (``trainer.env: {TF_USE_LEGACY_KERAS: "1"}``) the same code trains."""
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    job = str(tutorial_project / "job.yaml")
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "--config", job, "--set", "trainer.env={}",
                           "--set", "scheduling.max_restarts=0", "--set", f"output.base_dir={tutorial_project / 'k3'}"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)  # as a terminal shows it
    console = proc.stdout.strip().splitlines()
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert console[-3].startswith("error: the pipeline failed at step train: training failed: "), console[-12:]
    assert KERAS3_ERROR.match(console[-2]), console[-2]
    assert console[-1].startswith("  hint: this is Keras 3's Model.fit under a multi-worker strategy"), console[-1]
    assert "keras-team/keras#20585" in console[-1] and 'trainer.env: {TF_USE_LEGACY_KERAS: "1"}' in console[-1]
    assert "Traceback" not in proc.stdout and len(console) < 40, proc.stdout

    cfg = config_lib.load(job, [f"output.base_dir={tutorial_project / 'legacy'}"])
    assert cfg.trainer.env == {"TF_USE_LEGACY_KERAS": "1"}
    lines: list[str] = []
    result = steps.run_local(cfg, log=lines.append, timeout_s=300)
    assert result.returncode == 0 and result.attempts == 1, result.message
    assert "[chief-0] Epoch 3/3" in lines and (tutorial_project / "legacy" / "model" / "saved_model.pb").exists()
    assert_no_processes_left(str(tutorial_project))
