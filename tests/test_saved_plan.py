"""Issue 49: a saved plan, applied exactly (``vtp plan --out plan.json``, ``vtp apply plan.json``: jobs/commands/saved_plan.py).

A plan applied to the Vertex stand-in sends the PipelineJob whose training step creates the CustomJob the plan
recorded, field for field (the step run as Vertex runs it); a plan made stale by each of its inputs (the trainer's
code, the config, the image's digest, a quota, its age) is refused with that input named and nothing sent; a plan
edited by hand is refused. The project is a fake (its quota and its registry's answer for the image), as in
tests/test_plan.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from jobs.cloud import planning
from jobs.rules import labels
from jobs.rules.placement import Finding, Project
from jobs.commands import saved_plan
from tests.standins.vertex import VertexStandIn
from tests.vertex_steps import finish, start_step, task_inputs

ROOT = Path(__file__).resolve().parents[1]
DIGEST = "sha256:" + "c" * 64
IMAGE = "us-central1-docker.pkg.dev/acme-ml/training/regressor:v1@" + DIGEST


class Project_(Project):
    """T4-less n1 jobs: the quota of custom_model_training_cpus per region, and the registry's digest of the image."""

    def __init__(self):
        self.limit = 64
        self.digest = DIGEST

    def quota(self, cfg, option):
        return [Finding("quota cpus", 8 <= self.limit, f"quota custom_model_training_cpus in {option.region}: need 8, "
                                                       f"limit {self.limit}")]

    def bucket_location(self, uri):
        return "US", []

    def setup(self, cfg, option):
        return []

    def image_digest(self, image):
        return self.digest, ""


@pytest.fixture
def project(monkeypatch):
    fake = Project_()
    monkeypatch.setattr(planning, "PROJECT_FACTORY", lambda project_id, endpoint: fake)
    return fake


@pytest.fixture
def trainer(tmp_path):
    """The example regressor, copied: its job file (Vertex paths) and its code."""
    folder = tmp_path / "regressor"
    shutil.copytree(ROOT / "examples" / "tabular-regressor", folder)
    job = yaml.safe_load((folder / "job.yaml").read_text())
    job.update(output={"base_dir": "gs://acme-runs/regressor"}, container={"image_uri": IMAGE},
               placement={"regions": ["us-central1", "europe-west4"]})
    job["serving"]["eval_data"] = "gs://acme-data/eval.jsonl"
    (folder / "job.yaml").write_text(yaml.safe_dump(job))
    return folder


def _plan(trainer: Path, out: Path, capsys, *extra) -> dict:
    code = saved_plan.plan_main(["--config", str(trainer / "job.yaml"), "--project", "acme-ml", "--out", str(out),
                                 *extra])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert f"plan saved to {out} (run tabular-regressor-" in said.out
    return json.loads(out.read_text())


def _apply(out: Path, vertex, capsys, *extra) -> tuple[int, str]:
    from pipelines.run import compile_pipeline

    code = saved_plan.apply_main([str(out), "--pipeline-root", "gs://acme-runs/root", "--api-endpoint", vertex.url,
                                  "--no-wait", *extra], compile_pipeline)
    return code, capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_saved_plan_applied_sends_the_request_it_recorded_field_for_field(tmp_path, trainer, project, capsys):
    import components
    from google.protobuf import json_format

    doc = _plan(trainer, tmp_path / "plan.json", capsys)
    assert doc["pick"] == "us-central1 STANDARD" and doc["inputs"]["image"]["digest"] == DIGEST
    assert doc["inputs"]["code"]["content_sha256"]  # the trainer's files, as its image holds them
    with VertexStandIn() as vertex:
        code, err = _apply(tmp_path / "plan.json", vertex, capsys)
        assert code == 0, err
        assert f"plan: applying {tmp_path / 'plan.json'}" in err
        (create,) = vertex.calls("POST", "/pipelineJobs")
        assert create.path == "/v1/projects/acme-ml/locations/us-central1/pipelineJobs"
        assert create.query["pipelineJobId"] == [doc["job_id"]]  # the run the plan named
        body = create.json()
        assert body["labels"][labels.RUN] == doc["job_id"] and labels.problems(body["labels"]) == []
        params = body["runtimeConfig"]["parameterValues"]
        assert params["placement_plan"] == doc["placement_plan"]
        assert json.loads(params["config_json"]) == json.loads(doc["config_json"])
        # the pipeline's steps as Vertex runs them with those parameters: the training step's create
        compiled = body["pipelineSpec"]
        validated = components.definition("validate_config").python_func(
            config_json=params["config_json"],
            image_uri=components.definition("build_image").python_func(config_json=params["config_json"]),
            location=params["location"], placement_plan=params["placement_plan"], run_id=doc["job_id"])
        step = compiled["deploymentSpec"]["executors"]["exec-custom-training-job"]["container"]
        run = finish(start_step(step, "custom-training-job",
                                task_inputs(compiled, "custom-training-job", validated, vertex.url, "acme-ml"),
                                tmp_path, parameters=("gcp_resources",)))
        assert run.returncode == 0, run.stderr[-2000:]
        (sent,) = vertex.custom_jobs.values()
    received = json_format.MessageToDict(type(sent).pb(sent))
    for server_side in ("name", "state", "createTime", "startTime", "endTime"):
        received.pop(server_side, None)
    (recorded,) = doc["requests"]
    assert received == recorded["body"]
    assert recorded["url"].endswith("/v1/projects/acme-ml/locations/us-central1/customJobs")
    assert received["labels"] == {labels.RUN: doc["job_id"], labels.TRIAL: "none",
                                  labels.CONFIG: recorded["body"]["labels"][labels.CONFIG]}


def _edit_code(trainer: Path, project):
    with open(trainer / "trainer" / "task.py", "a") as f:
        f.write("\n# a change after the plan\n")


def _edit_config(trainer: Path, project):
    job = yaml.safe_load((trainer / "job.yaml").read_text())
    job["trainer"]["args"] = ["--epochs", "5"]
    (trainer / "job.yaml").write_text(yaml.safe_dump(job))


def _move_tag(trainer: Path, project):
    project.digest = "sha256:" + "d" * 64


def _take_quota(trainer: Path, project):
    project.limit = 4


def _wait_a_day(trainer: Path, project):
    saved_plan.CLOCK = lambda: __import__("time").time() + 25 * 3600


@pytest.mark.parametrize("change,named", [
    (_edit_code, "code: the trainer's files changed"),
    (_edit_config, 'config: {job} changed (trainer.args ["--epochs", "3"] -> ["--epochs", "5"])'),
    (_move_tag, f"image digest: {IMAGE.split('@')[0]} now points at sha256:{'d' * 64}, the plan was made with {DIGEST}"),
    (_take_quota, "quota in us-central1 STANDARD: now quota custom_model_training_cpus in us-central1: need 8, limit 4"),
    (_wait_a_day, "age: made "),
])
def test_a_stale_plan_is_refused_naming_what_changed_and_nothing_is_sent(tmp_path, trainer, project, capsys,
                                                                         monkeypatch, change, named):
    monkeypatch.setattr(saved_plan, "CLOCK", saved_plan.CLOCK)
    _plan(trainer, tmp_path / "plan.json", capsys)
    change(trainer, project)
    with VertexStandIn() as vertex:
        code, err = _apply(tmp_path / "plan.json", vertex, capsys)
        assert vertex.calls("POST", "/pipelineJobs") == []
    assert code == 2 and "Traceback" not in err
    (error,) = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert error.startswith(f"error: {tmp_path / 'plan.json'} is stale, nothing was sent: ")
    assert named.format(job=trainer / "job.yaml") in error, error
    assert error.endswith("--out " + str(tmp_path / "plan.json"))


def test_a_plan_edited_by_hand_or_not_a_plan_is_refused(tmp_path, trainer, project, capsys):
    doc = _plan(trainer, tmp_path / "plan.json", capsys)
    doc["placement_plan"]["options"].reverse()  # europe-west4 first, by hand
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    (tmp_path / "other.json").write_text("{}")
    with VertexStandIn() as vertex:
        for path, said in ((tmp_path / "plan.json", "was edited after vtp plan wrote it"),
                           (tmp_path / "other.json", "is not a plan saved by vtp plan --out"),
                           (tmp_path / "missing.json", "cannot read")):
            code, err = _apply(path, vertex, capsys)
            assert code == 2 and said in err and "Traceback" not in err
        assert vertex.calls("POST", "/pipelineJobs") == []


def test_a_plan_with_errors_is_not_saved(tmp_path, trainer, project, capsys):
    project.limit = 0
    code = saved_plan.plan_main(["--config", str(trainer / "job.yaml"), "--project", "acme-ml",
                                 "--out", str(tmp_path / "plan.json")])
    said = capsys.readouterr()
    assert code == 2 and "plan not saved to" in said.out and not (tmp_path / "plan.json").exists()


def test_a_quota_that_moved_without_changing_the_verdict_does_not_make_the_plan_stale(tmp_path, trainer, project,
                                                                                        capsys):
    _plan(trainer, tmp_path / "plan.json", capsys)
    project.limit = 32  # still covers the job's 8
    with VertexStandIn() as vertex:
        code, err = _apply(tmp_path / "plan.json", vertex, capsys)
        assert code == 0, err
        assert len(vertex.calls("POST", "/pipelineJobs")) == 1
