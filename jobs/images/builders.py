"""ONE image-builder interface, one class per backend (the shape of ZenML's ``image_builders``).

    builder = builder_for("docker")                      # or "cloudbuild", project=..., staging_bucket=...
    reference = builder.build(context, repository, tag, {"VARIANT": "cpu"})   # REPO:TAG@sha256:DIGEST

Every builder takes the same deterministic build context (``jobs.images.context``), pushes to
``repository:tag`` unless the registry already has that tag (the tag is the context's content hash, so
"already there" means "already built"), and returns the image pinned by digest: what every Vertex replica
will run. Failures are one line (``BuildError`` / ``CloudError``).

* :class:`DockerBuilder`: a Docker engine at ``DOCKER_HOST`` (``jobs.images.docker``); "already there" is
  asked through the engine, with its registry credentials.
* :class:`CloudBuildBuilder`: Google Cloud Build (``jobs.images.cloudbuild``, over the API client
  ``jobs.cloud.apis.cloudbuild``): the context uploaded to Cloud Storage, built and pushed next to Artifact Registry;
  "already there" asked from the registry directly (``jobs.cloud.apis.registry``), believed only from a Google
  registry asked with the Google token. It also builds a context already staged in Cloud Storage
  (``jobs.images.cloudbuild.StagedContext``): the pipeline's build step (``jobs.steps.calls.trainer_image``).
"""
from __future__ import annotations

import abc
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from jobs.cloud.apis import cloudbuild as api, registry
from jobs.cloud.apis.credentials import access_token, is_local_endpoint, may_receive_google_token
from jobs.images import cloudbuild
from jobs.images.docker import build_and_push_docker
from jobs.rules.errors import BuildError, CloudError
from jobs.images.cloudbuild import StagedContext
from jobs.images.context import BuildContext, write_tar
from jobs.rules.image_reference import parse_reference

BACKENDS = ("docker", "cloudbuild")


class InputError(Exception):
    """Bad input for a build (``run.py build``'s flags, the job's config): nothing was built; ``lines`` are the
    problems, one line each."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class ImageBuilder(abc.ABC):
    """Builds a context into ``repository:tag`` and returns the pushed image by digest."""

    name: str = ""

    def __init__(self, log: Callable[[str], None] = print):
        self.log = log

    @abc.abstractmethod
    def build(self, context: BuildContext | StagedContext, repository: str, tag: str,
              build_args: Mapping[str, str]) -> str:
        """``REPO:TAG@sha256:DIGEST``, built and pushed, or found already built. ``context``: a local build context
        (``jobs.images.context``), or one already staged in Cloud Storage (a backend that cannot build it says so
        in one line)."""


class DockerBuilder(ImageBuilder):
    name = "docker"

    def build(self, context: BuildContext | StagedContext, repository: str, tag: str,
              build_args: Mapping[str, str]) -> str:
        if isinstance(context, StagedContext):
            raise BuildError(f"build context {context.uri}: a Docker engine builds a local context; one in Cloud "
                             "Storage is built by Cloud Build (backend cloudbuild)")

        return build_and_push_docker(context, repository, tag, build_args, log=self.log)[0]


class CloudBuildBuilder(ImageBuilder):
    name = "cloudbuild"

    def __init__(self, project: str, staging_bucket: str, endpoint: str | None = None,
                 log: Callable[[str], None] = print):
        super().__init__(log)
        self.project, self.staging_bucket, self.endpoint = project, staging_bucket, endpoint

    def build(self, context: BuildContext | StagedContext, repository: str, tag: str,
              build_args: Mapping[str, str]) -> str:
        """A local context: ``REPO:TAG@DIGEST`` found already built, else staged, built and pushed. A context
        already staged in Cloud Storage (the pipeline's build step) is built as it is handed, in the registry's
        own project when the builder names none; the registry is not asked first."""
        if isinstance(context, StagedContext):
            return self._staged(context, repository, tag, build_args)
        return self.already_built(repository, tag) or self._cloudbuild(context, f"{repository}:{tag}", build_args)

    def already_built(self, repository: str, tag: str) -> str | None:
        """``REPO:TAG@DIGEST`` when the registry already has the tag, else None.

        Only a Google registry asked with the caller's Google token (``jobs.cloud.apis.registry``'s rule: the token
        goes to Google hosts only) is taken at its word; any other registry is asked anonymously and its
        answer only reported: the build goes ahead. Against a loopback Cloud Build stand-in only a loopback
        registry is asked (a test never reaches a real registry)."""
        ref = parse_reference(f"{repository}:{tag}")
        stand_in = is_local_endpoint(self.endpoint)
        if stand_in and not is_local_endpoint(ref.api_host):
            return None
        google = may_receive_google_token(registry.registry_url(ref)) and not stand_in
        answer = registry.registry_digest(ref, google_token=access_token("Artifact Registry") if google else None)
        if answer.digest and answer.trusted:
            self.log(f"already built: {repository}:{tag} is in the registry ({answer.digest}); nothing to build")
            return f"{repository}:{tag}@{answer.digest}"
        if answer.digest:
            self.log(f"registry {ref.registry} says it has {ref.path}:{tag} ({answer.digest}), but {answer.why}: "
                     "not proof that the image is there; building")
        return None

    def _cloudbuild(self, context: BuildContext, image: str, build_args: Mapping[str, str]) -> str:
        """Send the same deterministic context (gzipped, named ``<content tag>.tgz``) to Cloud Build."""
        with tempfile.TemporaryDirectory() as tmp:
            tarball = Path(tmp) / f"{image.rsplit(':', 1)[1]}.tgz"
            with open(tarball, "wb") as f:
                write_tar(context, f, gzip=True)
            return cloudbuild.build_and_push(tarball, image, context.dockerfile, project=self.project,
                                             staging_bucket=self.staging_bucket, build_args=build_args,
                                             endpoint=self.endpoint, log=self.log)

    def _staged(self, context: StagedContext, repository: str, tag: str, build_args: Mapping[str, str]) -> str:
        project = self.project or cloudbuild.registry_project(repository) or ""
        if not project:
            raise CloudError(f"cannot tell which project runs the build for {repository}: pass a project "
                                     f"(the repository is not in Artifact Registry or Container Registry)")
        return api.build_from_storage(context.uri, f"{repository}:{tag}", context.dockerfile, project=project,
                                      build_args=build_args, endpoint=self.endpoint, log=self.log)


def builder_for(backend: str, *, project: str | None = None, staging_bucket: str | None = None,
                endpoint: str | None = None, log: Callable[[str], None] = print) -> ImageBuilder:
    """The builder of ``backend`` (``docker`` | ``cloudbuild``); its flags are checked by the caller
    (``jobs.images.build.backend_problems``)."""
    if backend == "docker":
        return DockerBuilder(log)
    if backend == "cloudbuild":
        return CloudBuildBuilder(project or "", staging_bucket or "", endpoint, log)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
