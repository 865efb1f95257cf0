"""Tests for jobs.local.launch: real processes (plain-Python fakes, no TensorFlow), on loopback."""
from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from jobs.local.launch import __main__ as launcher_cli
from jobs.local.launch.outcome import JobFailed, ReplicaFailure
from jobs.local.launch.supervisor import launch
from jobs.rules.replica_env import vertex_environment

REPO = pathlib.Path(__file__).resolve().parents[1]
FAKES = pathlib.Path(__file__).resolve().parent / "fakes"
FAKE = [sys.executable, str(FAKES / "fake_worker.py")]


# -- helpers ----------------------------------------------------------------------------------------
def _stat(pid: int):
    """(state, pgrp) of a live or zombie pid, None if gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[2])


STARTED_RE = re.compile(r"[\w-]+ \(pid (\d+)\)")


def _pids(pid_dir: pathlib.Path, log_lines=()):
    """Replica pids (the launcher's own "[launcher] attempt k: started x (pid N)" lines, plus
    pid files the fakes wrote) and grandchild pids (pid files)."""
    replicas, children = set(), set()
    for line in log_lines:
        if line.startswith("[launcher] attempt "):
            replicas.update(int(pid) for pid in STARTED_RE.findall(line))
    for f in pid_dir.glob("*.pid"):
        pid = int(f.stem.rsplit("-", 1)[1])
        (children if "-child-" in f.stem else replicas).add(pid)
    return sorted(replicas), sorted(children)


def assert_nothing_left(pid_dir: pathlib.Path, log_lines=(), expect: int | None = None) -> None:
    """Every replica pid is gone (reaped: not even a zombie); nothing alive in their groups.

    ``expect``: how many replica processes the launcher must have started (from its log).
    """
    if isinstance(log_lines, str):
        log_lines = log_lines.splitlines()
    if expect is not None:
        started = _pids(pid_dir.parent / "no-such-dir", log_lines)[0]
        assert len(started) == expect, started
    replicas, children = _pids(pid_dir, log_lines)
    assert replicas
    for pid in replicas:  # the launcher reaped its children: /proc entry gone
        assert _stat(pid) is None, f"replica pid {pid} still present: {_stat(pid)}"
    deadline = time.monotonic() + 3
    while True:  # grandchildren are reparented to pid 1, which may or may not reap them
        alive = [pid for pid in children if (_stat(pid) or ("Z",))[0] != "Z"]
        groups = set(replicas)
        for entry in pathlib.Path("/proc").iterdir():
            if entry.name.isdigit():
                st = _stat(int(entry.name))
                if st and st[1] in groups and st[0] != "Z":
                    alive.append(int(entry.name))
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not alive, f"processes left behind: {alive}"


class Log(list):
    def __call__(self, line: str) -> None:
        self.append(line)

    def of(self, prefix: str) -> list[str]:
        return [line[len(prefix) + 1:] for line in self if line.startswith(prefix + " ")]

    def env_of(self, name: str) -> dict:
        for line in self.of(f"[{name}]"):
            if line.startswith("env "):
                return json.loads(line[4:])
        raise AssertionError(f"no env line from {name}: {self}")


def fake(pid_dir, *do, lines=3):
    cmd = FAKE + ["--pid-dir", str(pid_dir), "--lines", str(lines)]
    for d in do:
        cmd += ["--do", d]
    return cmd


@pytest.fixture
def pid_dir(tmp_path):
    d = tmp_path / "pids"
    d.mkdir()
    return d


# -- vertex_environment -----------------------------------------------------------------------------
@pytest.mark.timeout(30)
def test_vertex_environment_single_replica(tmp_path):
    env = vertex_environment([1, 0, 0, 0], {"workerpool0": ["127.0.0.1:1000"]}, 0, 0,
                             str(tmp_path / "out"), "job7")
    base = str(tmp_path / "out")
    assert env == {
        "CLUSTER_SPEC": json.dumps({"cluster": {"workerpool0": ["127.0.0.1:1000"]},
                                    "environment": "cloud",
                                    "task": {"type": "workerpool0", "index": 0}}),
        "TF_CONFIG": json.dumps({"cluster": {"chief": ["127.0.0.1:1000"]},
                                 "task": {"type": "chief", "index": 0},
                                 "environment": "cloud"}),
        "AIP_MODEL_DIR": base + "/model/",
        "AIP_CHECKPOINT_DIR": base + "/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": base + "/logs/",
        "CLOUD_ML_JOB_ID": "job7",
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.timeout(30)
def test_vertex_environment_chief_and_worker(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    addrs = {"workerpool0": ["127.0.0.1:1000"], "workerpool1": ["127.0.0.1:1001"]}
    env = vertex_environment((1, 1, 0, 0), addrs, 1, 0, "rel/out/", "local")
    assert json.loads(env["CLUSTER_SPEC"]) == {
        "cluster": {"workerpool0": ["127.0.0.1:1000"], "workerpool1": ["127.0.0.1:1001"]},
        "environment": "cloud", "task": {"type": "workerpool1", "index": 0}}
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"chief": ["127.0.0.1:1000"], "worker": ["127.0.0.1:1001"]},
        "task": {"type": "worker", "index": 0}, "environment": "cloud"}
    base = str(tmp_path / "rel" / "out")  # made absolute, one trailing slash
    assert env["AIP_MODEL_DIR"] == base + "/model/"
    assert env["AIP_CHECKPOINT_DIR"] == base + "/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == base + "/logs/"
    chief = vertex_environment((1, 1), addrs, 0, 0, "rel/out/", "local")  # pools may be left out
    assert json.loads(chief["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}
    assert {k: v for k, v in chief.items() if k.startswith("AIP_")} == \
        {k: v for k, v in env.items() if k.startswith("AIP_")}


@pytest.mark.timeout(30)
def test_vertex_environment_all_pools(tmp_path):
    addrs = {"workerpool0": ["h:0"], "workerpool1": ["h:1", "h:2"],
             "workerpool2": ["h:3", "h:4"], "workerpool3": ["h:5"]}
    cluster = {"chief": ["h:0"], "worker": ["h:1", "h:2"], "ps": ["h:3", "h:4"]}
    expected = [(0, 0, "chief"), (1, 0, "worker"), (1, 1, "worker"), (2, 0, "ps"), (2, 1, "ps"),
                (3, 0, "evaluator")]
    for pool, index, role in expected:
        env = vertex_environment([1, 2, 2, 1], addrs, pool, index, str(tmp_path), "j")
        spec = json.loads(env["CLUSTER_SPEC"])
        assert spec == {"cluster": addrs, "environment": "cloud",
                        "task": {"type": f"workerpool{pool}", "index": index}}
        tf = json.loads(env["TF_CONFIG"])
        assert tf == {"cluster": cluster, "task": {"type": role, "index": index},
                      "environment": "cloud"}
        assert "evaluator" not in tf["cluster"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("counts, match", [
    ([2, 0, 0, 0], "workerpool0"), ([0, 1], "workerpool0"), ([1, -1], "workerpool1"),
    ([1, 0, 1.5], "workerpool2"), ([1, 0, 0, "x"], "workerpool3"), ([1, 0, 0, 0, 1], "1 to 4"),
    ([], "1 to 4"),
])
@pytest.mark.unit  # names a launcher, starts nothing: the launch is refused first
def test_replica_counts_are_validated(tmp_path, counts, match):
    with pytest.raises(ValueError, match=match):
        launch(["true"], counts, str(tmp_path), log=Log())
    assert not (tmp_path / "logs").exists()


@pytest.mark.timeout(30)
def test_vertex_environment_rejects_mismatched_addresses(tmp_path):
    with pytest.raises(ValueError, match="workerpool1 .worker. has 2 replica"):
        vertex_environment([1, 2], {"workerpool0": ["a:1"], "workerpool1": ["a:2"]}, 0, 0,
                           str(tmp_path), "j")
    with pytest.raises(ValueError, match="index 1 out of range"):
        vertex_environment([1, 1], {"workerpool0": ["a:1"], "workerpool1": ["a:2"]}, 1, 1,
                           str(tmp_path), "j")


# -- launching --------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_two_replicas_succeed_with_isolated_environment(tmp_path, pid_dir, monkeypatch):
    monkeypatch.setenv("CLUSTER_SPEC", '{"bogus": "cluster_spec"}')
    monkeypatch.setenv("TF_CONFIG", '{"bogus": "tf_config"}')
    monkeypatch.setenv("AIP_MODEL_DIR", "gs://bogus/model/")
    monkeypatch.setenv("CLOUD_ML_PROJECT_ID", "bogus-project")
    before = dict(os.environ)
    log = Log()
    res = launch(fake(pid_dir), [1, 1, 0, 0], str(tmp_path / "out"), job_id="j1",
                 env={"FAKE_EXTRA": "x"}, log=log)
    assert dict(os.environ) == before  # the launcher never touches its own environment
    assert (res.returncode, res.failure, res.restarts, res.attempts) == (0, None, [], 1)
    base = str(tmp_path / "out")
    assert res.log_dir == base + "/logs/replicas"

    chief, worker = log.env_of("chief-0"), log.env_of("worker-0")
    spec = json.loads(chief["CLUSTER_SPEC"])
    addrs = spec["cluster"]
    assert set(addrs) == {"workerpool0", "workerpool1"}
    ports = [int(a.split(":")[1]) for pool in addrs.values() for a in pool]
    assert all(a.startswith("127.0.0.1:") for pool in addrs.values() for a in pool)
    assert len(set(ports)) == 2
    for name, seen, pool, role in [("chief-0", chief, 0, "chief"), ("worker-0", worker, 1, "worker")]:
        assert seen == vertex_environment([1, 1], addrs, pool, 0, base, "j1") | {"FAKE_EXTRA": "x"}, name
        assert json.loads(seen["TF_CONFIG"])["task"] == {"type": role, "index": 0}
        assert "bogus" not in json.dumps(seen)
    # both prefixes streamed, stderr merged, log files written
    assert "chief-0 line 2" in log.of("[chief-0]")
    assert "worker-0 action ok" in log.of("[worker-0]")
    for name in ("chief-0", "worker-0"):
        text = (tmp_path / "out/logs/replicas/attempt-1" / f"{name}.log").read_text()
        assert f"{name} line 0\n" in text and f"{name} action ok" in text
    for sub in ("model", "checkpoints", "logs"):
        assert (tmp_path / "out" / sub).is_dir()
    assert_nothing_left(pid_dir, log, expect=2)


@pytest.mark.timeout(60)
def test_failing_replica_stops_the_others(tmp_path, pid_dir):
    log = Log()
    with pytest.raises(JobFailed) as info:
        launch(fake(pid_dir, "chief=sleep", "worker=exit:3", lines=30), [1, 1],
               str(tmp_path), grace_s=3600, log=log)  # a grace far past the test's timeout: it must not be waited
    res = info.value.result
    assert res.returncode == 3 and res.attempts == 1 and res.restarts == []
    f = res.failure
    assert (f.replica, f.role, f.exit_status) == ("workerpool1-0", "worker", 3)
    assert len(f.last_lines) == 20
    assert f.last_lines[-1] == "worker-0 action exit:3" and "worker-0 line 29" in f.last_lines
    message = str(info.value)
    assert message == f.describe()
    assert "worker-0 (workerpool1-0, attempt 1) exited with status 3" in message
    assert "  | worker-0 line 29" in message and "worker-0.log" in message
    # the sleeper dies on SIGTERM at once: no waiting for grace_s (the test's timeout, 60 s, is far below it)
    assert not any("sending SIGKILL" in line for line in log)
    assert any("stopping chief-0" in line for line in log)
    assert_nothing_left(pid_dir, log, expect=2)


@pytest.mark.timeout(60)
def test_sigterm_ignoring_replica_is_killed_after_grace(tmp_path, pid_dir):
    log = Log()
    ready = pid_dir / "chief-0.ready"
    start = time.monotonic()
    res = launch(fake(pid_dir, "chief=ignore-term", f"worker=exit-when:{ready}:5"), [1, 1],
                 str(tmp_path), grace_s=1.0, log=log, check=False)
    elapsed = time.monotonic() - start
    assert res.returncode == 5 and res.failure.name == "worker-0"
    assert elapsed >= 1.0, elapsed  # the grace was given (its end is bounded by the test's timeout, not here)
    assert any("chief-0 ignored SIGTERM for 1 s; sending SIGKILL" in line for line in log)
    assert_nothing_left(pid_dir, log, expect=2)


@pytest.mark.timeout(60)
def test_grandchildren_are_killed_and_signal_deaths_named(tmp_path, pid_dir):
    log = Log()
    ready = pid_dir / "chief-0.ready"  # written once the chief has spawned its grandchild
    res = launch(fake(pid_dir, "chief=spawn", f"worker=exit-when:{ready}:-9"), [1, 1],
                 str(tmp_path), grace_s=0.5, log=log, check=False)
    assert res.returncode == 128 + 9
    assert res.failure.exit_status == -9
    assert "exited with status -9 (SIGKILL)" in res.failure.describe()
    replicas, children = _pids(pid_dir, log)
    assert len(children) == 1
    assert_nothing_left(pid_dir, log, expect=2)


@pytest.mark.timeout(60)
def test_timeout(tmp_path, pid_dir):
    start = time.monotonic()
    log = Log()
    with pytest.raises(JobFailed) as info:
        launch(fake(pid_dir, "*=sleep"), [1, 1], str(tmp_path), timeout_s=1.5, grace_s=0.5,
               log=log)
    elapsed = time.monotonic() - start
    res = info.value.result
    assert res.returncode == 124
    assert res.failure.timed_out_after == 1.5
    assert res.failure.still_running == ["chief-0", "worker-0"]
    assert str(info.value).startswith(
        "job timed out after 1.5 s (attempt 1); still running: chief-0, worker-0.")
    assert elapsed >= 1.5, elapsed  # not before the timeout (its end is bounded by the test's timeout)
    assert_nothing_left(pid_dir, log, expect=2)


@pytest.mark.timeout(60)
def test_restart_resumes(tmp_path, pid_dir):
    markers = tmp_path / "markers"
    markers.mkdir()
    log = Log()
    cmd = fake(pid_dir, "chief=ok", f"worker=fail-once:{markers}:1")
    res = launch(cmd, [1, 1], str(tmp_path / "out"), max_restarts=2, log=log)
    assert res.returncode == 0 and res.failure is None and res.attempts == 2
    assert len(res.restarts) == 1
    record = res.restarts[0]
    assert record.attempt == 2 and record.resumed_step == 7
    assert (record.failure.replica, record.failure.exit_status) == ("workerpool1-0", 1)
    assert "[launcher] restart 1/2: worker-0 exited with status 1; restarting all replicas" in log
    assert (tmp_path / "out/logs/replicas/attempt-2/worker-0.log").read_text().count("Resumed") == 1
    assert_nothing_left(pid_dir, log, expect=4)


@pytest.mark.timeout(60)
def test_no_restarts_left_fails(tmp_path, pid_dir):
    markers = tmp_path / "markers"
    markers.mkdir()
    cmd = fake(pid_dir, "chief=ok", f"worker=fail-once:{markers}:1")
    log = Log()
    res = launch(cmd, [1, 1], str(tmp_path), max_restarts=0, log=log, check=False)
    assert (res.returncode, res.attempts, res.restarts) == (1, 1, [])
    assert res.failure.last_lines[-1] == "worker-0 failing on purpose"
  # restarts that keep failing: every attempt used, then the failure
    res = launch(fake(pid_dir, "worker=kill-self"), [1, 1], str(tmp_path), max_restarts=1,
                 log=log, check=False)
    assert (res.returncode, res.attempts, len(res.restarts)) == (137, 2, 1)
    assert res.restarts[0].resumed_step is None
    assert ("[launcher] restart 1/1: worker-0 exited with status -9 (SIGKILL); "
            "restarting all replicas") in log
    assert_nothing_left(pid_dir, log, expect=6)


@pytest.mark.timeout(60)
def test_a_bad_config_exit_is_never_restarted(tmp_path, pid_dir):
    """Exit 2 (the trainer's "bad config or data", argparse's usage error) fails the job at once, restarts left
    or not: the same input would fail the same way. Another status still restarts."""
    log = Log()
    res = launch(fake(pid_dir, "chief=exit:2"), [1, 1], str(tmp_path), max_restarts=2, log=log, check=False)
    assert (res.returncode, res.attempts, res.restarts) == (2, 1, [])
    assert ("[launcher] not restarting: chief-0 exited with status 2 (bad config or input): a restart would fail "
            "the same way") in log
    res = launch(fake(pid_dir, "chief=exit:3"), [1], str(tmp_path), max_restarts=1, log=Log(), check=False,
                 permanent_statuses=(3,))
    assert (res.returncode, res.attempts) == (3, 1)
    res = launch(fake(pid_dir, "chief=exit:2"), [1], str(tmp_path), max_restarts=1, log=Log(), check=False,
                 permanent_statuses=())
    assert (res.returncode, res.attempts) == (2, 2)
    assert_nothing_left(pid_dir, log, expect=2)


#: A replica that dies as Keras 3 ``fit`` does under MultiWorkerMirroredStrategy: a traceback whose exception
#: message holds a tensor's repr over many lines (keras-team/keras#20585).
KERAS3_DEATH = """
import sys
print("Epoch 1/3", flush=True)
dump = "\\n".join(f"  {i}: <tf.Tensor: shape=(2,), numpy=array([{i}.0, {i}.5], dtype=float32)>," for i in range(30))
raise ValueError("Attempt to convert a value (PerReplica:{\\n" + dump + "\\n}) with an unsupported type "
                 "(<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.")
"""


@pytest.mark.timeout(60)
def test_the_replicas_own_error_and_the_hint_end_the_failure(tmp_path):
    """The failure's last lines are the replica's reason: its exception line, joined with the line that closes
    a message spanning lines (not the tensor dump between), then the known failure's hint."""
    with pytest.raises(JobFailed) as failed:
        launch([sys.executable, "-c", KERAS3_DEATH], [1], str(tmp_path), log=Log())
    failure = failed.value.result.failure
    assert failure.error_line == ("ValueError: Attempt to convert a value (PerReplica:{ … }) with an unsupported type "
                                  "(<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.")
    lines = failure.describe().splitlines()
    assert lines[0] == "chief-0 (workerpool0-0, attempt 1) exited with status 1."
    assert lines[-2] == f"  chief-0's error: {failure.error_line}"
    assert lines[-1].startswith("  hint: this is Keras 3's Model.fit under a multi-worker strategy")
    assert "trainer.env: {TF_USE_LEGACY_KERAS: \"1\"}" in lines[-1]
    assert failure.cause() == [line.strip() for line in lines[-2:]]
    assert any(line.startswith("  | ") for line in lines[1:-2])  # the last lines come before


def test_an_error_line_is_the_cause_without_its_prefix_and_no_hint_when_unknown():
    f = ReplicaFailure(replica="workerpool0-0", role="chief", exit_status=2,
                                last_lines=["error: training.steps: past the end"],
                                error_line="error: training.steps: past the end")
    assert f.cause() == ["chief-0's error: training.steps: past the end"]
    assert f.describe().splitlines()[-1] == "  chief-0's error: training.steps: past the end"
    assert ReplicaFailure("workerpool0-0", "chief", 1, []).cause() == []


@pytest.mark.timeout(60)
def test_parameter_servers_are_stopped_after_chief_and_workers(tmp_path, pid_dir):
    log = Log()
    res = launch(fake(pid_dir, "ps-0=sleep", "ps-1=ignore-term", "worker=sleep:0.3"),
                 [1, 2, 2, 0], str(tmp_path), grace_s=0.5, log=log)
    assert res.returncode == 0
    assert json.loads(log.env_of("ps-1")["TF_CONFIG"])["task"] == {"type": "ps", "index": 1}
    # the servers never exit alone: once the chief and the workers did, they were stopped (SIGTERM, the grace, then
    # SIGKILL for ps-1, which ignores SIGTERM), not waited for
    assert "[launcher] stopping ps-0, ps-1 (SIGTERM, then SIGKILL after 0.5 s)" in log
    assert "[launcher] ps-1 ignored SIGTERM for 0.5 s; sending SIGKILL" in log
    assert_nothing_left(pid_dir, log, expect=5)


@pytest.mark.timeout(60)
def test_chief_may_finish_first_and_evaluator_must_succeed(tmp_path, pid_dir):
    log = Log()
    res = launch(fake(pid_dir, "worker=sleep:0.5", "evaluator=sleep:0.3"), [1, 1, 0, 1],
                 str(tmp_path), log=log)
    assert res.returncode == 0
    assert log.index("[launcher] chief-0 exited with status 0") < \
        log.index("[launcher] worker-0 exited with status 0")
    tf = json.loads(log.env_of("evaluator-0")["TF_CONFIG"])
    assert tf["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in tf["cluster"]
    assert "workerpool3" in json.loads(log.env_of("evaluator-0")["CLUSTER_SPEC"])["cluster"]

    res = launch(fake(pid_dir, "evaluator=exit:4"), [1, 0, 0, 1], str(tmp_path), log=log,
                 check=False)
    assert res.returncode == 4 and res.failure.replica == "workerpool3-0"
    assert_nothing_left(pid_dir, log, expect=5)


@pytest.mark.timeout(60)
def test_parameter_server_rules_done_with_the_chief_and_a_dead_worker_tolerated(tmp_path, pid_dir):
    """done_when="chief": workers and ps are servers (they ignore SIGTERM here, as train_ps's do) and are
    killed at once when the chief is done; on_worker_failure="tolerate": a worker's death is logged, no restart."""
    log = Log()
    res = launch(fake(pid_dir, "chief=sleep:1.5", "evaluator=sleep:0.5", "worker-0=kill-self",
                      "worker-1=ignore-term", "ps=ignore-term"),
                 [1, 2, 1, 1], str(tmp_path), grace_s=30, log=log, max_restarts=2, done_when="chief",
                 on_worker_failure="tolerate")
    assert (res.returncode, res.attempts, res.restarts) == (0, 1, [])
    assert [(f.name, f.exit_status) for f in res.tolerated] == [("worker-0", -signal.SIGKILL)]
    assert ("[launcher] worker-0 exited with status -9 (SIGKILL); tolerated: the chief reschedules its steps "
            "on worker-1") in log
    assert log.index("[launcher] chief-0 exited with status 0") < log.index(
        "[launcher] stopping worker-1, ps-0 (SIGKILL: with the chief gone, servers hold nothing to save)")
    assert not any("ignored SIGTERM" in line for line in log)  # no grace spent on servers
    assert_nothing_left(pid_dir, log, expect=5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("actions,failed,status", [
    (("worker=kill-self",), "worker-1", 137),     # no worker left: the chief could not go on
    (("ps=exit:3",), "ps-0", 3),                   # a parameter server is never tolerated
    (("chief=exit:5",), "chief-0", 5),
])
@pytest.mark.process
def test_parameter_server_rules_restart_on_chief_ps_or_last_worker(tmp_path, pid_dir, actions, failed, status):
    log = Log()
    res = launch(fake(pid_dir, "chief=sleep", "worker=sleep", "ps=sleep", *actions), [1, 2, 1, 0], str(tmp_path),
                 grace_s=0.5, log=log, max_restarts=0, check=False, done_when="chief", on_worker_failure="tolerate")
    assert res.returncode == status and res.failure.name in ({failed, "worker-0"} if failed == "worker-1"
                                                            else {failed}), res.message
    assert_nothing_left(pid_dir, log, expect=4)


@pytest.mark.unit  # names a launcher, starts nothing: the launch is refused first
@pytest.mark.timeout(30)
def test_launch_rules_are_checked(tmp_path):
    with pytest.raises(ValueError, match="done_when must be one of all, chief, got 'workers'"):
        launch(["true"], [1], str(tmp_path), log=Log(), done_when="workers")
    with pytest.raises(ValueError, match="on_worker_failure must be one of restart, tolerate"):
        launch(["true"], [1], str(tmp_path), log=Log(), on_worker_failure="ignore")
    with pytest.raises(ValueError, match="'tolerate' needs done_when='chief'"):
        launch(["true"], [1], str(tmp_path), log=Log(), on_worker_failure="tolerate")


@pytest.mark.timeout(60)
@pytest.mark.process
def test_cli_parameter_server_rules(tmp_path, pid_dir, capsys):
    rc = launcher_cli.main(["--replicas", "1,2,1", "--base-output-dir", str(tmp_path), "--done-when", "chief",
                        "--on-worker-failure", "tolerate", "--", *fake(pid_dir, "chief=sleep:1", "worker-1=exit:9",
                                                                     "worker-0=sleep", "ps=sleep")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "[launcher] worker-1 exited with status 9; tolerated" in out and "[launcher] job succeeded" in out
    assert launcher_cli.main(["--replicas", "1", "--base-output-dir", str(tmp_path), "--on-worker-failure",
                          "tolerate", "--", "true"]) == 2
    assert "needs done_when='chief'" in capsys.readouterr().err
    assert_nothing_left(pid_dir, out, expect=4)


@pytest.mark.timeout(60)
def test_interrupt_in_library_use_cleans_up(tmp_path, pid_dir):
    class Interrupting(Log):
        def __call__(self, line):
            super().__call__(line)
            if line.startswith("[worker-0] worker-0 line 1"):
                raise KeyboardInterrupt
    log = Interrupting()
    with pytest.raises(KeyboardInterrupt):
        launch(fake(pid_dir, "*=ignore-term"), [1, 1], str(tmp_path), grace_s=0.5, log=log)
    assert_nothing_left(pid_dir, log, expect=2)


@pytest.mark.timeout(60)
def test_users_own_trainer_runs_unchanged(tmp_path):
    project = FAKES / "user_project"
    res = launch([sys.executable, "-m", "trainer.task", "--user_arg", "value"], [1, 1],
                 str(tmp_path), cwd=str(project), log=Log())
    assert res.returncode == 0
    chief = json.loads((tmp_path / "model" / "seen.json").read_text())
    worker = json.loads((tmp_path / "model" / "workertemp_0" / "seen.json").read_text())
    assert chief["argv"] == ["--user_arg", "value"] and chief["user_arg"] == "value"
    assert chief["spec"] == "trainer.task" and chief["module"] == "__main__"
    assert chief["task"] == {"type": "chief", "index": 0}
    assert worker["task"] == {"type": "worker", "index": 0} and worker["user_arg"] == "value"


@pytest.mark.timeout(30)
def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="non-empty"):
        launch([], [1], str(tmp_path), log=Log())
    with pytest.raises(ValueError, match="local directory"):
        launch(["true"], [1], "gs://bucket/x", log=Log())
    with pytest.raises(FileNotFoundError):
        launch(["/nonexistent/cmd"], [1, 1], str(tmp_path), log=Log())


# -- command line -----------------------------------------------------------------------------------
def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "jobs.local.launch", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, **kw)


@pytest.mark.timeout(90)
def test_cli_propagates_status_and_prints_failure(tmp_path, pid_dir):
    proc = _cli("--replicas", "1,1,0,0", "--base-output-dir", str(tmp_path), "--grace", "1",
                "--", *fake(pid_dir, "chief=sleep", "worker=exit:3"))
    started = proc.stdout
    assert proc.returncode == 3, proc.stderr
    assert "[worker-0] worker-0 action exit:3" in proc.stdout
    assert proc.stderr.startswith("launcher: job failed (exit 3): worker-0 (workerpool1-0, attempt 1)"
                                  " exited with status 3.")
    assert "  | worker-0 line 2" in proc.stderr and "Traceback" not in proc.stderr

    proc = _cli("--workerpool0", "1", "--workerpool1", "1", "--base-output-dir", str(tmp_path),
                "--job-id", "cli", "--", *fake(pid_dir))
    started += proc.stdout
    # the fake replicas never open their TF_CONFIG address: said in one line (jobs.local.launch.model_watch)
    assert proc.returncode == 0 and proc.stderr.startswith("launcher: warning: chief-0 and worker-0 never joined the "
                                                           "cluster they were given") and proc.stderr.count("\n") == 1
    assert '"CLOUD_ML_JOB_ID": "cli"' in proc.stdout and "[launcher] job succeeded" in proc.stdout

    proc = _cli("--replicas", "2,0", "--base-output-dir", str(tmp_path), "--", "true")
    assert proc.returncode == 2 and "workerpool0 (chief) replica count must be 1" in proc.stderr
    proc = _cli("--replicas", "1", "--base-output-dir", str(tmp_path))
    assert proc.returncode == 2 and "missing the worker command" in proc.stderr
    proc = _cli("--base-output-dir", str(tmp_path), "--", "/nonexistent/cmd")
    assert proc.returncode == 127 and "cannot start" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert_nothing_left(pid_dir, started, expect=4)


@pytest.mark.timeout(60)
@pytest.mark.process
def test_cli_main_in_process(tmp_path, pid_dir, capsys):
    rc = launcher_cli.main(["--replicas", "1", "--base-output-dir", str(tmp_path), "--timeout", "1",
                        "--grace", "0.2", "--", *fake(pid_dir, "chief=sleep")])
    assert rc == 124
    out, err = capsys.readouterr()
    assert "job timed out after 1 s (attempt 1); still running: chief-0." in err
    assert "Traceback" not in err
    assert_nothing_left(pid_dir, out, expect=1)


@pytest.mark.timeout(60)
def test_cli_sigterm_stops_everything(tmp_path, pid_dir):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "jobs.local.launch", "--replicas", "1,1", "--base-output-dir",
           str(tmp_path), "--grace", "0.5", "--", *fake(pid_dir, "*=ignore-term")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while len(list(pid_dir.glob("*.ready"))) < 2:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "got SIGTERM; all replicas stopped" in err and "Traceback" not in err
    assert_nothing_left(pid_dir, out, expect=2)
