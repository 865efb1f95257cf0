"""The Docker engine (``DOCKER_HOST``), with the docker SDK: THE client factory (:func:`client`, also the docker
runner's), and building and pushing an image through it (``jobs.images.builders.DockerBuilder`` calls these).

The engine's own registry credentials are used for pushes and for "does this tag exist". Every failure
is a :class:`~jobs.rules.image_reference.BuildError` whose text is one line.

Timeouts (the policy of :mod:`jobs.cloud.apis.clients`): ping and "does this tag exist" use the policy's read
timeout (the docker SDK takes one value for connect and read); the tag check is retried like any read
(the engine answers 5xx when the registry is unreachable). The ping is not retried: an engine that is
not there is not a transient fault. A build or push streams the engine's output and can stay silent
while a step works (a pip install of TensorFlow), so those calls wait up to :data:`STREAM_TIMEOUT_S`
between two chunks, as long as Cloud Build gives a whole build.
"""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Callable, Mapping

from jobs.cloud.apis import clients
from jobs.cloud.apis.policy import READ, policy
from jobs.cloud.apis.lines import describe
from jobs.images.context import BuildContext, write_tar
from jobs.rules.image_reference import BuildError, parse_reference

#: the longest a build or push may stay silent (Cloud Build's own bound for a whole build: 1 h)
STREAM_TIMEOUT_S = 3600


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


def registry_host(repository: str) -> str:
    return parse_reference(repository).registry


def client(timeout_s: float | None = None) -> Any:
    """THE ``docker.DockerClient`` for ``DOCKER_HOST`` (or the default socket), checked with a ping
    (``.api`` is its low-level client); ``timeout_s``: the policy's read timeout unless given. An engine that
    is not there is one BuildError line."""
    import docker
    import requests

    timeout_s = timeout_s or policy().read_s
    where = os.environ.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    try:
        client = docker.DockerClient(version="auto", timeout=timeout_s, **docker.utils.kwargs_from_env())
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise BuildError(f"no Docker engine reachable at {where}: {_first_line(exc)} "
                         "(start dockerd or set DOCKER_HOST)") from None
    return client


def remote_digest(client: Any, repository: str, tag: str) -> str | None:
    """The registry's digest for ``repository:tag``, asked through the engine (its credentials);
    None when the registry does not have it. Registry unreachable -> :class:`BuildError`."""
    import docker

    def attempt(timeout):
        client.api.timeout = max(timeout)  # the SDK takes one value for connect and read; capped by the budget left
        return client.api.inspect_distribution(f"{repository}:{tag}")

    try:
        answer = clients.retried(attempt, kind=READ, doing=f"checking whether {repository}:{tag} is in the "
                                 "registry", service="Docker engine", what=lambda exc: _first_line(
                                     getattr(exc, "explanation", None) or describe(exc)))
    except KeyboardInterrupt:
        raise
    except docker.errors.APIError as exc:
        text = str(getattr(exc, "explanation", "") or exc).lower()
        if exc.status_code in (401, 403, 404) or "not found" in text or "manifest unknown" in text:
            return None  # not there, or not visible to us: build (pushing the same content is harmless)
        raise BuildError(f"cannot reach registry {registry_host(repository)}: {_first_line(exc.explanation or exc)}") \
            from None
    except Exception as exc:  # gave up retrying (RetryError), the engine's connection dropped
        cause = getattr(exc, "cause", None) or exc
        detail = getattr(cause, "explanation", None) or describe(exc)
        raise BuildError(f"cannot reach registry {registry_host(repository)}: {_first_line(detail)}") from None
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
            stream = client.api.build(fileobj=tar, custom_context=True, dockerfile=ctx.dockerfile, tag=image,
                                  buildargs=dict(build_args or {}), rm=True, forcerm=True, pull=False, decode=True,
                                  timeout=STREAM_TIMEOUT_S)
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
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
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
    engine = client()
    try:
        existing = remote_digest(engine, repository, tag)
        if existing:
            log(f"already built: {repository}:{tag} is in the registry ({existing}); nothing to build")
            return f"{repository}:{tag}@{existing}", False
    finally:
        engine.close()
    engine = client(STREAM_TIMEOUT_S)  # build and push stream output with silences in between
    try:
        log(f"building {repository}:{tag} from {ctx.root} ({len(ctx.files)} files, -f {ctx.dockerfile})")
        build_image(engine, ctx, f"{repository}:{tag}", build_args, log)
        digest = push_image(engine, repository, tag, log)
        return f"{repository}:{tag}@{digest}", True
    finally:
        engine.close()
