"""Real MultiWorkerMirroredStrategy training: 2 worker processes on loopback through the launcher."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Killer, assert_no_processes_left, job_config
from jobs.run_records import records
from jobs.steps import calls as steps
from jobs.local.launch.outcome import JobFailed

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_two_worker_training_exports_a_model_that_loads_and_serves(tmp_path, prepared_data):
    """...with the side-car evaluator (pool 3) beside MultiWorkerMirroredStrategy: it never joins the
    collective (that was ``KeyError: 'evaluator'``) and evaluates the checkpoints until the last one."""
    cfg = job_config(tmp_path / "run", prepared_data, "training.steps=12", "checkpoint.every_steps=5",
                     "topology.evaluator.replica_count=1", "topology.evaluator.machine_type=n1-standard-4")
    lines: list[str] = []
    result = steps.run_local(cfg, timeout_s=240, log=lines.append)
    assert result.returncode == 0 and result.attempts == 1, "\n".join(lines[-30:])
    assert not any("KeyError" in line for line in lines)
    evaluation = json.loads((Path(cfg.output.base_dir) / "evaluation.json").read_text())
    assert evaluation["final"] and evaluation["step"] == 12 and {h["step"] for h in evaluation["history"]} <= {5, 10, 12}
    assert list((Path(cfg.output.base_dir) / "logs" / "validation").glob("events.out.tfevents.*"))

    metrics = records.read_metrics(cfg)
    assert metrics["strategy"] == "CollectiveAllReduceStrategy"  # MultiWorkerMirroredStrategy
    assert metrics["replicas"] == 2 and metrics["global_batch_size"] == 16  # per-replica 8 x 2 replicas
    assert metrics["steps"] == 12
    # with an evaluator replica the chief writes no validation series of its own (the evaluator's are there), but
    # still evaluates the final model once: metrics.json and Vertex hyperparameter tuning get its figures
    from jobs.run_records.tensorboard import read_scalars

    assert {s for s, _ in read_scalars(str(Path(cfg.output.base_dir) / "logs"))["validation/loss"]} <= {5, 10, 12}
    assert metrics["val_step"] == 12 and 0 <= metrics["val_accuracy"] <= 1
    reported = (Path(cfg.output.base_dir) / "hypertune" / "output.metrics").read_text().splitlines()
    assert [json.loads(line).get("val_accuracy") for line in reported][0] == str(metrics["val_accuracy"])

    base = Path(cfg.output.base_dir)
    ckpts = sorted(p.name for p in (base / "checkpoints").glob("ckpt-*.index"))
    assert ckpts == ["ckpt-10.index", "ckpt-12.index", "ckpt-5.index"]
    assert not list((base / "checkpoints").glob("workertemp_*")), "the worker's throwaway checkpoints remain"
    assert list((base / "logs").glob("events.out.tfevents.*")), "no TensorBoard summaries from the chief"
    assert (base / "model" / "saved_model.pb").exists() and (base / "model" / "metadata.json").exists()
    assert not [p for p in base.iterdir() if p.name.startswith(".model.tmp")]

    verified = steps.verify_model(str(base / "model"), data_dir=prepared_data)  # this process never trained
    manifest = json.loads((Path(prepared_data) / "manifest.json").read_text())
    assert verified["examples"] == manifest["num_examples"]["validation"]
    assert 0.0 <= verified["accuracy"] <= 1.0 and verified["loss"] > 0
    assert verified["metadata"]["classes"] == manifest["classes"]

    # The documented serving signature on raw JPEG bytes, in a fresh interpreter.
    jpeg = next((Path(prepared_data).parent / "images" / manifest["classes"][0]).glob("*.jpg"))
    code = (
        "import sys, tensorflow as tf\n"
        "fn = tf.saved_model.load(sys.argv[1]).signatures['serving_default']\n"
        "out = fn(image_bytes=tf.constant([open(sys.argv[2], 'rb').read()] * 2))\n"
        "print(sorted(out), out['probabilities'].shape, float(tf.reduce_sum(out['probabilities'][0])),"
        " out['class_name'].numpy()[0].decode(), list(out['class_names'].numpy()[0]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(base / "model"), str(jpeg)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert "['class_index', 'class_name', 'class_names', 'probabilities'] (2, 3)" in line
    assert abs(float(line.split(") ")[1].split()[0]) - 1.0) < 1e-4
    assert any(name in line for name in manifest["classes"])


@pytest.mark.timeout(300)
def test_a_replica_crash_fails_the_job_clearly_and_leaves_no_process(tmp_path, prepared_data):
    base = tmp_path / "crash"
    cfg = job_config(base, prepared_data, "training.steps=400", "scheduling.max_restarts=0",
                     "training.log_every_steps=2")
    killer = Killer(str(base), "workerpool1", "[worker-0] step 4/")
    with pytest.raises(JobFailed) as exc:
        steps.run_local(cfg, timeout_s=240, log=killer)
    assert killer.fired
    failure = exc.value.result.failure
    assert exc.value.result.returncode != 0
    # The killed worker, or the chief that lost its peer, is named with its status and last lines.
    assert failure.role in ("worker", "chief") and failure.last_lines
    message = str(exc.value)
    assert "exited with status" in message and "last " in message
    assert_no_processes_left(str(base))


@pytest.mark.timeout(120)
def test_a_worker_whose_peer_never_starts_gives_up_with_a_clear_message(tmp_path, prepared_data):
    """MWMS blocks forever when a peer never starts: the trainer bounds it (one clear line, SIGKILL)."""
    cfg = job_config(tmp_path / "alone", prepared_data, "scheduling.startup_timeout_s=8")
    env = {**os.environ, "CLUSTER_SPEC": json.dumps({
        "cluster": {"workerpool0": ["127.0.0.1:1"], "workerpool1": ["127.0.0.1:2"]},
        "environment": "cloud", "task": {"type": "workerpool0", "index": 0}})}
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "trainers.task", "--config-json", cfg.to_json()],
                          capture_output=True, text=True, timeout=100, env=env, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert "ERROR: multi-worker cluster start-up did not finish within 8 s" in proc.stderr
