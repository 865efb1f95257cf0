"""The local stand-ins for the cloud, and what would reach it, refused before anything starts.

* the local endpoints given (:class:`Local`: a Docker registry for Artifact Registry's Docker hosts, a KFP
  registry stand-in, a Vertex AI stand-in; loopback addresses only) and the substitutions they set;
* what a step of the build would reach in the cloud with its substitutions (:func:`cloud_problems`), and
  whether a Docker engine answers;
* the ``docker`` of the docker steps (:data:`DOCKER_SHIM`): an image named on a Google registry pushed to
  (pulled from) the local registry under the same path, any other non-loopback push refused;
* ``--small-images``: a FROM-scratch busybox Dockerfile in place of ``containers/Dockerfile``, and
  ``--wheels``: a folder of wheels for an offline image build.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from pathlib import Path

from jobs.commands.ci_local.build_file import Build
from jobs.cloud.apis.credentials import is_local_endpoint

SMALL_DOCKERFILE = """\
# vtp ci-local --small-images: in place of the trainer image, FROM scratch + busybox-static and the sources,
# VARIANT recorded in /etc/variant. No base image, no PyPI: every docker command of the steps runs for real.
FROM scratch
ARG VARIANT=cpu
COPY containers/busybox /bin/busybox
COPY trainers /app/trainers
COPY jobs /app/jobs
COPY components /app/components
COPY pipelines /app/pipelines
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox test -f /app/jobs/ci/cloudbuild_steps.py && /bin/busybox mkdir -p /etc && echo \\"$VARIANT\\" > /etc/variant"]
CMD ["/bin/busybox", "cat", "/etc/variant"]
"""
BUSYBOX = "/bin/busybox"
# Registry hosts that are Google's: what the docker shim sends to the local registry instead.
GOOGLE_REGISTRY = re.compile(r"^(?:[a-z0-9-]+-docker\.pkg\.dev|gcr\.io|[a-z]+\.gcr\.io)/")
DOCKER_SHIM = """\
#!{python}
\"\"\"vtp ci-local: the `docker` of the build's docker steps. An image on an Artifact Registry or gcr.io host is
pushed to (pulled from) the local registry {local} under the same path; a push to any other host that is not
loopback is refused; every other command is the real docker ({real}).\"\"\"
import os, re, subprocess, sys
REAL, LOCAL = {real!r}, {local!r}
GOOGLE = re.compile({pattern!r})
args = sys.argv[1:]
verb = args[1] if args[:1] == ["image"] and len(args) > 1 else (args[0] if args else "")
image = args[-1] if verb in ("push", "pull") and len(args) > 1 and not args[-1].startswith("-") else ""
match = GOOGLE.match(image)
if match:
    local = LOCAL + "/" + image[match.end():]
    if verb == "push":
        code = subprocess.call([REAL, "tag", image, local])
        if code == 0:
            print("ci-local: push " + image + " -> " + local, file=sys.stderr, flush=True)
            code = subprocess.call([REAL] + args[:-1] + [local])
    else:
        code = subprocess.call([REAL] + args[:-1] + [local]) or subprocess.call([REAL, "tag", local, image])
    sys.exit(code)
host = image.split("/")[0] if "/" in image else ""
if verb == "push" and ("." in host or ":" in host) and not host.startswith(("127.", "localhost")):
    print("ci-local: docker push " + image + ": a local run pushes only to the local registry " + LOCAL, file=sys.stderr)
    sys.exit(1)
os.execv(REAL, [REAL] + args)
"""


@dataclasses.dataclass
class Local:
    """The local endpoints given, and the substitution of ``cloudbuild.yaml`` each one sets."""
    registry: str | None = None        # HOST:PORT of a Docker registry: Artifact Registry's Docker hosts
    kfp_host: str | None = None        # _TEMPLATE_HOST: http://127.0.0.1:P/PROJECT/REPO
    vertex_endpoint: str | None = None  # _API_ENDPOINT: http://127.0.0.1:P

    def substitutions(self) -> dict[str, str]:
        pairs = (("_TEMPLATE_HOST", self.kfp_host), ("_API_ENDPOINT", self.vertex_endpoint))
        return {name: value for name, value in pairs if value}


#: ``--registry``: a Docker registry's HOST:PORT as docker names it in an image reference (no scheme, no path).
REGISTRY_RE = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):(?P<port>[0-9]{1,5})\Z")


def registry_problem(value: str) -> str | None:
    """Why ``--registry`` is not of a registry's form (HOST:PORT, the port 1-65535), or None: said before the
    loopback rule and long before a Docker engine is asked for."""
    m = REGISTRY_RE.fullmatch(value)
    if not m or not 1 <= int(m.group("port")) <= 65535:
        return (f"--registry {value!r}: not a registry's HOST:PORT (no scheme, no path; the port 1-65535), "
                "e.g. 127.0.0.1:5000")
    return None


def local_problems(local: Local) -> list[str]:
    problems = []
    if local.registry is not None and registry_problem(local.registry):
        return [registry_problem(local.registry)]
    for flag, value in (("--registry", local.registry), ("--kfp-host", local.kfp_host),
                        ("--vertex-endpoint", local.vertex_endpoint)):
        if value and not is_local_endpoint(value):
            problems.append(f"{flag} {value}: not a loopback address; a local run contacts no cloud "
                            "(give 127.0.0.1:PORT / http://127.0.0.1:PORT/...)")
    return problems


def cloud_problems(build: Build, subs: dict[str, str], given: Local) -> list[str]:
    """What a step of this build would reach in the cloud with these substitutions: each one line saying
    what the local run needs instead (this project's cloudbuild.yaml reaches Google through its docker pushes,
    _TEMPLATE_HOST / _TEMPLATE_REPOSITORY and _API_ENDPOINT / _SUBMIT)."""
    problems = []
    if any(s.is_docker for s in build.steps) and not given.registry:
        problems.append("the docker steps would push to Artifact Registry "
                        f"({subs.get('_REGION', 'REGION')}-docker.pkg.dev): give --registry 127.0.0.1:PORT (a local "
                        "registry: docker-registry, or docker run -d -p 5000:5000 registry:2)")
    template_host = subs.get("_TEMPLATE_HOST", "")
    if template_host and not is_local_endpoint(template_host):
        problems.append(f"upload-templates would upload to {template_host}: give --kfp-host "
                        "http://127.0.0.1:PORT/PROJECT/REPO (a local KFP registry stand-in)")
    elif not template_host and subs.get("_TEMPLATE_REPOSITORY"):
        problems.append(f"upload-templates would upload to https://{subs.get('_REGION')}-kfp.pkg.dev/"
                        f"{subs.get('PROJECT_ID')}/{subs['_TEMPLATE_REPOSITORY']}: give --kfp-host "
                        "http://127.0.0.1:PORT/PROJECT/REPO (a local KFP registry stand-in), or "
                        "--substitution _TEMPLATE_REPOSITORY= (nothing uploaded)")
    if subs.get("_SUBMIT") == "true" and not is_local_endpoint(subs.get("_API_ENDPOINT", "")):
        problems.append(f"submit would send {subs.get('_SUBMIT_PRESET')} to Vertex AI "
                        f"({subs.get('_API_ENDPOINT') or subs.get('_REGION', '') + '-aiplatform.googleapis.com'}): "
                        "give --vertex-endpoint http://127.0.0.1:PORT (a local Vertex AI stand-in), or leave _SUBMIT false")
    return problems


def docker_problem(host: str) -> str | None:
    """None when a Docker engine answers at ``host``, else the one line that says so."""
    import docker

    try:
        client = docker.APIClient(base_url=host, version="auto", timeout=10)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # docker raises DockerException, requests' errors, OSError...
        return (f"no Docker engine reachable at {host} ({' '.join(str(exc).split())[:160]}): start one, or give "
                "--docker-host")


def image_problems(small_images: bool, wheels: Path | None) -> list[str]:
    """What ``--small-images`` and ``--wheels`` need and do not have, one line each."""
    problems = []
    if small_images and not (os.path.isfile(BUSYBOX) and os.access(BUSYBOX, os.X_OK)):
        problems.append(f"--small-images needs {BUSYBOX} (apt-get install busybox-static)")
    if wheels and not any(wheels.glob("*.whl")):
        problems.append(f"--wheels {wheels}: no *.whl there")
    return problems


def install_small_images(workspace: Path) -> None:
    """``--small-images``: the FROM-scratch busybox Dockerfile and busybox in the workspace's ``containers/``."""
    (workspace / "containers").mkdir(exist_ok=True)
    (workspace / "containers" / "Dockerfile").write_text(SMALL_DOCKERFILE)
    shutil.copy2(BUSYBOX, workspace / "containers" / "busybox")


def link_wheels(workspace: Path, wheels: Path) -> None:
    """``--wheels``: every wheel of ``wheels`` linked (copied where it cannot be) into ``containers/wheels/``."""
    target = workspace / "containers" / "wheels"
    target.mkdir(parents=True, exist_ok=True)
    for wheel in sorted(wheels.glob("*.whl")):
        try:
            os.link(wheel, target / wheel.name)
        except OSError:
            shutil.copy2(wheel, target / wheel.name)


def write_docker_shim(folder: Path, registry: str | None) -> None:
    """The docker steps' ``docker`` (:data:`DOCKER_SHIM`) in ``folder``, over this machine's docker CLI."""
    folder.mkdir()
    (folder / "docker").write_text(DOCKER_SHIM.format(python=sys.executable, real=shutil.which("docker"),
                                                      local=registry, pattern=GOOGLE_REGISTRY.pattern))
    (folder / "docker").chmod(0o755)
