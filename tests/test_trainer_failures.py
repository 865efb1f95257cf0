"""Issue 41 items 5-13: every failure of a user's own trainer says its own cause, and every hint, followed, works.

Each test writes the user's trainer itself (never the built-in one), makes the mistake, reads what the product
says, does exactly that, and runs again. The trainers that need no TensorFlow are plain Python (fast); the ones
that must really train (Keras under MultiWorkerMirroredStrategy, a Horovod script ported by docs/trainer.md) are
marked ``integration``.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.steps import calls as steps
from jobs.local.launch import hints
from jobs.local.launch.outcome import JobFailed
from tests.conftest import ROOT, assert_no_processes_left
from jobfile import config as config_lib


def run_py(*args, cwd=None, timeout=300, env=None):
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)


def project(tmp_path: Path, task: str, job: str, name: str = "my-project") -> Path:
    """A user's project: ``trainer/task.py`` and ``job.yaml``."""
    folder = tmp_path / name
    (folder / "trainer").mkdir(parents=True)
    (folder / "trainer" / "__init__.py").write_text("")
    (folder / "trainer" / "task.py").write_text(textwrap.dedent(task))
    (folder / "job.yaml").write_text(textwrap.dedent(job))
    return folder


# -- 5: Keras 3 under multi-worker: the hint reads the code ----------------------------------------------------
def test_the_keras_hint_says_what_works_for_the_code_it_sees(tmp_path):
    for name, code in (("k3", "import keras\n"), ("tfk", "from tensorflow import keras\n"),
                       ("attr", "import tensorflow as tf\nm = tf.keras.Sequential()\n"),
                       ("legacy", "import tf_keras as keras\n"), ("none", "import numpy\n")):
        (tmp_path / name / "trainer").mkdir(parents=True)
        (tmp_path / name / "trainer" / "task.py").write_text(code)
    k3 = hints.multi_worker_fit_hint(str(tmp_path / "k3"), {"TF_USE_LEGACY_KERAS": "1"})
    assert "import keras, at trainer/task.py:1" in k3 and "`import tf_keras as keras`" in k3
    assert "TF_USE_LEGACY_KERAS does not change" in k3 and "declare trainer.env" not in k3  # it is declared: no use
    assert "from tensorflow import keras and declare" in hints.multi_worker_fit_hint(str(tmp_path / "k3"), {})
    for name in ("tfk", "attr"):
        tf_keras = hints.multi_worker_fit_hint(str(tmp_path / name), {})
        assert 'declare trainer.env: {TF_USE_LEGACY_KERAS: "1"}' in tf_keras and "your code uses tf.keras" in tf_keras
    unknown = hints.multi_worker_fit_hint(None)
    assert "`import tf_keras as keras`" in unknown and "TF_USE_LEGACY_KERAS=1" in unknown
    line = "ValueError: Attempt to convert a value (PerReplica:{ … }) with an unsupported type"
    assert hints.hint_for([line], str(tmp_path / "k3"), {"TF_USE_LEGACY_KERAS": "1"}) == k3
    assert hints.keras_imports(str(tmp_path / "none")) == {}


def test_the_no_model_hint_is_right_for_keras_3_and_for_tf_keras(tmp_path):
    for name, code in (("k3", "import keras\n"), ("legacy", "import tf_keras as keras\n"), ("tfk", "import tensorflow as tf\nx = tf.keras\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "task.py").write_text(code)
    k3 = hints.no_model_hint(str(tmp_path / "k3"))
    assert "model.export(os.environ['AIP_MODEL_DIR'])" in k3 and "model.save(" not in k3
    legacy = hints.no_model_hint(str(tmp_path / "legacy"))
    assert "model.save(os.environ['AIP_MODEL_DIR'])" in legacy and "model.export" not in legacy
    assert "model.export" in hints.no_model_hint(str(tmp_path / "tfk"), {})  # tf.keras without the variable: Keras 3
    assert "model.save(" in hints.no_model_hint(str(tmp_path / "tfk"), {"TF_USE_LEGACY_KERAS": "1"})
    both = hints.no_model_hint()
    assert "model.export" in both and "model.save" in both


KERAS3_MULTI_WORKER = """\
    import os

    import numpy as np
    import tensorflow as tf
    import keras

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    model.fit(ds.with_options(options), epochs=2, verbose=2)
    chief = strategy.cluster_resolver.task_type in (None, "chief")
    model.save(os.environ["AIP_MODEL_DIR"] if chief else os.path.join(os.environ["AIP_MODEL_DIR"], "..", "tmp"))
    """
MULTI_WORKER_JOB = """\
    name: keras-three
    trainer: {module: trainer.task, env: {TF_USE_LEGACY_KERAS: "1"}}
    topology:
      strategy: multi_worker
      chief: {replica_count: 1, machine_type: n1-standard-4}
      worker: {replica_count: 1, machine_type: n1-standard-4}
    scheduling: {max_restarts: 0}
    """


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_keras_3_import_under_multi_worker_gets_the_hint_that_works_and_following_it_trains(tmp_path):
    """``import keras`` with TF_USE_LEGACY_KERAS declared (what the old hint said) fails the same way; the hint now
    says to import tf_keras there; done exactly, the job trains."""
    folder = project(tmp_path, KERAS3_MULTI_WORKER, MULTI_WORKER_JOB)
    cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'first'}"])
    try:
        with pytest.raises(JobFailed) as failed:
            steps.run_local(cfg, log=lambda line: None, timeout_s=300)
        cause = failed.value.result.failure.cause()
        assert cause[-1].startswith("hint: this is Keras 3's Model.fit under a multi-worker strategy"), cause
        assert "import keras, at trainer/task.py:5" in cause[-1] and "`import tf_keras as keras`" in cause[-1]
        task = folder / "trainer" / "task.py"
        task.write_text(task.read_text().replace("import keras\n", "import tf_keras as keras\n"))  # as told
        cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'second'}"])
        result = steps.run_local(cfg, log=lambda line: None, timeout_s=300)
        assert result.returncode == 0 and (tmp_path / "second" / "model" / "saved_model.pb").exists()
    finally:
        assert_no_processes_left(str(tmp_path))


# -- 6: a trainer that writes no model -------------------------------------------------------------------------
NO_MODEL = """\
    import keras  # a Keras 3 trainer that forgot to save
    print("epoch 1/1 loss 0.5", flush=True)
    """
ONE_MACHINE_JOB = """\
    name: no-model
    trainer: {module: trainer.task}
    topology:
      strategy: one_device
      chief: {replica_count: 1, machine_type: n1-standard-4}
    """


@pytest.mark.timeout(300)
@pytest.mark.integration
def test_a_chief_that_ends_without_a_model_fails_the_train_step_itself(tmp_path):
    folder = project(tmp_path, NO_MODEL, ONE_MACHINE_JOB)
    proc = run_py("--config", str(folder / "job.yaml"), cwd=str(folder))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "✗ train" in proc.stdout and "verify-model" not in proc.stdout, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the pipeline failed at step train: training failed: the chief ended (exit 0) "
                           "without writing a model"), last
    assert "your code uses Keras 3: model.export(os.environ['AIP_MODEL_DIR'])" in last and "model.save(" not in last


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_no_model_hint_followed_trains_a_model(tmp_path):
    task = """\
        import os

        import numpy as np
        import keras

        model = keras.Sequential([keras.Input((3,), name="features"), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = np.random.RandomState(1).rand(32, 3).astype("float32")
        model.fit(x, x.sum(axis=1), epochs=1, verbose=2)
        """
    folder = project(tmp_path, task, ONE_MACHINE_JOB)
    cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'a'}"])
    with pytest.raises(steps.NoModel, match=r"your code uses Keras 3: model\.export\(os\.environ\['AIP_MODEL_DIR'\]\)"):
        steps.train_local(cfg, log=lambda line: None)
    path = folder / "trainer" / "task.py"
    path.write_text(path.read_text() + "model.export(os.environ['AIP_MODEL_DIR'])\n")  # as the hint says
    cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'b'}"])
    record = steps.train_local(cfg, log=lambda line: None)
    assert (Path(record["dirs"]["model"]) / "saved_model.pb").exists()


# -- 7 and 10: a study's failed trial, and a resumed study -----------------------------------------------------
STUDY_TASK = """\
    import argparse, json, os, sys, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--learning-rate", type=float, default=0.01)
    args = parser.parse_args()
    if "CLOUD_ML_TRIAL_ID" not in os.environ:  # the baseline: slow, and chatty as TensorFlow's start-up is
        for i in range(20):
            print(f"baseline-only line {i}: Could not find cuda drivers on your machine", flush=True)
            time.sleep(0.2)
    if os.environ.get("CLOUD_ML_TRIAL_ID") == "1" and os.path.exists(os.environ.get("FAIL_ONCE", "/nonexistent")):
        os.remove(os.environ["FAIL_ONCE"])
        sys.exit(3)
    path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps({"loss": str(abs(args.learning_rate - 0.03)), "global_step": "1"}) + "\\n")
    with open(os.path.join(os.environ["AIP_MODEL_DIR"], "saved_model.pb"), "wb") as f:  # a model, as a trial needs
        f.write(b"\\x08\\x01")
    """
STUDY_JOB = """\
    name: my-study
    trainer: {module: trainer.task}
    output: {base_dir: runs/my-study}
    topology:
      strategy: one_device
      chief: {replica_count: 1, machine_type: n1-standard-4}
    tuning:
      metric: loss
      goal: minimize
      parameters:
        learning_rate: {type: double, min: 0.01, max: 0.1}
      algorithm: random
      max_trials: 3
      parallel_trials: 1
      max_failed_trials: 3
    """


@pytest.mark.timeout(300)
def test_a_refused_tuning_flag_stops_the_study_naming_the_flag_with_the_trials_own_lines(tmp_path):
    folder = project(tmp_path, STUDY_TASK, STUDY_JOB)
    proc = run_py("--config", str(folder / "job.yaml"), cwd=str(folder))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    shown = proc.stdout.split("its last lines:")[-1]
    assert "unrecognized arguments: --learning_rate=" in shown and "baseline-only line" not in shown, shown
    errors = proc.stderr.strip().splitlines()
    assert errors[-2].startswith("error: the pipeline failed at step tune: tuning.parameters.learning_rate: the trainer "
                                 "refuses --learning_rate"), errors
    assert "it accepts --learning-rate" in errors[-2] and errors[-2].endswith("valid choices: learning-rate")
    assert errors[-1] == "  chief-0's error: task.py: error: unrecognized arguments: " + \
        errors[-2].split("unrecognized arguments: ")[1].split('"')[0]
    record = json.loads((folder / "runs" / "my-study" / "tuning.json").read_text())
    assert len(record["trials"]) == 1, "the study stopped at the first trial: every trial passes the same flag"
    assert record["trials"][0]["error"].startswith("chief-0 (workerpool0-0, attempt 1) exited with status 2: task.py: "
                                                   "error: unrecognized arguments: --learning_rate=")
    assert "own_failure" not in json.dumps(record)
    # followed: the parameter named as the trainer's flag
    job = folder / "job.yaml"
    job.write_text(job.read_text().replace("    learning_rate:", "    learning-rate:"))
    cfg = config_lib.load(str(job), [f"output.base_dir={tmp_path / 'renamed'}", "tuning.baseline=false"])
    from jobs.tuning.local import run_local_study

    done = run_local_study(cfg, log=lambda line: None)
    assert [t["state"] for t in done["trials"]] == ["SUCCEEDED"] * 3


def test_an_argparse_error_names_the_tuning_flag():
    assert hints.argparse_flag("task.py: error: unrecognized arguments: --learning_rate=0.04 --x", ["--learning_rate"]) \
        == "--learning_rate"
    assert hints.argparse_flag("task.py: error: argument --units: invalid int value: '3.5'", ["--units"]) == "--units"
    assert hints.argparse_flag("task.py: error: unrecognized arguments: --other=1", ["--learning_rate"]) is None
    assert hints.argparse_flag("ValueError: bad", ["--learning_rate"]) is None
    assert hints.accepted_spelling(["usage: task.py [-h] [--learning-rate LR]"], "--learning_rate") == "--learning-rate"


@pytest.mark.process
def test_a_resumed_random_study_continues_its_sequence_and_never_repeats_a_trial(tmp_path):
    from jobs.tuning.local import run_local_study
    from jobs.tuning.search import Search
    from jobs.rules.tuning_section import parse

    task = STUDY_TASK.replace('"--learning-rate"', '"--learning_rate"')
    folder = project(tmp_path, task, STUDY_JOB.replace("max_failed_trials: 3", "max_failed_trials: 0"))
    marker = tmp_path / "fail-once"
    marker.write_text("")  # a replica sees trainer.env only: the marker's path is declared there
    overrides = [f"trainer.env={{FAIL_ONCE: '{marker}'}}", "tuning.baseline=false", "tuning.max_trials=4"]
    cfg = config_lib.load(str(folder / "job.yaml"), overrides)
    from jobs.tuning.local import StudyFailed

    with pytest.raises(StudyFailed):  # trial 1 fails once: max_failed_trials 0 stops the study
        run_local_study(cfg, log=lambda line: None)
    done = run_local_study(cfg, log=lambda line: None)  # resumed: trial 1 again with its values, then new ones
    values = [t["parameters"]["learning_rate"] for t in done["trials"]]
    assert len(values) == 4 and len(set(values)) == 4, values
    search = Search(parse(cfg.tuning), cfg.training.seed)  # the same study uninterrupted proposes the same four
    assert [search.ask()[1]["learning_rate"] for _ in range(4)] == values
    # and a bayesian study (TPE's random start-up) the same
    tpe = config_lib.load(str(folder / "job.yaml"), [*overrides, "tuning.algorithm=bayesian"])
    full = Search(parse(tpe.tuning), tpe.training.seed)
    first = [full.ask()[1] for _ in range(3)]
    resumed = Search(parse(tpe.tuning), tpe.training.seed)
    resumed.replay([{"id": "1", "parameters": first[0], "state": "FAILED"}], set())
    assert [resumed.ask()[1] for _ in range(2)] == first[1:]


# -- 8: mixed GPUs -----------------------------------------------------------------------------------------------
def test_mixed_gpu_machines_get_one_line_naming_the_way_out_and_both_ways_pass(tmp_path):
    job = tmp_path / "gpus.yaml"
    job.write_text(textwrap.dedent("""\
        name: mixed
        topology:
          strategy: multi_worker
          chief: {replica_count: 1, machine_type: a3-ultragpu-8g, accelerator_type: NVIDIA_H200_141GB, accelerator_count: 8}
          worker: {replica_count: 1, machine_type: a3-highgpu-8g, accelerator_type: NVIDIA_H100_80GB, accelerator_count: 8}
        """))
    proc = run_py("validate", str(job))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: topology.worker.machine_type: every machine of a multi-worker job needs the "
                                "same GPUs (the strategy splits"), errors
    assert "use one machine type in every multi-worker pool" in errors[0]
    for way in (["--set", "topology.worker.machine_type=a3-ultragpu-8g",
                 "--set", "topology.worker.accelerator_type=NVIDIA_H200_141GB"],
                ["--set", "topology.chief.machine_type=a3-highgpu-8g",
                 "--set", "topology.chief.accelerator_type=NVIDIA_H100_80GB"]):
        followed = run_py("validate", str(job), *way)
        assert followed.returncode == 0 and "error:" not in followed.stderr, followed.stderr


# -- 9: relative paths, one rule ---------------------------------------------------------------------------------
def test_a_set_path_is_relative_to_the_current_folder_and_the_message_says_so(tmp_path):
    folder = project(tmp_path, "if __name__ == '__main__':\n    pass\n", "name: paths\ntrainer: {module: trainer.task}\n"
                     "topology: {strategy: one_device}\n")
    (folder / "eval.jsonl").write_text('{"instance": [1.0], "label": 1.0}\n')
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "pipeline_steps.py").write_text("if __name__ == '__main__':\n    pass\n")
    proc = run_py("validate", str(folder / "job.yaml"), "--set", "serving.eval_data=eval.jsonl", cwd=str(tmp_path))
    [error] = proc.stderr.strip().splitlines()
    assert error == (f"error: serving.eval_data: {tmp_path / 'eval.jsonl'} does not exist (a --set value is relative to "
                     f"the current folder, a job file's to the file's folder); valid choices: {folder / 'eval.jsonl'}")
    followed = run_py("validate", str(folder / "job.yaml"), "--set", f"serving.eval_data={folder / 'eval.jsonl'}",
                      cwd=str(tmp_path))
    assert followed.returncode == 0, followed.stderr
    proc = run_py("validate", str(folder / "job.yaml"), "--set", "trainer.source_dir=.", cwd=str(tmp_path))
    [error] = proc.stderr.strip().splitlines()
    assert "benchmarks" not in error and f"trainer/task.py is in {folder}: set trainer.source_dir to that folder" in error
    followed = run_py("validate", str(folder / "job.yaml"), "--set", f"trainer.source_dir={folder.name}",
                      cwd=str(tmp_path))
    assert followed.returncode == 0, followed.stderr


# -- 11: history and report ----------------------------------------------------------------------------------------
def _finished_run(root: Path, name: str, job: str, epochs: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    summary = {"name": job, "elapsed_s": 12.0, "steps": [],
               "code_version": {"text": "git 3921eb308b5c", "git_commit": "3921eb308b5c" + "0" * 28},
               "trainer_version": {"content_sha256": "0a4a166fa39f" + "1" * 52, "files": 3,
                                   "text": "sha256 0a4a166fa39f of its 3 file(s) in /p (not in a git repository)"}}
    (folder / "run.json").write_text(json.dumps({
        "status": "succeeded", "finished": "2026-11-27T13:25:32+00:00",
        "config": {"name": job, "trainer": {"args": ["--epochs", epochs, "--data", "/a/long/path/" * 12]}},
        "summary": summary, "steps": [{"name": "train", "seconds": 3.5, "status": "SUCCESS"}]}))
    return folder


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("columns", [80, 120])
def test_runs_compare_keeps_its_row_labels_in_a_narrow_terminal_and_names_the_trainers_code(tmp_path, columns,
                                                                                           monkeypatch):
    from jobs.local.history.reader import read_run
    from jobs.local.history.views import show_compare

    a = read_run(str(_finished_run(tmp_path, "my-regression-a", "my-regression-experiment", "3")))
    b = read_run(str(_finished_run(tmp_path, "my-regression-b", "my-regression-experiment", "2")))
    monkeypatch.setenv("COLUMNS", str(columns))
    out = _Terminal()
    show_compare(a, b, as_json=False, out=out)
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()  # a terminal's bold header
    table = [line for line in lines[2:] if not line.startswith(("shared metrics:", "config:"))]  # prose wraps
    assert max(len(line) for line in table) <= columns, out.getvalue()
    for label in ("job", "status", "code version", "tool version", "step train (s)", "trainer.args"):
        assert any(line.startswith(label + " ") for line in lines), (label, out.getvalue())
    code = next(line for line in lines if line.startswith("code version "))
    assert code.split()[2:] == ["sha256", "0a4a166fa39f", "sha256", "0a4a166fa39f"], code
    assert next(line for line in lines if line.startswith("tool version ")).split()[2:4] == ["git", "3921eb308b5c"]


def test_runs_list_keeps_the_job_name_whole_and_a_closed_pipe_ends_quietly(tmp_path):
    from jobs.local.history.reader import read_run
    from jobs.local.history.views import show_list

    run = read_run(str(_finished_run(tmp_path / "runs", "my-regression-a", "my-regression-experiment", "3")))
    run.metrics.update({"validation/epoch_loss": 0.123456, "validation/epoch_mean_absolute_error": 0.5})
    out = io.StringIO()
    show_list([run], str(tmp_path / "runs"), as_json=False, out=out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("my-regression-a "))
    assert " my-regression-experiment " in row and "val loss 0.1235" in row and len(row) <= 120, row
    proc = subprocess.Popen([sys.executable, str(ROOT / "pipelines" / "run.py"), "runs", "compare", "my-regression-a",
                             "my-regression-a"], cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # `| head` that has read what it wanted
    err = proc.stderr.read().decode()
    # every command's rule for a closed pipe (jobs.rules.command_line.survives_closed_pipe): 141 quietly, as `cat` ends
    assert proc.wait(timeout=60) == 141 and "Traceback" not in err and "BrokenPipeError" not in err, err


def test_the_report_step_table_is_completed_when_the_pipeline_ends(tmp_path):
    from jobs.local.run import step_table

    page = tmp_path / "report.html"
    page.write_text("<html>" + step_table.section({"steps": [{"name": "train", "seconds": 3.0, "status": "SUCCESS"}],
                                                   "running": ["report"]}) + "<p>after</p></html>")
    assert "running (this page is written by it)" in page.read_text()
    assert step_table.complete(str(page), [{"name": "train", "seconds": 3.0, "status": "SUCCESS"},
                                           {"name": "report", "seconds": 1.5, "status": "SUCCESS"},
                                           {"name": "upload-model", "seconds": 0.5, "status": "SUCCESS"}])
    text = page.read_text()
    assert "running" not in text and "<tr><td>upload-model</td><td>0.5</td><td>success</td></tr>" in text
    assert "<tr><td>report</td><td>1.5</td>" in text and text.endswith("<p>after</p></html>")
    assert not step_table.complete(str(tmp_path / "none.html"), [])


def test_the_summary_says_what_a_run_without_scalars_shows_and_how_to_get_curves():
    from jobs.local.run.summary import summary_lines

    lines = summary_lines({"name": "x", "trainer": {"trainer": "trainer.task", "replica_counts": [1, 1], "attempts": 1,
                                                    "seconds": 40, "scalars": {}}})
    training = next(line for line in lines if line.startswith("  training "))
    assert "final no TensorBoard scalars" not in training
    assert "no figures: the trainer wrote no TensorBoard scalars to AIP_TENSORBOARD_LOG_DIR" in training
    assert "keras.callbacks.TensorBoard(log_dir=os.environ['AIP_TENSORBOARD_LOG_DIR'])" in training


# -- 12: a study under --runner docker -----------------------------------------------------------------------------
def test_a_study_under_the_docker_runner_is_refused_before_the_engine_is_reached(tmp_path):
    folder = project(tmp_path, STUDY_TASK, STUDY_JOB)
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = run_py("--config", str(folder / "job.yaml"), "--runner", "docker", cwd=str(folder), env=env, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [error] = proc.stderr.strip().splitlines()
    assert error.startswith("error: tuning: a study runs its trials under the process runner") and \
        error.endswith("valid choices: --runner process"), error
    assert "Docker engine" not in proc.stdout + proc.stderr and not (folder / "runs").exists()


# -- 13: Horovod ----------------------------------------------------------------------------------------------------
def test_horovod_is_refused_with_its_reason_pointing_at_multi_worker(tmp_path):
    job = tmp_path / "hvd.yaml"
    job.write_text("name: hvd\ntopology: {strategy: horovod}\n")
    proc = run_py("validate", str(job))
    [error] = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and error.startswith("error: topology.strategy: 'horovod' is not supported: Horovod's "
                                                     "last release, 0.28.1 (2023), does not build for today's TensorFlow")
    assert "docs/trainer.md" in error and error.endswith("valid choices: multi_worker")


def ported_script() -> str:
    doc = (ROOT / "docs" / "trainer.md").read_text()
    return doc.split("<!-- horovod-ported -->\n```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_horovod_script_ported_by_the_guide_trains_with_two_workers(tmp_path):
    """docs/trainer.md's ported script, as it stands in the guide, under the local launcher: chief + 1 worker;
    the loss falls, both replicas end with the same weights (the all-reduce), the chief exports the model."""
    folder = project(tmp_path, ported_script(), """\
        name: ported
        trainer: {module: trainer.task, args: ["--epochs", "3"]}
        topology:
          strategy: multi_worker
          chief: {replica_count: 1, machine_type: n1-standard-4}
          worker: {replica_count: 1, machine_type: n1-standard-4}
        scheduling: {max_restarts: 0}
        """)
    cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'run'}"])
    lines: list[str] = []
    try:
        result = steps.run_local(cfg, log=lines.append, timeout_s=300)
    finally:
        assert_no_processes_left(str(tmp_path))
    assert result.returncode == 0, result.message
    losses = [float(line.split()[-1]) for line in lines if line.startswith("[chief-0] epoch ")]
    assert len(losses) == 3 and losses[-1] < losses[0], losses
    weights = {line.split("]", 1)[0]: line.split("weights ", 1)[1] for line in lines if " weights " in line}
    assert set(weights) == {"[chief-0", "[worker-0"} and len(set(weights.values())) == 1, weights
    assert (tmp_path / "run" / "model" / "saved_model.pb").exists()
