"""`python pipelines/run.py --runner docker`: every step and every replica in the job's image
(jobs/local/launch/docker_session.py, replica_container.py, containers.py).

The rules first (no engine); then, against the real test engine (tests/docker_servers.py, overlay2 where the
kernel takes it) and the one trainer image the suite builds (fixture ``trainer_image``): the default job
with 2 replica containers to a verified model; `docker kill` of the worker container, then Ctrl-C, then the
rerun that resumes; a user's trainer through its own image, built by the runner; an image without the
user's code stopped by the probe. After each, no container of the run is left in the engine.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.local.launch import containers, docker_session, replica_container
from jobs.local.run.folder import last_checkpoint
from jobfile import config as config_lib

ROOT = Path(__file__).resolve().parent.parent


# ---- rules ------------------------------------------------------------------------------------------------
def test_settings_travel_to_the_step_containers_and_back():
    s = containers.Settings(run_id="r1", base="/tmp/x", mounts=("/tmp/x", "/data"), timeout_s=12,
                            docker_host="unix:///run/d.sock")
    assert containers.Settings.from_env(s.to_env()) == s
    assert containers.Settings.from_env({}) is None  # the process runner
    with pytest.raises(containers.ContainerError, match="VTP_DOCKER_MOUNTS"):
        containers.Settings.from_env({"VTP_RUNNER": "docker", "VTP_DOCKER_MOUNTS": "not json"})
    assert s.labels("replica", **{containers.LABEL_NAME: "worker-0"}) == {
        "vtp.run": "r1", "vtp.base": "/tmp/x", "vtp.kind": "replica", "vtp.replica": "worker-0"}


def test_a_replica_runs_its_pools_container_spec_with_the_vertex_environment_only():
    specs = [{"replica_count": 1, "container_spec": {"image_uri": "r/i:t@sha256:" + "a" * 64,
                                                     "command": ["python"], "args": ["-m", "trainers.task"]}},
             {"replica_count": 2, "container_spec": {"image_uri": "r/i:t@sha256:" + "a" * 64,
                                                     "args": ["--role", "w"], "env": [{"name": "X", "value": "1"}]}},
             {}, {}]
    env = {"CLUSTER_SPEC": json.dumps({"cluster": {}, "task": {"type": "workerpool1", "index": 1}}),
           "TF_CONFIG": "{}", "AIP_MODEL_DIR": "/b/model/", "CLOUD_ML_JOB_ID": "j", "PATH": "/host/bin",
           "PYTHONPATH": "/host/repo", "HOME": "/root", "GOOGLE_APPLICATION_CREDENTIALS": "/secret.json"}
    pool, index, spec = replica_container.replica_spec(specs, env)
    assert (pool, index, spec["args"]) == (1, 1, ["--role", "w"])
    assert replica_container.container_environment(env, spec) == {
        "CLUSTER_SPEC": env["CLUSTER_SPEC"], "TF_CONFIG": "{}", "AIP_MODEL_DIR": "/b/model/", "CLOUD_ML_JOB_ID": "j",
        "X": "1", "VTP_LOCAL_LAUNCHER": "1"}  # nothing of the host's PATH, PYTHONPATH or credentials


def test_a_pinned_image_is_used_as_is_and_a_bare_repository_is_built():
    assert docker_session.is_pinned("127.0.0.1:5000/t/tf-trainer:ctx-1@sha256:" + "b" * 64)
    assert docker_session.is_pinned("127.0.0.1:5000/t/tf-trainer:ctx-1")
    assert not docker_session.is_pinned("127.0.0.1:5000/t/tf-trainer")
    assert not docker_session.is_pinned(None)


def test_the_engine_socket_goes_to_the_train_step():
    assert containers.socket_path("unix:///tmp/d/docker.sock") == "/tmp/d/docker.sock"
    assert containers.socket_path("") == "/var/run/docker.sock"
    assert containers.socket_path("tcp://127.0.0.1:2375") is None
    with pytest.raises(containers.ContainerError, match="unix:// or tcp://"):
        containers.socket_path("ssh://me@host")


def test_the_containers_see_the_runs_folders_at_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "flowers").mkdir()
    cfg = config_lib.load("local", ["output.base_dir=runs/x", "data.source=images", "data.path=flowers"])
    out = docker_session.for_containers(cfg)
    assert out.output.base_dir == str(tmp_path / "runs" / "x") and out.data.path == str(tmp_path / "flowers")
    assert docker_session.host_folders(out) == [str(tmp_path / "runs" / "x"), str(tmp_path / "flowers")]


def test_requirements_the_probe_checks(tmp_path):
    (tmp_path / "requirements.txt").write_text("# comment\npandas>=2.0\nnumpy  # inline\n-r other.txt\n"
                                               "pywin32; sys_platform == 'win32'\n")
    cfg = config_lib.load("local", [f"trainer.source_dir={tmp_path}", "trainer.module=trainer.task",
                                           "trainer.requirements=requirements.txt", "data.source=none"])
    assert [(line, name, str(spec)) for line, name, spec in docker_session.requirement_names(cfg)] == [
        ("pandas>=2.0", "pandas", ">=2.0"), ("numpy", "numpy", "")]


def test_runner_docker_is_local_only(capsys):
    from pipelines.run import main

    assert main(["--runner", "docker", "--compile-only", "x.yaml"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --runner docker: a local run only"), err


def test_no_engine_is_one_line(capsys, tmp_path, monkeypatch):
    from pipelines.run import main

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    status = main(["--runner", "docker", "--image", "127.0.0.1:1/t/i:ctx-1", "--verbose",
                   "--set", f"output.base_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1 and err[0].startswith("error: no Docker engine reachable at unix://"), err


# ---- against the engine, with the suite's trainer image ---------------------------------------------------
def _run(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _env(dockerd) -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": dockerd.host, "DOCKER_BUILDKIT": "0"}


def _left(dockerd, base: Path) -> list[str]:
    client = dockerd.client(timeout_s=60)
    try:
        return [c["Names"][0] for c in client.containers(all=True, filters={"label": f"vtp.base={base}"})]
    finally:
        client.close()


def _replica_starts(dockerd, since: float) -> list[str]:
    """The replica containers the engine started since ``since`` (its event log), by replica name."""
    client = dockerd.client(timeout_s=60)
    try:
        events = client.events(since=int(since), until=int(time.time()) + 1, decode=True,
                               filters={"type": "container", "event": "start", "label": "vtp.kind=replica"})
        return [e["Actor"]["Attributes"]["vtp.replica"] for e in events]
    finally:
        client.close()


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_the_default_job_runs_in_containers_to_a_verified_model(trainer_image, dockerd, tmp_path):
    base = tmp_path / "run"
    since = time.time()
    t0 = time.monotonic()
    done = _run(["--runner", "docker", "--image", trainer_image["reference"], "--set", f"output.base_dir={base}"],
                _env(dockerd))
    seconds = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    trainer_image["log"](f"--runner docker, default job: {seconds:.0f} s on {dockerd.storage_driver}")
    run = json.loads((base / "run.json").read_text())["summary"]
    assert run["runner"]["name"] == "docker" and run["runner"]["image"].startswith(trainer_image["repo"])
    assert run["verification"]["predictions"] and run["verification"]["accuracy"] >= 0, run["verification"]
    assert run["training"]["steps"] == 30 and run["trainer"]["attempts"] == 1
    assert (base / "model" / "saved_model.pb").is_file() and (base / "report.html").is_file()
    assert sorted(_replica_starts(dockerd, since)) == ["chief-0", "worker-0"]  # each replica a container
    specs = json.loads((base / "logs" / "replicas" / "worker_pool_specs.json").read_text())
    assert specs[0]["container_spec"]["image_uri"] == trainer_image["reference"]  # what Vertex would get
    assert "[chief-0]" in (base / "logs" / "replicas" / "attempt-1" / "chief-0.log").read_text() or \
        (base / "logs" / "replicas" / "attempt-1" / "chief-0.log").stat().st_size > 0
    assert _left(dockerd, base) == []
    again = _run(["--runner", "docker", "--image", trainer_image["reference"], "--set", f"output.base_dir={base}"],
                 _env(dockerd), timeout=300)
    assert again.returncode == 0 and "already complete" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _last_checkpoint(base: Path) -> int:
    """The step of the newest complete checkpoint: CheckpointManager's state file, which a resume reads and the
    interrupted line names (not the newest ``ckpt-N.index``, which exists before its checkpoint is complete)."""
    last = last_checkpoint(str(base / "checkpoints"))
    return last[1] if last else 0


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_docker_kill_of_the_worker_resumes_ctrl_c_stops_every_container_and_the_rerun_resumes(
        trainer_image, dockerd, tmp_path):
    base = tmp_path / "run"
    args = ["--runner", "docker", "--image", trainer_image["reference"], "--set", f"output.base_dir={base}",
            "--set", "training.steps=100000", "--set", "checkpoint.every_steps=20"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "pipelines" / "run.py"), *args], env=_env(dockerd), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    client = dockerd.client(timeout_s=60)
    try:
        _wait_for(lambda: _last_checkpoint(base) >= 20, 600, "the first checkpoint")
        workers = client.containers(filters={"label": ["vtp.kind=replica", "vtp.replica=worker-0",
                                                       f"vtp.base={base}"]})
        assert len(workers) == 1
        client.kill(workers[0]["Id"])  # docker kill: SIGKILL, exit 137
        killed_at = _last_checkpoint(base)  # the worker is gone: no further step completes in this attempt
        attempt2 = base / "logs" / "replicas" / "attempt-2" / "chief-0.log"
        resumed = _wait_for(lambda: attempt2.is_file() and re.search(r"resumed from step (\d+)", attempt2.read_text()),
                            600, "the restart")
        resumed_at = int(resumed.group(1))
        _wait_for(lambda: _last_checkpoint(base) >= resumed_at + 40, 600, "training after the restart")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        client.close()
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("interrupted at step ") and "resume with: python pipelines/run.py" in last, last
    stopped_at = int(last.split("interrupted at step ")[1].split(";")[0])
    # the line names the checkpoint the folder holds once everything stopped (what a rerun resumes from), a
    # checkpoint of the second attempt; the second attempt resumed from the first attempt's last one, at least
    # where it stood when its worker was killed (a save under way then may still have completed)
    assert stopped_at == _last_checkpoint(base) and stopped_at >= resumed_at + 40 >= killed_at + 40
    assert _left(dockerd, base) == []

    # the rerun resumes where Ctrl-C stopped, and finishes
    done = _run([*args[:-4], "--set", f"training.steps={stopped_at + 20}", "--set", "checkpoint.every_steps=20"],
                _env(dockerd))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((base / "training.json").read_text())
    chief = (base / "logs" / "replicas" / "attempt-1" / "chief-0.log").read_text()
    assert f"resumed from step {stopped_at}" in chief, chief[-2000:]
    assert record["attempts"] == 1
    assert _left(dockerd, base) == []


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "elsewhere" / "my-project"
    shutil.copytree(ROOT / "examples" / "tabular-regressor", project)
    return project


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_an_image_without_the_users_code_fails_in_the_probe(trainer_image, dockerd, tmp_path):
    project = _project(tmp_path)
    base = tmp_path / "run"
    done = _run(["--config", str(project / "job.yaml"), "--runner", "docker", "--image", trainer_image["reference"],
                 "--set", f"output.base_dir={base}"], _env(dockerd), timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert len(errors) == 1, errors
    assert errors[0].startswith("error: trainer.module: trainer.task is not importable in ")
    assert "from its working directory /app" in errors[0] and "the image lacks your code" in errors[0]
    assert "python pipelines/run.py build --config JOB --image REPO" in errors[0]
    assert not (base / "pipeline_root").exists()  # nothing ran
    assert _left(dockerd, base) == []


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_a_users_trainer_runs_in_its_own_image_built_by_the_runner(trainer_image, dockerd, registry, tmp_path):
    project = _project(tmp_path)
    base = tmp_path / "run"
    repo = f"{registry.host}/training/my-regressor"
    since = time.time()
    done = _run(["--config", str(project / "job.yaml"), "--runner", "docker", "--image", repo,
                 "--context", str(trainer_image["ctx"]), "--build-arg", "BASE_IMAGE=localbase:bookworm",
                 "--set", f"output.base_dir={base}", "--set", 'trainer.args=["--epochs", "2", "--examples", "512"]'],
                _env(dockerd))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "runner docker: building the job's image" in done.stdout
    run = json.loads((base / "run.json").read_text())["summary"]
    assert run["runner"]["image"].startswith(f"{repo}@sha256:"), run["runner"]
    assert run["verification"]["predictions"] and run["verification"]["instances"] >= 1, run["verification"]
    assert run["trainer"]["trainer"] == "trainer.task" and run["trainer"]["attempts"] == 1
    assert sorted(_replica_starts(dockerd, since)) == sorted(
        f"{role}-{i}" for role, n in zip(("chief", "worker", "ps", "evaluator"), run["trainer"]["replica_counts"])
        for i in range(n))
    assert (base / "model" / "saved_model.pb").is_file()
    assert _left(dockerd, base) == []


# ---- the launcher's hook and the probe's verdicts, without an engine --------------------------------------
class _Removing:
    """A container the engine is removing by itself (kfp's ``auto_remove``): our removal is refused, and the
    engine lists it for ``listed`` more looks."""

    def __init__(self, name: str, listed: int):
        self.name, self.listed = name, listed

    def remove(self, force=False):
        raise RuntimeError("409 Conflict: removal of container is already in progress")


class _Listing:
    def __init__(self, *found: _Removing):
        self.found, self.containers = list(found), self

    def list(self, all=False, filters=None):
        assert all and filters == {"label": ["vtp.run=r1"]}
        shown = [c for c in self.found if c.listed > 0]
        for c in self.found:
            c.listed -= 1
        return shown


def test_removing_a_runs_containers_waits_until_the_engine_lists_none():
    lines = []
    assert containers.remove_labelled(_Listing(_Removing("awesome_lalande", 5)), {"vtp.run": "r1"}, lines.append,
                                      wait_s=30) == []
    assert lines == []  # gone once the engine finished removing it: nothing to say
    late = _Listing(_Removing("step", 10**6))
    containers.remove_labelled(late, {"vtp.run": "r1"}, lines.append, wait_s=0.5)
    assert lines == ["warning: 1 container(s) still being removed after 0.5 s: step"]


def test_the_launcher_calls_after_attempt_once_per_attempt_on_every_path(tmp_path):
    from jobs.local.launch.supervisor import launch

    calls = []
    result = launch([sys.executable, "-c", "import sys; sys.exit(3)"], [1, 0, 0, 0], str(tmp_path), max_restarts=1,
                    log=lambda _line: None, check=False, after_attempt=lambda: calls.append("x"))
    assert result.returncode == 3 and result.attempts == 2 and calls == ["x", "x"]
    calls.clear()
    launch([sys.executable, "-c", "pass"], [1, 1, 0, 0], str(tmp_path), log=lambda _line: None,
           after_attempt=lambda: calls.append("x"))
    assert calls == ["x"]


class _FakeContainer:
    def __init__(self, output: str, code: int = 0):
        self.output, self.code, self.removed = output, code, False

    def start(self):
        pass

    def wait(self, timeout=None):
        return {"StatusCode": self.code}

    def logs(self):
        return self.output.encode()

    def remove(self, force=False):
        self.removed = True


class _FakeEngine:
    def __init__(self, container):
        self.container, self.created = container, {}
        self.containers = self

    def create(self, image, **kwargs):
        self.created = {"image": image, **kwargs}
        return self.container


def _probe(found: dict, cfg, code: int = 0):
    line = "VTP-PROBE " + json.dumps({"cwd": "/workspace/code", "python": "3.11.2", **found})
    engine = _FakeEngine(_FakeContainer(line + "\n", code))
    settings = containers.Settings(run_id="r", base="/tmp/b")
    problems = docker_session.probe_problems(engine, "r/i@sha256:" + "c" * 64, cfg, settings)
    assert engine.container.removed and engine.created["network_mode"] == "none"
    assert engine.created["labels"]["vtp.kind"] == "probe"
    return problems


def test_the_probe_names_what_the_image_lacks(tmp_path):
    ok = {m: "ok" for m in ("tensorflow", *docker_session.PROJECT_MODULES)}
    builtin = config_lib.load("local")
    assert _probe({"modules": ok, "versions": {"tensorflow": "2.21.0"}}, builtin) == []
    no_tf = _probe({"modules": {**ok, "tensorflow": "No module named 'tensorflow'"}, "versions": {}}, builtin)
    assert len(no_tf) == 1 and "tensorflow is not installed in the image" in no_tf[0]
    assert "python pipelines/run.py build" in no_tf[0]
    (tmp_path / "requirements.txt").write_text("pandas>=2\nnumpy>=9\n")
    user = config_lib.load("local", [f"trainer.source_dir={tmp_path}", "trainer.module=trainer.task",
                                     "trainer.requirements=requirements.txt", "data.source=none"])
    found = {"modules": {**ok, "trainer.task": "ok"}, "versions": {"tensorflow": "2.21.0", "pandas": None,
                                                                   "numpy": "2.1.0"}}
    problems = _probe(found, user)
    assert problems == [
        "trainer.requirements: pandas>=2 is not installed in r/i@sha256:" + "c" * 64 + "; build the image with "
        "python pipelines/run.py build --config JOB --image REPO",
        "trainer.requirements: numpy>=9 but r/i@sha256:" + "c" * 64 + " has numpy 2.1.0; rebuild it with "
        "python pipelines/run.py build --config JOB --image REPO"]
    broken = _probe({}, builtin, code=1)
    assert len(broken) == 1 and "`python` in the image failed (exit 1)" in broken[0]
