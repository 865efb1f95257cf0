"""``python pipelines/run.py build``: build the trainer image from this repository and push it.

    python pipelines/run.py build                                   # local preset -> cpu image, docker engine
    python pipelines/run.py build --config gpu-1x4                  # GPU pools -> the -gpu repository, VARIANT=gpu
    python pipelines/run.py build --image 127.0.0.1:5000/tf-trainer --variant cpu
    python pipelines/run.py build --backend cloudbuild --project P --staging-bucket gs://B/builds
    python pipelines/run.py build --config my-project/job.yaml --image REPO   # your trainer: jobs/user_image.py

The tag is the content hash of the build context (``ctx-<16 hex>``, see ``jobs.build_context``): the same
sources give the same tag, so a registry that already has it means nothing is built. The last line
printed is the pushed image pinned by digest, ``REPO:TAG@sha256:DIGEST``, ready for
``--set container.image_uri=...``.

Exit status: 0 pushed (or already there); 2 bad input (config, image reference, context, Dockerfile
path); 1 the engine, the build or the push failed. Every failure is one ``error:`` line on stderr.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from jobs.build_context import DEFAULT_DOCKERFILE, BuildError, content_tag, make_context, write_tar

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is jobs/cloud/build.py)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python pipelines/run.py build", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", default="local", help="preset or YAML file: gives the repository and the variant")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--context", default=str(ROOT), help="build context directory (default: this repository); with "
                                                         "a job's own trainer: the trainer image's")
    p.add_argument("--dockerfile", default=DEFAULT_DOCKERFILE, help="Dockerfile, relative to the context")
    p.add_argument("--image", metavar="REPO_URI", help="repository to push to, without tag (default: from the config); "
                                                       "with a job's own trainer (trainer.module): your image's")
    p.add_argument("--variant", choices=("cpu", "gpu", "tpu"), help="image variant (default: from the accelerators)")
    p.add_argument("--build-arg", dest="build_args", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Dockerfile ARG, e.g. BASE_IMAGE=python:3.11-slim (repeatable; part of the tag)")
    p.add_argument("--backend", choices=("docker", "cloudbuild"), default="docker")
    p.add_argument("--project", help="cloudbuild: Google Cloud project")
    p.add_argument("--staging-bucket", help="cloudbuild: gs://BUCKET/path where the context tarball is uploaded")
    p.add_argument("--api-endpoint", help="cloudbuild: API endpoint (a local stand-in in tests)")
    p.add_argument("--wheels", metavar="DIR", help="a job with its own trainer: install trainer.requirements offline "
                                                   "from these wheels (--no-index; jobs/user_image.py)")
    return p.parse_args(argv)


def _error(message: str, status: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return status


def resolve_target(args: argparse.Namespace) -> tuple[str, str]:
    """(repository, variant) from --image/--variant, else from the config."""
    from jobs import images

    if args.image:
        ref = images.parse_reference(args.image)
        if ref.tag or ref.digest:
            raise BuildError(f"--image {args.image}: give the repository only; the tag is the content hash "
                             f"of the build context; valid choices: {ref.repository}")
        return ref.repository, args.variant or _config_variant(args)
    from trainers import config as config_lib

    cfg = config_lib.load(args.config, args.overrides)
    variant = args.variant or images.variant_for(cfg)
    return images.build_repository(cfg, variant), variant


def backend_problems(args: argparse.Namespace) -> list[str]:
    """The Cloud Build backend's flags: a project id, a gs:// staging folder; none of them with docker."""
    from jobs.cloud import preflight

    if args.backend == "docker":
        given = [flag for flag, value in (("--project", args.project), ("--staging-bucket", args.staging_bucket),
                                          ("--api-endpoint", args.api_endpoint)) if value is not None]
        return [f"{flag}: only for --backend cloudbuild; add --backend cloudbuild or remove it" for flag in given]
    problems = [str(p) for p in preflight.project_problems("--project", args.project)]
    problems += [str(p) for p in preflight.gcs_problems("--staging-bucket", args.staging_bucket, "gs://BUCKET/builds",
                                                        path_required=False)]
    return problems


def _config_variant(args: argparse.Namespace) -> str:
    from jobs import images
    from trainers import config as config_lib

    return images.variant_for(config_lib.load(args.config, args.overrides))


def main(argv: list[str]) -> int:
    from jobs.cloud import clients

    return clients.run_command(_main, list(argv))


def _main(argv: list[str]) -> int:
    args = parse_args(argv)
    from jobs import user_image
    from jobs.cloud.clients import CloudError
    from trainers.errors import ConfigError

    problems = backend_problems(args)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 2
    if user_image.is_user_job(args):  # a job file with a trainer: section: the trainer image, then the user's
        return user_image.main(args, build_with_backend, _progress)

    try:
        if args.wheels:
            raise BuildError("--wheels: only for a job with its own trainer (trainer.module); the trainer image "
                             "installs offline from containers/wheels/ in its context")
        repository, variant = resolve_target(args)
        build_args = {"VARIANT": variant}
        for item in args.build_args:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise BuildError(f"--build-arg {item!r}: expected KEY=VALUE; valid choices: BASE_IMAGE=python:3.11-slim")
            build_args[key] = value
        ctx = make_context(Path(args.context), args.dockerfile)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except BuildError as exc:
        return _error(str(exc), 2)

    tag = content_tag(ctx, build_args)
    print(f"image {repository}:{tag} (variant {variant}, context {ctx.root}, {len(ctx.files)} files)", flush=True)
    try:
        reference = build_with_backend(ctx, repository, tag, build_args, args)
    except CloudError as exc:  # BuildError, and whatever jobs.cloud.cloudbuild raises
        return _error(str(exc), 1)
    print(reference)
    return 0


def build_with_backend(ctx, repository: str, tag: str, build_args: dict[str, str], args: argparse.Namespace) -> str:
    """Build and push ``repository:tag`` from ``ctx`` with ``args.backend`` unless the registry has it;
    returns ``REPO:TAG@sha256:DIGEST``. Raises CloudError (BuildError) with one line."""
    if args.backend == "docker":
        from jobs.cloud.docker_engine import build_and_push_docker

        return build_and_push_docker(ctx, repository, tag, build_args, log=_progress)[0]
    return _already_built(repository, tag, args) or _cloudbuild(ctx, f"{repository}:{tag}", build_args, args)


def _progress(line: str) -> None:
    print(f"  {line}", flush=True)


def _already_built(repository: str, tag: str, args: argparse.Namespace) -> str | None:
    """``REPO:TAG@DIGEST`` when the registry already has the tag, else None.

    Only a Google registry asked with the caller's Google token (``jobs.cloud.registry``'s rule: the token
    goes to Google hosts only) is taken at its word; any other registry is asked anonymously and its
    answer only reported: the build goes ahead. Against a loopback Cloud Build stand-in only a loopback
    registry is asked (a test never reaches a real registry)."""
    from jobs import images
    from jobs.cloud import clients, registry

    ref = images.parse_reference(f"{repository}:{tag}")
    stand_in = clients.is_local_endpoint(args.api_endpoint)
    if stand_in and not clients.is_local_endpoint(ref.api_host):
        return None
    google = clients.may_receive_google_token(registry.registry_url(ref)) and not stand_in
    answer = registry.registry_digest(ref, google_token=clients.access_token("Artifact Registry") if google else None)
    if answer.digest and answer.trusted:
        _progress(f"already built: {repository}:{tag} is in the registry ({answer.digest}); nothing to build")
        return f"{repository}:{tag}@{answer.digest}"
    if answer.digest:
        _progress(f"registry {ref.registry} says it has {ref.path}:{tag} ({answer.digest}), but {answer.why}: "
                  "not proof that the image is there; building")
    return None


def _cloudbuild(ctx, image: str, build_args: dict[str, str], args: argparse.Namespace) -> str:
    """Send the same deterministic context (gzipped, named ``<content tag>.tgz``) to Cloud Build through
    ``jobs.cloud.cloudbuild``; it returns ``REPO:TAG@sha256:DIGEST``."""
    from jobs.cloud import cloudbuild

    with tempfile.TemporaryDirectory() as tmp:
        tarball = Path(tmp) / f"{image.rsplit(':', 1)[1]}.tgz"
        with open(tarball, "wb") as f:
            write_tar(ctx, f, gzip=True)
        return cloudbuild.build_and_push(tarball, image, ctx.dockerfile, project=args.project,
                                         staging_bucket=args.staging_bucket, build_args=build_args,
                                         endpoint=args.api_endpoint, log=_progress)
