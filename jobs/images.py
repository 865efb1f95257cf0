"""Which trainer image a job runs, and building + pushing it through a Docker engine.

Image variants (``containers/Dockerfile`` ``--build-arg VARIANT=...``, pyproject extras of the same name):

=======  ===========================================  ===============================================
variant  TensorFlow in the image                      chosen when the job's pools ask for
=======  ===========================================  ===============================================
cpu      tensorflow-cpu 2.21                          no accelerator
gpu      tensorflow[and-cuda] 2.21 (CUDA/cuDNN wheels) a GPU (``NVIDIA_*``) in any pool
tpu      tensorflow-tpu 2.20 + libtpu (no 2.21 build)  a TPU (``cloud-tpu``, TPU VM machine, ``TPU_*``)
=======  ===========================================  ===============================================

Why one repository per variant (``<container.image_repository>`` for cpu, ``...-gpu``, ``...-tpu``): the
content tag (:func:`jobs.build_context.content_tag`) names the sources, and a CPU and a GPU image of the
same sources must not fight over one tag. ``container.image_uri``, when set, wins over all of this.

The Docker backend talks to the engine at ``DOCKER_HOST`` through the ``docker`` SDK's low-level
``APIClient`` (the engine's own credentials are used for pushes and for "does this tag exist"). The
Cloud Build backend has no engine: :func:`registry_digest` asks the registry's ``/v2/`` API itself.
Every failure is a :class:`BuildError` whose text is one line.
"""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Callable, Mapping

from jobs.build_context import BuildContext, BuildError, write_tar

VARIANTS = ("cpu", "gpu", "tpu")
#: the project the presets name in container.image_repository; never a real build target
PLACEHOLDER_PROJECT = "my-project"
#: repository suffix per variant (cpu is the plain repository: what components and CPU jobs run).
VARIANT_SUFFIX = {"cpu": "", "gpu": "-gpu", "tpu": "-tpu"}

# docker/distribution reference grammar (reference/regexp.go), without the tag/digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_DOMAIN_RE = re.compile(rf"^{_DOMAIN}$")
_PATH_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


# ---- which image ------------------------------------------------------------------------------------

def _pools(cfg: Any) -> list[Mapping[str, Any]]:
    doc = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
    topology = doc.get("topology") or {}
    return [topology.get(name) or {} for name in ("chief", "worker", "parameter_server", "evaluator")]


def variant_for(cfg: Any) -> str:
    """``gpu`` when any pool with replicas asks for a GPU, ``tpu`` for a TPU, else ``cpu``.

    ``cfg``: a :class:`trainers.config.JobConfig` or its dict. TPUs are recognised through the hardware
    catalog (legacy ``cloud-tpu`` machines, TPU VM machine types, ``TPU_*`` accelerators).
    """
    from jobs.hardware.catalog import load_catalog

    catalog = load_catalog()
    doc = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
    found = set()
    if (doc.get("topology") or {}).get("strategy") == "tpu":
        found.add("tpu")
    for pool in _pools(doc):
        if not pool.get("replica_count"):
            continue
        accel, machine = str(pool.get("accelerator_type") or ""), str(pool.get("machine_type") or "")
        entry = catalog.machines.get(machine)
        if (entry is not None and entry.tpu) or (accel and catalog.is_tpu(accel)) or pool.get("tpu_topology"):
            found.add("tpu")
        elif accel and int(pool.get("accelerator_count") or 0) > 0:
            found.add("gpu")
    if "tpu" in found:
        return "tpu"
    return "gpu" if "gpu" in found else "cpu"


def split_reference(ref: str) -> tuple[str, str | None, str | None]:
    """``REPO[:TAG][@sha256:DIGEST]`` -> (repository, tag, digest); :class:`BuildError` when malformed."""
    text = ref.strip()
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.match(digest):
            raise BuildError(f"bad image reference {ref!r}: digest must be sha256:<64 hex digits>")
    tag = None
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        text, tag = text.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise BuildError(f"bad image reference {ref!r}: tag {tag!r} is not a valid tag")
    first, _, rest = text.partition("/")
    has_domain = bool(rest) and ("." in first or ":" in first or first == "localhost")  # docker's rule
    valid = (_DOMAIN_RE.match(first) and _PATH_RE.match(rest)) if has_domain else _PATH_RE.match(text)
    if not valid or len(text) > 255:
        raise BuildError(f"bad image reference {ref!r}: expected HOST[:PORT]/PATH with lowercase letters, digits "
                         "and . _ - separators, e.g. us-central1-docker.pkg.dev/PROJECT/REPO/tf-trainer")
    return text, tag, digest


def registry_host(repository: str) -> str:
    """The registry part of a repository (Docker Hub's ``docker.io`` when the first part is no host)."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def repository_for(base_repository: str, variant: str) -> str:
    """``base`` for cpu, ``base-gpu`` / ``base-tpu`` for the others."""
    if variant not in VARIANTS:
        raise BuildError(f"unknown image variant {variant!r}; valid choices: {', '.join(VARIANTS)}")
    repository, _, _ = split_reference(base_repository)
    return repository + VARIANT_SUFFIX[variant]


def build_repository(cfg: Any, variant: str | None = None) -> str:
    """The repository a build for this job pushes to: ``container.image_repository`` + variant suffix.

    A config that sets only ``container.image_uri`` builds into that image's repository (no suffix: the
    user named the image). Neither set -> :class:`BuildError`.
    """
    container = cfg.container if hasattr(cfg, "container") else None
    base = getattr(container, "image_repository", "") if container is not None else ""
    explicit = getattr(container, "image_uri", "") if container is not None else ""
    if base:
        repository = repository_for(base, variant or variant_for(cfg))
        if f"/{PLACEHOLDER_PROJECT}/" in repository:
            raise BuildError(f"container.image_repository {base} still names the presets' placeholder project "
                             f"{PLACEHOLDER_PROJECT!r}: --set container.image_repository=REGION-docker.pkg.dev/"
                             "PROJECT/REPO/tf-trainer, or pass --image REPO_URI")
        return repository
    if explicit:
        return split_reference(explicit)[0]
    raise BuildError("the config names no image repository: set container.image_repository "
                     "(e.g. us-central1-docker.pkg.dev/PROJECT/REPO/tf-trainer) or pass --image")


def job_image(cfg: Any, built: str | None = None) -> str:
    """The image a job's replicas run: ``container.image_uri`` when set (explicit wins), else ``built``
    (what a build step produced, ``REPO:TAG@sha256:...``), else ``<variant repository>:latest``."""
    explicit = getattr(cfg.container, "image_uri", "")
    if explicit:
        return explicit
    if built:
        return built
    base = getattr(cfg.container, "image_repository", "")
    return f"{repository_for(base, variant_for(cfg))}:latest" if base else ""


def component_image(cfg: Any) -> str:
    """Pipeline components always run the CPU image (they never train): the explicit image, else the
    cpu repository ``:latest``."""
    explicit = getattr(cfg.container, "image_uri", "")
    if explicit:
        return explicit
    base = getattr(cfg.container, "image_repository", "")
    return f"{repository_for(base, 'cpu')}:latest" if base else ""


# ---- the registry's own API (no engine: the Cloud Build backend) ------------------------------------

MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json")


def _is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in ("localhost", "[::1]") or name.startswith("127.")


def registry_digest(repository: str, tag: str, *, access_token: str | None = None,
                    timeout_s: float = 20.0) -> str | None:
    """``HEAD /v2/<name>/manifests/<tag>`` on the registry: its ``Docker-Content-Digest``, or None when the
    tag is not there (or we may not look: then building is the safe answer).

    Registries that want a token (Artifact Registry, Docker Hub) answer 401 with a ``Bearer realm=...``
    challenge: the token is fetched from that realm, with ``oauth2accesstoken:<access_token>`` as basic
    auth when a Google access token is given. Loopback registries are spoken to over plain HTTP."""
    import requests

    host = registry_host(repository)
    if host == "docker.io":
        host, name = "registry-1.docker.io", repository if "/" in repository else f"library/{repository}"
    else:
        name = repository[len(host) + 1:]
    url = f"{'http' if _is_loopback(host) else 'https'}://{host}/v2/{name}/manifests/{tag}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    try:
        answer = requests.head(url, headers=headers, timeout=timeout_s)
        challenge = answer.headers.get("WWW-Authenticate", "")
        if answer.status_code == 401 and challenge.lower().startswith("bearer "):
            params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            auth = ("oauth2accesstoken", access_token) if access_token else None
            grant = requests.get(params.get("realm", ""), auth=auth, timeout=timeout_s,
                                 params={k: v for k, v in params.items() if k in ("service", "scope")})
            if grant.ok:
                token = grant.json().get("token") or grant.json().get("access_token")
                answer = requests.head(url, headers={**headers, "Authorization": f"Bearer {token}"},
                                       timeout=timeout_s)
    except requests.RequestException as exc:
        raise BuildError(f"cannot reach registry {host}: {_first_line(exc)}") from None
    if answer.status_code == 200:
        return answer.headers.get("Docker-Content-Digest")
    if answer.status_code in (401, 403, 404):
        return None
    raise BuildError(f"registry {host} answered HTTP {answer.status_code} for {name}:{tag}")


# ---- the Docker engine ------------------------------------------------------------------------------

def _first_line(text: Any) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    line = lines[-1] if lines else str(text)
    return line if len(line) <= 400 else line[:397] + "..."


_FAILED_COMMAND = re.compile(r"^The command '(.*)' returned a non-zero code: (\d+)$", re.S)


def _build_failure(message: Any) -> str:
    """The engine's failure line, with a long RUN command cut to its start (the full text is in the log above)."""
    text = " ".join(str(message).split())
    match = _FAILED_COMMAND.match(text)
    if match:
        command = match.group(1)
        command = command if len(command) <= 100 else command[:97] + "..."
        return f"RUN `{command}` returned a non-zero code: {match.group(2)}"
    return _first_line(text)


def docker_client(timeout_s: float = 600) -> Any:
    """A low-level ``docker.APIClient`` for ``DOCKER_HOST`` (or the default socket), checked with a ping."""
    import docker
    import requests

    where = os.environ.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    try:
        client = docker.APIClient(version="auto", timeout=timeout_s, **docker.utils.kwargs_from_env())
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise BuildError(f"no Docker engine reachable at {where}: {_first_line(exc)} "
                         "(start dockerd or set DOCKER_HOST)") from None
    return client


def remote_digest(client: Any, repository: str, tag: str) -> str | None:
    """The registry's digest for ``repository:tag``, asked through the engine (its credentials);
    None when the registry does not have it. Registry unreachable -> :class:`BuildError`."""
    import docker

    try:
        answer = client.inspect_distribution(f"{repository}:{tag}")
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", "") or exc).lower()
        if exc.status_code in (401, 403, 404) or "not found" in text or "manifest unknown" in text:
            return None  # not there, or not visible to us: build (pushing the same content is harmless)
        raise BuildError(f"cannot reach registry {registry_host(repository)}: {_first_line(exc.explanation or exc)}") \
            from None
    return (answer.get("Descriptor") or {}).get("digest")


def build_image(client: Any, ctx: BuildContext, image: str, build_args: Mapping[str, str] | None = None,
                log: Callable[[str], None] = print) -> str:
    """Build ``image`` (``REPO:TAG``) from ``ctx`` sent as the deterministic tar; returns the image id.

    The engine's output lines are passed to ``log`` as they come. A failing instruction -> BuildError
    with the engine's message (e.g. ``The command '/bin/sh -c false' returned a non-zero code: 1``)."""
    import docker
    import requests

    image_id = None
    pending = ""  # the engine streams raw writes: a line can arrive in pieces (unbuffered Python prints)
    with tempfile.TemporaryFile() as tar:
        write_tar(ctx, tar)
        tar.seek(0)
        try:
            stream = client.build(fileobj=tar, custom_context=True, dockerfile=ctx.dockerfile, tag=image,
                                  buildargs=dict(build_args or {}), rm=True, forcerm=True, pull=False, decode=True)
            for chunk in stream:
                if "error" in chunk or "errorDetail" in chunk:
                    message = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
                    raise BuildError(f"docker build of {image} failed: {_build_failure(message)}")
                pending += str(chunk.get("stream", ""))
                *lines, pending = pending.split("\n")
                for line in lines:
                    if line.strip():
                        log(line.rstrip())
                aux = chunk.get("aux") or {}
                image_id = aux.get("ID", image_id)
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            raise BuildError(f"docker build of {image} failed: {_first_line(getattr(exc, 'explanation', None) or exc)}") \
                from None
    if pending.strip():
        log(pending.rstrip())
    if not image_id:
        raise BuildError(f"docker build of {image} ended without an image id")
    return image_id


def push_image(client: Any, repository: str, tag: str, log: Callable[[str], None] = print) -> str:
    """Push ``repository:tag``; returns ``sha256:...`` as the registry acknowledged it.

    The push stream reports errors as chunks, not as exceptions: any ``error`` chunk, or a stream that
    ends without a digest, is a :class:`BuildError` (never a half-pushed image reported as done)."""
    import docker
    import requests

    digest = None
    seen: set[tuple[str, str]] = set()
    try:
        for chunk in client.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                message = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error")
                raise BuildError(f"push of {repository}:{tag} to {registry_host(repository)} failed: "
                                 f"{_first_line(message)}")
            status, layer = str(chunk.get("status", "")), str(chunk.get("id", ""))
            if status and status not in ("Pushing", "Preparing", "Waiting") and (layer, status) not in seen:
                seen.add((layer, status))
                log(f"{layer}: {status}" if layer else status)
            digest = (chunk.get("aux") or {}).get("Digest", digest)
    except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
        raise BuildError(f"push of {repository}:{tag} failed: {_first_line(getattr(exc, 'explanation', None) or exc)}") \
            from None
    if not digest:
        raise BuildError(f"push of {repository}:{tag} ended without a digest from the registry")
    return digest


def build_and_push_docker(ctx: BuildContext, repository: str, tag: str, build_args: Mapping[str, str] | None = None,
                          log: Callable[[str], None] = print) -> tuple[str, bool]:
    """Build and push unless the registry already has ``repository:tag``.

    Returns (``REPO:TAG@sha256:DIGEST``, built?)."""
    client = docker_client()
    try:
        existing = remote_digest(client, repository, tag)
        if existing:
            log(f"already built: {repository}:{tag} is in the registry ({existing}); nothing to build")
            return f"{repository}:{tag}@{existing}", False
        log(f"building {repository}:{tag} from {ctx.root} ({len(ctx.files)} files, -f {ctx.dockerfile})")
        build_image(client, ctx, f"{repository}:{tag}", build_args, log)
        digest = push_image(client, repository, tag, log)
        return f"{repository}:{tag}@{digest}", True
    finally:
        client.close()
