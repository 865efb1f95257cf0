"""The reusable components: one folder each, YAMLs generated from the definitions (expected files), loadable
by any KFP user, typed artifacts between steps, the image as one setting, and light steps (no TensorFlow or
aiplatform import where the step does not need it).

``UPDATE_EXPECTED=1 python -m pytest tests/test_components.py`` regenerates ``components/*/component.yaml``."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import components
import components.base
from tests.conftest import ROOT

IMAGE = "us-central1-docker.pkg.dev/team/training/tf-trainer:ctx-1@sha256:" + "b" * 64


def _sdk_free(text: str) -> str:
    """The YAML without kfp's own version line (a kfp patch release changes nothing else)."""
    return re.sub(r"(?m)^sdkVersion: kfp-\S+$", "sdkVersion: kfp", text)


def _generated(tmp_path: Path, image: str | None = None) -> Path:
    out = tmp_path / "generated"
    components.write_yamls(out, image)
    return out


def test_every_component_yaml_is_generated_from_its_definition(tmp_path):
    out = _generated(tmp_path)
    stale = []
    for name in components.NAMES:
        generated, committed = components.yaml_path(name, out), components.yaml_path(name)
        if os.environ.get("UPDATE_EXPECTED"):
            committed.write_text(generated.read_text())
        if not committed.is_file() or _sdk_free(committed.read_text()) != _sdk_free(generated.read_text()):
            stale.append(name)
    assert not stale, (f"components/<name>/component.yaml out of date for {stale}: regenerate with "
                       "UPDATE_EXPECTED=1 python -m pytest tests/test_components.py")


def test_each_folder_holds_one_component_and_components_name_is_its_package():
    import importlib
    import types

    folders = sorted(p.name for p in (ROOT / "components").iterdir() if (p / "component.py").is_file())
    assert folders == sorted(components.NAMES)
    for name in components.NAMES:
        package = importlib.import_module(f"components.{name}")
        assert isinstance(getattr(components, name), types.ModuleType) and getattr(components, name) is package
        assert components.definition(name) is package.component.__dict__[name]
        assert components.definition(name).name == name.replace("_", "-")
    with pytest.raises(KeyError, match="no component 'trian'"):
        components.definition("trian")


EXPECTED_TYPES = {  # component: ({input: type}, {output: type}) of the artifacts a KFP user wires (kfp's spelling)
    "prepare_data": ({}, {"dataset": "system.Dataset@0.0.1"}),
    "train": ({"dataset": "system.Dataset@0.0.1"}, {"model": "system.Model@0.0.1", "metrics": "system.Metrics@0.0.1",
                                              "checkpoints": "system.Artifact@0.0.1", "tensorboard": "system.Artifact@0.0.1"}),
    "verify_model": ({"model": "system.Model@0.0.1", "dataset": "system.Dataset@0.0.1"},
                     {"verified_model": "system.Model@0.0.1", "metrics": "system.Metrics@0.0.1", "verification": "system.Artifact@0.0.1"}),
    "gate": ({"model": "system.Model@0.0.1", "verification": "system.Artifact@0.0.1",
              "training_metrics": "system.Metrics@0.0.1", "tensorboard": "system.Artifact@0.0.1"},
             {"gated_model": "system.Model@0.0.1", "metrics": "system.Metrics@0.0.1", "result": "system.Artifact@0.0.1"}),
    "upload_model": ({"model": "system.Model@0.0.1", "gate_record": "system.Artifact@0.0.1"},
                     {"vertex_model": "google.VertexModel@0.0.1"}),
    "tune": ({"dataset": "system.Dataset@0.0.1"}, {"model": "system.Model@0.0.1", "metrics": "system.Metrics@0.0.1",
                                             "study": "system.Artifact@0.0.1"}),
    "hyperparameter_tuning_job": ({}, {"model": "system.Model@0.0.1"}),
    "pick_model": ({"tuning_study": "system.Artifact@0.0.1"}, {"model": "system.Model@0.0.1",
                                                             "study": "system.Artifact@0.0.1"}),
    "report": ({"verification": "system.Artifact@0.0.1", "tensorboard": "system.Artifact@0.0.1", "checkpoints": "system.Artifact@0.0.1"},
               {"report": "system.HTML@0.0.1", "summary": "system.Markdown@0.0.1", "confusion": "system.ClassificationMetrics@0.0.1"}),
}


@pytest.mark.parametrize("name", components.NAMES)
def test_a_kfp_user_loads_each_yaml_with_typed_artifacts(name):
    from kfp import components as kfp_components

    loaded = kfp_components.load_component_from_file(str(components.yaml_path(name)))
    spec = loaded.component_spec
    assert spec.implementation.container.image == components.base.DEFAULT_IMAGE
    entry = " ".join(spec.implementation.container.command)
    assert "kfp.dsl.executor_main" in entry or entry == f"python3 -u -m components.entry {name}"
    inputs, outputs = EXPECTED_TYPES.get(name, ({}, {}))
    assert {k: v.type for k, v in (spec.inputs or {}).items() if k in inputs} == inputs
    assert {k: v.type for k, v in (spec.outputs or {}).items() if k in outputs} == outputs
    assert spec.description, "the YAML carries the definition's docstring"


def test_run_py_components_writes_the_set_for_an_image(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "components", "--image", IMAGE,
                           "--out", str(tmp_path / "set")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = [Path(line) for line in proc.stdout.split()]
    assert sorted(p.parent.name for p in written) == sorted(components.NAMES)
    for path in written:
        doc = yaml.safe_load(path.read_text())
        (executor,) = doc["deploymentSpec"]["executors"].values()
        assert executor["container"]["image"] == IMAGE
    # the same files as the committed ones, but for the image line
    committed = components.yaml_path("train").read_text()
    assert _sdk_free((tmp_path / "set" / "train" / "component.yaml").read_text()) == _sdk_free(committed.replace(
        components.base.DEFAULT_IMAGE, IMAGE))


@pytest.mark.parametrize("image,why", [("us-central1-docker.pkg.dev/p/r/tf-trainer:v1", "names no digest"),
                                       ("us-central1-docker.pkg.dev/p/r/tf-trainer@sha256:abc", "sha256:<64 lowercase hex"),
                                       ("TF Trainer:v1", "bad image reference")])
@pytest.mark.process
def test_run_py_components_refuses_an_image_not_pinned_by_digest(tmp_path, image, why):
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "components", "--image", image,
                           "--out", str(tmp_path / "set")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: --image: ") and why in line
    assert not (tmp_path / "set").exists()


def test_published_components_run_in_the_given_image():
    c = components.published(IMAGE)
    for name in components.NAMES:
        assert getattr(c, name).component_spec.implementation.container.image == IMAGE
    assert components.published().train.component_spec.implementation.container.image == components.base.DEFAULT_IMAGE


@pytest.mark.parametrize("name", components.NAMES)
def test_published_loads_each_yaml_as_kfps_own_loader_does(name):
    from kfp.components import load_component_from_file

    ours, kfps = components.load_yaml(components.yaml_path(name)), load_component_from_file(str(components.yaml_path(name)))
    assert type(ours) is type(kfps)
    assert ours.component_spec == kfps.component_spec and ours.component_spec.description
    assert ours.component_yaml == kfps.component_yaml


def test_a_v1_or_broken_yaml_goes_through_kfps_own_loader(tmp_path):
    v1 = tmp_path / "v1.yaml"
    v1.write_text("name: Echo\nimplementation:\n  container:\n    image: alpine\n    command: [echo, hi]\n")
    assert components.load_yaml(v1).component_spec.name == "echo"
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: 1\n---\nb: 2\n---\nc: 3\n")
    with pytest.raises(ValueError, match="one or two YAML documents"):
        components.load_yaml(broken)


def test_run_py_imports_kfp_without_its_api_client_and_leaves_no_switch_behind():
    code = ("import os, sys; from jobs.commands.run_command import import_kfp_without_its_client as f; f(); "
            "import kfp.local, kfp.dsl, kfp.compiler; "
            "print('kfp.client' in sys.modules, 'kubernetes' in sys.modules, '_KFP_RUNTIME' in os.environ)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


def test_the_pipeline_is_built_from_the_published_yamls(tmp_path):
    """No private path: every container task of the compiled pipeline runs a component whose executor is the
    committed YAML's, byte for byte but for the image."""
    from pipelines.training_pipeline import compile_pipeline
    from jobfile import config as config_lib

    published = {}
    for name in components.NAMES:
        doc = yaml.safe_load(components.yaml_path(name).read_text())
        (executor,) = doc["deploymentSpec"]["executors"].values()
        published[json.dumps([executor["container"]["command"], executor["container"].get("args")])] = name
    ours = []  # the Vertex pipelines and the local ones, together, of a job with a gate and of a study
    jobs = [config_lib.load("local", ["serving.gate.thresholds=[accuracy >= 0.5]",
                                      "notify.webhook.url_secret=projects/p/secrets/s/versions/1"]),
            config_lib.load("tuning")]
    for n, cfg in enumerate(jobs):
        for target in ("vertex", "local"):
            compiled = yaml.safe_load(Path(compile_pipeline(cfg, str(tmp_path / f"{target}-{n}.yaml"),
                                                            target, base_image=IMAGE)).read_text())
            ours += [e for e in compiled["deploymentSpec"]["executors"].values() if "container" in e]
    used = {published.get(json.dumps([e["container"]["command"], e["container"].get("args")])) for e in ours}
    assert None not in used, "a container task that is not one of the published components"
    assert used == set(components.NAMES)  # every one of them, the CustomJob step included
    assert {e["container"]["image"] for e in ours} == {IMAGE}


LIGHT = """
import json, sys, time
started = time.perf_counter()
from jobfile import config as config_lib
from components.validate_config.component import validate_config
from components.upload_model.component import upload_model
cfg = config_lib.load("local")
out = validate_config.python_func(cfg.to_json(), location="europe-west4")
from kfp.dsl import Model
from google_cloud_pipeline_components.types.artifact_types import VertexModel
upload_model.python_func(model=Model(uri=sys.argv[1] + "/model"), vertex_model=VertexModel(uri="", metadata={}),
                         location="us-central1", dry_run=True, record_dir=sys.argv[1])
heavy = sorted(m for m in ("tensorflow", "keras", "google.cloud.aiplatform", "google.cloud.aiplatform_v1",
                           "matplotlib") if m in sys.modules)
print(json.dumps({"heavy": heavy, "seconds": time.perf_counter() - started}))
"""


def test_steps_that_need_no_tensorflow_import_none(tmp_path):
    """validate_config and the upload request (a local run's dry run) import neither TensorFlow nor Keras,
    aiplatform or matplotlib (their wall time is in benchmarks/pipeline_steps.py, not asserted here)."""
    proc = subprocess.run([sys.executable, "-c", LIGHT, str(tmp_path)], capture_output=True, text=True, cwd=str(ROOT),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["heavy"] == []
    assert (tmp_path / "model_upload_request.json").is_file()


# -- a KFP user's own pipeline (examples/kfp-pipeline) ------------------------------------------------------
def _example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kfp_example", ROOT / "examples" / "kfp-pipeline" / "pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_users_pipeline_from_the_components_compiles_for_vertex(tmp_path, capsys):
    from tests.pipeline_dag import tasks_started_with_defaults

    out = tmp_path / "mine.yaml"
    assert _example().main(["--compile", str(out), "--image", IMAGE, "--base-dir", "gs://team-bucket/runs/x"]) == 0
    compiled = yaml.safe_load(out.read_text())
    tasks = compiled["root"]["dag"]["tasks"]
    assert sorted(tasks) == ["custom-training-job", "importer", "importer-2", "make-images", "prepare-data", "report",
                             "validate-config", "verify-model"]
    assert tasks["prepare-data"]["inputs"]["artifacts"]["images"]["taskOutputArtifact"] == {
        "outputArtifactKey": "images", "producerTask": "make-images"}
    assert tasks["custom-training-job"]["dependentTasks"] == ["prepare-data", "validate-config"]
    importer = tasks["verify-model"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]["producerTask"]
    assert "custom-training-job" in tasks[importer]["dependentTasks"]  # the CustomJob's model, not a local step
    assert "comp-custom-training-job" in tasks_started_with_defaults(compiled)
    assert {e["container"]["image"] for e in compiled["deploymentSpec"]["executors"].values() if "container" in e} \
        == {IMAGE}
    # what the project's submission refuses, the example's --compile refuses too: one line each
    capsys.readouterr()
    placeholder = "us-central1-docker.pkg.dev/my-project/training/tf-trainer:latest"
    assert _example().main(["--compile", str(tmp_path / "no.yaml"), "--image", placeholder,
                            "--base-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith("error: --image: ") and "my-project" in line for line in err)
    assert any(line.startswith("error: --base-dir: ") for line in err) and not (tmp_path / "no.yaml").exists()


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_users_pipeline_from_the_components_runs_under_kfp_local(tmp_path):
    """Their own data step, then this project's prepare -> train (2 workers) -> verify -> report."""
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "kfp-pipeline" / "pipeline.py"), "--local",
                           str(tmp_path / "run")], capture_output=True, text=True, timeout=540, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "run" / "model" / "saved_model.pb").is_file()
    (verify_out,) = (tmp_path / "run" / "pipeline_root").glob("*/verify-model/executor_output.json")
    meta = json.loads(verify_out.read_text())["artifacts"]["verified_model"]["artifacts"][0]["metadata"]
    assert meta["classes"] == ["class_0", "class_1", "class_2"] and meta["verified"] is True
    assert 0 <= meta["accuracy"] <= 1
    (report_out,) = (tmp_path / "run" / "pipeline_root").glob("*/report/executor_output.json")
    assert set(json.loads(report_out.read_text())["artifacts"]) == {"report", "summary", "confusion"}
    # a short console (no executor JSON dumps) that ends with where the model and the report are
    assert len(proc.stdout.splitlines()) < 60, proc.stdout
    assert '"inputs"' not in proc.stdout and "executor_input" not in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == f"report: {tmp_path / 'run' / 'report.html'}"
    assert (tmp_path / "run" / "report.html").is_file()


def test_run_py_components_publishes_the_set_to_a_kfp_repository(tmp_path):
    """``--host`` uploads each component.yaml as the KFP registry takes a package (the stand-in parses it as a
    PipelineSpec, as the real repository does), tagged; a bad host or a tag without a host is one line."""
    from tests.standins.kfp_registry import KfpRegistryStandIn

    def run(*extra):
        return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "components", "--image", IMAGE,
                               "--out", str(tmp_path / "set"), *extra], capture_output=True, text=True, timeout=180)

    with KfpRegistryStandIn("proj", "components") as registry:
        proc = run("--host", registry.host, "--tag", "v1")
        assert proc.returncode == 0, proc.stderr
        assert set(registry.packages) == {n.replace("_", "-") for n in components.NAMES}
        for name, versions in registry.packages.items():
            ((version, upload),) = versions.items()
            assert upload["tags"] == ["v1"] and f"  published {name}/{version}" in proc.stdout
            assert IMAGE.encode() in upload["content"]
    bad = run("--host", "https://example.com/x")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --host: 'https://example.com/x' is not a Kubeflow")
    lonely = run("--tag", "v1")
    assert lonely.returncode == 2 and "error: --tag: tags the published versions; add --host" in lonely.stderr
