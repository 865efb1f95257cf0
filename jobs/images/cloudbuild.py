"""Cloud Build as an image builder: a build context staged in Cloud Storage, built and pushed next to the
registry, returned by digest. ``jobs.images.builders.CloudBuildBuilder`` (the one builder interface) calls it;
the API calls themselves are ``jobs.cloud.apis.cloudbuild`` (the build) and ``jobs.cloud.apis.gcs`` (the upload).

Two kinds of context:

* a local one (``jobs.images.context.BuildContext``, ``run.py build --backend cloudbuild``): its tarball is
  gzip'd if it is not already and uploaded to ``gs://STAGING/PATH/<ctx-tag>.tgz`` (:func:`build_and_push`);
  the name is content-addressed, so a repeat build of the same context reuses the same object name;
* one already staged (:class:`StagedContext`, the pipeline's build step: a ``gs://.../<tag>.tgz`` that
  ``run.py build`` or a CI step put there): built as it is, its tag the object's name (:func:`tag_for_source`),
  in the registry's own project unless one is given (:func:`registry_project`).
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from jobs.cloud.apis import cloudbuild, gcs
from jobs.rules.errors import CloudError
from jobs.rules.image_reference import parse_reference
from jobs.images.context import DEFAULT_DOCKERFILE

CONTENT_TAG = re.compile(r"ctx-[0-9a-f]{8,64}")


@dataclasses.dataclass(frozen=True)
class StagedContext:
    """A build context already in Cloud Storage (``uri``: a ``gs://`` tarball) and its Dockerfile's path in it."""
    uri: str
    dockerfile: str = DEFAULT_DOCKERFILE

    @property
    def tag(self) -> str:
        """The image tag the object's name gives (:func:`tag_for_source`)."""
        return tag_for_source(self.uri)


def staged_name(context_tar: Path) -> str:
    """The object name for a context tarball: its own name when that is already a content tag
    (``ctx-<hex>.tgz`` as ``jobs.images.context`` names them), else ``ctx-<sha256 of the bytes>.tgz``."""
    stem = context_tar.name.split(".")[0]
    if CONTENT_TAG.fullmatch(stem):
        return f"{stem}.tgz"
    digest = hashlib.sha256()
    with open(context_tar, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return f"ctx-{digest.hexdigest()[:16]}.tgz"


def gzipped(context_tar: Path, workdir: Path) -> Path:
    """``context_tar`` itself when it is gzip'd already, else a gzip copy in ``workdir`` (mtime 0, so the
    same tar gives the same bytes). Cloud Build's storage source accepts ``.tar.gz``."""
    with open(context_tar, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            return context_tar
    out = workdir / (context_tar.name.split(".")[0] + ".tgz")
    with open(context_tar, "rb") as src, open(out, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def build_and_push(context_tar: Path, image: str, dockerfile: str, *, project: str, staging_bucket: str,
                   build_args: Mapping[str, str] | None = None, endpoint: str | None = None,
                   log: Callable[[str], None] = print, poll: tuple[float, float] | None = None) -> str:
    """Upload the build context ``context_tar`` to ``staging_bucket`` (``gs://B[/PATH]``), build and push
    ``image`` (``repo:tag``) with Cloud Build; returns ``repo:tag@sha256:...``."""
    context_tar = Path(context_tar)
    cloudbuild.split_image(image)  # a bad reference fails before anything is uploaded
    bucket, prefix = gcs.parse_uri(staging_bucket)
    with tempfile.TemporaryDirectory(prefix="cloudbuild-") as tmp:
        source = gzipped(context_tar, Path(tmp))
        uri = f"gs://{bucket}/{prefix + '/' if prefix else ''}{staged_name(context_tar)}"
        log(f"uploading build context {context_tar} ({source.stat().st_size} bytes) to {uri}")
        gcs.upload(source, uri, project=project, endpoint=endpoint, content_type="application/gzip",
                   label=str(context_tar))
    return cloudbuild.build_from_storage(uri, image, dockerfile, project=project, build_args=build_args, endpoint=endpoint,
                              log=log, poll=poll)


def registry_project(repository: str) -> str | None:
    """The project that owns an Artifact Registry (``REGION-docker.pkg.dev/PROJECT/...``) or Container
    Registry (``[REGION.]gcr.io/PROJECT/...``) repository; None for any other registry."""
    ref = parse_reference(repository)
    parts = ref.path.split("/")
    if len(parts) >= 2 and (ref.registry.endswith("-docker.pkg.dev") or ref.registry == "gcr.io"
                            or ref.registry.endswith(".gcr.io")):
        return parts[0]
    return None


def tag_for_source(source_uri: str) -> str:
    """The image tag for a context already in Cloud Storage: the object's name without extensions, which
    is the content tag when :func:`build_and_push` or ``run.py build --backend cloudbuild`` staged it."""
    _, name = gcs.parse_uri(source_uri)
    stem = name.rsplit("/", 1)[-1].split(".")[0]
    if not re.fullmatch(r"[\w][\w.-]{0,127}", stem):
        raise CloudError(f"build context {source_uri}: cannot derive an image tag from {stem!r}; name the "
                         f"object <tag>.tgz, e.g. ctx-<hash>.tgz")
    return stem
