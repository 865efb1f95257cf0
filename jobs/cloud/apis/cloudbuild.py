"""The Cloud Build API: one build of a context staged in Cloud Storage, followed to its end, its image returned
by digest. The builder that stages a context and calls this is ``jobs.images.cloudbuild`` (behind the one
builder interface, ``jobs.images.builders``).

Why Cloud Build: no local Docker engine is needed, the image is built next to Artifact Registry, and the
digest that comes back pins exactly what every Vertex replica will run (a tag can move; a digest cannot).

Steps (each one request through the real client library):

1. the context tarball is already in ``gs://STAGING/PATH/<ctx-tag>.tgz`` (``jobs.images.cloudbuild``
   uploads it through :mod:`jobs.cloud.apis.gcs`);
2. ``CloudBuildClient.create_build`` (REST) with one ``docker build -f DOCKERFILE -t IMAGE .`` step and
   ``images: [IMAGE]`` (Cloud Build pushes the images listed there after the steps succeed, and reports
   each pushed digest in ``results.images``);
3. the build is followed (``GET /v1/projects/P/builds/ID``, a read under the policy of
   :mod:`jobs.cloud.apis.clients`), each status change printed as one line, until the build ends;
4. ``IMAGE@sha256:...`` is returned (``repo:tag@digest``: the tag says where it came from, the digest pins it).

A failed build (FAILURE, TIMEOUT, INTERNAL_ERROR, CANCELLED, EXPIRED) or an API error becomes one
:class:`~jobs.rules.errors.CloudError` line with Cloud Build's own detail and the log URL.
"""
from __future__ import annotations

import time
from typing import Callable, Mapping

from jobs.cloud.apis import clients, gcs
from jobs.cloud.apis.policy import CREATE_SERVER_ID, policy
from jobs.cloud.apis.lines import ended, keeps_running
from jobs.cloud.apis.credentials import client_kwargs
from jobs.rules.errors import CloudError
from jobs.rules.image_reference import parse_reference

DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
#: Cloud Build's own default is 10 min; a TensorFlow image with its wheels can take longer.
BUILD_TIMEOUT_S = 3600
#: extra time to wait beyond the build timeout (time spent QUEUED does not count against it).
QUEUE_MARGIN_S = 900
FAILED = ("FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")


def split_image(image: str) -> tuple[str, str]:
    """``host/path/name:tag`` -> (``host/path/name``, ``tag``) through THE reference parser; a build needs
    an explicit tag, because ``results.images`` is matched by name and an untagged push would silently be
    ``:latest``."""
    ref = parse_reference(image)
    if ref.digest:
        raise CloudError(f"image {image!r} already names a digest; give repo:tag to build")
    if not ref.tag:
        raise CloudError(f"image {image!r} has no tag; give REPO:TAG, e.g. {image}:ctx-<hash>")
    return ref.repository, ref.tag


def build_request(source_uri: str, image: str, dockerfile: str, build_args: Mapping[str, str] | None = None,
                  timeout_s: int = BUILD_TIMEOUT_S):
    """The ``Build`` resource: one docker build step on the unpacked source (``--build-arg K=V`` for each
    build arg, sorted); ``images`` makes Cloud Build push the image and report its digest."""
    from google.cloud.devtools import cloudbuild_v1

    bucket, name = gcs.parse_uri(source_uri)
    _, tag = split_image(image)
    arg_flags = [flag for key in sorted(build_args or {}) for flag in ("--build-arg", f"{key}={build_args[key]}")]
    return cloudbuild_v1.Build(
        source=cloudbuild_v1.Source(storage_source=cloudbuild_v1.StorageSource(bucket=bucket, object_=name)),
        steps=[cloudbuild_v1.BuildStep(name=DOCKER_BUILDER, id="docker-build",
                                       args=["build", "-f", dockerfile, *arg_flags, "-t", image, "."])],
        images=[image],
        tags=["vertex-tf-pipelines", tag],
        timeout={"seconds": int(timeout_s)},
    )


def build_client(endpoint: str | None = None):
    from google.cloud.devtools import cloudbuild_v1

    return cloudbuild_v1.CloudBuildClient(**client_kwargs(endpoint, "Cloud Build"))


def run_build(build, *, project: str, endpoint: str | None = None, log: Callable[[str], None] = print,
              poll: tuple[float, float] | None = None, client=None):
    """Create ``build`` in ``project``, follow it to the end, return the finished ``Build``.

    The build's id is Cloud Build's, so the create is repeated only when nothing can have been created
    (429, no connection): after a 5xx or a dropped connection the line says a build may exist and the
    command that lists them. Following is a read (``GET projects/P/builds/ID``) under the policy.
    ``poll`` = (first interval, longest interval) in seconds (default: 1, ``VTP_CLOUD_POLL_S``)."""
    client = client or build_client(endpoint)
    poll = poll or (min(1.0, policy().poll_s), policy().poll_s)
    operation = clients.call(client.create_build, project_id=project, build=build, kind=CREATE_SERVER_ID,
                             doing=f"creating a Cloud Build build in project {project}",
                             unsure=f"a build may have been created even so: gcloud builds list --ongoing --project {project}",
                             hints={403: "the caller needs roles/cloudbuild.builds.editor, and the Cloud Build API must "
                                         "be enabled: gcloud services enable cloudbuild.googleapis.com"})
    current = getattr(operation.metadata, "build", None)
    if current is None or not current.id:
        raise CloudError(f"creating a Cloud Build build in project {project}: the answer named no build; "
                         f"see: gcloud builds list --ongoing --project {project}")
    build_id = current.id
    see = f"gcloud builds describe {build_id} --project {project}; cancel: gcloud builds cancel {build_id} --project {project}"
    keeps_running(f"Cloud Build build {build_id}", see)
    log(f"cloud build {build_id}: created in project {project}; logs: {current.log_url}")
    limit_s = (build.timeout.total_seconds() or BUILD_TIMEOUT_S) + QUEUE_MARGIN_S
    deadline = time.monotonic() + limit_s
    interval, last = poll[0], None
    while True:
        status = current.status.name
        if status != last:
            log(f"cloud build {build_id}: {status}")
            last = status
        if status not in ("QUEUED", "WORKING", "PENDING", "STATUS_UNKNOWN"):
            break
        if time.monotonic() > deadline:
            raise CloudError(f"cloud build {build_id}: still {status} after {limit_s:.0f}s "
                             f"(its timeout + {QUEUE_MARGIN_S}s in the queue); stopped waiting, the build may "
                             f"still finish: {see}; logs: {current.log_url}")
        time.sleep(interval)
        interval = min(interval * 1.5, poll[1])
        current = clients.call(client.get_build, project_id=project, id=build_id,
                               doing=f"following Cloud Build build {build_id}",
                               unsure=f"the build may still be running: {see}")
    ended(f"Cloud Build build {build_id}")
    if status != "SUCCESS":
        detail = current.failure_info.detail or current.status_detail
        raise CloudError(f"cloud build {build_id} {status}: {' '.join(detail.split()) or 'no detail given'}; "
                         f"logs: {current.log_url}")
    return current


def image_by_digest(build, image: str) -> str:
    """``image@sha256:...`` from the finished build's ``results.images``."""
    for pushed in build.results.images:
        if pushed.name == image and pushed.digest:
            return f"{image}@{pushed.digest}"
    names = ", ".join(p.name for p in build.results.images) or "none"
    raise CloudError(f"cloud build {build.id} succeeded but reported no digest for {image} (pushed: {names})")


def build_from_storage(source_uri: str, image: str, dockerfile: str, *, project: str,
                       build_args: Mapping[str, str] | None = None, endpoint: str | None = None,
                       log: Callable[[str], None] = print, poll: tuple[float, float] | None = None) -> str:
    """Build ``image`` from a context tarball already in Cloud Storage; returns ``image@sha256:...``."""
    build = build_request(source_uri, image, dockerfile, build_args)
    log(f"building {image} from {source_uri} (-f {dockerfile}) with Cloud Build in project {project}")
    return image_by_digest(run_build(build, project=project, endpoint=endpoint, log=log, poll=poll), image)


