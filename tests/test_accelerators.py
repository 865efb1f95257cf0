"""A cloud replica whose pool asked for GPUs/TPUs that TensorFlow cannot see stops (exit 4, one line);
locally (plain process or jobs.local.launch) the same config runs over CPUs and says so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainers import cluster as cluster_lib
from jobfile import config as config_lib
from trainers.strategy import EXIT_NO_ACCELERATOR, AcceleratorMissing, check_accelerators

ROOT = Path(__file__).resolve().parent.parent


def vertex_env(pool: str = "workerpool0", index: int = 0, pools=("workerpool0",), launcher: bool = False) -> dict:
    spec = {"cluster": {p: [f"10.0.0.{i}:2222"] for i, p in enumerate(pools)}, "environment": "cloud",
            "task": {"type": pool, "index": index}}
    env = {"CLUSTER_SPEC": json.dumps(spec)}
    if launcher:
        env[cluster_lib.LOCAL_LAUNCHER_ENV] = "1"
    return env


def test_exit_code_is_new():
    from trainers.checkpoint import EXIT_PREEMPTED

    assert EXIT_NO_ACCELERATOR not in (0, 2, 3, EXIT_PREEMPTED)


def test_cloud_gpu_pool_without_gpus_stops_with_one_line():
    cfg = config_lib.load("gpu-1x4")
    info = cluster_lib.read_cluster(vertex_env())
    assert info.on_cloud and info.pool == "workerpool0"
    with pytest.raises(AcceleratorMissing) as err:
        check_accelerators(cfg, info, gpus=0)
    text = str(err.value)
    assert "\n" not in text
    for fragment in ("workerpool0 (chief)", "4 x NVIDIA_TESLA_T4", "n1-standard-16", "sees no GPU", "--variant gpu"):
        assert fragment in text, text


def test_worker_pool_is_checked_for_its_own_accelerators():
    cfg = config_lib.load("multiworker")
    info = cluster_lib.read_cluster(vertex_env("workerpool1", 2, pools=("workerpool0", "workerpool1")))
    with pytest.raises(AcceleratorMissing, match=r"workerpool1 \(worker\) asked for 2 x NVIDIA_TESLA_T4"):
        check_accelerators(cfg, info, gpus=0)
    assert check_accelerators(cfg, info, gpus=2) is None
    assert "only 1 GPU" in check_accelerators(cfg, info, gpus=1)


def test_cpu_pools_and_legacy_tpu_are_not_gpu_checked():
    assert check_accelerators(config_lib.load("local"), cluster_lib.read_cluster(vertex_env()), gpus=0) is None
    # cloud-tpu: the TPU is remote (gRPC); a missing one is TPUUnavailable (exit 3) when connecting
    assert check_accelerators(config_lib.load("tpu"), cluster_lib.read_cluster(vertex_env()), gpus=0) is None


def test_tpu_vm_without_libtpu_stops():
    cfg = config_lib.load("tpu", ["topology.chief.machine_type=ct5lp-hightpu-4t", "topology.chief.tpu_topology=2x2",
                                  "topology.chief.accelerator_type=", "topology.chief.accelerator_count=0"])
    info = cluster_lib.read_cluster(vertex_env())
    with pytest.raises(AcceleratorMissing, match=r"TPU VM ct5lp-hightpu-4t \(2x2\).*no TPU runtime"):
        check_accelerators(cfg, info, has_tpu_runtime=False)
    assert check_accelerators(cfg, info, has_tpu_runtime=True) is None


def test_local_launcher_and_plain_process_run_over_cpus_and_say_so():
    cfg = config_lib.load("gpu-1x4")
    under_launcher = cluster_lib.read_cluster(vertex_env(launcher=True))
    assert under_launcher.local_launcher and not under_launcher.on_cloud
    note = check_accelerators(cfg, under_launcher, gpus=0)
    assert "running over CPUs" in note and "local launcher" in note and "4 x NVIDIA_TESLA_T4" in note
    plain = cluster_lib.read_cluster({})
    assert "a local process" in check_accelerators(cfg, plain, gpus=0)


def test_launcher_marks_its_replicas():
    from jobs.rules.replica_env import replica_environment, vertex_environment

    vertex = vertex_environment([1], {"workerpool0": ["127.0.0.1:1"]}, 0, 0, "/tmp/x", "job")
    env = replica_environment({cluster_lib.LOCAL_LAUNCHER_ENV: "0", "HOME": "/root"}, None, vertex)
    assert env[cluster_lib.LOCAL_LAUNCHER_ENV] == "1"
    assert cluster_lib.read_cluster(env).local_launcher


@pytest.mark.integration
def test_task_exits_4_with_one_line_on_a_cloud_machine_without_gpus():
    """The real entry point, as Vertex starts it on a GPU machine whose image has no CUDA-visible GPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", cluster_lib.LOCAL_LAUNCHER_ENV)}
    env.update(vertex_env(), CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "trainers.task", "--config", "gpu-1x4"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == EXIT_NO_ACCELERATOR, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "workerpool0 (chief) asked for 4 x NVIDIA_TESLA_T4" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert "step " not in proc.stdout  # nothing trained
