"""A project folder as a user keeps one (issue 51 item 1): the trainer's code beside its job files, a compiled
pipeline, a saved plan, notes. The code is what goes into the image (``jobs.images.user_code.collect_code``, one
selection for the image and the hash); this product's own files are not code; a finished run is refused only when a
file it was made from changed or went, and the refusal names the files; files only added are said, not refused."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.images import user as user_image
from jobs.images.user_code import collect_code
from jobs.local.run.folder import check_folder, making, starts_over, write_making
from jobs.local.run.lock import NotThisJob
from jobs.run_records import own_outputs, records
from tests.conftest import finished_run
from tests.snapshots import tree_bytes
from jobfile import config as config_lib

ROOT = Path(__file__).resolve().parent.parent

TRAINER = textwrap.dedent('''\
    """A user's trainer written from scratch: Keras 3 through tf.keras, argparse flags, model.export."""
    import argparse, os
    import numpy as np
    import tensorflow as tf

    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    a = p.parse_args()
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    y = x.sum(1, keepdims=True)
    inp = tf.keras.Input((4,), name="features")
    model = tf.keras.Model(inp, tf.keras.layers.Dense(1, name="value")(inp))
    model.compile("sgd", "mse")
    model.fit(x, y, epochs=a.epochs, verbose=2)
    model.export(os.environ["AIP_MODEL_DIR"])
''')
JOB = textwrap.dedent('''\
    name: myclf
    trainer: {source_dir: ., module: trainer.task, args: ["--epochs", "1"]}
    topology: {strategy: one_device, worker: {replica_count: 0}}
    output: {base_dir: runs/myclf}
''')
GPU_JOB = textwrap.dedent('''\
    name: myclf
    trainer: {source_dir: ., module: trainer.task, args: ["--epochs", "1"]}
    topology:
      strategy: one_device
      region: us-central1
      chief: {replica_count: 1, machine_type: a3-highgpu-1g, accelerator_type: NVIDIA_H100_80GB, accelerator_count: 1}
    container:
      image_uri: us-central1-docker.pkg.dev/acme-ml/training/my-trainer:v1@sha256:{digest}
    output: {base_dir: gs://acme-ml-runs/myclf}
''').replace("{digest}", "1" * 64)


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text(TRAINER)
    (tmp_path / "job.yaml").write_text(JOB)
    return tmp_path


def run_py(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _cfg(project: Path, *overrides: str):
    return config_lib.load(str(project / "job.yaml"), list(overrides))


# -- which files are code ------------------------------------------------------------------------------------
def test_this_products_files_are_not_code_and_the_users_look_alikes_are(project):
    (project / "gpu-job.yaml").write_text(GPU_JOB)
    (project / "h100.pipeline.yaml").write_text("# PIPELINE DEFINITION\n# Name: myclf\ncomponents: {}\n"
                                                "deploymentSpec: {}\npipelineInfo: {name: myclf}\nroot: {}\n")
    (project / "plan.json").write_text(json.dumps({"project": "P", "pick": None, "requests": [], "options": [],
                                                   "cost": None, "checks": []}, indent=1))
    out = project / "out"  # a run folder written with --set output.base_dir=out
    out.mkdir()
    (out / records.PROVENANCE_RECORD).write_text(json.dumps({"config": {}, "written": "2026-11-29T00:00:00"}))
    (out / "model.txt").write_text("x")
    (project / ".vtp-cache" / "precision").mkdir(parents=True)
    (project / ".vtp-cache" / "precision" / "k.json").write_text("{}")
    # the user's own files that look like ours: all code
    (project / "config.yaml").write_text("trainer: {epochs: 5}\ndata: {path: x}\n")
    (project / "hparams.yaml").write_text("model: {name: small_cnn}\noptimizer: adam\n")
    (project / "mine").mkdir()
    (project / "mine" / "run.json").write_text('{"status": "ok"}')
    (project / "results.json").write_text('{"project": "mine"}')
    (project / "NOTES.md").write_text("notes\n")
    included, excluded = collect_code(project, "runs/myclf")
    assert included == ["NOTES.md", "config.yaml", "hparams.yaml", "mine/run.json", "results.json",
                        "trainer/__init__.py", "trainer/task.py"]
    assert dict(excluded) == {
        ".vtp-cache/": "always: this product's: the precision measurements' cache; 1 file",
        "gpu-job.yaml": "always: this product's: a job file",
        "h100.pipeline.yaml": "always: this product's: a compiled pipeline (vtp --compile-only)",
        "job.yaml": "always: this product's: a job file",
        "out/": "always: this product's: a run folder; 2 files",
        "plan.json": "always: this product's: a saved plan (vtp plan --out)",
    }
    # the image takes the same selection
    plan = user_image.plan(_cfg(project))
    assert sorted(plan.code_files) == [f"code/{rel}" for rel in included]


def test_a_real_compiled_pipeline_and_a_real_plan_are_recognised(project):
    """Written by the product's own writers, not by hand (the shapes the exclusion relies on)."""
    (project / "gpu-job.yaml").write_text(GPU_JOB)
    proc = run_py("--config", "gpu-job.yaml", "--compile-only", "h100.pipeline.yaml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    proc = run_py("plan", "--config", "gpu-job.yaml", "--out", "plan.json", cwd=project)  # a plan with errors is not saved
    assert (project / "plan.json").exists(), proc.stderr
    assert own_outputs.is_compiled_pipeline(project / "h100.pipeline.yaml")
    assert own_outputs.is_saved_plan(project / "plan.json")
    assert collect_code(project, "runs/myclf")[0] == ["trainer/__init__.py", "trainer/task.py"]


# -- the folder's run: refused only for what it was made from --------------------------------------------------
def test_files_only_added_are_said_and_the_finished_run_stands(project):
    base = finished_run(project / "job.yaml")
    (project / "NOTES.md").write_text("notes\n")
    said = []
    assert check_folder(str(base), making(_cfg(project)), say=said.append)["status"] == "succeeded"
    assert said == ["trainer code: NOTES.md added since the run in this folder; none of the files it was made from "
                    "changed, so it stands (an added file is in the image: if it changes what your trainer does, "
                    "--fresh trains with it; if it is not code, list it in .dockerignore)"]
    # the remedy, followed: NOTES.md listed in .dockerignore leaves the image and the hash; nothing more is said
    (project / ".dockerignore").write_text("NOTES.md\n")
    said.clear()
    assert check_folder(str(base), making(_cfg(project)), say=said.append)["status"] == "succeeded"
    assert said == []


def test_a_changed_or_removed_file_is_refused_by_name(project):
    base = finished_run(project / "job.yaml")
    (project / "trainer" / "task.py").write_text(TRAINER + "# tuned\n")
    (project / "trainer" / "__init__.py").unlink()
    (project / "util.py").write_text("")
    with pytest.raises(NotThisJob) as exc:
        check_folder(str(base), making(_cfg(project)))
    assert (f"holds a finished run of another job (trainer code in {project}: trainer/task.py changed; "
            "trainer/__init__.py removed; util.py added); nothing in it was changed.") in str(exc.value)


def test_an_old_provenance_record_is_read_and_the_refusal_says_it_cannot_name_files(project):
    base = finished_run(project / "job.yaml")
    made = json.loads((base / records.PROVENANCE_RECORD).read_text())
    del made["trainer_code"]["file_sha256"]  # as provenance.json was written before the list (count and hash)
    (base / records.PROVENANCE_RECORD).write_text(json.dumps(made))
    assert check_folder(str(base), making(_cfg(project)))["status"] == "succeeded"  # the same code: complete
    (project / "trainer" / "task.py").write_text(TRAINER + "# tuned\n")
    with pytest.raises(NotThisJob) as exc:
        check_folder(str(base), making(_cfg(project)))
    assert ("that run's record predates the list of its files, so which files differ cannot be named)"
            in str(exc.value))


def test_an_unfinished_run_without_a_checkpoint_starts_over_and_says_why(project):
    cfg = _cfg(project)
    base = Path(config_lib.resolved_base_dir(cfg))
    (base / "logs" / "replicas" / "attempt-1").mkdir(parents=True)  # its replicas ran, then it was stopped
    write_making(str(base), making(cfg))
    said = []
    assert check_folder(str(base), making(cfg), say=said.append) is None
    assert said == [f"the unfinished run in {base} left no checkpoint in {base}/checkpoints: your trainer left none "
                    "there (AIP_CHECKPOINT_DIR), so this run starts from the beginning, not where that one stopped; to "
                    "resume after a stop, save checkpoints there: Keras fit: callbacks=[keras.callbacks."
                    "BackupAndRestore(os.environ['AIP_CHECKPOINT_DIR'])]; a custom loop: tf.train.CheckpointManager "
                    "over that folder, restored at start"]
    (base / "checkpoints").mkdir()
    (base / "checkpoints" / "chief.keras").write_text("x")
    assert starts_over(str(base), making(cfg)["config"]) is None  # something to resume from: nothing to say


@pytest.mark.integration
def test_compile_plan_and_notes_then_a_rerun_is_complete_and_a_code_edit_is_refused_by_name(project):
    """Issue 51's path, as a user meets it: a run, the README's compile, a saved plan and a notes file beside the
    trainer, a rerun (complete), then a real edit (refused, the file named; the finished run untouched)."""
    proc = run_py("--config", "job.yaml", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (project / "gpu-job.yaml").write_text(GPU_JOB)
    assert run_py("--config", "gpu-job.yaml", "--compile-only", "h100.pipeline.yaml", cwd=project).returncode == 0
    assert run_py("plan", "--config", "gpu-job.yaml", "--out", "plan.json", cwd=project).returncode == 0  # a plan that fits
    assert (project / "plan.json").exists()
    (project / "NOTES.md").write_text("tried lr 0.01\n")
    proc = run_py("--config", "job.yaml", cwd=project)
    assert proc.returncode == 0 and "is already complete" in proc.stdout, proc.stdout + proc.stderr
    assert "note: trainer code: NOTES.md added since the run in this folder" in proc.stdout
    base = project / "runs" / "myclf"
    before = tree_bytes(base)
    (project / "trainer" / "task.py").write_text(TRAINER.replace("\"sgd\"", "\"adam\""))
    proc = run_py("--config", "job.yaml", cwd=project)
    assert proc.returncode == 2
    errors = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(errors) == 1 and (f"holds a finished run of another job (trainer code in {project}: trainer/task.py "
                                 "changed; NOTES.md added)") in errors[0], proc.stderr
    assert tree_bytes(base) == before
