"""The Google token never leaves Google: ``run.py build --backend cloudbuild`` against hostile registries.

Every host is a stand-in on 127.0.0.1 reached over real, verified https through the TLS proxy
(tests/standins/tls_proxy.py), so the product decides on the real host names, as it would in production:
oauth2/cloudbuild/storage.googleapis.com and us-docker.pkg.dev (Google), evil.example.com, auth.docker.io,
registry-1.docker.io, registry.example.com (not Google). The command runs as a user would, with
Application Default Credentials (an authorized_user file whose refresh at oauth2.googleapis.com yields
:data:`TOKEN`). After each run every request every non-Google stand-in received is searched for the token,
the refresh token and the client secret (headers, Basic credentials decoded, bodies), and so are stdout
and stderr.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.standins.base import StandIn
from tests.standins.cloudbuild import CloudBuild
from tests.standins.gcs import Gcs
from tests.standins.registry import RegistryStandIn, TokenRealm, basic_credentials
from tests.standins.tls_proxy import TlsProxy
from tests.test_submit import clean_env

TOKEN = "ya29.FAKE-GOOGLE-ACCESS-TOKEN-3c7d9e"
REFRESH, SECRET = "1//FAKE-REFRESH-TOKEN-b41f", "FAKE-CLIENT-SECRET-77aa"
SECRETS = (TOKEN, REFRESH, SECRET)
GOOGLE_HOSTS = ("oauth2.googleapis.com", "cloudbuild.googleapis.com", "storage.googleapis.com", "us-docker.pkg.dev")
DIGEST = "sha256:" + "d" * 64


def leaks(requests) -> list[str]:
    """Where any secret appears in ``requests`` (headers, decoded Basic credentials, bodies)."""
    found = []
    for r in requests:
        texts = [f"{k}: {v}" for k, v in r.headers.items()] + [basic_credentials(r) or "", r.body.decode("latin-1"),
                                                                 json.dumps(r.query)]
        found += [f"{r.method} {r.headers.get('Host')}{r.path}: {s[:12]}..." for s in SECRETS for t in texts if s in t]
    return found


@pytest.fixture
def world(tmp_path):
    """Google's APIs, a Google registry, and the hosts that are not Google's, all behind one TLS proxy."""
    google = StandIn().start()
    google.route("POST", r"/token", lambda req, m: (200, {"access_token": TOKEN, "expires_in": 3600,
                                                          "token_type": "Bearer"}))
    storage = Gcs(google, buckets={"stage"})
    builds = CloudBuild(google, gcs=storage)
    others = {host: StandIn().start() for host in ("evil.example.com", "auth.docker.io", "registry-1.docker.io",
                                                   "registry.example.com")}
    TokenRealm(others["evil.example.com"], granted="evil-grant")
    TokenRealm(others["auth.docker.io"], granted="hub-grant")
    registries = {}  # filled by the test: {host: RegistryStandIn}
    adc = tmp_path / "adc.json"
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "c.apps.googleusercontent.com",
                               "client_secret": SECRET, "refresh_token": REFRESH,
                               "token_uri": "https://oauth2.googleapis.com/token"}))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    state = {"google": google, "builds": builds, "others": others, "registries": registries, "tmp": tmp_path,
             "adc": adc, "ctx": ctx}
    yield state
    for server in [google, *others.values(), *registries.values()]:
        server.stop()


def run_build(world, image: str):
    hosts = {h: world["google"] for h in GOOGLE_HOSTS[:3]} | world["others"] | world["registries"]
    proxy = TlsProxy(hosts, None, world["tmp"]).start()
    try:
        env = clean_env(world["tmp"], GOOGLE_APPLICATION_CREDENTIALS=str(world["adc"]), **proxy.env())
        started = time.monotonic()
        proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "build", "--backend", "cloudbuild",
                               "--context", str(world["ctx"]), "--dockerfile", "Dockerfile", "--image", image,
                               "--variant", "cpu", "--project", "my-proj", "--staging-bucket", "gs://stage/builds"],
                              capture_output=True, text=True, env=env, timeout=120, cwd=str(ROOT))
    finally:
        proxy.stop()
    return proc, time.monotonic() - started


def assert_no_leak(world, proc):
    not_google = list(world["others"].values()) + [r for h, r in world["registries"].items() if h not in GOOGLE_HOSTS]
    assert leaks([r for s in not_google for r in s.requests]) == []
    assert not any(s in proc.stdout + proc.stderr for s in SECRETS), "a secret in the output"


def test_an_artifact_registry_answer_naming_a_foreign_realm_gets_no_token_and_is_no_proof(world):
    ar = world["registries"]["us-docker.pkg.dev"] = RegistryStandIn(realm="https://evil.example.com/token",
                                                                    granted="evil-grant").start()
    ar.tags = _every_tag(DIGEST)  # a hostile registry claims every tag once its foreign grant comes back
    proc, took = run_build(world, "us-docker.pkg.dev/my-proj/repo/tf-trainer")
    assert proc.returncode == 0, proc.stderr
    evil = world["others"]["evil.example.com"]
    assert evil.calls("GET", "/token"), "the realm was asked (anonymously)"
    assert_no_leak(world, proc)
    assert "its token realm https://evil.example.com/token is not a Google host over https: not proof" in proc.stdout
    assert len(world["builds"].builds) == 1, "an answer from a foreign grant is no proof: the image is built"
    assert proc.stdout.strip().splitlines()[-1].endswith(CloudBuild.digest_for(world["builds"].requests[0]["images"][0]))
    assert took < 60


def test_docker_hub_is_asked_anonymously_and_its_answer_is_no_proof(world):
    hub = world["others"]["registry-1.docker.io"]
    registry = RegistryStandIn(realm="https://auth.docker.io/token", granted="hub-grant")
    registry.tags = _every_tag(DIGEST)
    hub.routes[:] = registry.routes
    proc, _ = run_build(world, "user/tf-trainer")
    assert proc.returncode == 0, proc.stderr
    (head, *_) = hub.calls("HEAD", r"/v2/user/tf-trainer/manifests/ctx-")
    assert "Authorization" not in head.headers and world["others"]["auth.docker.io"].calls("GET", "/token")
    assert_no_leak(world, proc)
    assert "registry docker.io says it has user/tf-trainer:ctx-" in proc.stdout
    assert len(world["builds"].builds) == 1
    assert world["builds"].requests[0]["images"][0].startswith("docker.io/user/tf-trainer:ctx-")


def test_a_foreign_registry_pointing_at_a_google_realm_gets_no_token(world):
    """The token goes to a realm only when the registry itself is Google's: a foreign registry could
    otherwise have us fetch a Google registry token and hand it over."""
    foreign = world["others"]["registry.example.com"]
    registry = RegistryStandIn(realm="https://us-docker.pkg.dev/v2/token", granted="ar-grant")
    registry.tags = _every_tag(DIGEST)
    foreign.routes[:] = registry.routes
    ar = world["registries"]["us-docker.pkg.dev"] = StandIn().start()
    TokenRealm(ar, "/v2/token", granted="ar-grant")
    proc, _ = run_build(world, "registry.example.com/team/tf-trainer")
    assert proc.returncode == 0, proc.stderr
    (grant,) = ar.calls("GET", "/v2/token")
    assert basic_credentials(grant) is None and leaks([grant]) == []
    assert_no_leak(world, proc)
    assert len(world["builds"].builds) == 1


def test_artifact_registry_with_its_own_realm_gets_the_token_and_is_believed(world):
    ar = world["registries"]["us-docker.pkg.dev"] = RegistryStandIn(realm="https://us-docker.pkg.dev/v2/token",
                                                                    granted="ar-grant").start()
    ar.tags = _every_tag(DIGEST)
    TokenRealm(ar, "/v2/token", granted="ar-grant", require_basic=TOKEN)
    proc, _ = run_build(world, "us-docker.pkg.dev/my-proj/repo/tf-trainer")
    assert proc.returncode == 0, proc.stderr
    (grant,) = ar.calls("GET", "/v2/token")
    assert basic_credentials(grant) == f"oauth2accesstoken:{TOKEN}"  # Google host, https: allowed
    assert grant.query["scope"] == ["repository:my-proj/repo/tf-trainer:pull"]
    assert "already built: us-docker.pkg.dev/my-proj/repo/tf-trainer:ctx-" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].endswith(f"@{DIGEST}")
    assert world["builds"].builds == {}, "nothing built"
    assert_no_leak(world, proc)


class _every_tag(dict):
    """Registry tags: every (name, tag) has ``digest``."""

    def __init__(self, digest: str):
        super().__init__()
        self.digest = digest

    def get(self, key, default=None):
        return self.digest


def test_the_rule_itself():
    from jobs.cloud.apis.credentials import may_receive_google_token as ok

    assert ok("https://us-docker.pkg.dev/v2/token") and ok("https://europe-west4-aiplatform.googleapis.com/v1/x")
    assert ok("https://gcr.io/v2/token") and ok("https://eu.gcr.io/v2/token")
    for url in ("http://us-docker.pkg.dev/v2/token", "https://auth.docker.io/token", "https://evil.example.com/t",
                "https://us-docker.pkg.dev.evil.example.com/t", "https://evilpkg.dev/t", "https://notgcr.io/t",
                "https://user:pw@us-docker.pkg.dev/t", "https://us-docker.pkg.dev:8443/t", "ftp://gcr.io/x",
                "https://127.0.0.1:5000/v2/token", "https://us-docker.pkg.dev./t", "us-docker.pkg.dev/t"):
        assert not ok(url), url
