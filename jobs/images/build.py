"""``python pipelines/run.py build``: build the job's image through a builder and push it, by digest.

    python pipelines/run.py build                                   # local preset -> cpu image, docker engine
    python pipelines/run.py build --config gpu-1x4                  # GPU pools -> the -gpu repository, VARIANT=gpu
    python pipelines/run.py build --image 127.0.0.1:5000/tf-trainer --variant cpu
    python pipelines/run.py build --backend cloudbuild --project P --staging-bucket gs://B/builds
    python pipelines/run.py build --config my-project/job.yaml --image REPO   # your trainer: jobs/images/user.py

The tag is the content hash of the build context (``ctx-<16 hex>``): the same
sources give the same tag, so a registry that already has it means nothing is built. The last line
printed is the pushed image pinned by digest, ``REPO:TAG@sha256:DIGEST``, ready for
``--set container.image_uri=...``.

Exit status: 0 pushed (or already there); 2 bad input (config, image reference, context, Dockerfile
path); 1 the engine, the build or the push failed. Every failure is one ``error:`` line on stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Callable

from jobs import images
from jobs.rules import preflight
from jobs.cloud.apis.lines import run_command
from jobs.images.builders import BACKENDS, InputError, builder_for
from jobs.images.context import DEFAULT_DOCKERFILE, content_tag, make_context
from jobs.images.user import build_user_image
from jobs.rules.command_line import add_job_arguments, job_of, plain, shown
from jobs.rules.errors import CloudError
from jobs.rules.image_reference import BuildError
from jobfile import config as config_lib
from jobfile.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file is jobs/images/build.py)


@dataclasses.dataclass
class Request:
    """What to build (``run.py build``'s flags)."""

    config: str = "local"
    overrides: list[str] = dataclasses.field(default_factory=list)
    context: str = str(ROOT)
    dockerfile: str = DEFAULT_DOCKERFILE
    image: str | None = None        # the repository to push to (no tag); a user trainer's own
    variant: str | None = None
    build_args: list[str] = dataclasses.field(default_factory=list)
    backend: str = "docker"
    project: str | None = None
    staging_bucket: str | None = None
    api_endpoint: str | None = None
    wheels: str | None = None


def parse_args(argv: list[str]) -> Request:
    head, _, rest = __doc__.partition("\n\nThe tag")
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py build"), description=plain(head),
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=plain("The tag" + rest))
    add_job_arguments(p, "preset or YAML file: gives the repository and the variant")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set container.image_repository=REPO (repeatable)")
    p.add_argument("--context", default=str(ROOT), help="build context directory (default: this repository); with "
                                                         "a job's own trainer: the trainer image's")
    p.add_argument("--dockerfile", default=DEFAULT_DOCKERFILE, help="Dockerfile, relative to the context")
    p.add_argument("--image", metavar="REPO_URI", help="repository to push to, without tag (default: from the config); "
                                                       "with a job's own trainer (trainer.module): your image's")
    p.add_argument("--variant", choices=("cpu", "gpu", "tpu"), help="image variant (default: from the accelerators)")
    p.add_argument("--build-arg", dest="build_args", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Dockerfile ARG, e.g. BASE_IMAGE=python:3.11-slim (repeatable; part of the tag)")
    p.add_argument("--backend", choices=BACKENDS, default="docker")
    p.add_argument("--project", help="cloudbuild: Google Cloud project")
    p.add_argument("--staging-bucket", help="cloudbuild: gs://BUCKET/path where the context tarball is uploaded")
    p.add_argument("--api-endpoint", help="cloudbuild: API endpoint (a local stand-in in tests)")
    p.add_argument("--wheels", metavar="DIR", help="a job with its own trainer: install trainer.requirements offline "
                                                   "from these wheels (--no-index; jobs/images/user.py)")
    args = p.parse_args(argv)
    args.config = job_of(p, args)
    del args.job
    return Request(**vars(args))


def backend_problems(req: Request) -> list[str]:
    """The Cloud Build backend's flags: a project id, a gs:// staging folder; none of them with docker."""
    if req.backend == "docker":
        given = [flag for flag, value in (("--project", req.project), ("--staging-bucket", req.staging_bucket),
                                          ("--api-endpoint", req.api_endpoint)) if value is not None]
        return [f"{flag}: only for --backend cloudbuild; add --backend cloudbuild or remove it" for flag in given]
    problems = [str(p) for p in preflight.project_problems("--project", req.project)]
    problems += [str(p) for p in preflight.gcs_problems("--staging-bucket", req.staging_bucket,
                                                        "gs://<your bucket>/builds",
                                                        path_required=False)]
    return problems


def _user_config(req: Request):
    """The job's config when it has its own trainer (``trainer.module``), else None. A config that does not
    load is left to the trainer-image path, which reports its problems."""
    try:
        cfg = config_lib.load(req.config, req.overrides)
    except (ConfigError, OSError, ValueError):
        return None
    return cfg if cfg.trainer.module else None


def build(req: Request, log: Callable[[str], None] = print) -> str:
    """Build (or find already built) the job's image and return it, ``REPO:TAG@sha256:DIGEST``. A job with
    its own trainer gets two images (``jobs.images.user``); the reference returned is the user's. Raises
    :class:`InputError` (bad input, nothing built) or ``CloudError`` (the engine, the build or the push)."""
    problems = backend_problems(req)
    if problems:
        raise InputError(problems)
    builder = builder_for(req.backend, project=req.project, staging_bucket=req.staging_bucket,
                          endpoint=req.api_endpoint, log=lambda line: log(f"  {line}"))
    user_cfg = _user_config(req)
    if user_cfg is not None:
        return build_user_image(user_cfg, req, builder, log)
    try:
        if req.wheels:
            raise BuildError("--wheels: only for a job with its own trainer (trainer.module); the trainer image "
                             "installs offline from containers/wheels/ in its context")
        if req.image:
            ref = images.parse_reference(req.image)
            if ref.tag or ref.digest:
                raise BuildError(f"--image {req.image}: give the repository only; the tag is the content hash "
                                 f"of the build context; valid choices: {ref.repository}")
            repository = ref.repository
            variant = req.variant or images.variant_for(config_lib.load(req.config, req.overrides))
        else:
            cfg = config_lib.load(req.config, req.overrides)
            variant = req.variant or images.variant_for(cfg)
            repository = images.build_repository(cfg, variant)
        build_args = {"VARIANT": variant}
        for item in req.build_args:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise BuildError(f"--build-arg {item!r}: expected KEY=VALUE; valid choices: BASE_IMAGE=python:3.11-slim")
            build_args[key] = value
        ctx = make_context(Path(req.context), req.dockerfile)
    except ConfigError as exc:
        raise InputError([str(p) for p in exc.problems]) from None
    except BuildError as exc:
        raise InputError([str(exc)]) from None
    tag = content_tag(ctx, build_args)
    log(f"image {repository}:{tag} (variant {variant}, context {ctx.root}, {len(ctx.files)} files)")
    return builder.build(ctx, repository, tag, build_args)


def build_or_say(req: Request) -> str:
    """:func:`build`, its lines printed as they come (``run.py --runner docker`` builds the image first): the
    pushed reference, or "" when it failed, its ``error:`` lines printed."""
    print(shown("runner docker: building the job's image (as python pipelines/run.py build)"), flush=True)
    try:
        return build(req, log=lambda line: print(line, flush=True))
    except InputError as exc:
        print("\n".join(f"error: {line}" for line in exc.lines), file=sys.stderr)
    except CloudError as exc:
        print(f"error: {exc}", file=sys.stderr)
    return ""


def main(argv: list[str]) -> int:
    return run_command(_main, list(argv))


def _main(argv: list[str]) -> int:
    req = parse_args(argv)
    try:
        reference = build(req, log=lambda line: print(line, flush=True))
    except InputError as exc:
        for line in exc.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except CloudError as exc:  # BuildError, and whatever the cloud backends raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(reference)
    return 0
