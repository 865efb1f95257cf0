"""What runs on Vertex runs here (issue 55): training scripts written the way Google's Vertex AI samples write them
(``tests/vertex_samples/``: TF Serving's ``model/1`` layout, a tuning lab whose trial spec repeats its fixed flags,
a script that keeps its data in its working directory, one reading TensorFlow Datasets, one written for Keras 2, one
that asserts its GPUs), each with a job file and taken unchanged, end with a verified model here or fail with one
line that says how to run them unchanged.

One test (or a few) per item of the issue: 1 the model one folder below ``AIP_MODEL_DIR``; 2 tuning as Vertex runs
it; 3 a replica's own working directory; 4 the requirements read against the image; 5 the hints. Only the tests
that start TensorFlow are ``integration``; the others use samples (or their stand-ins) that need no TensorFlow."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

from jobs.cloud.apis import vertex
from jobs.local.launch import custom_job, hints
from jobs.local.launch.workdir import ReplicaWorkdirs
from jobs.rules import image_requirements, saved_model, tuning_rules
from jobs.run_records import trial_files
from jobs.rules.validate import validate
from jobs.steps import calls as steps
from tests.conftest import ROOT
from tests.test_trainer_failures import project
from jobfile import config as config_lib
from jobfile import paths

SAMPLES = ROOT / "tests" / "vertex_samples"


def sample(tmp_path: Path, name: str) -> Path:
    """A sample's project folder, copied outside this repository as a user's would be."""
    dest = tmp_path / name
    shutil.copytree(SAMPLES / name, dest, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    return dest


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (runs/ aside) and the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and "runs" not in p.relative_to(folder).parts}


def touch_model(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "saved_model.pb").write_bytes(b"\x08\x01")
    return folder


# -- 1: the model where Vertex users put it ------------------------------------------------------------------------
def test_the_rule_finds_a_savedmodel_in_aip_model_dir_or_one_folder_below(tmp_path):
    here = touch_model(tmp_path / "here")
    assert saved_model.find_saved_model(str(here) + "/") == saved_model.FoundModel(str(here), str(here))
    for layout, found, kind in (("1", "1", "version 1, TensorFlow Serving's layout"),
                                ("1700000000", "1700000000", "timestamp 1700000000"),
                                ("savedmodel", "savedmodel", "the folder 'savedmodel'")):
        model = tmp_path / layout / "model"
        touch_model(model / layout)
        (model / "workertemp_1").mkdir()  # a worker's temporary folder holds no SavedModel: not a candidate
        got = saved_model.find_saved_model(str(model))
        assert (got.path, got.below, got.others) == (str(model / found), found, ())
        assert got.line == (f"note: the model is the SavedModel in {model / found}, one folder below AIP_MODEL_DIR "
                            f"({kind}), as Vertex takes it: that folder is verified and registered")
    versions = tmp_path / "versions"
    for v in ("1", "2", "10"):
        touch_model(versions / v)
    got = saved_model.find_saved_model(str(versions))
    assert (got.path, got.others) == (str(versions / "10"), ("2", "1"))  # the newest, as TF Serving serves it
    assert got.line.endswith("; passed over: 2, 1 (older)")


@pytest.mark.parametrize("layout, line", [
    ({}, "{d} holds no SavedModel (no saved_model.pb in it or in a folder one level below); the folder is empty"),
    (None, "{d} holds no SavedModel (no saved_model.pb in it or in a folder one level below); the folder does not "
           "exist"),
    ({"model.keras": b"k", "checkpoint/ckpt-1.index": b"c"},
     "{d} holds no SavedModel (no saved_model.pb in it or in a folder one level below); it holds: checkpoint/, "
     "model.keras"),
    ({"savedmodel/1700000000/saved_model.pb": b"m"},
     "{d} holds no SavedModel (no saved_model.pb in it or in a folder one level below); it holds: savedmodel/; a "
     "SavedModel two folders down, in savedmodel/1700000000/, is deeper than a model is looked for: save it to "
     "AIP_MODEL_DIR or one folder below"),
    ({"a/saved_model.pb": b"m", "b/saved_model.pbtxt": b"m"},
     "{d} holds SavedModels in 2 folders (a/, b/), and only folders named by numbers (versions, timestamps) say "
     "which is newest: write one model to AIP_MODEL_DIR, or each one to a numbered folder under it"),
])
def test_none_or_several_is_one_line_listing_what_the_folder_holds(tmp_path, layout, line):
    d = tmp_path / "model"
    for rel, data in (layout or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    if layout is not None:
        d.mkdir(exist_ok=True)
    with pytest.raises(saved_model.NoSavedModel) as e:
        saved_model.find_saved_model(str(d))
    assert str(e.value) == line.format(d=d)


def test_a_gs_folder_is_read_through_the_gcs_mount_and_named_as_given(tmp_path, monkeypatch):
    """On Vertex a pipeline task sees gs://B/P at /gcs/B/P: the rule lists it there and answers in gs:// terms (the
    Model Registry's artifactUri); without the mount and without TensorFlow it is taken as given."""
    monkeypatch.setattr(paths, "FUSE_ROOT", str(tmp_path / "gcs"))
    touch_model(tmp_path / "gcs" / "bucket" / "runs" / "job" / "model" / "1")
    found = saved_model.find_saved_model("gs://bucket/runs/job/model/")
    assert found.path == "gs://bucket/runs/job/model/1" and found.model_dir == "gs://bucket/runs/job/model"
    assert saved_model.artifact_location("gs://bucket/runs/job/model/") == "gs://bucket/runs/job/model/1"
    monkeypatch.setattr(paths, "FUSE_ROOT", str(tmp_path / "no-mount"))
    unchecked = saved_model.find_saved_model("gs://bucket/runs/job/model/", remote=False)
    assert (unchecked.path, unchecked.checked) == ("gs://bucket/runs/job/model", False)
    assert saved_model.artifact_location("gs://bucket/runs/job/model/1") == "gs://bucket/runs/job/model/1"


SAVES_ONE_DOWN = """\
    import os, sys

    folder = os.path.join(os.environ["AIP_MODEL_DIR"], sys.argv[1])  # model.save(os.path.join(AIP_MODEL_DIR, "1"))
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, sys.argv[2]), "wb").close()
    """
ONE_REPLICA = """\
    name: saves
    trainer: {module: trainer.task, args: ["1", "saved_model.pb"]}
    topology:
      strategy: one_device
      chief: {replica_count: 1, machine_type: n1-standard-4}
    output: {base_dir: runs/saves}
    """


@pytest.mark.process  # the train step / the study starts the sample's replicas
def test_the_train_step_takes_the_model_one_folder_below_and_the_registry_request_names_it(tmp_path):
    folder = project(tmp_path, SAVES_ONE_DOWN, ONE_REPLICA)
    cfg = config_lib.load(str(folder / "job.yaml"))
    said: list[str] = []
    record = steps.train_local(cfg, log=said.append)
    model = folder / "runs" / "saves" / "model"
    assert record["model"] == str(model / "1") and record["dirs"]["model"] == str(model)
    assert f"note: the model is the SavedModel in {model / '1'}, one folder below AIP_MODEL_DIR (version 1, " \
           "TensorFlow Serving's layout), as Vertex takes it: that folder is verified and registered" in said
    request = vertex.upload_request(str(model), display_name="saves", serving_image="img", project="p",
                                    location="us-central1")
    assert request["model"]["artifactUri"] == str(model / "1")
    # a Keras 3 ``model.save("model.keras")`` one folder down is no SavedModel: the step fails, naming what is there
    cfg = config_lib.load(str(folder / "job.yaml"), ['trainer.args=["keras", "model.keras"]',
                                                     f"output.base_dir={tmp_path / 'other'}"])
    with pytest.raises(steps.NoModel) as e:
        steps.train_local(cfg, log=lambda line: None)
    assert str(e.value).startswith(f"the chief ended (exit 0) without writing a model: {tmp_path / 'other' / 'model'} "
                                   "holds no SavedModel (no saved_model.pb in it or in a folder one level below); it "
                                   "holds: keras/; the trainer must write a SavedModel to AIP_MODEL_DIR")


def test_a_study_record_finds_its_runs_from_a_model_one_folder_below():
    study = {"metric": "loss", "goal": "minimize", "best_trial": {"id": "2", "metric": 0.1,
                                                                  "model_dir": "gs://b/run/2/model"},
             "trials": [{"id": "1", "state": "SUCCEEDED", "metric": 0.5, "model_dir": "gs://b/run/1/model"},
                        {"id": "2", "state": "SUCCEEDED", "metric": 0.1, "model_dir": "gs://b/run/2/model"}]}
    assert tuning_rules.verified_trial(study, "gs://b/run/2/model/1")["id"] == "2"  # Vertex's trial, verify's folder
    assert tuning_rules.verified_trial(study, "gs://b/run/1/model")["id"] == "1"
    assert tuning_rules.verified_trial(study, "gs://b/run/3/model/1") is None
    for model_dir in ("/r/2/model", "/r/2/model/1", "/r/2/model/savedmodel", "/r/2/model/model"):
        assert trial_files.trial_folder("/r", {"id": "2", "model_dir": model_dir}) == "/r/2"


# -- 2: tuning as Vertex runs it ------------------------------------------------------------------------------------
@pytest.mark.process  # the train step / the study starts the sample's replicas
def test_a_spec_repeating_fixed_flags_runs_each_trials_value_and_the_baseline_the_fixed_one(tmp_path):
    """The tuning lab's fixed arguments give --lr 0.01 and --batch_size 64 and its spec tunes --lr: a warning, not
    a refusal; each trial's --lr=VALUE comes last and wins (the metric is 1 - |lr - 0.03| - batch_size / 10000:
    it says which lr the trainer took), the baseline keeps --lr 0.01, and every model is found one folder down."""
    from jobs.tuning.local import run_local_study

    folder = sample(tmp_path, "tuning_lab")
    cfg = config_lib.load(str(folder / "tune.yaml"), ['trainer.args=["--lr", "0.01", "--batch_size", "64", "--export"]'])
    report = validate(cfg)
    assert report.errors == []
    assert [str(w) for w in report.warnings] == [
        "tuning.parameters.lr: trainer.args also gives --lr 0.01; each trial's --lr=VALUE comes after it and wins "
        "(argparse keeps the last, as on Vertex, which appends a trial's flags to the fixed ones), so each trial runs "
        "with its own lr and the baseline runs the job as it stands, with --lr 0.01"]
    record = run_local_study(cfg, log=lambda line: None)
    base = folder / "runs" / "tuning-lab"
    by_lr = {t["parameters"]["lr"]: t for t in record["trials"]}
    for lr, trial in by_lr.items():
        assert trial["state"] == "SUCCEEDED" and trial["metric"] == pytest.approx(1 - abs(lr - 0.03) - 0.0064)
        assert trial["model_dir"] == str(base / trial["id"] / "model" / "1")
    assert record["baseline"]["metric"] == pytest.approx(1 - 0.02 - 0.0064)
    assert record["baseline"]["model_dir"] == str(base / "baseline" / "model" / "1")
    assert record["handed_on"]["id"] == by_lr[0.02]["id"] and record["handed_on"]["model_dir"].endswith("/model/1")


@pytest.mark.process  # the train step / the study starts the sample's replicas
def test_a_trial_that_ends_without_a_model_fails_at_the_trial_with_the_missing_model_line(tmp_path):
    """The codelab writes no model: its first trial is FAILED with the train step's line (the study stops there,
    max_failed_trials 0), not SUCCEEDED and found out by the verify step after the whole study."""
    from jobs.tuning.local import StudyFailed, run_local_study

    folder = sample(tmp_path, "tuning_lab")
    cfg = config_lib.load(str(folder / "tune.yaml"), ["tuning.baseline=false"])
    said: list[str] = []
    with pytest.raises(StudyFailed) as e:
        run_local_study(cfg, log=said.append)
    record = json.loads((folder / "runs" / "tuning-lab" / "tuning.json").read_text())
    [trial] = record["trials"]
    line = (f"the chief ended (exit 0) without writing a model: {folder / 'runs' / 'tuning-lab' / '1' / 'model'} holds "
            "no SavedModel (no saved_model.pb in it or in a folder one level below); the folder is empty; the trainer "
            "must write a SavedModel to AIP_MODEL_DIR")
    assert trial["state"] == "FAILED" and trial["error"].startswith(line) and trial["metric"] is not None
    assert any(s.startswith("trial 1 FAILED in ") and line in s for s in said), said
    assert str(e.value).startswith("the study stopped after 1 failed trial(s) (tuning.max_failed_trials is 0: here the "
                                   f"first failed trial stops the study); trial 1 FAILED: {line}")


# -- 3: a replica's working directory is its own ------------------------------------------------------------------
WRITER = """\
    import json, os

    from trainer import util  # the trainer's package, importable as in the image

    os.makedirs("data", exist_ok=True)  # the sample's "download": into its working directory
    with open(os.path.join("data", "rows.csv"), "w") as f:
        f.write("1,2,3\\n")
    with open(os.path.join("trainer", "util.py"), "a") as f:  # even a trainer rewriting a file of its own
        f.write("# changed by a replica\\n")
    role = json.loads(os.environ["TF_CONFIG"])["task"]["type"]
    found = sorted(os.path.relpath(os.path.join(d, n)) for d, _, names in os.walk(".") for n in names)
    print("REPLICA", json.dumps({"role": role, "cwd": os.getcwd(), "util": util.NAME, "files": found}), flush=True)
    if role == "chief":
        open(os.path.join(os.environ["AIP_MODEL_DIR"], "saved_model.pb"), "wb").close()
    """
TWO_REPLICAS = """\
    name: writer
    trainer: {module: trainer.task}
    topology:
      strategy: multi_worker
      chief: {replica_count: 1, machine_type: n1-standard-4}
      worker: {replica_count: 1, machine_type: n1-standard-4}
    output: {base_dir: runs/writer}
    """


def test_each_replica_runs_in_its_own_copy_of_the_code_and_the_source_folder_is_never_written(tmp_path):
    from jobs.images.user_code import trainer_version

    folder = project(tmp_path, WRITER, TWO_REPLICAS)
    (folder / "trainer" / "util.py").write_text('NAME = "util"\n')
    (folder / ".env").write_text("TOKEN=1\n")  # a credential: never in the image, never in a replica's folder
    cfg = config_lib.load(str(folder / "job.yaml"))
    before, version = tree(folder), trainer_version(cfg)
    said: list[str] = []
    for _ in range(2):  # run twice: the second run sees the same folder, the same code
        custom_job.launch(cfg, str(folder / "runs" / "writer"), log=said.append)
    assert tree(folder) == before and trainer_version(cfg) == version, "nothing a replica writes lands in source_dir"
    replicas = [json.loads(line.split("REPLICA ", 1)[1]) for line in said if "REPLICA " in line]
    assert sorted(r["role"] for r in replicas) == ["chief", "chief", "worker", "worker"]
    assert len({r["cwd"] for r in replicas}) == 4  # one folder per replica and attempt
    for r in replicas:
        assert os.path.dirname(r["cwd"]) == tempfile.gettempdir() and not os.path.exists(r["cwd"])  # removed
        # the image's code: the job file is not in it (jobs.run_records.own_outputs), nor a credential file
        assert r["util"] == "util" and ".env" not in r["files"] and "job.yaml" not in r["files"]
        assert "data/rows.csv" in r["files"]
    assert any("each replica runs in its own working folder, a copy of the 3 file(s)" in line for line in said), said


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_working_directory_sample_trains_twice_and_its_folder_stays_as_it_was(tmp_path):
    """The sample that "downloads" its data into its working directory, as it is: the data lands in the replica's
    own folder (gone with it), the project's folder keeps its files and its code's SHA-256, so a second run in the
    same output folder is the same job, not "a finished run of another job" (one tf_keras epoch on 32 rows)."""
    from jobs.images.user_code import trainer_version

    folder = sample(tmp_path, "workdir_writer")
    cfg = config_lib.load(str(folder / "job.yaml"))
    before, version = tree(folder), trainer_version(cfg)
    said: list[str] = []
    for _ in range(2):
        custom_job.launch(cfg, str(folder / "runs" / "workdir-writer"), log=said.append)
    downloads = [line for line in said if "] downloaded data/rows.csv into " in line]
    assert len(downloads) == 2 and all(f"into {tempfile.gettempdir()}/vtp-chief-0-" in line for line in downloads)
    assert tree(folder) == before and trainer_version(cfg) == version
    assert (folder / "runs" / "workdir-writer" / "model" / "saved_model.pb").is_file()


def test_a_replicas_folder_holds_exactly_the_files_the_images_workdir_holds(tmp_path):
    """The process runner's copy and the image (``vtp build``'s code layer, its WORKDIR) are the same files: the
    docker runner's replica is a container of that image, in that WORKDIR, so both runners agree."""
    from jobs.images import user

    folder = sample(tmp_path, "tfds_reader")
    (folder / "notes.md").write_text("x")
    (folder / "runs").mkdir()
    (folder / "runs" / "old.txt").write_text("an earlier run's output: neither in the image nor in a replica's folder")
    cfg = config_lib.load(str(folder / "job.yaml"))
    image = user.plan(cfg)
    workdirs = ReplicaWorkdirs(cfg.trainer.source_dir, config_lib.resolved_base_dir(cfg))
    assert sorted(f"code/{rel}" for rel in workdirs.files) == sorted(image.code_files)
    assert f"WORKDIR {user.CODE_DIR}" in user.dockerfile("r/base@sha256:" + "a" * 64, image, ["python"])
    made = workdirs.make("chief-0")
    try:
        assert tree(Path(made)) == {k: v for k, v in tree(folder).items()
                                    if f"code/{k}" in image.code_files}
    finally:
        workdirs.remove(made)
    assert not os.path.exists(made)


# -- 4: the requirements read against the image -------------------------------------------------------------------
@pytest.mark.parametrize("pin, line", [
    ("tensorflow==2.8.0", "line 1 (tensorflow==2.8.0) cannot install in the image: no build for its Python 3.11 "
                          "(TensorFlow 2.8: Python 3.7-3.10; TensorFlow's tested build configurations); the image "
                          "holds tensorflow 2.21"),
    ("tensorflow==2.12.1", "line 1 (tensorflow==2.12.1) would replace the image's tensorflow 2.21 with TensorFlow "
                           "2.12 (its tf_keras 2.21 and Keras 3 would no longer match it"),
    ("tensorflow-gpu==2.8.0", "line 1 (tensorflow-gpu==2.8.0) cannot install in the image: no build for its Python "
                              "3.11"),
    ("tensorflow-cpu", "line 1 (tensorflow-cpu) installs a second TensorFlow (tensorflow-cpu) over the image's "
                       "tensorflow 2.21"),
    ("tf_keras==2.15.0", "line 1 (tf_keras==2.15.0): tf_keras 2.X requires tensorflow 2.X, so it would replace the "
                         "image's tensorflow 2.21"),
    ("keras==2.12.0", "line 1 (keras==2.12.0) would replace the image's Keras 3, which its tensorflow 2.21 requires"),
    ("tensorflow==2.99.0", "line 1 (tensorflow==2.99.0) would replace the image's tensorflow 2.21 with a TensorFlow "
                           "release that TensorFlow's table (read 2026-11-29) does not list"),
])
def test_a_pin_the_image_cannot_install_or_that_would_replace_what_it_holds_is_one_line(tmp_path, pin, line):
    folder = sample(tmp_path, "tfds_reader")
    (folder / "requirements.txt").write_text(f"{pin}\ncloudml-hypertune\n")
    errors = [str(e) for e in validate(config_lib.load(str(folder / "job.yaml"))).errors]
    assert len(errors) == 1 and errors[0].startswith(f"trainer.requirements: {line}"), errors
    assert "valid choices: remove the line" in errors[0]


@pytest.mark.parametrize("pins", ["tensorflow\ntf_keras\nkeras>=3", "tensorflow>=2.8", "tensorflow==2.21.*",
                                  "tensorflow<2.16; python_version < '3.11'", "tf-keras~=2.21.0", "numpy<3"])
def test_pins_the_image_satisfies_or_that_do_not_apply_to_it_pass(tmp_path, pins):
    folder = sample(tmp_path, "tfds_reader")
    (folder / "requirements.txt").write_text(pins + "\n")
    assert validate(config_lib.load(str(folder / "job.yaml"))).errors == []


def test_a_tpu_jobs_image_holds_tensorflow_tpu_2_20():
    assert image_requirements.image_pin_problems("tensorflow-tpu==2.20.*\n", "tpu") == []
    [p] = image_requirements.image_pin_problems("tensorflow==2.21.0\n", "tpu")
    assert "installs a second TensorFlow (tensorflow) over the image's tensorflow-tpu 2.20" in str(p)


def test_what_the_check_says_the_image_holds_is_what_it_is_built_from():
    """The image has no pyproject to read at run time: the check's data is held to the files the image is built from."""
    dockerfile = (ROOT / "containers" / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:(\d+\.\d+)-slim$", dockerfile, re.M).group(1) == \
        image_requirements.IMAGE_PYTHON
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for variant, (dist, series) in image_requirements.IMAGE_TENSORFLOW.items():
        assert any(re.fullmatch(rf"{dist}(\[[\w-]+\])?=={re.escape(series)}\.\*", r) for r in extras[variant]), \
            (variant, extras[variant])
    for dist, series in image_requirements.IMAGE_TENSORFLOW.values():  # the image's own release has a build for it
        assert image_requirements._has_build(series)


TFDS_MISSING = "ModuleNotFoundError: No module named 'tensorflow_datasets'"


def test_a_missing_module_the_requirements_list_says_where_to_install_it_for_the_runner(tmp_path):
    folder = sample(tmp_path, "tfds_reader")
    requirements = str(folder / "requirements.txt")
    if importlib.util.find_spec("tensorflow_datasets") is None:  # the sample's own failure, as a replica here has it
        cfg = config_lib.load(str(folder / "job.yaml"))
        result = custom_job.launch(cfg, str(folder / "runs" / "tfds"), check=False, log=lambda line: None)
        assert result.failure.cause() == [
            f"chief-0's error: {TFDS_MISSING}",
            "hint: trainer.requirements lists it (line 1: tensorflow-datasets==4.9.2), which vtp build installs in your "
            f"image; the process runner (the default) runs every replica in this environment ({sys.executable}): "
            "install it here (python -m pip install 'tensorflow-datasets==4.9.2'), or run every replica in your image: "
            "vtp build --config JOB --image REPO, then --runner docker --image REPO"]
    docker = hints.hint_for([TFDS_MISSING], None, requirements=requirements, runner="docker")
    assert docker.startswith("trainer.requirements lists it (line 1: tensorflow-datasets==4.9.2), but the image the "
                             "replicas ran was built without it: rebuild it")
    absent = "ModuleNotFoundError: No module named 'vtp_no_such_package.sub'"
    assert hints.hint_for([absent], str(folder), requirements=requirements).startswith(
        f"neither this environment ({sys.executable}), where the process runner runs every replica, nor "
        f"trainer.requirements ({requirements}) has vtp_no_such_package: add the package")
    assert hints.hint_for(["ModuleNotFoundError: No module named 'trainer.missing'"], str(folder)) is None  # its own
    assert hints.hint_for(["ModuleNotFoundError: No module named 'yaml.nothing'"], str(folder)) is None  # here
    (folder / "requirements.txt").write_text("google-cloud-storage>=2\nscikit-learn\n")
    for module, dist in (("google.cloud.storage", "google-cloud-storage"), ("sklearn", "scikit-learn")):
        assert image_requirements.listed(requirements, module).name == dist


# -- 5: hints for what these scripts meet --------------------------------------------------------------------------
@pytest.mark.parametrize("error, api", [  # the lines as Keras 3.15 under TensorFlow 2.21 words them (seen here)
    ("AttributeError: module 'keras.callbacks' has no attribute 'experimental'", "keras.callbacks.experimental"),
    ("AttributeError: module 'keras._tf_keras.keras.layers' has no attribute 'experimental'",
     "keras.layers.experimental"),
    ("ModuleNotFoundError: No module named 'tensorflow.keras.layers.experimental'", "keras.layers.experimental"),
    ("AttributeError: module 'keras.mixed_precision' has no attribute 'experimental'", None),  # tf_keras 2.21 neither
    ("AttributeError: module 'keras.utils' has no attribute 'experimental'", "keras.utils.experimental"),
    ("ImportError: `keras.optimizers.legacy` is not supported in Keras 3. When using `tf.keras`, ...",
     "keras.optimizers.legacy"),
    ("AttributeError: 'Sequential' object has no attribute 'fit_generator'", "Model.fit_generator"),
    ("ValueError: Invalid filepath extension for saving. Please add either a `.keras` extension",
     "model.save to a folder (a SavedModel)"),
    ("AttributeError: module 'keras.layers' has no attribute 'Dnese'", None),  # a typo is no Keras 2 API
    ("ModuleNotFoundError: No module named 'keras.engine'", None),  # private in tf_keras too
])
def test_keras_2_apis_under_keras_3_are_recognised_from_tf_kerass_own_api(error, api):
    assert hints.keras2_api(error) == api


def test_the_keras_2_hint_says_what_runs_the_code_unchanged(tmp_path):
    error = "AttributeError: module 'keras.callbacks' has no attribute 'experimental'"
    for name, code in (("k3", "import keras\n"), ("tfk", "import tensorflow as tf\nx = tf.keras.layers\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.py").write_text(code)
    head = ("keras.callbacks.experimental is Keras 2's (tf_keras, which the trainer image holds) and Keras 3 has no "
            "such thing; Keras 3 is what `import keras` gives, and tf.keras unless TF_USE_LEGACY_KERAS=1, here and in "
            "the image; ")
    assert hints.hint_for([error], str(tmp_path / "k3")) == head + (
        "your code imports Keras 3 itself (import keras, at task.py:1), which the variable does not change: write "
        "`import tf_keras as keras` there")
    assert hints.hint_for([error], str(tmp_path / "tfk"), {}) == head + (
        "your code uses tf.keras (at task.py:2): declare trainer.env: {TF_USE_LEGACY_KERAS: \"1\"} in the job file "
        "(set in every replica before TensorFlow is imported, here and on Vertex), and tf.keras is then tf_keras: the "
        "code runs unchanged")
    assert "code that imports keras needs `import tf_keras as keras`" in hints.hint_for([error], None)


def test_a_gpu_count_the_script_asserts_gets_the_local_gpu_hint():
    lines = ["AssertionError", "  File \"/app/trainer/task.py\", line 14, in main",
             "    assert len(gpus) == args.num_gpus", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^", "AssertionError"]
    hint = hints.hint_for(lines)
    assert hint.startswith("the trainer checks its GPUs (assert len(gpus) == args.num_gpus), and a replica here sees "
                           "only this machine's GPUs, none without one (the local launcher runs a GPU pool over this "
                           "machine's CPUs; on Vertex the pool's GPUs are there)")
    assert hints.hint_for(["AssertionError: expected 4 GPUs, found 0"]).startswith(
        "the trainer checks its GPUs (AssertionError: expected 4 GPUs, found 0)")
    assert hints.hint_for(["AssertionError", "    assert rows > 0"]) is None  # not about GPUs


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_keras_2_and_gpu_samples_fail_here_with_their_hint(tmp_path):
    """The two samples as they are, run as replicas: each fails on its own line, and the hint is the one above."""
    for name, hint in (("keras2_callbacks", "hint: keras.callbacks.experimental is Keras 2's (tf_keras, which the "
                                            "trainer image holds)"),
                       ("gpu_count", "hint: the trainer checks its GPUs (assert len(gpus) == args.num_gpus)")):
        folder = sample(tmp_path, name)
        cfg = config_lib.load(str(folder / "job.yaml"), ["scheduling.max_restarts=0"])
        result = custom_job.launch(cfg, str(folder / "runs" / name), check=False, log=lambda line: None)
        cause = result.failure.cause()
        assert result.returncode == 1 and cause[-1].startswith(hint), cause


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_a_sample_saving_in_tf_servings_layout_ends_with_a_verified_registered_model(tmp_path):
    """``model.save(os.path.join(AIP_MODEL_DIR, "1"))``, the sample unchanged with its job file: trained, found one
    folder below, verified there in a process that never trained, and that folder is the Model Registry's
    artifactUri (one tf_keras epoch on 64 generated rows)."""
    folder = sample(tmp_path, "serving_layout")
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "--config", str(folder / "job.yaml")],
                          capture_output=True, text=True, timeout=400, cwd=str(folder))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    model = folder / "runs" / "serving-layout" / "model"
    assert f"note: the model is the SavedModel in {model / '1'}, one folder below AIP_MODEL_DIR (version 1, " in out
    assert f"verified {model / '1'}: serving_default(hidden_input) on 2 instances (serving.sample_request)" in out
    request = json.loads((folder / "runs" / "serving-layout" / "model_upload_request.json").read_text())
    assert request["model"]["artifactUri"] == str(model / "1")
    verification = json.loads((folder / "runs" / "serving-layout" / "verification.json").read_text())
    assert verification["model_dir"] == str(model / "1")  # the train step handed that folder on
    assert not (folder / "trainer" / "__pycache__").exists()  # the replica's own folder took its bytecode
