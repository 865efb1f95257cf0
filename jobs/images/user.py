"""A user's own trainer as an image: FROM the trainer image by digest, then the requirements, then the code.

    python pipelines/run.py build --config my-project/job.yaml --image REPO

(``jobs.images.build`` hands a job file with a ``trainer:`` section here.) Two images:

1. the **trainer image** for the pools' variant (``containers/Dockerfile``: TensorFlow, tf_keras, this
   package), built and pushed as ``run.py build`` always does, content-tagged, skipped when the registry
   has it; pushed to ``container.image_repository`` (+ ``-gpu``/``-tpu``) when set, else beside REPO as
   ``tf-trainer[-gpu|-tpu]``. ``container.base_image: REPO[:TAG]@sha256:...`` names one instead (no build);
2. **your image**, ``REPO:ctx-<hash>``, from a generated context (:func:`plan`, :func:`dockerfile`)::

       Dockerfile                  generated: FROM <trainer image>@sha256:... (by digest, never a tag)
       requirements/<file>         trainer.requirements alone (+ --wheels for an offline install) -> layer 1
       code/...                    trainer.source_dir, filtered (below)                          -> layer 2

   so a change to the code rebuilds only the code layer, and a change to the requirements only the last
   two. WORKDIR is the code (``/workspace/code``): every replica's ``python -m <module>`` runs there.
   No ENTRYPOINT (Vertex and KFP give the command); CMD is the job's worker command.

What never reaches the context (``jobs.images.user_code``: :data:`ALWAYS_EXCLUDED_DIRS`, :data:`CREDENTIAL_NAMES`,
:func:`credential_reason`), whatever the user's own ``.dockerignore`` (applied first, Docker's rules) says:
version control and caches, ``runs/`` and the job's ``output.base_dir`` when inside ``source_dir``, and
anything that looks like a credential. Every excluded path is printed with its reason.

The content tag (:func:`jobs.images.context.content_tag`) hashes the generated context, so it covers the
code, the requirements, the base image's digest (in the Dockerfile) and the build args.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from jobs import images
from jobs.images.builders import InputError
from jobs.images.context import BuildContext, content_tag, make_context
from jobs.images.user_code import collect_code
from jobs.rules import job_image, job_spec
from jobs.rules.command_line import shown
from jobs.rules.image_reference import BuildError, parse_reference
from jobs.rules.job_image import PLACEHOLDER_PROJECT
from jobs.rules.trainer_section import trainer_file_problems
from jobfile import config as config_lib
from jobfile.errors import ConfigError, problem
from jobfile.regular_file import NotARegularFile, read_regular

CODE_DIR = "/workspace/code"
REQUIREMENTS_DIR = "/workspace/requirements"
_INDEX_CREDENTIAL = re.compile(r"://[^/\s@:]+:[^/\s@]+@")
FILE_OPTIONS = ("-r", "--requirement", "-c", "--constraint")


@dataclasses.dataclass(frozen=True)
class Plan:
    """What goes into the user's image: archive path (``requirements/...``, ``code/...``) -> file on disk;
    ``excluded``: (path relative to source_dir, reason) for everything left out."""

    source_dir: Path
    files: dict[str, Path]
    requirements: str  # archive path of the requirements file, "" when none
    wheels: tuple[str, ...]  # archive paths of offline wheels
    excluded: tuple[tuple[str, str], ...]

    @property
    def code_files(self) -> list[str]:
        return [name for name in self.files if name.startswith("code/")]


def requirements_problems(path: Path, field: str = "trainer.requirements") -> list:
    """The requirements file is copied into the image alone, before the code: lines naming other files or
    local folders cannot be installed from there, and an index URL with a password would be kept in a
    layer of the image."""
    out = []
    try:
        lines = read_regular(str(path), field).decode("utf-8", "replace").splitlines()
    except NotARegularFile as exc:
        return list(exc.problems)
    except OSError as exc:
        return [problem(field, f"{path}: cannot be read ({exc.strerror or exc})", ["requirements.txt"])]
    for number, raw in enumerate(lines, 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        head = line.split()[0]
        option = head.split("=", 1)[0]
        if option in FILE_OPTIONS or (head[:2] in ("-r", "-c") and len(head) > 2):
            out.append(problem(field, f"{path.name} line {number} ({line}) names another file; the requirements "
                                      f"layer is built from this one file, before the code is copied: list those "
                                      f"packages in {path.name}", ["numpy>=1.26"]))
        elif head in ("-e", "--editable") or head.startswith((".", "/", "file:")):
            out.append(problem(field, f"{path.name} line {number} ({line}) installs a local folder; your code is "
                                      f"the image's working directory already ({CODE_DIR}): remove the line, or "
                                      f"name a released package", ["numpy>=1.26"]))
        elif _INDEX_CREDENTIAL.search(line):
            out.append(problem(field, f"{path.name} line {number} has a user:password in a URL, which would stay "
                                      f"in the image: give the index without it and its credentials through "
                                      f"--build-arg PIP_EXTRA_ARGS or a keyring", ["--extra-index-url https://HOST/simple"]))
    return out


def plan(cfg, wheels_dir: str | None = None) -> Plan:
    """The generated context's files for the job's ``trainer:`` section. ``ConfigError`` (one problem per
    line) when the source folder, the module or the requirements file are wrong (the same checks as
    ``run.py validate``: :func:`jobs.rules.trainer_section.trainer_file_problems`)."""
    t = cfg.trainer
    if not t.module:
        raise ConfigError(problem("trainer.module", shown("is empty: python pipelines/run.py build --config JOB builds "
                                                          "a user image only for a job with its own trainer"),
                                  ["trainer.task"]))
    problems = [p for p in trainer_file_problems(cfg) if p.field.startswith("trainer.")]
    if problems:
        raise ConfigError(problems)
    root = Path(t.source_dir).resolve()
    files: dict[str, Path] = {}
    requirements = ""
    if t.requirements:
        req = (root / t.requirements).resolve()
        problems = requirements_problems(req)
        if problems:
            raise ConfigError(problems)
        requirements = f"requirements/{req.name}"
        files[requirements] = req
    wheels: list[str] = []
    if wheels_dir:
        found = sorted(Path(wheels_dir).glob("*.whl")) if Path(wheels_dir).is_dir() else []
        if not found:
            raise ConfigError(problem("--wheels", f"{wheels_dir} holds no .whl files; give a folder of wheels for "
                                                  "the requirements (pip download -r requirements.txt -d DIR)",
                                      ["wheels/"]))
        if not requirements:
            raise ConfigError(problem("--wheels", "given without trainer.requirements: nothing would install them",
                                      ["requirements.txt"]))
        for wheel in found:
            name = f"requirements/wheels/{wheel.name}"
            files[name] = wheel.resolve()
            wheels.append(name)
    included, excluded = collect_code(root, config_lib.resolved_base_dir(cfg))
    for rel in included:
        files[f"code/{rel}"] = root / rel
    return Plan(root, files, requirements, tuple(wheels), tuple(excluded))


def dockerfile(base_image: str, plan_: Plan, command: list[str]) -> str:
    """The generated Dockerfile. ``base_image`` must be pinned (``REPO@sha256:...``); the tag, if any,
    is dropped from FROM (a digest is what it runs) and kept in a comment."""
    ref = parse_reference(base_image)
    repository, tag, digest = ref.repository, ref.tag, ref.digest
    if not digest:
        raise BuildError(f"base image {base_image} is not pinned by digest; give REPO@sha256:...")
    layers = "the trainer image, your requirements, your code" if plan_.requirements else "the trainer image, your code"
    lines = ["# Generated by `run.py build` (jobs/images/user.py): your trainer over the trainer image",
             f"# {tag or ''} by digest. Layers: {layers} (last).",
             f"FROM {repository}@{digest}"]
    if plan_.requirements:
        name = plan_.requirements.split("/", 1)[1]
        offline = f"--no-index --find-links {REQUIREMENTS_DIR}/wheels " if plan_.wheels else ""
        lines += ['ARG PIP_EXTRA_ARGS=""',
                  f"COPY requirements/ {REQUIREMENTS_DIR}/",
                  f"RUN pip install --no-cache-dir {offline}${{PIP_EXTRA_ARGS}} -r {REQUIREMENTS_DIR}/{name}"]
    lines += [f"COPY code/ {CODE_DIR}/",
              f"WORKDIR {CODE_DIR}",
              f"CMD {json.dumps(list(command))}"]
    return "\n".join(lines) + "\n"


def materialize(plan_: Plan, dockerfile_text: str, dest: Path) -> BuildContext:
    """Write the context into ``dest`` (hard links where possible) and return it as a :class:`BuildContext`."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "Dockerfile").write_text(dockerfile_text)
    for name, source in plan_.files.items():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
            continue
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
    return make_context(dest, "Dockerfile")


def trainer_repository(cfg, user_repository: str, variant: str) -> str:
    """Where the trainer image for ``variant`` goes: ``container.image_repository`` (+ suffix) when set,
    else beside the user's repository, named ``tf-trainer[-gpu|-tpu]``."""
    if cfg.container.image_repository:
        return images.build_repository(cfg, variant)
    parent, sep, _ = user_repository.rpartition("/")
    if not sep:
        raise BuildError(f"--image {user_repository}: give HOST/PATH/NAME so the trainer image can go beside it "
                         "(or set container.image_repository)")
    return f"{parent}/tf-trainer{images.VARIANT_SUFFIX[variant]}"


def user_repository(image: str | None) -> str:
    if not image:
        raise BuildError("--image: a job with its own trainer is built into an image of your own; name its "
                         "repository, e.g. --image us-central1-docker.pkg.dev/PROJECT/REPO/my-trainer")
    ref = images.parse_reference(image)
    repository, tag, digest = ref.repository, ref.tag, ref.digest
    if tag or digest:
        raise BuildError(f"--image {image}: give the repository only; the tag is the content hash of the build "
                         f"context, e.g. --image {repository}")
    _no_placeholder("--image", repository)
    return repository


def _no_placeholder(what: str, repository: str) -> None:
    if f"/{PLACEHOLDER_PROJECT}/" in f"{repository}/":
        raise BuildError(f"{what} {repository} still names the presets' placeholder project {PLACEHOLDER_PROJECT!r}; "
                         "name your own, e.g. us-central1-docker.pkg.dev/PROJECT/REPO/my-trainer")


def configured_base(cfg) -> str | None:
    """``container.base_image`` checked: pinned by digest, no placeholder; None when unset."""
    base = cfg.container.base_image
    if not base:
        return None
    try:
        ref = images.parse_reference(base)
        repository, digest = ref.repository, ref.digest
    except BuildError as exc:
        raise BuildError(f"container.base_image: {exc}") from None
    if not digest:
        raise BuildError(f"container.base_image {base}: must be pinned by digest (the last line of {shown('python pipelines/run.py build')}), "
                         f"e.g. {repository}:ctx-...@sha256:<64 hex>")
    _no_placeholder("container.base_image", repository)
    return base


def build_user_image(cfg, req, builder, log: Callable[[str], None]) -> str:
    """``run.py build`` for a job with a ``trainer:`` section (``req``: ``jobs.images.build.Request``;
    ``builder``: ``jobs.images.builders.ImageBuilder``): the trainer image (built, found, or
    ``container.base_image``), then the user's image FROM it; returns the user's image by digest. Bad input is
    ``jobs.images.builders.InputError`` (nothing built); a failed build a CloudError."""
    started = time.monotonic()
    try:
        repository = user_repository(req.image)
        variant = req.variant or job_image.variant_for(cfg)
        the_plan = plan(cfg, req.wheels)
        base = configured_base(cfg)
        trainer_build_args = {"VARIANT": variant}
        user_build_args = {}
        for item in req.build_args:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise BuildError(f"--build-arg {item!r}: expected KEY=VALUE")
            trainer_build_args[key] = value
            if key == "PIP_EXTRA_ARGS":
                user_build_args[key] = value
        trainer_ctx = trainer_repo = None
        if base is None:
            trainer_repo = trainer_repository(cfg, repository, variant)
            trainer_ctx = make_context(Path(req.context), req.dockerfile)
    except ConfigError as exc:  # bad input: one line per problem, nothing built
        raise InputError([str(p) for p in exc.problems]) from None
    except BuildError as exc:
        raise InputError([str(exc)]) from None

    if base is None:
        tag = content_tag(trainer_ctx, trainer_build_args)
        log(f"trainer image {trainer_repo}:{tag} (variant {variant}, context {trainer_ctx.root}, "
            f"{len(trainer_ctx.files)} files)")
        base = builder.build(trainer_ctx, trainer_repo, tag, trainer_build_args)
    else:
        log(f"trainer image {base} (container.base_image)")
    with tempfile.TemporaryDirectory(prefix="user-image-") as tmp:
        text = dockerfile(base, the_plan, job_spec.worker_command(cfg))
        ctx = materialize(the_plan, text, Path(tmp) / "context")
        tag = content_tag(ctx, user_build_args)
        size = sum(p.stat().st_size for p in the_plan.files.values() if not p.is_symlink())
        log(f"image {repository}:{tag} (your trainer: python -m {cfg.trainer.module} in {CODE_DIR}; "
            f"{len(the_plan.code_files)} files from {the_plan.source_dir}"
            f"{', requirements ' + the_plan.requirements.split('/', 1)[1] if the_plan.requirements else ''}"
            f"{f', {len(the_plan.wheels)} wheels' if the_plan.wheels else ''}; {size / 2**20:.1f} MiB)")
        for rel, why in the_plan.excluded:
            builder.log(f"excluded {rel} ({why})")
        build_started = time.monotonic()
        reference = builder.build(ctx, repository, tag, user_build_args)
        build_s = time.monotonic() - build_started
    log(f"trainer image: {base}")
    log(f"your image: {reference} (its build and push {build_s:.1f} s; {time.monotonic() - started:.1f} s in all)")
    return reference
