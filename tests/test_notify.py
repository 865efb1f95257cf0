"""``notify:`` (issue 53, item 2): a run's end, with its cause, sent to a webhook whose URL is a secret.

The section's rules; the message built from a run's records (the failure the failed step recorded for this run, the
model and its verdict, the cost, the links, bounded); delivery to strict stand-ins of Google Chat's, Slack's and a
plain JSON webhook, and every way delivery fails (500, no answer, a redirect to another host, a refused connection,
plain http): one ``warning:`` line, never the URL, the run's outcome its own; the URL read from Secret Manager through
the real client against a strict stand-in; the pipelines compiled with the exit handler and never the URL; and a
local run through ``kfp.local`` whose failure reaches the webhook with the replica's own error (integration).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from jobs.cloud.apis import notify as sender
from jobs.rules import preflight, validate
from jobs.run_records import records
from jobs.steps import calls as steps, notify_message
from tests.conftest import ROOT
from tests.standins.base import StandIn
from tests.standins.secret_manager import SecretManager
from tests.standins.webhook import SECRET_PATH, WebhookStandIn
from tests.test_project import fast_policy  # noqa: F401  (autouse: the policy's 1 s timeouts, 2 s of retries)
from jobfile import config as config_lib
from jobfile.config_notify import Webhook
from jobfile.errors import ConfigError

SECRET = "projects/my-proj/secrets/run-webhook/versions/latest"


def job(tmp_path: Path, *overrides: str) -> config_lib.JobConfig:
    return config_lib.load("local", [f"output.base_dir={tmp_path / 'run'}", *overrides])


def said() -> tuple[list[str], callable]:
    lines: list[str] = []
    return lines, lines.append


# ---- the section ---------------------------------------------------------------------------------------------------

def test_a_url_in_the_job_file_is_refused_in_one_line_that_never_repeats_it():
    with pytest.raises(ConfigError) as caught:
        validate.load("local", ["notify.webhook.url_env=https://hooks.slack.com/services/T0/B0/XYZSECRET"],
                      check_data=False)
    (line,) = [str(p) for p in caught.value.problems]
    assert line.startswith("notify.webhook.url_env: holds a URL: the webhook's URL is a secret and never goes into "
                           "the job file")
    assert "XYZSECRET" not in line and "url_secret: projects/PROJECT/secrets/run-webhook/versions/latest" in line


@pytest.mark.parametrize("overrides, expected", [
    (["notify.webhook.url_env=A", f"notify.webhook.url_secret={SECRET}"], "notify.webhook: names both url_env and url_secret"),
    (["notify.webhook.url_env=1X"], "notify.webhook.url_env: '1X' is not an environment variable's name"),
    (["notify.webhook.url_secret=projects/p/secrets/s"], "notify.webhook.url_secret: 'projects/p/secrets/s' is not a "
                                                          "Secret Manager version"),
    (["notify.webhook.format=slack"], "notify.webhook.format: 'slack' is set but no URL is named"),
    (["notify.webhook.url_env=HOOK", "notify.on=[]"], "notify.on: is empty"),
    (["notify.email=[someone]"], "notify.email[0]: 'someone' is not an e-mail address"),
    (["notify.on=[failure]"], "notify.on[0]: 'failure' is not allowed (did you mean 'failed'?)"),
])
def test_each_rule_of_the_section_is_one_line_naming_the_field(overrides, expected):
    with pytest.raises(ConfigError) as caught:
        validate.load("local", overrides, check_data=False)
    lines = [str(p) for p in caught.value.problems]
    assert len(lines) == 1 and lines[0].startswith(expected), lines


def test_a_vertex_run_cannot_read_this_machines_variable_and_is_told_to_use_a_secret():
    cfg = config_lib.load("multiworker", ["notify.webhook.url_env=VTP_WEBHOOK_URL"])
    assert not validate.validate(cfg, check_data=False).errors  # fine for a run here
    errors, _ = preflight.job_problems(cfg, "my-proj", "us-central1")
    (line,) = [str(e) for e in errors if e.field.startswith("notify")]
    assert line.startswith("notify.webhook.url_env: $VTP_WEBHOOK_URL is this machine's variable, which a run on Vertex "
                           "never sees") and "notify.webhook.url_secret=projects/PROJECT/secrets/" in line
    secret = config_lib.load("multiworker", [f"notify.webhook.url_secret={SECRET}"])
    assert not [e for e in preflight.job_problems(secret, "my-proj", "us-central1")[0] if e.field.startswith("notify")]


# ---- the message ---------------------------------------------------------------------------------------------------

def test_the_message_carries_this_runs_cause_the_replicas_lines_and_the_links(tmp_path):
    cfg = job(tmp_path, "notify.webhook.url_env=HOOK")
    base = config_lib.resolved_base_dir(cfg)
    lines = [f"step {i}: loss {1 / (i + 1):.3f}" for i in range(40)] + ["RuntimeError: on purpose"]
    records.write_failure(base, "run-7", "train", "chief-0's error: RuntimeError: on purpose", replica="chief-0",
                          cause={"kind": "user_code", "what": "chief-0 exited with status 1", "hint": "fix the lr"},
                          lines=lines)
    msg = notify_message.message(cfg, "FAILED", error="Task exit-handler-1 failed.", run_id="run-7")
    assert msg["run"] == {"job": cfg.name, "state": "FAILED", "where": "on this machine", "folder": base,
                          "pipeline_job": None, "run_id": "run-7"}
    cause = msg["cause"]
    assert (cause["step"], cause["replica"], cause["kind"], cause["hint"]) == ("train", "chief-0", "user_code", "fix the lr")
    assert cause["last_lines"] == lines[-records.FAILURE_LINES:]  # bounded: the last 20
    text = msg["text"].splitlines()
    assert text[0] == f"vtp: {cfg.name} FAILED on this machine"
    assert text[1] == "cause in step train: chief-0 exited with status 1: chief-0's error: RuntimeError: on purpose"
    assert text[2] == "hint: fix the lr" and text[3] == "last 20 lines of chief-0:" and text[-3].endswith("on purpose")
    assert "model: none verified (the run ended before the verify step)" in msg["text"]
    assert msg["cost"]["basis"].startswith("on Vertex: the plan's list price") and msg["cost"]["per_hour_usd"] > 0
    # another run's record is not this run's cause: the final state's own message is said instead
    other = notify_message.message(cfg, "FAILED", error="Task exit-handler-1 failed.", run_id="run-8")
    assert other["cause"]["error"] == "Task exit-handler-1 failed." and other["cause"]["last_lines"] == []


def test_a_step_that_records_no_run_id_is_matched_by_the_runs_creation_time(tmp_path):
    base = str(tmp_path)
    records.write_failure(base, "", "custom-training-job", "CustomJob ... ended FAILED: stockout")
    written = records.read_at(base, records.FAILURE_RECORD)["written"]
    assert records.read_failure(base, "uuid-1", "2020-01-01T00:00:00Z")["step"] == "custom-training-job"
    assert records.read_failure(base, "uuid-1", "2999-01-01T00:00:00.5Z") == {}  # written before this run began
    assert records.read_failure(base, "uuid-1", "{{$.pipeline_job_create_time_utc}}") == {}  # unresolved: no match
    assert written.endswith("+00:00")


def test_a_long_message_is_cut_to_the_bound_oldest_lines_first(tmp_path):
    cfg = job(tmp_path)
    records.write_failure(config_lib.resolved_base_dir(cfg), "r", "train", "boom", lines=["x" * 300] * 20)
    text = notify_message.message(cfg, "FAILED", run_id="r")["text"]
    assert len(text) <= notify_message.TEXT_MAX and text.count("x" * 300) < 20 and "cost:" in text


def test_a_succeeded_runs_message_names_the_model_its_verdict_and_the_report(tmp_path):
    cfg = job(tmp_path, "serving.gate.thresholds=[eval_accuracy >= 0.8]")
    base = Path(config_lib.resolved_base_dir(cfg))
    base.mkdir(parents=True)
    records.write_at(str(base), records.VERIFICATION_RECORD, {
        "model_dir": str(base / "model"), "signature": "serving_default", "instances": 2,
        "eval": {"task": "classification", "examples": 50, "accuracy": 0.41, "baseline_accuracy": 0.34}})
    records.write_at(str(base), records.GATE_RECORD, {"passed": False, "missed": "serving.gate.thresholds[0]: "
                     "eval_accuracy 0.41 >= 0.8 missed, so the model is not registered"})
    (base / records.REPORT_PAGE).write_text("<html></html>")
    msg = notify_message.message(cfg, "SUCCEEDED")
    assert msg["cause"] is None and msg["links"]["report"] == str(base / records.REPORT_PAGE)
    assert msg["model"]["verdict"] == ("on 50 held-out examples (serving.eval_data): accuracy 0.410 (the most common "
                                       "class: 0.340); gate missed: serving.gate.thresholds[0]: eval_accuracy 0.41 >= "
                                       "0.8 missed; the model is not registered")
    assert f"report: {base / records.REPORT_PAGE}" in msg["text"]


def test_a_vertex_runs_message_links_the_console_and_the_reports_bucket_url():
    cfg = config_lib.load("multiworker", ["output.base_dir=gs://team/runs/mw"])
    msg = notify_message.message(cfg, "SUCCEEDED", pipeline_job="projects/p/locations/us-central1/pipelineJobs/mw-1",
                                 on_vertex=True)
    assert msg["links"]["console"] == ("https://console.cloud.google.com/vertex-ai/locations/us-central1/pipelines/"
                                       "runs/mw-1?project=p")
    assert msg["links"]["report"] == "https://storage.cloud.google.com/team/runs/mw/report.html"
    assert msg["text"].startswith("vtp: flowers-multiworker SUCCEEDED on Vertex AI (pipeline job mw-1)")


# ---- delivery ------------------------------------------------------------------------------------------------------

def message(tmp_path) -> dict:
    cfg = job(tmp_path)
    records.write_failure(config_lib.resolved_base_dir(cfg), "r1", "train", "chief-0's error: ValueError: bad lr",
                          replica="chief-0", lines=["Traceback (most recent call last):", "ValueError: bad lr"])
    return notify_message.message(cfg, "FAILED", run_id="r1")


@pytest.mark.parametrize("kind", ["json", "slack", "chat"])
def test_each_kind_of_webhook_receives_the_message_it_takes(tmp_path, kind):
    msg = message(tmp_path)
    with WebhookStandIn(kind) as hook:
        lines, say = said()
        sent = sender.send(Webhook(url_env="HOOK", format=kind), msg, env={"HOOK": hook.hook_url}, say=say)
        assert sent, lines
        (body,) = hook.received
    assert body["text"] == msg["text"] and "ValueError: bad lr" in body["text"]
    if kind == "json":
        assert body == json.loads(json.dumps(msg))
    else:
        assert set(body) == {"text"}
    assert lines == [f"notify: the run's end (FAILED) was sent to the webhook in $HOOK"]


def test_auto_picks_the_body_by_host():
    assert sender.format_for(Webhook(url_env="H"), "https://hooks.slack.com/services/a/b/c") == "slack"
    assert sender.format_for(Webhook(url_env="H"), "https://chat.googleapis.com/v1/spaces/A/messages?key=k") == "chat"
    assert sender.format_for(Webhook(url_env="H"), "https://example.com/hook") == "json"


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}{SECRET_PATH}"


@pytest.mark.parametrize("fault, said_", [
    (500, "it answered 500"),
    ("hang", "no answer within 1 s"),
    ("drop", "the connection was dropped before an answer"),
    ("redirect", "it answered 302, a redirect to another host (127.0.0.2), which is never followed"),
    ("refused", "the connection was refused"),
])
def test_a_webhook_that_fails_is_one_warning_that_never_names_the_url(tmp_path, fault, said_):
    msg = message(tmp_path)
    with WebhookStandIn("json") as hook, WebhookStandIn("json") as elsewhere:
        url = hook.hook_url
        if fault == "redirect":
            hook.redirect_to(elsewhere.hook_url.replace("127.0.0.1", "127.0.0.2"))
        elif fault == "refused":
            url = _closed_port_url()
        elif fault is not None:
            hook.fault(fault, times=None)
        lines, say = said()
        assert sender.send(Webhook(url_env="HOOK"), msg, env={"HOOK": url}, say=say) is False
        assert elsewhere.requests == [] and hook.received == []
    (line,) = lines
    assert line.startswith("warning: notify: the run's end (FAILED) was not sent to the webhook in $HOOK: ")
    assert said_ in line, line
    assert "T000-secret" not in line and "/hooks/" not in line


def test_a_redirect_to_the_same_host_keeping_the_post_is_followed(tmp_path):
    msg = message(tmp_path)
    with WebhookStandIn("json", path="/hooks/new-secret") as hook:
        hook.route("POST", r"/hooks/old-secret", lambda req, m: (308, "", {"Location": "/hooks/new-secret"}))
        hook.routes.insert(0, hook.routes.pop())  # before the catch-all
        lines, say = said()
        assert sender.send(Webhook(url_env="HOOK"), msg, env={"HOOK": hook.url + "/hooks/old-secret"}, say=say), lines
        assert len(hook.received) == 1


@pytest.mark.parametrize("url, why", [
    ("http://hooks.example.com/T000-secret", "is http:// , not https:// (the secret would travel in clear): not sent"),
    ("hooks.example.com/T000-secret", "is not a URL: not sent"),
])
def test_a_url_that_is_not_https_is_never_sent_to(tmp_path, url, why):
    lines, say = said()
    assert sender.send(Webhook(url_env="HOOK"), message(tmp_path), env={"HOOK": url}, say=say) is False
    assert lines == [f"warning: notify: the run's end (FAILED) was not sent: the webhook URL in $HOOK {why}"]


def test_a_variable_that_is_not_set_is_one_warning(tmp_path):
    lines, say = said()
    assert sender.send(Webhook(url_env="NO_SUCH_HOOK"), message(tmp_path), env={}, say=say) is False
    assert lines == ["warning: notify: the run's end (FAILED) was not sent: notify.webhook.url_env: $NO_SUCH_HOOK is "
                     "not set in the environment of the step that sends (a run on Vertex never sees this machine's "
                     "variables: use notify.webhook.url_secret there)"]


# ---- the URL from Secret Manager -----------------------------------------------------------------------------------

def test_the_url_is_read_from_a_secret_manager_version_through_the_real_client(tmp_path):
    msg = message(tmp_path)
    with WebhookStandIn("chat") as hook, StandIn() as api:
        secrets = SecretManager(api, secrets={SECRET: hook.hook_url + "\n"})
        lines, say = said()
        assert sender.send(Webhook(url_secret=SECRET, format="chat"), msg, api_endpoint=api.url, say=say), lines
        assert secrets.accessed == [SECRET] and len(hook.received) == 1
        (access,) = api.calls("GET", ":access")
        assert "authorization" not in {k.lower() for k in access.headers}  # a loopback stand-in: no token
    assert lines == [f"notify: the run's end (FAILED) was sent to the webhook in secret {SECRET}"]


@pytest.mark.parametrize("setup, said_", [
    (lambda api, s: api.fault(403, ":access", times=None), "reading projects/my-proj/secrets/run-webhook/versions/latest:"
                                                           " 403"),
    (lambda api, s: s.secrets.clear(), "404"),
    (lambda api, s: s.damaged.add(SECRET), "the payload does not match its CRC32C"),
    (lambda api, s: api.fault(503, ":access", times=None), "gave up"),
])
def test_a_secret_that_cannot_be_read_is_one_warning(tmp_path, capsys, setup, said_):
    msg = message(tmp_path)
    with WebhookStandIn("json") as hook, StandIn() as api:
        secrets = SecretManager(api, secrets={SECRET: hook.hook_url})
        setup(api, secrets)
        lines, say = said()
        assert sender.send(Webhook(url_secret=SECRET), msg, api_endpoint=api.url, say=say) is False
        assert hook.requests == []
    (line,) = lines
    assert line.startswith("warning: notify: the run's end (FAILED) was not sent: ") and said_ in line, line
    assert "T000-secret" not in line + capsys.readouterr().err
    if "403" in said_:
        assert "roles/secretmanager.secretAccessor" in line


# ---- the exit handler's step ---------------------------------------------------------------------------------------

def test_the_exit_handlers_step_ends_well_whatever_happens(tmp_path, capsys):
    from kfp.dsl import PipelineTaskFinalStatus

    notify = __import__("components").definition("notify").python_func
    status = PipelineTaskFinalStatus(state="FAILED", pipeline_job_resource_name="local-pipeline-exit-handler-1",
                                     pipeline_task_name="exit-handler-1", error_code=1,
                                     error_message="Task exit-handler-1 failed.")
    notify(config_json="{not json", status=status)  # returns: never raises, never exits
    cfg = job(tmp_path, "notify.webhook.url_env=VTP_TEST_NO_SUCH_HOOK")
    notify(config_json=cfg.to_json(), status=status, run_id="x")
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("warning: notify: the run's end was not sent: its config cannot be read (config_json: "
                             "not valid JSON")
    assert err[1].startswith("warning: notify: the run's end (FAILED) was not sent: notify.webhook.url_env: "
                             "$VTP_TEST_NO_SUCH_HOOK is not set") and len(err) == 2


def test_only_the_ends_notify_on_names_are_sent(tmp_path):
    with WebhookStandIn("json") as hook:
        os.environ["VTP_TEST_HOOK"] = hook.hook_url
        try:
            cfg = job(tmp_path, "notify.webhook.url_env=VTP_TEST_HOOK", "notify.on=[failed]")
            assert notify_message.notify_run_end(cfg, "SUCCEEDED") is False
            assert notify_message.notify_run_end(cfg, "CANCELLED") is False
            assert notify_message.notify_run_end(cfg, "PIPELINE_STATE_FAILED", say=lambda line: None) is True
            every = job(tmp_path, "notify.webhook.url_env=VTP_TEST_HOOK")
            assert steps.notify_cancelled(every)  # a local run's Ctrl-C: the exit handler never runs
        finally:
            del os.environ["VTP_TEST_HOOK"]
        assert [b["run"]["state"] for b in hook.received] == ["FAILED", "CANCELLED"]


# ---- the compiled pipelines ----------------------------------------------------------------------------------------

IMAGE = "us-central1-docker.pkg.dev/team/training/tf-trainer:x@sha256:" + "a" * 64


def compiled(tmp_path, target: str, *overrides: str) -> dict:
    from pipelines.training_pipeline import compile_pipeline

    cfg = config_lib.load("multiworker", [f"container.image_uri={IMAGE}", "output.base_dir=gs://team/runs/mw",
                                          *overrides])
    path = compile_pipeline(cfg, str(tmp_path / f"{target}-{len(overrides)}.yaml"), target)
    return yaml.safe_load(Path(path).read_text())


def _exit_task(dag: dict, name: str) -> dict:
    task = dag["tasks"][name]
    assert task["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert task["dependentTasks"] == ["exit-handler-1"]
    return task


def test_both_pipelines_end_in_the_notify_exit_handler_and_never_hold_the_url(tmp_path, monkeypatch):
    monkeypatch.setenv("VTP_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/XYZSECRET")
    for target, wanted in (("local", "VTP_WEBHOOK_URL"), ("vertex", SECRET)):
        field = "url_env" if target == "local" else "url_secret"
        spec = compiled(tmp_path, target, f"notify.webhook.{field}={wanted}")
        assert "XYZSECRET" not in json.dumps(spec)
        notify = _exit_task(spec["root"]["dag"], "notify")
        assert notify["inputs"]["parameters"]["status"] == {"taskFinalStatus": {"producerTask": "exit-handler-1"}}
        assert notify["inputs"]["parameters"]["on_vertex"]["runtimeValue"]["constant"] is (target == "vertex")
        assert notify["cachingOptions"] == {}  # never cached: every run's end is its own
        body = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
        assert ("custom-training-job" in body) == (target == "vertex") and ("train" in body) == (target == "local")


def test_on_vertex_the_plan_check_comes_before_anything_is_created(tmp_path):
    tasks = compiled(tmp_path, "vertex")["root"]["dag"]["tasks"]
    assert "check-plan" in tasks["custom-training-job"]["dependentTasks"]
    assert "check-plan" in tasks["prepare-data"]["dependentTasks"]
    check = tasks["check-plan"]["inputs"]["parameters"]
    assert check["project"]["runtimeValue"]["constant"] == "{{$.pipeline_google_cloud_project_id}}"
    assert check["require_checks"] == {"componentInputParameter": "require_checks"}
    assert check["config_json"]["taskOutputParameter"]["producerTask"] == "validate-config"
    assert "train" not in tasks and "notify" not in tasks  # no notify section: no exit handler
    from pipelines.training_pipeline import compile_pipeline

    study = config_lib.load("tuning", [f"container.image_uri={IMAGE}", "output.base_dir=gs://team/runs/t",
                                       "data.source=none", "trainer.module=trainer.task"])
    tasks = yaml.safe_load(Path(compile_pipeline(study, str(tmp_path / "study.yaml"))).read_text())["root"]["dag"]["tasks"]
    created = [n for n, t in tasks.items() if t["componentRef"]["name"].startswith(("comp-custom-training-job",
                                                                                      "comp-hyperparameter-tuning-job"))]
    assert len(created) == 2 and all("check-plan" in tasks[n]["dependentTasks"] for n in created)


def test_vertexs_email_is_an_exit_handler_too_beside_the_webhook(tmp_path):
    only = compiled(tmp_path, "vertex", "notify.email=[ml-team@example.com]")
    email = _exit_task(only["root"]["dag"], "vertex-pipelines-notification-email")
    assert email["inputs"]["parameters"]["recipients"]["runtimeValue"]["constant"] == ["ml-team@example.com"]
    both = compiled(tmp_path, "vertex", "notify.email=[ml-team@example.com]", f"notify.webhook.url_secret={SECRET}")
    _exit_task(both["root"]["dag"], "notify")
    (run,) = both["components"]["comp-exit-handler-1"]["dag"]["tasks"].values()  # the run, a sub-pipeline
    inner = both["components"][run["componentRef"]["name"]]["dag"]["tasks"]
    assert inner["vertex-pipelines-notification-email"]["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    local = compiled(tmp_path, "local", "notify.email=[ml-team@example.com]")  # Vertex's e-mail only
    assert "vertex-pipelines-notification-email" not in json.dumps(local)


# ---- a local run (kfp.local), end to end ---------------------------------------------------------------------------

FAILING = """\
    print("epoch 1/3: loss 0.91", flush=True)
    lr = -1.0
    raise RuntimeError(f"on purpose: lr must be > 0, got {lr}")
    """


def _project(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    (folder / "trainer").mkdir(parents=True)
    (folder / "trainer" / "__init__.py").write_text("")
    (folder / "trainer" / "task.py").write_text(textwrap.dedent(FAILING))
    (folder / "job.yaml").write_text(textwrap.dedent("""\
        name: nightly-clf
        trainer: {module: trainer.task}
        data: {source: none}
        topology:
          strategy: one_device
          chief: {replica_count: 1, machine_type: n1-standard-4}
        notify:
          webhook: {url_env: VTP_WEBHOOK_URL, format: chat}
        """))
    return folder


def _run(folder: Path, url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VTP_WEBHOOK_URL": url, "VTP_CLOUD_READ_TIMEOUT_S": "2"}
    return subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "--config", "job.yaml", "--fresh"],
                          cwd=str(folder), capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_a_local_run_that_fails_sends_its_cause_and_a_failing_webhook_changes_nothing(tmp_path):
    folder = _project(tmp_path)
    with WebhookStandIn("chat") as hook:
        proc = _run(folder, hook.hook_url)
        assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
        (body,) = hook.received
        text = body["text"].splitlines()
        assert text[0] == "vtp: nightly-clf FAILED on this machine"
        assert text[1] == ("cause in step train: chief-0 exited with status 1: chief-0's error: RuntimeError: on "
                           "purpose: lr must be > 0, got -1.0")
        assert "last 7 lines of chief-0:" in text and "  epoch 1/3: loss 0.91" in text
        assert "▸ notify" in proc.stdout and "warning: notify" not in proc.stdout + proc.stderr

        hook.fault(500, times=None)  # the same run again, the webhook failing: the run's own end is unchanged
        again = _run(folder, hook.hook_url)
    assert again.returncode == 1 and again.stderr == proc.stderr.replace(str(folder), str(folder))
    warnings = [line.strip() for line in again.stdout.splitlines() if "warning: notify" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: notify: the run's end (FAILED) was not sent to the "
                                                         "webhook in $VTP_WEBHOOK_URL: it answered 500"), warnings
    secret = SECRET_PATH.rsplit("/", 1)[-1]
    everything = proc.stdout + proc.stderr + again.stdout + again.stderr
    for path in (folder / "runs").rglob("*"):
        if path.is_file():
            everything += path.read_text(errors="replace")
    assert secret not in everything


# ---- the Vertex CustomJob step records why it failed -------------------------------------------------------------

def test_a_failed_custom_job_leaves_its_cause_and_its_replicas_lines_for_the_message(tmp_path):
    from tests.standins.cloud_logging import LoggingStandIn
    from tests.standins.vertex import VertexStandIn
    from tests.test_custom_job import _compiled, _inputs, _pools, run_executor

    traceback = ["Epoch 1/3", "Traceback (most recent call last):", '  File "/app/trainer/task.py", line 12, in <module>',
                 "ValueError: --learning_rate must be > 0, got -1.0"]
    base = tmp_path / "run"
    error = "The replica workerpool0-0 exited with a non-zero status of 1."
    with VertexStandIn(custom_states=("RUNNING", "FAILED"), custom_error=error) as vertex, LoggingStandIn() as logging:
        logging.lines("1000", "workerpool0-0", traceback)
        proc = run_executor(_compiled(tmp_path), _inputs(_pools(), vertex.url, logging_endpoint=logging.url,
                                                          base_output_directory=str(base)), tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    record = records.read_at(str(base), records.FAILURE_RECORD)
    assert record["run"] == "" and record["step"] == "custom-training-job" and record["replica"] == "chief-0"
    assert record["job"] == "projects/my-proj/locations/europe-west4/customJobs/1000"
    assert record["cause"]["kind"] == "user_code" and record["last_lines"] == traceback
    cfg = config_lib.load("local", [f"output.base_dir={base}"])
    msg = notify_message.message(cfg, "FAILED", run_id="uuid", run_created="2020-01-01T00:00:00Z", on_vertex=True)
    assert msg["text"].splitlines()[1] == ("cause in step custom-training-job: a Python exception in your code: CustomJob "
                                           "projects/my-proj/locations/europe-west4/customJobs/1000 ended FAILED: " + error)
    assert "hint: your code raised: ValueError: --learning_rate must be > 0, got -1.0" in msg["text"]
    assert msg["links"]["job"] == ("https://console.cloud.google.com/agent-platform/locations/europe-west4/training/1000"
                                   "?project=my-proj")
