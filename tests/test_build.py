"""`run.py build` with the docker backend against a real dockerd and a real registry.

The image is FROM scratch + busybox-static (no base image to pull, ~2 s to build); its RUN step really
runs in the engine. What is asserted is read back from the registry's own /v2/ API.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docker_servers import BUSYBOX, require

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parent.parent

DOCKERFILE = """FROM scratch
COPY busybox /bin/busybox
COPY app/ /app/
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox test -f /app/hello.txt && /bin/busybox mkdir -p /out && /bin/busybox printf made- && /bin/busybox printf 'in-pieces\\n'"]
CMD ["/bin/busybox", "cat", "/app/hello.txt"]
"""


@pytest.fixture
def context(tmp_path) -> Path:
    require(BUSYBOX)
    ctx = tmp_path / "ctx"
    (ctx / "app").mkdir(parents=True)
    shutil.copy(BUSYBOX, ctx / "busybox")
    (ctx / "app" / "hello.txt").write_text("hello\n")
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    (ctx / "notes").mkdir()
    (ctx / "notes" / "big.log").write_text("ignored\n")
    (ctx / ".dockerignore").write_text("notes/\n")
    return ctx


def build(capsys, *args: str) -> tuple[int, list[str], list[str]]:
    from pipelines.run import main

    status = main(["build", *args])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err.splitlines()


def test_build_push_then_already_built_then_new_tag_on_change(docker_env, own_registry, context, capsys):
    repo = f"{own_registry.host}/tests/busybox"
    args = ("--context", str(context), "--dockerfile", "Dockerfile", "--image", repo, "--variant", "cpu")

    status, out, err = build(capsys, *args)
    assert status == 0, err
    assert err == []
    reference = out[-1]
    assert reference.startswith(f"{repo}:ctx-") and "@sha256:" in reference
    tag = reference.split(":", 2)[-1].split("@")[0]
    digest = reference.split("@")[1]
    assert any("Step 4/5 : RUN" in line for line in out), out  # the engine really built it, step by step
    assert "  made-in-pieces" in out  # output lines re-assembled from the engine's raw chunks

    manifest, served_digest, body = own_registry.manifest("tests/busybox", tag)
    assert served_digest == digest == "sha256:" + hashlib.sha256(body).hexdigest()
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert len(manifest["layers"]) == 3  # busybox, app/, the RUN's mkdir
    assert own_registry.tags("tests/busybox") == [tag]

    # same content again: the registry has the tag, nothing is built
    (context / "app" / "hello.txt").touch()  # mtime only
    status, out2, err = build(capsys, *args)
    assert status == 0, err
    assert out2[-1] == reference
    assert any("already built" in line for line in out2)
    assert not any(line.strip().startswith("Step ") for line in out2), out2

    # an ignored file changing does not change the tag either
    (context / "notes" / "big.log").write_text("changed\n")
    status, out3, _ = build(capsys, *args)
    assert out3[-1] == reference

    # a real change: new tag, pushed beside the first
    (context / "app" / "hello.txt").write_text("hello again\n")
    status, out4, err = build(capsys, *args)
    assert status == 0, err
    new_tag = out4[-1].split(":", 2)[-1].split("@")[0]
    assert new_tag != tag
    assert sorted(own_registry.tags("tests/busybox")) == sorted([tag, new_tag])


def test_cli_as_written_in_the_readme(docker_env, own_registry, context):
    """`python pipelines/run.py build ...` in its own process: last line is REPO:TAG@sha256:DIGEST."""
    repo = f"{own_registry.host}/tests/cli"
    proc = subprocess.run([sys.executable, "pipelines/run.py", "build", "--context", str(context), "--dockerfile",
                           "Dockerfile", "--image", repo], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.splitlines()[-1]
    tag, digest = last.split(":", 2)[-1].split("@")
    assert last.startswith(repo + ":ctx-")
    assert own_registry.manifest("tests/cli", tag)[1] == digest


def _one_error(status: int, out: list[str], err: list[str], expected_status: int, *fragments: str) -> str:
    assert status == expected_status, (status, out, err)
    err = [line for line in err if not line.startswith("warning: ")]  # a retry is said on its own line
    assert len(err) == 1, err
    assert err[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in err[0], err[0]
    assert not any("@sha256:" in line for line in out), out  # nothing reported as pushed
    return err[0]


def test_no_engine_reachable(own_registry, context, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile",
                             "--image", f"{own_registry.host}/tests/x")
    _one_error(status, out, err, 1, "no Docker engine reachable", f"unix://{tmp_path}/nothing.sock")


def test_registry_refusing_the_push(docker_env, readonly_registry, context, capsys):
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile",
                             "--image", f"{readonly_registry.host}/tests/refused")
    _one_error(status, out, err, 1, "push of", "failed", "405")  # read-only mode: Method not allowed
    assert readonly_registry.tags("tests/refused") == []


def test_unreachable_registry(docker_env, context, capsys, monkeypatch):
    from tests.docker_servers import free_port

    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "2")  # nothing listens: refused at every try, for this long

    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile",
                             "--image", f"127.0.0.1:{free_port()}/tests/nowhere")
    _one_error(status, out, err, 1, "127.0.0.1:")


@pytest.mark.parametrize("image, fragment", [
    ("127.0.0.1:5000/Tests/UPPER", "bad image reference"),
    ("127.0.0.1:5000/tests/x:some-tag", "give the repository only"),
    ("127.0.0.1:5000/tests/x@sha256:1234", "digest must be"),
    ("bad image", "bad image reference"),
])
def test_bad_image_reference(context, image, fragment, capsys):
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile", "--image", image)
    _one_error(status, out, err, 2, fragment)


def test_failing_run_step(docker_env, own_registry, context, capsys):
    (context / "Dockerfile").write_text(DOCKERFILE.replace("test -f /app/hello.txt", "test -f /app/missing.txt"))
    repo = f"{own_registry.host}/tests/failing"
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile", "--image", repo)
    _one_error(status, out, err, 1, "docker build of", "returned a non-zero code: 1")
    assert own_registry.tags("tests/failing") == []


def test_missing_context_and_dockerfile(context, tmp_path, capsys):
    status, out, err = build(capsys, "--context", str(tmp_path / "absent"), "--image", "127.0.0.1:5000/x")
    _one_error(status, out, err, 2, "build context", "is not a directory")
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "nope/Dockerfile",
                             "--image", "127.0.0.1:5000/x")
    _one_error(status, out, err, 2, "Dockerfile nope/Dockerfile not found")


def test_registry_api_and_cloudbuild_backend_on_a_registry_that_is_not_googles(docker_env, own_registry, context, capsys):
    """The tag check without an engine (what the Cloud Build backend uses): HEAD /v2/.../manifests/TAG, read
    back from a real registry; its answer came without Google credentials from a registry that is not
    Google's, so it is reported and not taken as proof: Cloud Build builds anyway."""
    from jobs.cloud.apis.registry import registry_digest
    from jobs.images import parse_reference
    from tests.standins.base import StandIn
    from tests.standins.cloudbuild import CloudBuild
    from tests.standins.gcs import Gcs

    repo = f"{own_registry.host}/tests/both"
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile", "--image", repo)
    assert status == 0, err
    reference = out[-1]
    tag, digest = reference.split(":", 2)[-1].split("@")
    answer = registry_digest(parse_reference(f"{repo}:{tag}"))
    assert (answer.digest, answer.trusted) == (digest, False)
    assert registry_digest(parse_reference(f"{repo}:ctx-0000000000000000")).digest is None

    with StandIn() as server:
        builds = CloudBuild(server, gcs=Gcs(server, buckets={"stage"}))
        status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile", "--image", repo,
                                 "--backend", "cloudbuild", "--project", "my-proj", "--staging-bucket", "gs://stage/builds",
                                 "--api-endpoint", server.url)
    assert status == 0, err
    assert any(f"says it has tests/both:{tag} ({digest}), but {own_registry.host} is not a Google registry: not proof" in line
               for line in out), out
    assert len(builds.builds) == 1 and out[-1].startswith(f"{repo}:{tag}@sha256:")


def test_a_registry_that_is_not_googles_never_gets_the_google_token():
    """401 + Bearer challenge -> token from the realm: asked anonymously (a loopback registry and realm are
    not Google hosts over https), so a realm that wants Google credentials grants nothing, and nothing is
    believed."""
    from jobs.cloud.apis.registry import registry_digest
    from jobs.images import parse_reference
    from tests.standins.registry import RegistryStandIn, TokenRealm, basic_credentials

    with RegistryStandIn(realm="", granted="registry-token") as server:
        server.realm = f"{server.url}/v2/token"
        server.tags = {("p/r/img", "ctx-1"): "sha256:" + "c" * 64}
        TokenRealm(server, "/v2/token", granted="registry-token", require_basic="google-token")
        host = server.url.removeprefix("http://")
        answer = registry_digest(parse_reference(f"{host}/p/r/img:ctx-1"), google_token="google-token")
        (grant,) = server.calls("GET", "/v2/token")
    assert basic_credentials(grant) is None and "google-token" not in str(grant.headers)
    assert grant.query == {"service": ["registry"], "scope": ["repository:p/r/img:pull"]}
    assert (answer.digest, answer.trusted) == (None, False)


def test_presets_placeholder_repository_is_refused(context, capsys):
    status, out, err = build(capsys, "--context", str(context), "--dockerfile", "Dockerfile", "--config", "gpu-1x4")
    _one_error(status, out, err, 2, "placeholder project 'my-project'", "--set container.image_repository=")
