"""Environment parsing: every CLUSTER_SPEC / TF_CONFIG shape Vertex (and the launcher) produce."""
import json

import pytest

from trainers.cluster import output_dirs, read_cluster, replica_dir
from jobfile.errors import ConfigError

A, B, C = "10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2222"


def spec(pools, task_type, index=0):
    return {"CLUSTER_SPEC": json.dumps({"cluster": pools, "environment": "cloud",
                                        "task": {"type": task_type, "index": index}})}


def test_no_environment_is_a_single_local_chief():
    info = read_cluster({})
    assert (info.task_type, info.task_index, info.is_chief, info.num_workers) == ("chief", 0, True, 0)
    assert info.tf_config is None and info.source == "none"


def test_single_replica_cluster_spec_is_not_multi_worker():
    info = read_cluster(spec({"workerpool0": [A]}, "workerpool0"))
    assert info.is_chief and info.num_workers == 1 and info.tf_config is None


@pytest.mark.parametrize("pool,index,role,chief", [
    ("workerpool0", 0, "chief", True), ("workerpool1", 0, "worker", False), ("workerpool1", 1, "worker", False),
])
def test_cluster_spec_chief_and_workers(pool, index, role, chief):
    info = read_cluster(spec({"workerpool0": [A], "workerpool1": [B, C]}, pool, index))
    assert (info.task_type, info.task_index, info.is_chief) == (role, index, chief)
    assert info.num_workers == 3
    tf_config = json.loads(info.tf_config)
    assert tf_config["cluster"] == {"chief": [A], "worker": [B, C]}
    assert tf_config["task"] == {"type": role, "index": index}


def test_cluster_spec_parameter_servers_and_evaluator():
    env = spec({"workerpool0": [A], "workerpool1": [B], "workerpool2": ["ps:1"], "workerpool3": ["ev:1"]},
               "workerpool3")
    info = read_cluster(env)
    assert info.task_type == "evaluator" and not info.is_chief
    assert "evaluator" not in info.cluster  # TF requires the evaluator outside the cluster
    assert info.cluster["ps"] == ("ps:1",)


def test_tf_config_wins_over_cluster_spec_and_master_means_chief():
    env = {"TF_CONFIG": json.dumps({"cluster": {"master": [A], "worker": [B]}, "task": {"type": "master", "index": 0}}),
           **spec({"workerpool0": [C]}, "workerpool0")}
    info = read_cluster(env)
    assert info.source == "TF_CONFIG" and info.task_type == "chief" and info.cluster["chief"] == (A,)


def test_tf_config_without_chief_makes_worker_zero_the_chief():
    tf = {"cluster": {"worker": [A, B]}, "task": {"type": "worker", "index": 0}}
    assert read_cluster({"TF_CONFIG": json.dumps(tf)}).is_chief
    tf["task"]["index"] = 1
    assert not read_cluster({"TF_CONFIG": json.dumps(tf)}).is_chief


def test_aip_dirs_and_fallback_layout(tmp_path):
    env = {**spec({"workerpool0": [A]}, "workerpool0"), "AIP_MODEL_DIR": "gs://b/out/model/",
           "AIP_CHECKPOINT_DIR": "gs://b/out/checkpoints/", "AIP_TENSORBOARD_LOG_DIR": "gs://b/out/logs/"}
    assert output_dirs(read_cluster(env), "ignored") == {
        "model": "gs://b/out/model", "checkpoints": "gs://b/out/checkpoints", "logs": "gs://b/out/logs"}
    assert output_dirs(read_cluster({}), str(tmp_path)) == {
        "model": str(tmp_path / "model"), "checkpoints": str(tmp_path / "checkpoints"), "logs": str(tmp_path / "logs")}


def test_non_chief_replicas_write_to_a_throwaway_dir():
    chief = read_cluster(spec({"workerpool0": [A], "workerpool1": [B]}, "workerpool0"))
    worker = read_cluster(spec({"workerpool0": [A], "workerpool1": [B]}, "workerpool1"))
    assert replica_dir(chief, "/x/ckpt") == "/x/ckpt"
    assert replica_dir(worker, "/x/ckpt") == "/x/ckpt/workertemp_worker_0"
    assert replica_dir(worker, "gs://b/ckpt/") == "gs://b/ckpt/workertemp_worker_0"


def test_tpu_config_is_read():
    info = read_cluster({"TPU_CONFIG": json.dumps({"tpu_node_name": "n", "zone": "us-central1-b", "project": "p"})})
    assert info.tpu_config["tpu_node_name"] == "n"


@pytest.mark.parametrize("name", ["CLUSTER_SPEC", "TF_CONFIG", "TPU_CONFIG"])
def test_broken_json_is_a_clear_error(name):
    with pytest.raises(ConfigError, match=f"{name}: environment variable is not valid JSON"):
        read_cluster({name: "{oops"})


def test_unknown_pool_is_named():
    with pytest.raises(ConfigError, match="CLUSTER_SPEC.task.type: unknown worker pool 'workerpool9'"):
        read_cluster(spec({"workerpool0": [A]}, "workerpool9"))


def test_launcher_environment_round_trips_through_the_reader(tmp_path):
    """What the local launcher gives a replica is what the trainer reads (the same contract as Vertex)."""
    from jobs.rules.replica_env import vertex_environment

    addresses = {"workerpool0": ["127.0.0.1:1"], "workerpool1": ["127.0.0.1:2", "127.0.0.1:3"]}
    env = vertex_environment([1, 2, 0, 0], addresses, 1, 1, str(tmp_path), "job")
    info = read_cluster(env)
    assert (info.task_type, info.task_index, info.num_workers, info.is_chief) == ("worker", 1, 3, False)
    assert output_dirs(info, "unused")["checkpoints"] == str(tmp_path / "checkpoints")


@pytest.mark.parametrize("pool,strategy,role", [
    ("workerpool0", "parameter_server", "train"), ("workerpool1", "parameter_server", "serve"),
    ("workerpool2", "parameter_server", "serve"), ("workerpool3", "parameter_server", "evaluate"),
    ("workerpool0", "multi_worker", "train"), ("workerpool1", "multi_worker", "train"),
    ("workerpool2", "multi_worker", "idle"), ("workerpool3", "multi_worker", "evaluate"),
    ("workerpool3", "one_device", "evaluate"),
])
def test_replica_role(pool, strategy, role):
    from trainers.cluster import replica_role

    pools = {"workerpool0": [A], "workerpool1": [B], "workerpool2": [C], "workerpool3": ["10.0.0.4:2222"]}
    info = read_cluster(spec(pools, pool))
    assert replica_role(info, strategy) == role
    assert "evaluator" not in info.cluster  # TensorFlow's cluster never lists the evaluator
