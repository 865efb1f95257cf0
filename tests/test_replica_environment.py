"""What a replica sees: Vertex's variables, the job's ``trainer.env``, a short documented base, and nothing else
of the caller's shell (``jobs.rules.replica_env``), under the process runner and the docker runner alike."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.rules import job_spec, replica_env
from jobs.local.launch import containers, replica_container
from tests.conftest import ROOT
from jobfile import config as config_lib

#: the caller's shell in these tests: variables a replica must never see (Vertex would never set them)
SHELL = {"SHELL_ONLY": "1", "GOOGLE_APPLICATION_CREDENTIALS": "/some/key.json", "CLOUDSDK_CONFIG": "/x",
         "PYTHONPATH": "/somewhere", "TF_USE_LEGACY_KERAS": "1"}
VERTEX = {"CLUSTER_SPEC", "TF_CONFIG", "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR",
          "CLOUD_ML_JOB_ID"}

#: A user's trainer that reports the names in its environment (before anything it imports could add one), then
#: exports the smallest SavedModel the pipeline's verify step accepts (the chief only).
PROBE = '''\
import json
import os

print("replica-env " + json.dumps(sorted(os.environ)), flush=True)
print("replica-values " + json.dumps({k: os.environ.get(k) for k in ("DECLARED", "PYTHONPATH")}), flush=True)
if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "chief":
    import tensorflow as tf

    class Doubler(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def serve(self, x):
            return {"y": 2.0 * x}

    model = Doubler()
    tf.saved_model.save(model, os.environ["AIP_MODEL_DIR"], signatures={"serving_default": model.serve})
'''

JOB = '''\
name: env-probe
trainer:
  module: trainer.task
  env: {DECLARED: "yes"}
topology:
  strategy: multi_worker
  chief: {replica_count: 1, machine_type: n1-standard-4}
  worker: {replica_count: 1, machine_type: n1-standard-4}
output:
  base_dir: runs/env-probe
'''


def _seen(log_file: Path) -> tuple[set[str], dict[str, str]]:
    lines = log_file.read_text().splitlines()
    names = next(json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("replica-env "))
    values = next(json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("replica-values "))
    return set(names), values


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_replica_sees_vertex_its_declared_env_and_the_base_and_nothing_of_the_shell(tmp_path):
    """Through the real pipeline (``run.py --config job.yaml``, kfp.local task, launcher, replicas), with a shell
    holding credentials, a ``PYTHONPATH`` and ``TF_USE_LEGACY_KERAS``: each replica sees ``trainer.env``, Vertex's
    variables and the documented base (``BASE_NAMES``, ``IMAGE_ENV``, ``PYTHONPATH`` = the checkout), only."""
    project = tmp_path / "probe"
    (project / "trainer").mkdir(parents=True)
    (project / "trainer" / "task.py").write_text(PROBE)
    (project / "job.yaml").write_text(JOB)
    env = {**os.environ, **SHELL}
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "--config", str(project / "job.yaml")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    replicas = project / "runs" / "env-probe" / "logs" / "replicas" / "attempt-1"
    allowed = set(replica_env.BASE_NAMES) | set(replica_env.IMAGE_ENV) | {"PYTHONPATH"}
    for replica in ("chief-0", "worker-0"):
        names, values = _seen(replicas / f"{replica}.log")
        assert "DECLARED" in names and values["DECLARED"] == "yes", replica  # trainer.env
        assert not names & set(SHELL) - {"PYTHONPATH"}, (replica, names & set(SHELL))  # the shell's own: none
        assert not [n for n in names if "CREDENTIAL" in n or n.startswith(("CLOUDSDK_", "GOOGLE_"))], names
        assert VERTEX <= names, (replica, VERTEX - names)  # Vertex's
        vertex = {n for n in names if replica_env.is_vertex_variable(n)}
        rest = names - vertex - {"DECLARED", "VTP_LOCAL_LAUNCHER"}
        assert rest <= allowed, (replica, rest - allowed)  # the documented base, nothing else
        assert values["PYTHONPATH"] == replica_env.PROJECT_ROOT, values  # the checkout: the image's /app here
    assert {"PATH", "HOME"} <= names and set(replica_env.IMAGE_ENV) <= names


def test_the_docker_runner_builds_a_replica_containers_env_with_the_same_builder(monkeypatch):
    """``--runner docker``: a replica container gets, from the pool's ``container_spec.env`` (THE job spec, where
    ``trainer.env`` goes) and the launcher's Vertex variables, exactly what a replica process gets from the
    process runner, less the process base (the image brings its own ``ENV``)."""
    for name, value in SHELL.items():
        monkeypatch.setenv(name, value)
    cfg = config_lib.load("local", ["trainer.env={DECLARED: 'yes', TF_USE_LEGACY_KERAS: '1'}"])
    spec = job_spec.custom_job_spec(cfg)
    pools = [p for p in spec["worker_pool_specs"] if p]
    assert all(p["container_spec"]["env"] == [{"name": "DECLARED", "value": "yes"},
                                              {"name": "TF_USE_LEGACY_KERAS", "value": "1"}] for p in pools)
    counts = cfg.topology.replica_counts()
    addresses = {replica_env.POOL_NAMES[p]: [f"127.0.0.1:{1000 + p * 10 + i}" for i in range(n)]
                 for p, n in enumerate(counts) if n}
    vertex = replica_env.vertex_environment(counts, addresses, 1, 0, "/b", cfg.name)
    # what the launcher gives the docker runner's stand-in process (jobs.steps.calls.run_local: base = this process's
    # environment, no declared env: the stand-in is ours, it needs the engine's settings) ...
    stand_in = replica_env.replica_environment(containers.stand_in_environment(), {}, vertex)
    assert stand_in["SHELL_ONLY"] == "1"  # the stand-in's, never passed on to its container
    container = replica_container.container_environment(stand_in, spec["worker_pool_specs"][1]["container_spec"])
    # ... and what it gives a replica process under the process runner (jobs.steps.calls.run_local: pool 0's env)
    declared = {e["name"]: e["value"] for e in spec["worker_pool_specs"][0]["container_spec"]["env"]}
    process = replica_env.replica_environment(replica_env.process_base(), declared, vertex)
    assert container == {k: v for k, v in process.items() if k not in replica_env.process_base() or k in declared}
    assert container["DECLARED"] == "yes" and container["TF_USE_LEGACY_KERAS"] == "1"  # declared, not the shell's
    for leaked in ("SHELL_ONLY", "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "PYTHONPATH", "PATH"):
        assert leaked not in container, leaked
    assert process["PYTHONPATH"] == replica_env.PROJECT_ROOT and "SHELL_ONLY" not in process
