"""``vtp schedule`` (issue 53, item 3): the same job every night as a Vertex AI ``PipelineJobSchedule``.

Against strict stand-ins (the schedules API decoding ``Schedule`` and its ``CreatePipelineJobRequest`` with the real
``aiplatform_v1`` types, an Artifact Registry KFP repository, the project's APIs, Secret Manager, a Google Chat
webhook): create (the template uploaded by its digest, labels and the service account in the pipeline job every run is
made from, one run at a time), list, pause, resume with and without catch-up, delete; the cron and its time zone
refused in one line each before anything is sent; and a scheduled run, walked as Vertex runs its compiled DAG,
whose quota check fails: one message through ``notify:``, no CustomJob created (and, with the quota back, the same
walk creating one: the walk would have seen it).
"""
from __future__ import annotations

import re

import pytest
import yaml

from jobs.rules import cron as cron_rules
from tests.conftest import without_plan
from tests.standins.gcs import Gcs
from tests.standins.iam import Iam
from tests.standins.kfp_registry import KfpRegistryStandIn
from tests.standins.quotas import Quotas
from tests.standins.schedules import Schedules
from tests.standins.secret_manager import SecretManager
from tests.standins.service_usage import ServiceUsage
from tests.standins.vertex import VertexStandIn
from tests.standins.webhook import WebhookStandIn
from tests.test_submit import IMAGE, run_main
from tests.vertex_dag import schedules_run

PROJECT, REGION = "my-proj", "europe-west4"
SECRET = "projects/my-proj/secrets/run-webhook/versions/latest"
SA = "pipeline-runner@my-proj.iam.gserviceaccount.com"
CPUS = "custom_model_training_cpus"
CRON = "TZ=America/New_York 0 3 * * *"
JOB = ["--config", "local", "--set", "output.base_dir=gs://my-pipelines/runs/flowers", "--set",
       f"container.image_uri={IMAGE}", "--set", f"topology.region={REGION}", "--set",
       f"notify.webhook.url_secret={SECRET}", "--set", "notify.webhook.format=chat"]


@pytest.fixture(autouse=True)
def fast_policy(monkeypatch, tmp_path):
    for key, value in {"VTP_CLOUD_CONNECT_TIMEOUT_S": "1", "VTP_CLOUD_READ_TIMEOUT_S": "1",
                       "VTP_CLOUD_RETRY_TOTAL_S": "2", "VTP_CLOUD_RETRY_FIRST_S": "0.05",
                       "VTP_CLOUD_RETRY_MAX_S": "0.2"}.items():
        monkeypatch.setenv(key, value)
    for key in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no gcloud credentials file: the image check says so
    monkeypatch.setenv("NO_GCE_CHECK", "true")


class Cloud:
    """One Vertex stand-in carrying the schedules API and the project's APIs, a KFP repository, a webhook."""

    def __init__(self, vertex: VertexStandIn, registry: KfpRegistryStandIn, hook: WebhookStandIn):
        self.vertex, self.registry, self.hook = vertex, registry, hook
        self.schedules = Schedules(vertex)
        self.quotas = Quotas(vertex, limits={CPUS: {"*": 64}})
        ServiceUsage(vertex, enabled={"aiplatform.googleapis.com", "storage.googleapis.com",
                                      "artifactregistry.googleapis.com"})
        Gcs(vertex, buckets={"my-pipelines": "EUROPE-WEST4"})
        Iam(vertex, accounts={SA: {"iam.serviceAccounts.actAs"}})
        self.secrets = SecretManager(vertex, secrets={SECRET: hook.hook_url})

    def common(self) -> list[str]:
        return ["--project", PROJECT, "--region", REGION, "--api-endpoint", self.vertex.url]

    def create(self, *extra: str) -> int:
        return run_main("schedule", "create", *JOB, "--cron", CRON, "--pipeline-root", "gs://my-pipelines/root",
                        "--host", self.registry.host, "--service-account", SA, "--labels", "team=vision",
                        *self.common(), *extra)


@pytest.fixture
def cloud():
    with VertexStandIn() as vertex, KfpRegistryStandIn(PROJECT, "pipelines") as registry, \
            WebhookStandIn("chat") as hook:
        yield Cloud(vertex, registry, hook)


# ---- the cron and its time zone ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cron, lines", [
    (CRON, []),
    ("CRON_TZ=Europe/Paris */15 9-17 * * MON-FRI", []),
    ("0 3 * * 7", []),
    ("TZ=America/New_Yrok 0 3 * * *", ["--cron: time zone 'America/New_Yrok' is not an IANA time zone (did you mean "
                                       "'America/New_York'?); Vertex takes TZ=<IANA name> before the five fields; "
                                       "valid choices: TZ=America/New_York 0 3 * * *"]),
    ("TZ=America/New_York 61 3 * * *", ["--cron: minute field '61': '61' is not a value of 0-59; valid choices: "
                                        "TZ=America/New_York 0 3 * * *"]),
    ("TZ=Mars/Base 0 3 * *", ["--cron: time zone 'Mars/Base' is not an IANA time zone; Vertex takes TZ=<IANA name> "
                              "before the five fields; valid choices: TZ=America/New_York 0 3 * * *",
                              "--cron: '0 3 * *' has 4 field(s); a cron expression has five: minute, hour, day of "
                              "the month, month, day of the week (after an optional TZ=<IANA name>); valid choices: "
                              "TZ=America/New_York 0 3 * * *"]),
    ("@daily", ["--cron: '@daily': Vertex's cron takes five fields, not a macro; valid choices: TZ=UTC 0 0 * * *"]),
    ("0 3 * JAN-FOO *", ["--cron: month field 'JAN-FOO': 'JAN-FOO' is not a range of 1-12 or JAN-DEC; valid "
                         "choices: TZ=America/New_York 0 3 * * *"]),
    ("0 17-9 * * *", ["--cron: hour field '17-9': the range '17-9' runs backwards; valid choices: "
                      "TZ=America/New_York 0 3 * * *"]),
])
def test_the_cron_and_its_time_zone_are_one_line_each(cron, lines):
    assert [str(p) for p in cron_rules.cron_problems(cron)] == lines


def test_a_bad_cron_is_refused_before_anything_is_sent(cloud, capsys):
    rc = run_main("schedule", "create", *JOB, "--cron", "TZ=America/New_Yrok 61 3 * * *", "--pipeline-root",
                  "gs://my-pipelines/root", "--host", cloud.registry.host, *cloud.common())
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 2 and all(line.startswith("error: --cron: ") for line in err), err
    assert cloud.vertex.requests == [] and cloud.registry.requests == []


@pytest.mark.parametrize("extra, expected", [
    ([], "error: --host/--template: give one: --host uploads the compiled pipeline"),
    (["--host", "https://example.com/repo"], "error: --host: 'https://example.com/repo' is not a Kubeflow Pipelines "
                                             "repository in Artifact Registry"),
])
def test_a_schedule_needs_one_template(cloud, capsys, extra, expected):
    rc = run_main("schedule", "create", *JOB, "--cron", CRON, "--pipeline-root", "gs://my-pipelines/root", *extra,
                  *cloud.common())
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(expected), err
    assert cloud.vertex.requests == []


# ---- create, list, pause, resume, delete ---------------------------------------------------------------------------

def test_create_list_pause_resume_delete(cloud, capsys, tmp_path):
    from google.cloud import aiplatform_v1

    assert cloud.create() == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    (name,) = cloud.schedules.schedules
    assert out.strip() == name and name.startswith(f"projects/{PROJECT}/locations/{REGION}/schedules/")
    (body,) = cloud.schedules.created
    schedule = aiplatform_v1.Schedule.from_json(__import__("json").dumps(body))  # strict: the stand-in decoded it so
    assert schedule.cron == CRON and schedule.display_name == "flowers-local"
    assert schedule.max_concurrent_run_count == 1 and schedule.allow_queueing is False
    request = schedule.create_pipeline_job_request
    assert request.parent == f"projects/{PROJECT}/locations/{REGION}"
    job = request.pipeline_job
    # labels and the service account in the pipeline job every run is made from (python-aiplatform#2929, #4039)
    assert job.service_account == SA
    got = dict(job.labels)
    assert re.fullmatch(r"[0-9a-f]{16}", got.pop("vtp-config"))  # the config's hash (jobs.rules.labels.config_hash)
    assert got == {"team": "vision", "vtp-job": "flowers-local", "vtp-schedule": "flowers-local"}
    values = dict(job.runtime_config.parameter_values)
    assert values["folder_per_run"] is True and values["require_checks"] is False and values["location"] == REGION
    assert "notify" in values["config_json"] and SECRET in values["config_json"]
    # the template uploaded by its digest, and that very template in the schedule
    ((package, versions),) = cloud.registry.packages.items()
    ((version, uploaded),) = versions.items()
    assert job.template_uri == f"{cloud.registry.host}/{package}/{version}" and version.startswith("sha256:")
    spec = yaml.safe_load(uploaded["content"])
    assert body["createPipelineJobRequest"]["pipelineJob"]["pipelineSpec"] == spec
    assert "check-plan" in spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    lines = without_plan(err).splitlines()
    assert lines[0].startswith(f"uploaded the template: {package}/sha256:")
    assert lines[1] == (f"created schedule {name}: 'flowers-local' at 0 3 * * * (America/New_York), state ACTIVE, next "
                        "run 2026-11-30 08:00 UTC")
    assert f"as {SA}, labels team=vision, vtp-config={job.labels['vtp-config']}, vtp-job=flowers-local, " \
           "vtp-schedule=flowers-local" in lines[2]
    assert "at most 1 run at a time (a run due meanwhile is skipped, not queued)" in lines[3]

    sid = name.rsplit("/", 1)[-1]
    assert run_main("schedule", "list", *cloud.common()) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split() == ["SCHEDULE", "STATE", "CRON", "NEXT", "RUN", "RUNS", "NAME"]
    assert listed[1].split()[:2] == [sid, "ACTIVE"] and CRON in listed[1] and listed[1].endswith("flowers-local")

    assert run_main("schedule", "pause", sid, *cloud.common()) == 0
    assert capsys.readouterr().out.startswith(f"paused {name}: no run starts until it is resumed")
    assert cloud.schedules.schedules[name].state.name == "PAUSED"
    assert run_main("schedule", "resume", sid, *cloud.common()) == 0
    assert "the runs missed while it was paused are not started" in capsys.readouterr().out
    assert cloud.schedules.schedules[name].catch_up is False
    run_main("schedule", "pause", name, *cloud.common())
    assert run_main("schedule", "resume", name, "--catch-up", *cloud.common()) == 0
    assert cloud.schedules.schedules[name].catch_up is True and "start first, one at a time" in capsys.readouterr().out

    assert run_main("schedule", "delete", sid, *cloud.common()) == 0
    assert capsys.readouterr().out.strip() == f"deleted {name}"
    assert run_main("schedule", "list", *cloud.common()) == 0
    assert capsys.readouterr().out.strip() == f"no pipeline schedules in projects/{PROJECT}/locations/{REGION}"


def test_a_listing_reads_every_page(cloud, capsys):
    for i in range(3):
        assert cloud.create("--name", f"nightly-{i}") == 0
    capsys.readouterr()
    assert run_main("schedule", "list", *cloud.common()) == 0
    rows = capsys.readouterr().out.strip().splitlines()[1:]
    assert [r.split()[-1] for r in rows] == ["nightly-0", "nightly-1", "nightly-2"]
    assert len(cloud.vertex.calls("GET", r"/schedules$")) == 2  # two a page


def test_a_create_whose_answer_is_lost_is_not_repeated_and_says_how_to_look(cloud, capsys):
    cloud.vertex.fault(503, r"/schedules$", method="POST")
    assert cloud.create() == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: creating schedule 'flowers-local' in projects/my-proj/locations/europe-west4: "
                              "503"), err[-1]
    assert err[-1].endswith("a schedule may have been created even so: python pipelines/run.py schedule list "
                            f"--project {PROJECT} --region {REGION}")
    assert len(cloud.vertex.calls("POST", r"/schedules$")) == 1


@pytest.mark.parametrize("args, expected, rc", [
    (["pause", "4000000099"], "error: pausing schedule projects/my-proj/locations/europe-west4/schedules/4000000099: "
                              "404", 1),
    (["delete", "nightly"], "error: SCHEDULE: 'nightly' is neither a schedule id nor its resource name", 2),
    (["list", "--region", "mars-central1"], "error: --region: 'mars-central1' is not a Vertex AI region", 2),
])
def test_a_schedule_that_is_not_there_is_one_line(cloud, capsys, args, expected, rc):
    common = [a for a in cloud.common() if a not in ("--region", REGION)] if "--region" in args else cloud.common()
    assert run_main("schedule", *args, *common) == rc
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected), err


def test_a_job_whose_webhook_url_is_an_environment_variable_cannot_be_scheduled(cloud, capsys):
    rc = run_main("schedule", "create", *JOB, "--set", "notify.webhook.url_secret=", "--set",
                  "notify.webhook.url_env=VTP_WEBHOOK_URL", "--cron", CRON, "--pipeline-root", "gs://my-pipelines/root",
                  "--host", cloud.registry.host, *cloud.common())
    err = capsys.readouterr().err
    assert rc == 2 and "error: notify.webhook.url_env: $VTP_WEBHOOK_URL is this machine's variable" in err
    assert cloud.schedules.created == [] and cloud.registry.requests == []


# ---- a scheduled run ----------------------------------------------------------------------------------------------

def _walk(cloud, monkeypatch, tmp_path):
    from jobfile import paths

    (tmp_path / "gcs").mkdir(exist_ok=True)
    monkeypatch.setattr(paths, "FUSE_ROOT", str(tmp_path / "gcs"))  # Vertex's /gcs mount of every task
    (body,) = cloud.schedules.created
    return schedules_run(body, project=PROJECT, job_name="flowers-local-20261130080000", uuid="5f0c-run",
                         created="2026-11-30T08:00:02.115Z", api_endpoint=cloud.vertex.url)


@pytest.mark.unit  # names a launcher, starts nothing: the launch is refused first
def test_a_scheduled_run_whose_quota_check_fails_sends_its_message_and_creates_no_job(cloud, capsys, monkeypatch,
                                                                                      tmp_path):
    assert cloud.create() == 0
    cloud.quotas.limits[CPUS] = {REGION: 0, "*": 64}  # the quota changed since the schedule was made
    capsys.readouterr()
    run = _walk(cloud, monkeypatch, tmp_path)
    assert run.failed == ["check-plan"] and "custom-training-job" in run.skipped, (run.ran, run.skipped)
    assert run.ran == ["build-image", "validate-config", "check-plan", "notify"]
    assert cloud.vertex.custom_jobs == {} and cloud.vertex.calls("POST", "customJobs") == []
    (message,) = cloud.hook.received
    text = message["text"].splitlines()
    assert text[0] == "vtp: flowers-local FAILED on Vertex AI (pipeline job flowers-local-20261130080000)"
    assert text[1].startswith("cause in step check-plan: the plan's checks failed before any job was created: "
                              "placement: no option fits (europe-west4 STANDARD: aiplatform.googleapis.com/"
                              f"{CPUS} in europe-west4")
    assert "limit is 0" in text[1]
    assert text[2].startswith("hint: vtp plan --config JOB --project PROJECT shows every check")
    console = [line for line in text if line.startswith("console: ")]
    assert console == [f"console: https://console.cloud.google.com/vertex-ai/locations/{REGION}/pipelines/runs/"
                       "flowers-local-20261130080000?project=my-proj"]
    # the run's own folder (folder_per_run): the failure was recorded there, for this run
    recorded = tmp_path / "gcs" / "my-pipelines" / "runs" / "flowers" / "flowers-local-20261130080000" / "failure.json"
    assert '"run": "5f0c-run"' in recorded.read_text()
    err = capsys.readouterr().out
    assert "error: placement: no option fits" in err and SECRET not in cloud.hook.hook_url


def test_with_the_quota_back_the_same_walk_creates_the_job(cloud, capsys, monkeypatch, tmp_path):
    """The control: the walk runs the training step once the checks pass, so 'no job created' above is the DAG's (a
    trainer that reads its own data: no prepare step, whose dataset artifact the walk does not make)."""
    assert cloud.create("--set", "data.source=none", "--set", "trainer.module=trainer.task") == 0, \
        capsys.readouterr().err
    run = _walk(cloud, monkeypatch, tmp_path)
    assert "check-plan" in run.ran and "check-plan" not in run.failed
    assert "custom-training-job" in run.ran, (run.ran, run.failed, run.skipped, run.logs)
    (created,) = cloud.vertex.custom_jobs.values()
    assert created.job_spec.base_output_directory.output_uri_prefix == \
        "gs://my-pipelines/runs/flowers/flowers-local-20261130080000"


def test_a_schedule_of_a_template_uploaded_before(cloud, tmp_path):
    """``--template https://REGION-kfp.pkg.dev/...``: downloaded over https (a TLS proxy carries the real host name to
    the repository stand-in, certificate verified), its images checked, its spec and URI in every run."""
    from tests.standins.tls_proxy import TlsProxy
    from tests.test_submit import _cli, clean_env

    assert run_main("upload-template", "--host", cloud.registry.host, "--tag", "v1", *JOB[2:]) == 0
    assert run_main("upload-template", "--host", cloud.registry.host, "--tag", "quiet", *JOB[2:], "--set",
                    "notify.webhook.url_secret=", "--set", "notify.webhook.format=auto") == 0
    (content,) = [v["content"] for v in cloud.registry.packages["flowers-local"].values() if "v1" in v["tags"]]
    template = f"https://{REGION}-kfp.pkg.dev/{PROJECT}/pipelines/flowers-local/v1"
    proxy = TlsProxy(cloud.registry, [f"{REGION}-kfp.pkg.dev"], tmp_path).start()
    try:
        quiet, _ = _cli(["schedule", "create", *JOB, "--cron", CRON, "--pipeline-root", "gs://my-pipelines/root",
                         "--template", template.replace("/v1", "/quiet"), *cloud.common()],
                        clean_env(tmp_path, **proxy.env()))
        proc, _ = _cli(["schedule", "create", *JOB, "--cron", CRON, "--pipeline-root", "gs://my-pipelines/root",
                        "--template", template, *cloud.common()], clean_env(tmp_path, **proxy.env()))
    finally:
        proxy.stop()
    # a template compiled without the job's notify section would not send a thing: refused, nothing created
    assert quiet.returncode == 2 and quiet.stderr.strip().splitlines()[-1].startswith(
        f"error: --template: {template.replace('/v1', '/quiet')} was compiled without notify:"), quiet.stderr
    assert proc.returncode == 0, proc.stderr
    (body,) = cloud.schedules.created
    job = body["createPipelineJobRequest"]["pipelineJob"]
    assert job["templateUri"] == template and job["pipelineSpec"] == yaml.safe_load(content)
    assert job["runtimeConfig"]["parameterValues"]["folder_per_run"] is True
    assert "uploaded the template" not in proc.stderr  # nothing compiled or uploaded again
