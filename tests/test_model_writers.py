"""One model writer (issue 51 item 2): a local job whose replicas never joined their cluster, or in which more than
one replica wrote the model folder, ends with one line naming the replicas and the rule before the model is used;
the MultiWorkerMirroredStrategy collision (``MergeV2Checkpoints ... variables_temp``) gets its hint; and
``trainers.outputs.model_dir()`` (the rule in one call), followed, trains and saves under the strategy.

The watch's parts are tested without TensorFlow (a socket for a joined replica, renames for SavedModel writes); the
trainers that must really train are marked ``integration`` and are the smallest jobs that show it (a Dense layer,
one epoch, a chief and one worker)."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.local.launch import hints
from jobs.local.launch.model_watch import ModelWatch, listening_ports
from jobs.local.launch.outcome import JobFailed
from jobs.steps import calls as steps
from tests.conftest import ROOT, assert_no_processes_left
from jobfile import config as config_lib
from trainers import outputs


# -- the helper: the right folder for every replica -------------------------------------------------------------
def _env(task_type: str, index: int, chief: bool = True) -> dict[str, str]:
    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]} if chief else {"worker": ["a:1", "b:2"]}
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}}),
            "AIP_MODEL_DIR": "/runs/x/model/"}


def test_model_dir_is_aip_model_dir_on_the_chief_and_a_throwaway_folder_elsewhere():
    assert outputs.model_dir(_env("chief", 0)) == "/runs/x/model/"
    assert outputs.model_dir(_env("worker", 0, chief=False)) == "/runs/x/model/"  # worker 0 of a chief-less cluster
    assert outputs.model_dir({}) == "model"  # python -m trainer.task alone
    assert outputs.is_chief({}) and not outputs.is_chief(_env("worker", 0))
    other = outputs.model_dir(_env("worker", 0))
    assert os.path.isdir(other) and not other.startswith("/runs/") and "worker-0-model-" in other
    assert outputs.model_dir(_env("worker", 0)) != other  # every call a folder of its own


# -- the watch -------------------------------------------------------------------------------------------------
def _write_saved_model(folder: Path, n: int) -> None:
    tmp = folder / f"saved_model.pb.tmp{n}"
    tmp.write_bytes(b"x" * n)
    os.replace(tmp, folder / "saved_model.pb")  # as TensorFlow writes it: a temporary name renamed into place


def test_replicas_that_never_joined_and_both_wrote_are_said_in_one_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    watch = ModelWatch(f"{model}/", {"chief-0": 1, "worker-0": 2})  # ports nothing listens on
    _write_saved_model(model, 1)
    _write_saved_model(model, 2)  # milliseconds apart: still two writes
    watch.sample()
    watch.close()
    (line,) = watch.findings()
    assert line.startswith(f"chief-0 and worker-0 never joined the cluster they were given (no replica opened its "
                           f"TF_CONFIG address): each ran your trainer on its own, 2 separate runs; {model}/ was "
                           "written 2 times, by chief-0 and worker-0: the model there is whichever came last")
    assert hints.SAVE_RULE in line and line.endswith(
        "to train on one machine: --fresh --set topology.strategy=one_device --set topology.worker.replica_count=0")


def test_a_joined_cluster_whose_replicas_each_exported_is_said_by_name(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]  # what a joined replica opens
    try:
        ports = {"chief-0": servers[0].getsockname()[1], "worker-0": servers[1].getsockname()[1]}
        assert set(ports.values()) <= listening_ports()
        watch = ModelWatch(str(model), ports)
        watch.sample()
        for name in ports:  # Keras 3's export says where it wrote
            watch.line(name, f"Saved artifact at '{model}/'. The following endpoints are available:")
        watch.line("chief-0", "Saved artifact at '/elsewhere'.")
        watch.close()
        assert watch.findings() == [f"chief-0 and worker-0 each wrote the model folder {model}/: the model there is "
                                    f"whichever came last; {hints.SAVE_RULE}"]
        # the rule kept: the chief alone wrote the folder, every replica joined: nothing to say
        quiet = ModelWatch(str(model), ports)
        quiet.sample()
        quiet.line("chief-0", f"Saved artifact at '{model}'.")
        _write_saved_model(model, 3)
        quiet.close()
        assert quiet.writes == 1 and quiet.findings() == []
        # no replica said where it saved (tf_keras logs it only at INFO), the kernel saw two completions
        counted = ModelWatch(str(model), ports)
        counted.sample()
        _write_saved_model(model, 3)
        _write_saved_model(model, 4)
        counted.close()
        assert counted.findings() == [f"{model}/ was written 2 times while chief-0 and worker-0 trained together: the "
                                      f"model there is whichever came last; {hints.SAVE_RULE}"]
    finally:
        for s in servers:
            s.close()
    assert ModelWatch(str(model), {"chief-0": 1}).findings() == []  # one training replica: nothing to compare


def test_the_merge_checkpoints_collision_gets_the_save_rule_in_the_trainers_keras(tmp_path):
    (tmp_path / "trainer.py").write_text("import tensorflow as tf\nm = tf.keras.Sequential()\n")
    line = ("tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node __wrapped__MergeV2Checkpoints"
            "_device_/job:chief/replica:0/task:0/device:CPU:0}} allow_missing_files was set to false and /r/model/"
            "variables/variables_temp/part-00000-of-00001 did not exist.NOT_FOUND")
    hint = hints.hint_for([line], str(tmp_path), {"TF_USE_LEGACY_KERAS": "1"})
    assert hint.startswith("more than one replica saved into the same folder at once")
    assert hints.SAVE_RULE in hint and hint.endswith("from trainers.outputs import model_dir, then "
                                                     "model.save(model_dir())")
    assert hint_for_keras3(tmp_path).endswith("model.export(model_dir())")
    # the hints that lead to a save say the rule too
    assert hints.SAVE_RULE in hints.multi_worker_fit_hint(str(tmp_path), {})
    assert hints.SAVE_RULE in hints.no_model_hint(str(tmp_path), {})


def hint_for_keras3(folder: Path) -> str:
    (folder / "trainer.py").write_text("import keras\n")
    return hints.hint_for(["NotFoundError: MergeV2Checkpoints /m/variables/variables_temp/part-00000"], str(folder), {})


# -- as a user meets it ----------------------------------------------------------------------------------------
NO_STRATEGY = """\
    import os
    import numpy as np
    import tensorflow as tf

    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    inp = tf.keras.Input((4,), name="features")
    model = tf.keras.Model(inp, tf.keras.layers.Dense(1)(inp))
    model.compile("sgd", "mse")
    model.fit(x, x.sum(1), epochs=1, verbose=2)
    print("exporting to", os.environ["AIP_MODEL_DIR"], flush=True)
    model.export(os.environ["AIP_MODEL_DIR"])
    """
MWMS = """\
    import os
    import numpy as np
    import tensorflow as tf
    {import_line}

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
        model.compile("sgd", "mse")
    ds = tf.data.Dataset.from_tensor_slices((x, x.sum(1))).batch(16)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    model.fit(ds.with_options(options), epochs=1, verbose=2)
    model.save({target})
    """
TWO_REPLICAS = """\
    name: two
    trainer: {module: trainer.task, env: {TF_USE_LEGACY_KERAS: "1"}}
    topology:
      strategy: multi_worker
      chief: {replica_count: 1, machine_type: n1-standard-4}
      worker: {replica_count: 1, machine_type: n1-standard-4}
    scheduling: {max_restarts: 0}
    output: {base_dir: runs/two}
    """


def _project(tmp_path: Path, task: str, job: str = TWO_REPLICAS) -> Path:
    (tmp_path / "trainer").mkdir(parents=True, exist_ok=True)
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text(textwrap.dedent(task))
    (tmp_path / "job.yaml").write_text(textwrap.dedent(job))
    return tmp_path


def run_py(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], capture_output=True, text=True,
                          timeout=400, cwd=cwd)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_trainer_without_a_strategy_on_two_replicas_is_said_and_the_one_machine_remedy_works(tmp_path):
    folder = _project(tmp_path, NO_STRATEGY, TWO_REPLICAS.replace('env: {TF_USE_LEGACY_KERAS: "1"}', "args: []"))
    try:
        proc = run_py("--config", "job.yaml", cwd=folder)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        said = [x.strip() for x in proc.stdout.splitlines() if "never joined" in x]
        assert len(said) == 1 and said[0].startswith(
            "warning: chief-0 and worker-0 never joined the cluster they were given"), proc.stdout
        assert f"{folder}/runs/two/model/ was written 2 times, by chief-0 and worker-0" in said[0]
        # before the model is used: the line comes in the train step, before verify starts
        assert proc.stdout.index("never joined") < proc.stdout.index("▸ verify-model")
        remedy = said[0].split("to train on one machine: ")[1].split()
        proc = run_py("--config", "job.yaml", *remedy, cwd=folder)  # exactly as said
        assert proc.returncode == 0 and "never joined" not in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
        record = json.loads((folder / "runs" / "two" / "training.json").read_text())
        assert record["replica_counts"][:2] == [1, 0] and record["warnings"] == []
    finally:
        assert_no_processes_left(str(tmp_path))


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_both_replicas_saving_under_the_strategy_get_the_hint_and_the_rule_followed_trains(tmp_path):
    task = MWMS.format(import_line="", target='os.environ["AIP_MODEL_DIR"]')
    folder = _project(tmp_path, task)
    try:
        cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'first'}"])
        # Whether the two saves collide is timing (seen both ways here: a busy machine spaced them apart): colliding,
        # the job fails with TensorFlow's error and the hint; not colliding, it succeeds and both writers are said.
        try:
            result = steps.run_local(cfg, log=lambda line: None, timeout_s=300)
        except JobFailed as failed:
            cause = failed.result.failure.cause()
            assert "MergeV2Checkpoints" in cause[0] and cause[-1].startswith(
                "hint: more than one replica saved into the same folder at once"), cause
            assert cause[-1].endswith("from trainers.outputs import model_dir, then model.save(model_dir())")
        else:
            # by name where the replicas' output said where they saved (Keras 3), else by the kernel's count
            model = re.escape(f"{tmp_path / 'first' / 'model'}/")
            (note,) = result.notes
            assert re.fullmatch(rf"(chief-0 and worker-0 each wrote the model folder {model}|{model} was written "
                                rf"[2-9] times while chief-0 and worker-0 trained together): the model there is "
                                rf"whichever came last; {re.escape(hints.SAVE_RULE)}", note), note
        # as the hint says
        task = MWMS.format(import_line="from trainers.outputs import model_dir", target="model_dir()")
        (folder / "trainer" / "task.py").write_text(textwrap.dedent(task))
        cfg = config_lib.load(str(folder / "job.yaml"), [f"output.base_dir={tmp_path / 'second'}"])
        logged: list[str] = []
        record = steps.train_local(cfg, log=logged.append)
        assert (tmp_path / "second" / "model" / "saved_model.pb").exists()
        assert record["warnings"] == [] and not [x for x in logged if x.startswith("warning:")], logged
    finally:
        assert_no_processes_left(str(tmp_path))
