"""Issue 40: why a Vertex job failed (its failed replicas' last lines from Cloud Logging, one hint line), and the
training step's fall-over to the next placement option when Vertex has no capacity.

Cloud Logging is the real client (google-cloud-logging's HTTP JSON client) against ``tests.standins.cloud_logging``
(``ListLogEntriesRequest`` decoded strictly); Vertex is ``tests.standins.vertex``; the compiled step runs as
Vertex runs it (``tests.test_custom_job``'s executor).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from jobs.rules import vertex_failures
from tests.standins.cloud_logging import LoggingStandIn
from tests.standins.vertex import VertexStandIn

NAME = "projects/my-proj/locations/europe-west4/customJobs/1000"
STOCKOUT = "Resources are insufficient in region: europe-west4. Please try a different region."
TRACEBACK = ["Epoch 1/3", "Traceback (most recent call last):", '  File "/app/trainer/task.py", line 12, in <module>',
             "    main()", "ValueError: --learning_rate must be > 0, got -1.0"]


# -- the classifier: data with sources ----------------------------------------------------------------------
@pytest.mark.parametrize("message,lines,kind", [
    (STOCKOUT, [], "capacity"),
    ("The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_h100_gpus",
     [], "quota"),
    ("The replica workerpool0-0 exited with a non-zero status of 137. Termination reason: OOMKilled.", [], "out_of_memory"),
    ("The replica workerpool0-0 exited with a non-zero status of 1.", ["Failed to pull image \"x\": manifest unknown"],
     "image_pull"),
    ("The replica workerpool0-0 exited with a non-zero status of 1.",
     ["Traceback (most recent call last):", "google.api_core.exceptions.Forbidden: 403 GET ...: trainer@p.iam "
      "does not have storage.objects.get access to the Google Cloud Storage object."], "permission"),
    ("The replica workerpool0-0 exited with a non-zero status of 1.", TRACEBACK, "user_code"),
    ("The replica workerpool0-0 exited with a non-zero status of 1.", ["just a line"], None),
])
def test_each_known_cause_is_one_hint(message, lines, kind):
    cause = vertex_failures.classify(message, lines, "europe-west4")
    assert (cause.kind if cause else None) == kind
    if kind == "user_code":
        assert cause.hint == "your code raised: ValueError: --learning_rate must be > 0, got -1.0"
    if cause is not None:
        assert "\n" not in cause.hint and cause.falls_over == (kind == "capacity")


def test_every_cause_has_its_source_and_the_data_its_date():
    import yaml

    doc = yaml.safe_load(Path(vertex_failures.DATA).read_text())
    assert str(doc["read"]) == "2026-11-27"
    for c in doc["causes"]:
        assert c["sources"] and c["patterns"] and c["hint"], c["what"]
        assert c["falls_over"] == (c["kind"] == "capacity"), c["what"]  # never for code, a request or quota


def test_replica_names_map_both_ways():
    assert vertex_failures.failed_tasks("The replica workerpool1-2 exited ... and workerpool1-2, workerpool0-0") == \
        ["workerpool1-2", "workerpool0-0"]
    assert [vertex_failures.replica_of(t) for t in ("workerpool0-0", "workerpool1-3", "workerpool2-0",
                                                    "workerpool3-0")] == ["chief-0", "worker-3", "ps-0", "evaluator-0"]
    assert vertex_failures.task_of("worker-1") == "workerpool1-1" and vertex_failures.task_of("chef-0") is None


# -- Cloud Logging: the stand-in's answers and faults, each a bounded line ------------------------------------
@pytest.fixture
def fast_policy(monkeypatch):
    monkeypatch.setenv("VTP_CLOUD_READ_TIMEOUT_S", "1")
    monkeypatch.setenv("VTP_CLOUD_CONNECT_TIMEOUT_S", "1")
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "2")
    monkeypatch.setenv("VTP_CLOUD_RETRY_FIRST_S", "0.1")


def test_entries_come_newest_first_bounded_and_are_shown_oldest_first(fast_policy):
    from jobs.cloud.apis import job_logs

    with LoggingStandIn() as logging:
        logging.lines("1000", "workerpool0-0", [f"line {i}" for i in range(50)])
        logging.add("1000", "workerpool0-0", "a text payload", json_payload=False)
        logging.add("1000", "workerpool1-0", "another replica")
        logging.add("999", "workerpool0-0", "another job")
        entries = job_logs.read(NAME, project="my-proj", task="workerpool0-0", endpoint=logging.url, limit=5)
        (request,) = logging.requests
        few = job_logs.read(NAME, project="my-proj", task="workerpool0-0", endpoint=logging.url, max_bytes=21)
    assert [e.message for e in entries] == ["line 46", "line 47", "line 48", "line 49", "a text payload"]
    body = request.json()
    assert body["orderBy"] == "timestamp desc" and body["pageSize"] == 5 and body["resourceNames"] == ["projects/my-proj"]
    assert body["filter"].startswith('resource.type="ml_job" AND resource.labels.job_id="1000" AND '
                                     'resource.labels.task_name="workerpool0-0"')
    assert [e.message for e in few] == ["line 49", "a text payload"]  # 21 bytes: the newest that fit
    line = entries[-1].line()
    assert line.startswith("INFO\t20") and line.endswith("\tchief-0 (workerpool0-0)\ta text payload")


@pytest.mark.parametrize("fault,expected", [
    (403, "403 stand-in fault 403"),
    (503, "gave up after retrying for 2 s: 503"),
    ("drop", "dropped before an answer came"),
    ("hang", "no answer from 127.0.0.1:"),
    ("html", "the answer was not the API's JSON"),
])
def test_cloud_logging_faults_are_one_line_never_a_traceback_or_a_hang(fast_policy, capsys, fault, expected):
    from jobs.cloud.apis import job_logs
    from jobs.rules.errors import CloudError

    started = time.monotonic()
    with LoggingStandIn() as logging:
        logging.fault(fault, r"/v2/entries:list", times=None)
        with pytest.raises(CloudError) as err:
            job_logs.read(NAME, project="my-proj", task="workerpool0-0", endpoint=logging.url)
    assert time.monotonic() - started < 30
    text = str(err.value)
    assert "\n" not in text and text.startswith("reading the logs of chief-0 1000: ") and expected in text
    retries = [ln for ln in capsys.readouterr().err.splitlines() if ln]
    assert all(ln.startswith("warning: Cloud Logging: reading the logs of chief-0 1000: ") for ln in retries)


def test_a_request_the_real_api_would_refuse_is_refused_by_the_standin():
    """The stand-in decodes the body as the real ListLogEntriesRequest: an unknown field is a 400."""
    import requests

    with LoggingStandIn() as logging:
        answer = requests.post(logging.url + "/v2/entries:list", json={"resourceNames": ["projects/p"],
                                                                      "filtr": "x"}, timeout=10)
    assert answer.status_code == 400 and "filtr" in answer.json()["error"]["message"]


# -- a failed CustomJob: its replica's last lines and the hint, in the step's console -------------------------
def _step(tmp_path):
    from tests.test_custom_job import _compiled, _inputs, _pools

    return _compiled(tmp_path), _inputs, _pools()


def test_a_failed_custom_job_shows_the_failed_replicas_last_lines_and_the_hint(tmp_path):
    from tests.test_custom_job import run_executor

    compiled, inputs, pools = _step(tmp_path)
    message = "The replica workerpool0-0 exited with a non-zero status of 1. To find out more about why your job exited please check the logs: https://console.cloud.google.com/logs/viewer?..."
    with VertexStandIn(custom_states=("RUNNING", "FAILED"), custom_error=message) as vertex, LoggingStandIn() as logging:
        logging.lines("1000", "workerpool0-0", TRACEBACK)
        logging.add("1000", "workerpool1-0", "worker-0's own line")
        proc = run_executor(compiled, inputs(pools, vertex.url, logging_endpoint=logging.url), tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    out = proc.stdout
    assert "hint:" in out, proc.stderr[-3000:]
    assert "chief-0's last 5 lines (Cloud Logging):\n  Epoch 1/3\n  Traceback (most recent call last):" in out
    assert "  ValueError: --learning_rate must be > 0, got -1.0\n" in out
    assert "worker-0's own line" not in out
    assert "hint: your code raised: ValueError: --learning_rate must be > 0, got -1.0" in out
    assert ("the job in the console: https://console.cloud.google.com/agent-platform/locations/europe-west4/training/"
            "1000?project=my-proj") in out
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert line.endswith("ended FAILED: " + " ".join(message.split()))
    print(out)


def test_cloud_logging_out_of_reach_is_one_line_and_the_error_still_comes(tmp_path, fast_policy):
    from jobs.cloud.vertex_jobs import custom_job
    from jobs.rules.errors import CloudError
    from tests.test_custom_job import _pools

    lines: list[str] = []
    with VertexStandIn(custom_states=("FAILED",)) as vertex, LoggingStandIn() as logging:
        logging.fault(403, r"/v2/entries:list", times=None, message="Permission 'logging.logEntries.list' denied")
        with pytest.raises(CloudError, match="ended FAILED"):
            custom_job.run(display_name="x", worker_pool_specs=_pools(), project="my-proj", location="europe-west4",
                           gcp_resources=str(tmp_path / "g"), api_endpoint=vertex.url, logging_endpoint=logging.url,
                           log=lines.append, sleep=lambda s: None)
    (said,) = [ln for ln in lines if "could not be read" in ln]
    assert "403 Permission 'logging.logEntries.list' denied" in said
    assert said.endswith("see them with gcloud ai custom-jobs stream-logs 1000 --region europe-west4 --project "
                         "my-proj --task-name workerpool0-0")


# -- capacity fall-over ------------------------------------------------------------------------------------
PLACEMENT = [{"region": "europe-west4", "strategy": "STANDARD"}, {"region": "us-central1", "strategy": "STANDARD"},
             {"region": "us-central1", "strategy": "SPOT"}]


def _trainer(base: Path, seen: list):
    """What the stand-in's jobs "run": a trainer that resumes from the latest ``ckpt-<step>.index`` in
    ``<base>/checkpoints`` and checkpoints 40 steps further while RUNNING."""
    def on_state(job, state):
        if state != "RUNNING":
            return
        folder = base / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        steps = [int(p.name[5:-6]) for p in folder.glob("ckpt-*.index")]
        resumed = max(steps, default=0)
        seen.append((job.name.split("/")[3], job.job_spec.base_output_directory.output_uri_prefix, resumed))
        (folder / f"ckpt-{resumed + 40}.index").write_text("")
    return on_state


def test_a_stockout_falls_over_to_the_next_region_and_the_trainer_resumes(tmp_path):
    from tests.test_custom_job import run_executor

    compiled, inputs, pools = _step(tmp_path)
    base = tmp_path / "run"
    seen: list = []
    with VertexStandIn(custom_by_location={"europe-west4": (("RUNNING", "FAILED"), STOCKOUT)},
                       on_custom_state=_trainer(base, seen)) as vertex, LoggingStandIn() as logging:
        proc = run_executor(compiled, inputs(pools, vertex.url, logging_endpoint=logging.url, placement=PLACEMENT,
                                             base_output_directory=str(base)), tmp_path)
        creates = vertex.calls("POST", r"/customJobs$")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [c.path.split("/")[5] for c in creates] == ["europe-west4", "us-central1"]
    assert {c.json()["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for c in creates} == {str(base)}
    assert seen == [("europe-west4", str(base), 0), ("us-central1", str(base), 40)]  # resumed from step 40
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("fall-over:")]  # the list of earlier pipelines
    assert line == ("fall-over: CustomJob 1000 in europe-west4 STANDARD ended for no capacity (stockout) in the region; "
                    "creating it again in us-central1 STANDARD with the same output directory: the trainer resumes "
                    "from checkpoint step 40")
    assert "hint: no capacity: Vertex has not enough of these machines in europe-west4" in proc.stdout
    assert "Cloud Logging" not in proc.stdout  # no replica ran out of capacity: no logs asked for
    # gcp_resources names the job that ran (GCPC cancels through it); the attempts are recorded
    resources = json.loads((tmp_path / "gcp_resources").read_text())
    assert resources["resources"][0]["resourceUri"].endswith("/locations/us-central1/customJobs/1001")
    attempts = json.loads((base / "vertex_jobs.json").read_text())["attempts"]
    assert [(a["region"], a["state"], a.get("cause"), a.get("resumes_from")) for a in attempts] == [
        ("europe-west4", "FAILED", "capacity", "checkpoint step 40"), ("us-central1", "SUCCEEDED", None, None)]
    print(proc.stdout)


@pytest.mark.parametrize("error,lines", [
    ("The replica workerpool0-0 exited with a non-zero status of 1.", TRACEBACK),
    ("The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus", []),
    ("The replica workerpool0-0 exited with a non-zero status of 1.", ["no known cause here"]),
])
def test_user_code_quota_or_an_unknown_cause_never_fall_over(tmp_path, error, lines):
    from jobs.cloud.vertex_jobs import custom_job
    from jobs.rules.errors import CloudError
    from tests.test_custom_job import _pools

    said: list[str] = []
    with VertexStandIn(custom_states=("RUNNING", "FAILED"), custom_error=error) as vertex, LoggingStandIn() as logging:
        logging.lines("1000", "workerpool0-0", lines)
        with pytest.raises(CloudError) as err:
            custom_job.run(display_name="x", worker_pool_specs=_pools(), project="my-proj", location="europe-west4",
                           gcp_resources=str(tmp_path / "g"), api_endpoint=vertex.url, logging_endpoint=logging.url,
                           placement=PLACEMENT, base_output_directory=str(tmp_path / "run"), log=said.append,
                           sleep=lambda s: None)
        assert len(vertex.calls("POST", r"/customJobs$")) == 1
    assert not [ln for ln in said if ln.startswith("fall-over")]
    assert str(err.value).endswith("ended FAILED: " + error)


def test_fall_over_is_bounded_by_the_list_and_by_the_timeout(tmp_path):
    from jobs.cloud.vertex_jobs import custom_job
    from jobs.rules.errors import CloudError
    from tests.test_custom_job import _pools

    spec = dict(display_name="x", worker_pool_specs=_pools(), project="my-proj", location="europe-west4",
                base_output_directory=str(tmp_path / "run"), sleep=lambda s: None, log=lambda s: None)
    everywhere = {r: (("FAILED",), f"Resources are insufficient in region: {r}") for r in ("europe-west4", "us-central1")}
    with VertexStandIn(custom_by_location=everywhere) as vertex:
        with pytest.raises(CloudError, match="no placement option is left to fall over to$"):
            custom_job.run(gcp_resources=str(tmp_path / "a"), api_endpoint=vertex.url, placement=PLACEMENT,
                           logging_endpoint="http://127.0.0.1:9", **spec)
        assert len(vertex.calls("POST", r"/customJobs$")) == 3  # each option once
        # the timeout in all: the second job gets what is left of it; too little left: no third
        ticks = iter([0.0, 100.0, 3560.0])  # the start, each failure
        with pytest.raises(CloudError, match="scheduling.timeout leaves 40 s, too little to start again$"):
            custom_job.run(gcp_resources=str(tmp_path / "b"), api_endpoint=vertex.url, placement=PLACEMENT,
                           timeout="3600s", clock=lambda: next(ticks), logging_endpoint="http://127.0.0.1:9", **spec)
        creates = vertex.calls("POST", r"/customJobs$")[3:]
    assert [c.json()["jobSpec"]["scheduling"]["timeout"] for c in creates] == ["3600s", "3500s"]


def test_resume_point_says_what_it_can_read(tmp_path):
    from jobs.cloud.vertex_jobs.custom_job import resume_point

    assert resume_point(str(tmp_path)) == f"step 0 (no checkpoint in {tmp_path}/checkpoints)"
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-120"\n')
    assert resume_point(str(tmp_path)) == "checkpoint step 120"
    (tmp_path / "checkpoints" / "checkpoint").unlink()
    (tmp_path / "checkpoints" / "backup").mkdir()
    (tmp_path / "checkpoints" / "backup" / "training_metadata.json").write_text('{"epoch": 2, "batch": 7}')
    assert resume_point(str(tmp_path)) == "the Keras backup of epoch 2 (batch 7)"
    assert "no /gcs mount" in resume_point("gs://b/run") or os.path.isdir("/gcs")


def test_the_report_lists_the_vertex_attempts(tmp_path):
    from jobs.steps.reporting import data as report_data

    (tmp_path / "vertex_jobs.json").write_text(json.dumps({"attempts": [
        {"region": "europe-west4", "strategy": "STANDARD", "job": NAME, "state": "FAILED", "cause": "capacity",
         "fell_over_to": "us-central1 STANDARD", "resumes_from": "checkpoint step 40"},
        {"region": "us-central1", "strategy": "STANDARD", "job": "projects/my-proj/locations/us-central1/customJobs/1001",
         "state": "SUCCEEDED"}]}))
    built = report_data.gather(None, str(tmp_path), verification={})
    assert ("Vertex CustomJob 1000 in europe-west4 STANDARD: FAILED; fell over to us-central1 STANDARD, resuming from "
            "checkpoint step 40") in built["html"]
    assert "Vertex CustomJob 1001 in us-central1 STANDARD: SUCCEEDED" in built["html"]
    assert ("Vertex fell over: CustomJob 1000 in europe-west4 STANDARD ended FAILED (capacity); went on in us-central1 "
            "STANDARD from checkpoint step 40.") in built["markdown"]
