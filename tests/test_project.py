"""The project's side of ``vtp plan`` (jobs.cloud.apis.project.CloudProject) against strict stand-ins of the real APIs:
quotas (Cloud Quotas), bucket location (Cloud Storage), APIs enabled (Service Usage), the image (a registry's
manifest), the run-as service account (IAM), network / reservation / persistent resource; each check ok, missing,
forbidden, or not checked; every fault (5xx, dropped connection, silence, an HTML page) one bounded line.

The policy is shrunk through its environment variables (connect/read 1 s, 2 s of retries), never by patching."""
from __future__ import annotations

import pytest

from jobs.cloud.apis.project import CloudProject, line, main
from jobs.rules.hardware import quotas as quota_names
from jobs.rules.placement import Option
from tests.standins.base import StandIn
from tests.standins.gcs import Gcs
from tests.standins.iam import Iam
from tests.standins.quotas import Quotas
from tests.standins.registry import RegistryStandIn, TokenRealm
from tests.standins.resources import Resources
from tests.standins.service_usage import ServiceUsage
from jobfile import config as config_lib

T4 = "custom_model_training_nvidia_t4_gpus"
T4_SPOT = "custom_model_training_preemptible_nvidia_t4_gpus"
CPUS = "custom_model_training_cpus"
CPUS_SPOT = "custom_model_training_preemptible_cpus"
APIS = {"aiplatform.googleapis.com", "storage.googleapis.com", "artifactregistry.googleapis.com",
        "compute.googleapis.com"}
SA = "trainer@my-proj.iam.gserviceaccount.com"
DIGEST = "sha256:" + "a" * 64


@pytest.fixture(autouse=True)
def fast_policy(monkeypatch):
    for key, value in {"VTP_CLOUD_CONNECT_TIMEOUT_S": "1", "VTP_CLOUD_READ_TIMEOUT_S": "1",
                       "VTP_CLOUD_RETRY_TOTAL_S": "2", "VTP_CLOUD_RETRY_FIRST_S": "0.05",
                       "VTP_CLOUD_RETRY_MAX_S": "0.2"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)


class Cloud:
    def __init__(self, api: StandIn, registry: RegistryStandIn):
        self.api, self.registry = api, registry
        self.quotas = Quotas(api, limits={T4: {"us-central1": 0, "us-east4": 8, "europe-west4": 2},
                                          T4_SPOT: {"us-central1": 8}, CPUS: {"*": 64}, CPUS_SPOT: {"*": 64}},
                             ids={T4_SPOT: "CustomModelTrainingPreemptibleT4GPUsPerProjectPerRegion"})
        self.usage = ServiceUsage(api, enabled=set(APIS))
        self.iam = Iam(api, accounts={SA: {"iam.serviceAccounts.actAs"}})
        self.gcs = Gcs(api, buckets={"runs": "US-CENTRAL1"})
        self.resources = Resources(api, networks={"projects/123/global/networks/vpc"},
                                   reservations={"projects/my-proj/zones/us-central1-a/reservations/r1"},
                                   persistent_resources={"projects/my-proj/locations/us-central1/persistentResources/pr1"})
        self.image = f"{registry.url[7:]}/my-proj/training/trainer@{DIGEST}"
        registry.tags[("my-proj/training/trainer", DIGEST)] = DIGEST
        self.project = CloudProject("my-proj", api_endpoint=api.url)


@pytest.fixture
def cloud():
    with StandIn() as api, RegistryStandIn(realm="") as registry:
        registry.realm = f"{registry.url}/token"
        TokenRealm(registry)
        yield Cloud(api, registry)


def job(**sections) -> config_lib.JobConfig:
    doc = config_lib.load("gpu-1x4").to_dict()
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return config_lib.from_dict(doc)


def only(findings, what: str):
    found = [f for f in findings if what in f.what]
    assert len(found) == 1, [f.what for f in findings]
    return found[0]


def one_line(finding) -> str:
    assert "\n" not in finding.line and "Traceback" not in finding.line
    return finding.line


# ---- quotas --------------------------------------------------------------------------------------------------------

def test_a_gpu_job_whose_region_has_quota_0_is_refused_naming_a_region_with_quota(cloud):
    found = cloud.project.quota(job(), Option("us-central1", "STANDARD"))
    t4 = only(found, T4)
    assert t4.ok is False and t4.severity == "error"
    text = one_line(t4)
    assert f"aiplatform.googleapis.com/{T4} in us-central1" in text
    assert "needs 4 NVIDIA_TESLA_T4 GPUs" in text and "limit is 0" in text
    assert "cover the whole job and the catalog offers it: us-east4" in text
    assert "europe-west4" not in text  # 2 T4 there: not enough
    assert "checked against the limit alone: current usage is not read" in text
    assert "console.cloud.google.com/iam-admin/quotas?project=my-proj" in text
    assert t4.fix.startswith("gcloud beta quotas preferences create --service=aiplatform.googleapis.com "
                             f"--quota-id={quota_names_id(T4)} --preferred-value=4 --dimensions=region=us-central1")
    assert only(found, CPUS).ok is True  # 16 vCPUs of n1-standard-16 against the default 64


def quota_names_id(metric: str) -> str:
    from tests.standins.quotas import quota_id

    return quota_id(metric)


def test_the_same_job_fits_where_the_limit_covers_it(cloud):
    found = cloud.project.quota(job(), Option("us-east4", "STANDARD"))
    assert [f.ok for f in found] == [True, True]
    assert "needs 4 NVIDIA_TESLA_T4 GPUs, the limit is 8" in only(found, T4).line


def test_spot_is_checked_against_the_preemptible_quota(cloud):
    found = cloud.project.quota(job(), Option("us-central1", "SPOT"))
    spot = only(found, T4_SPOT)
    assert spot.ok is True and f"aiplatform.googleapis.com/{T4_SPOT} in us-central1" in spot.line
    assert not [f for f in found if f.what.endswith(f"{T4} in us-central1")]
    assert only(found, CPUS_SPOT).ok is True


def test_a_study_needs_its_parallel_trials_and_the_baseline_at_once(cloud):
    study = job(tuning={"metric": "accuracy", "goal": "maximize", "max_trials": 6, "parallel_trials": 3,
                        "parameters": {"learning_rate": {"type": "double", "min": 0.001, "max": 0.1}}})
    needs = {n.what: n.amount for n in quota_names.job_needs(study)}
    assert needs == {"NVIDIA_TESLA_T4 GPUs": 16, "vCPUs": 64}  # (3 trials + the baseline) x 4 GPUs, x 16 vCPUs
    found = cloud.project.quota(study, Option("us-east4", "STANDARD"))
    t4 = only(found, T4)
    assert t4.ok is False and "needs 16 NVIDIA_TESLA_T4 GPUs (3 trials at once + the baseline)" in t4.line
    assert "no region of the project has limits that cover the whole job" in t4.line


def test_a_quota_the_project_does_not_list_is_not_checked_and_says_so(cloud):
    h200 = job(topology={"chief": {"machine_type": "a3-ultragpu-8g", "accelerator_type": "NVIDIA_H200_141GB",
                                   "accelerator_count": 8}})
    found = cloud.project.quota(h200, Option("us-central1", "FLEX_START"))
    gpu = only(found, "h200")
    assert gpu.ok is None
    assert "lists no such Vertex AI quota (the name is inferred, not seen in a source)" in one_line(gpu)


def test_the_quotas_are_listed_once_for_every_option(cloud):
    for option in (Option("us-central1", "STANDARD"), Option("us-east4", "SPOT"), Option("europe-west4", "STANDARD")):
        cloud.project.quota(job(), option)
    listed = cloud.api.calls("GET", "quotaInfos")
    pages = -(-len(cloud.quotas.limits) // 2)
    assert len(listed) == pages  # one listing (every page once) answers every region


def test_no_permission_to_read_quotas_is_one_not_checked_line_naming_it(cloud):
    cloud.api.fault(403, "quotaInfos", times=None, message="Permission 'cloudquotas.quotas.get' denied")
    found = cloud.project.quota(job(), Option("us-central1", "STANDARD"))
    assert [f.ok for f in found] == [None]
    assert "cloudquotas.quotas.get" in one_line(found[0]) and "roles/cloudquotas.viewer" in found[0].line


def test_an_unknown_project_is_refused_by_the_standin_and_not_checked(cloud):
    other = CloudProject("someone-else", api_endpoint=cloud.api.url)
    assert [f.ok for f in other.quota(job(), Option("us-central1", "STANDARD"))] == [None]


# ---- bucket --------------------------------------------------------------------------------------------------------

def test_bucket_location_ok_missing_forbidden(cloud):
    location, found = cloud.project.bucket_location("gs://runs/jobs/a")
    assert location == "US-CENTRAL1" and found[0].ok is True
    location, found = cloud.project.bucket_location("gs://nope/x")
    assert location is None and found[0].ok is False
    assert found[0].fix.startswith("gcloud storage buckets create gs://nope --location=REGION --project=my-proj")
    cloud.api.fault(403, "/storage/v1/b/secret", times=None)
    location, found = cloud.project.bucket_location("gs://secret/x")
    assert location is None and found[0].ok is None and "storage.buckets.get" in one_line(found[0])
    location, found = cloud.project.bucket_location("runs/local")
    assert location is None and found[0].ok is None


# ---- the rest of the set-up ------------------------------------------------------------------------------------------

def full_job(cloud, **vertex):
    return job(container={"image_uri": cloud.image},
               vertex={"service_account": SA, "network": "projects/123/global/networks/vpc", **vertex},
               scheduling={"persistent_resource_id": "pr1",
                           "reservation_affinity": {"reservation_affinity_type": "SPECIFIC_RESERVATION",
                                                    "key": "compute.googleapis.com/reservation-name",
                                                    "values": ["projects/my-proj/zones/us-central1-a/reservations/r1"]}})


def test_every_setup_check_passes_on_a_project_that_has_everything(cloud):
    found = cloud.project.setup(full_job(cloud), Option("us-central1", "STANDARD"))
    assert [(f.what, f.ok) for f in found] == [
        ("APIs enabled", True), ("the job's image", True), ("the run-as service account", True),
        ("network projects/123/global/networks/vpc", True),
        ("reservation projects/my-proj/zones/us-central1-a/reservations/r1", True), ("persistent resource pr1", True)]
    batch = cloud.api.calls("GET", "services:batchGet")[0]
    assert sorted(batch.query["names"]) == sorted(f"projects/my-proj/services/{a}" for a in APIS)
    # a loopback stand-in is asked anonymously: no Google token leaves for it
    for req in [*cloud.api.requests, *cloud.registry.requests]:
        assert not any(k.lower() == "authorization" and "Bearer registry-token" not in v for k, v in req.headers.items()), req


def test_each_missing_piece_is_a_problem_naming_the_command_that_mends_it(cloud):
    cloud.usage.enabled.discard("artifactregistry.googleapis.com")
    cloud.iam.accounts.clear()
    cloud.resources.networks.clear()
    cloud.resources.reservations.clear()
    cloud.resources.persistent_resources.clear()
    cloud.registry.tags.clear()
    found = {f.what: f for f in cloud.project.setup(full_job(cloud), Option("us-central1", "STANDARD"))}
    assert all(f.ok is False for f in found.values()), [line(f) for f in found.values()]
    fixes = {what: f.fix for what, f in found.items()}
    assert fixes["APIs enabled"] == "gcloud services enable artifactregistry.googleapis.com --project my-proj"
    assert fixes["the job's image"].startswith("gcloud artifacts docker images list")
    assert fixes["the run-as service account"] == "gcloud iam service-accounts create trainer --project=my-proj"
    assert fixes["network projects/123/global/networks/vpc"] == "gcloud compute networks create vpc --project=123"
    assert fixes["reservation projects/my-proj/zones/us-central1-a/reservations/r1"].startswith(
        "gcloud compute reservations create r1 --zone=us-central1-a --project=my-proj")
    assert fixes["persistent resource pr1"].startswith(
        "gcloud ai persistent-resources create --persistent-resource-id=pr1 --region=us-central1")


def test_a_caller_who_may_not_act_as_the_service_account_is_told_the_binding(cloud):
    cloud.iam.accounts[SA] = set()
    found = only(cloud.project.setup(full_job(cloud), Option("us-central1", "STANDARD")), "service account")
    assert found.ok is False and "iam.serviceAccounts.actAs" in found.line
    assert "--role=roles/iam.serviceAccountUser" in found.fix


def test_a_reservation_in_another_region_is_refused(cloud):
    found = cloud.project.setup(full_job(cloud), Option("europe-west4", "STANDARD"))
    reservation = only(found, "reservation")
    assert reservation.ok is False and "not in the job's region europe-west4" in reservation.line


@pytest.mark.parametrize("pattern, what, permission", [
    ("services:batchGet", "APIs enabled", "serviceusage.services.get"),
    ("/v2/", "the job's image", "artifactregistry.repositories.downloadArtifacts"),
    ("testIamPermissions", "the run-as service account", "may not test permissions"),
    ("/global/networks/", "network", "compute.networks.get"),
    ("/reservations/", "reservation", "compute.reservations.get"),
    ("persistentResources", "persistent resource", "aiplatform.persistentResources.get"),
])
def test_each_setup_check_without_permission_is_not_checked_naming_what_is_missing(cloud, pattern, what, permission):
    cloud.api.fault(403, pattern, times=None)
    cloud.registry.fault(403, pattern, times=None)
    found = only(cloud.project.setup(full_job(cloud), Option("us-central1", "STANDARD")), what)
    assert found.ok is None and permission in one_line(found)


# ---- without credentials -----------------------------------------------------------------------------------------------

def test_without_credentials_every_check_is_one_not_checked_line(monkeypatch, tmp_path, cloud):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))
    project = CloudProject("my-proj")  # Google's endpoints: nothing is sent without credentials
    cfg = full_job(cloud)
    cfg.container.image_uri = f"us-central1-docker.pkg.dev/my-proj/training/trainer@{DIGEST}"
    found = [*project.quota(cfg, Option("us-central1", "STANDARD")), *project.setup(cfg, Option("us-central1", "STANDARD")),
             *project.bucket_location("gs://runs/x")[1]]
    assert [f.ok for f in found] == [None] * len(found), [line(f) for f in found]
    for f in found:
        assert "GOOGLE_APPLICATION_CREDENTIALS" in one_line(f), f.line
    assert {f.what for f in found} >= {"Vertex AI quotas in us-central1", "APIs enabled", "the job's image",
                                            "the run-as service account", "bucket of gs://runs/x"}


def test_without_a_project_every_check_says_so():
    project = CloudProject("")
    found = [*project.quota(job(), Option("us-central1", "STANDARD")), *project.setup(job(), Option("us-central1", "STANDARD"))]
    assert [f.ok for f in found] == [None, None] and all("no project named" in f.line for f in found)


# ---- faults: each one bounded line ----------------------------------------------------------------------------------------

CHECKS = {
    "quotas": ("quotaInfos", lambda p, cfg: p.quota(cfg, Option("us-central1", "STANDARD"))),
    "bucket": ("/storage/v1/b/", lambda p, cfg: p.bucket_location("gs://runs/x")[1]),
    "apis": ("services:batchGet", lambda p, cfg: [only(p.setup(cfg, Option("us-central1", "STANDARD")), "APIs")]),
    "iam": ("serviceAccounts", lambda p, cfg: [only(p.setup(cfg, Option("us-central1", "STANDARD")), "service account")]),
    "image": ("/v2/", lambda p, cfg: [only(p.setup(cfg, Option("us-central1", "STANDARD")), "image")]),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", [503, "drop", "hang", "html"])
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_every_fault_is_one_bounded_not_checked_line(cloud, capsys, check, fault):
    pattern, run = CHECKS[check]
    (cloud.registry if check == "image" else cloud.api).fault(fault, pattern, times=None)
    found = run(cloud.project, full_job(cloud))
    assert found and all(f.ok is None for f in found), [line(f) for f in found]
    for f in found:
        one_line(f)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert all(x.startswith("warning: ") for x in err.strip().splitlines() if x), err


def test_nothing_listening_is_one_not_checked_line_per_check(cloud):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    project = CloudProject("my-proj", api_endpoint=f"http://127.0.0.1:{port}")
    cfg = full_job(cloud)
    found = [*project.quota(cfg, Option("us-central1", "STANDARD")), *project.setup(cfg, Option("us-central1", "STANDARD")),
             *project.bucket_location("gs://runs/x")[1]]
    assert [f.ok for f in found if f.what != "the job's image"] == [None] * (len(found) - 1)
    for f in found:
        if f.what != "the job's image":  # the image's registry is its own host, still listening
            assert "connection refused" in one_line(f), f.line


def test_the_command_prints_one_line_per_finding(cloud, capsys):
    rc = main(["--project", "my-proj", "--config", "gpu-1x4", "--api-endpoint", cloud.api.url])
    out = capsys.readouterr().out
    assert rc == 1  # the T4 quota of us-central1
    assert "== us-central1 STANDARD" in out
    assert f"error: aiplatform.googleapis.com/{T4} in us-central1" in out
