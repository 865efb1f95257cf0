"""``vtp logs`` (jobs/commands/logs_cli.py): one command for a local run's replica logs and a Vertex job's (Cloud
Logging through the real client, against the stand-in), ``--replica`` and ``--follow``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.commands import logs_cli
from tests.standins.cloud_logging import LoggingStandIn
from tests.standins.vertex import VertexStandIn

NAME = "projects/my-proj/locations/europe-west4/customJobs/1000"


def _run(argv, sleep=lambda s: None):
    lines: list[str] = []
    return logs_cli.main(argv, out=lines.append, sleep=sleep), lines


def _local_run(tmp_path: Path) -> Path:
    base = tmp_path / "run"
    for attempt, replica, text in [(1, "chief-0", "epoch 1\nTraceback (most recent call last):\nValueError: x\n"),
                                   (1, "worker-0", "worker says\n"), (2, "chief-0", "resumed from step 40\n")]:
        folder = base / "logs" / "replicas" / f"attempt-{attempt}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{replica}.log").write_text(text)
    return base


def test_a_local_runs_replica_logs_every_attempt_and_one_replica(tmp_path):
    base = _local_run(tmp_path)
    status, lines = _run([str(base)])
    assert status == 0 and lines == ["attempt 1\tchief-0\tepoch 1", "attempt 1\tchief-0\tTraceback (most recent call last):",
                                     "attempt 1\tchief-0\tValueError: x", "attempt 1\tworker-0\tworker says",
                                     "attempt 2\tchief-0\tresumed from step 40"]
    status, lines = _run([str(base), "--replica", "worker-0", "--follow"])  # no run holds it: follow ends at once
    assert status == 0 and lines == ["attempt 1\tworker-0\tworker says", f"(no run holds {base} now: nothing more will come)"]


@pytest.mark.parametrize("argv,expected", [
    (["--replica", "chef-0"], "error: logs: --replica: 'chef-0' is not a replica name; valid forms: chief-0,"),
    (["--lines", "0"], "error: logs: --lines must be a whole number >= 1, got 0"),
    ([], "not a run folder with replica logs"),
])
def test_bad_input_is_one_error_line(tmp_path, capsys, argv, expected):
    status, _ = _run([str(tmp_path / "nothing"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and expected.replace("logs: ", "") in err[0].replace("logs: ", "")


def test_a_vertex_job_by_name_by_run_folder_and_by_gcp_resources(tmp_path):
    from jobs.cloud.vertex_jobs.job_runner import write_gcp_resources

    with LoggingStandIn() as logging:
        logging.lines("1000", "workerpool0-0", ["chief starts", "chief ends"])
        logging.add("1000", "workerpool1-0", "worker line", json_payload=False, severity="WARNING")
        status, by_name = _run([NAME, "--logging-endpoint", logging.url])
        folder = tmp_path / "run"
        folder.mkdir()
        (folder / "vertex_jobs.json").write_text(json.dumps({"attempts": [
            {"job": "projects/my-proj/locations/us-central1/customJobs/999", "state": "FAILED"},
            {"job": NAME, "state": "SUCCEEDED"}]}))
        _, by_folder = _run([str(folder), "--replica", "worker-0", "--logging-endpoint", logging.url])
        write_gcp_resources(str(tmp_path / "gcp_resources"), NAME, "europe-west4")
        _, by_file = _run([str(tmp_path / "gcp_resources"), "--replica", "chief-0", "--logging-endpoint", logging.url])
    assert status == 0
    assert [ln.split("\t")[0] + " " + ln.split("\t", 2)[2] for ln in by_name] == [
        "INFO chief-0 (workerpool0-0)\tchief starts", "INFO chief-0 (workerpool0-0)\tchief ends",
        "WARNING worker-0 (workerpool1-0)\tworker line"]
    assert by_folder[0] == ("(an earlier attempt: projects/my-proj/locations/us-central1/customJobs/999; vtp logs "
                            "projects/my-proj/locations/us-central1/customJobs/999)")
    assert [ln.rsplit("\t", 1)[1] for ln in by_folder[1:]] == ["worker line"]
    assert [ln.rsplit("\t", 1)[1] for ln in by_file] == ["chief starts", "chief ends"]


def test_follow_prints_new_lines_until_the_job_ends(tmp_path):
    from jobs.cloud.vertex_jobs import custom_job
    from tests.test_custom_job import _pools

    with VertexStandIn(custom_states=("RUNNING", "RUNNING", "RUNNING", "SUCCEEDED")) as vertex, \
            LoggingStandIn() as logging:
        name = custom_job.run(display_name="x", worker_pool_specs=_pools(), project="my-proj", location="europe-west4",
                              gcp_resources=str(tmp_path / "g"), api_endpoint=vertex.url, log=lambda s: None,
                              sleep=lambda s: None)
        job = name.rsplit("/", 1)[-1]
        vertex.gets[job] = 0  # run it again for the follower: RUNNING, RUNNING, RUNNING, SUCCEEDED
        logging.add(job, "workerpool0-0", "step 1")
        later = iter(["step 2", "step 3", "step 4"])

        def sleep(_):  # the job writes a line between two polls
            logging.add(job, "workerpool0-0", next(later))

        status, lines = _run([name, "--follow", "--logging-endpoint", logging.url, "--api-endpoint", vertex.url], sleep)
    assert status == 0
    assert [ln.rsplit("\t", 1)[1] for ln in lines[:-1]] == ["step 1", "step 2", "step 3", "step 4"]
    assert lines[-1] == f"({job} ended SUCCEEDED)"


def test_cloud_logging_out_of_reach_is_one_error_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "1")
    with LoggingStandIn() as logging:
        logging.fault(403, r"/v2/entries:list", times=None, message="Permission denied on logging.logEntries.list")
        status, lines = _run([NAME, "--logging-endpoint", logging.url])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and lines == [] and len(err) == 1
    assert err[0].startswith("error: reading the logs of job 1000: ") and "403 Permission denied" in err[0]
