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

What never reaches the context (:data:`ALWAYS_EXCLUDED_DIRS`, :data:`CREDENTIAL_NAMES`,
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
import stat
import tempfile
import time
from collections.abc import Callable
from typing import Any
from pathlib import Path

from jobs.images.context import BuildContext, content_tag, make_context
from jobs.image_reference import BuildError
from trainers.fileio import NotARegularFile, read_regular

CODE_DIR = "/workspace/code"
REQUIREMENTS_DIR = "/workspace/requirements"
#: directories left out at any depth of trainer.source_dir: version control, virtualenvs, caches
ALWAYS_EXCLUDED_DIRS = (".git", ".hg", ".svn", ".venv", "venv", "__pycache__", ".pytest_cache", ".mypy_cache",
                        ".ipynb_checkpoints")
#: left out at the top of trainer.source_dir: local runs' default output folder
TOP_EXCLUDED_DIRS = ("runs",)
#: files that are credentials by name (anywhere)
CREDENTIAL_NAMES = (".env", ".netrc", ".git-credentials", ".pypirc", ".dockercfg", "credentials.db",
                    "application_default_credentials.json")
COMPILED_SUFFIXES = (".pyc", ".pyo")
#: files up to this size are read to look for private keys and key files
SNIFF_BYTES = 1 << 20
_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")
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


def credential_reason(path: Path) -> str | None:
    """Why ``path`` looks like a credential, or None: a name in :data:`CREDENTIAL_NAMES` or ``.env.*``; a
    JSON file with a ``private_key`` (service-account key) or ``refresh_token`` (gcloud user credentials);
    any file up to 1 MiB holding a PEM private key."""
    name = path.name
    if name in CREDENTIAL_NAMES or name.startswith(".env."):
        return f"credential: {name} file"
    try:
        if path.is_symlink() or path.stat().st_size > SNIFF_BYTES:
            return None
        data = read_regular(str(path), "trainer.source_dir", limit=SNIFF_BYTES)
    except (OSError, NotARegularFile):  # a named pipe or device is left out as "not a regular file", never read
        return None
    if name.endswith(".json") and (b'"private_key"' in data or b'"refresh_token"' in data):
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and ("private_key" in doc or "refresh_token" in doc):
            return f"credential: JSON key file ({'private_key' if 'private_key' in doc else 'refresh_token'})"
    if _PRIVATE_KEY.search(data):
        return "credential: holds a private key"
    return None


_DIR_KIND = {".git": "version control", ".hg": "version control", ".svn": "version control", ".venv": "virtualenv",
             "venv": "virtualenv"}


def _files(count: int) -> str:
    return f"{count} file{'' if count == 1 else 's'}"


def _user_patterns(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.is_file():
        return []
    lines = [line.strip() for line in read_regular(str(path), "trainer.source_dir").decode("utf-8", "replace")
             .splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _inside(child: Path, parent: Path) -> str | None:
    try:
        rel = child.resolve().relative_to(parent.resolve())
    except (ValueError, OSError):
        return None
    return rel.as_posix() if rel.parts else None


def collect_code(source_dir: Path, output_dir: str = "") -> tuple[list[str], list[tuple[str, str]]]:
    """(included files, excluded (path, reason)) of ``source_dir``, relative posix paths, sorted.

    The user's ``.dockerignore`` first (Docker's rules, its ``!`` exceptions included), then what is always
    left out (those cannot be re-included). An excluded folder is reported once, with its file count."""
    from docker.utils.build import PatternMatcher

    root = source_dir.resolve()
    patterns = _user_patterns(root)
    allowed = set(PatternMatcher(patterns).walk(str(root))) if patterns else None
    output_rel = _inside(Path(output_dir), root) if output_dir and "://" not in output_dir else None
    included: list[str] = []
    excluded: list[tuple[str, str]] = []
    by_user: dict[str, int] = {}
    for current, dirs, files in os.walk(root):
        rel_dir = Path(current).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        keep_dirs = []
        for d in sorted(dirs):
            rel = f"{rel_dir}/{d}" if rel_dir else d
            why = None
            if d in ALWAYS_EXCLUDED_DIRS:
                why = f"always: {_DIR_KIND.get(d, 'cache')}"
            elif not rel_dir and d in TOP_EXCLUDED_DIRS:
                why = "always: local runs' output"
            elif output_rel and rel == output_rel:
                why = "always: the job's output.base_dir"
            if why:
                count = sum(len(f) for _, _, f in os.walk(Path(current) / d))
                excluded.append((f"{rel}/", f"{why}; {_files(count)}"))
            elif os.path.islink(Path(current) / d):
                files.append(d)  # a link to a folder is archived as the link itself, as docker does
            else:
                keep_dirs.append(d)
        dirs[:] = keep_dirs
        for f in sorted(files):
            rel = f"{rel_dir}/{f}" if rel_dir else f
            full = Path(current) / f
            if allowed is not None and rel not in allowed:
                top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
                by_user[top] = by_user.get(top, 0) + 1
                continue
            if f.endswith(COMPILED_SUFFIXES):
                excluded.append((rel, "always: compiled Python"))
                continue
            why = credential_reason(full)
            if why:
                excluded.append((rel, f"always: {why}"))
                continue
            mode = os.lstat(full).st_mode
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                included.append(rel)
            else:
                excluded.append((rel, "not a regular file"))
    for top, count in by_user.items():
        excluded.append((top, f"your .dockerignore; {_files(count)}" if top.endswith("/") else "your .dockerignore"))
    return sorted(included), sorted(excluded)


def trainer_version(cfg) -> dict[str, Any] | None:
    """Which code of a user's trainer ran, apart from this tool's (``jobs.provenance.code_version``):
    ``{"source_dir", "git_commit", "git_dirty", "content_sha256", "files", "text"}``. The git commit of
    ``trainer.source_dir``'s repository (and whether its files there had changes), when it is in one; always the
    SHA-256 of the files the trainer's image would hold (:func:`collect_code`: the same files, the same
    exclusions), so a copy outside any repository is named by its content. None for the built-in trainer; on
    Vertex (no ``source_dir``: the code is the image's) the image names it."""
    import hashlib

    from jobs.provenance import commit_text, git_state

    if cfg is None or not cfg.user_trainer:
        return None
    root = cfg.trainer.source_dir
    if not root or not os.path.isdir(root):
        image = cfg.container.image_uri or "the job's image"
        return {"source_dir": root or None, "git_commit": None, "git_dirty": None, "content_sha256": None,
                "files": None, "text": f"the code in {image} (its WORKDIR)"}
    commit, dirty = git_state(root, paths=["."])  # its repository's commit; changes under the trainer's folder
    out: dict[str, Any] = {"source_dir": root, "git_commit": commit, "git_dirty": dirty}
    digest = hashlib.sha256()
    files, _ = collect_code(Path(root), cfg.output.base_dir)
    for rel in files:
        digest.update(rel.encode() + b"\0")
        try:
            digest.update(read_regular(str(Path(root, rel)), "trainer.source_dir"))
        except (OSError, NotARegularFile):  # a link to a pipe or a device: named, never read
            digest.update(b"(unreadable)")
        digest.update(b"\0")
    out.update(content_sha256=digest.hexdigest(), files=len(files))
    content = f"sha256 {out['content_sha256'][:12]} of its {len(files)} file(s)"
    if out["git_commit"]:
        out["text"] = f"{commit_text(out['git_commit'], out['git_dirty'])} ({content})"
    else:
        out["text"] = f"{content} in {root} (not in a git repository)"
    return out


def requirements_problems(path: Path, field: str = "trainer.requirements") -> list:
    """The requirements file is copied into the image alone, before the code: lines naming other files or
    local folders cannot be installed from there, and an index URL with a password would be kept in a
    layer of the image."""
    from trainers.errors import problem

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
    ``run.py validate``: :func:`jobs.validate.trainer_file_problems`)."""
    from jobs.validate import trainer_file_problems
    from trainers import config as config_lib
    from trainers.errors import ConfigError, problem

    t = cfg.trainer
    if not t.module:
        raise ConfigError(problem("trainer.module", "is empty: run.py build --config JOB builds a user image only for "
                                                    "a job with its own trainer", ["trainer.task"]))
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
    from jobs.image_reference import parse_reference

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
    from jobs import images

    if cfg.container.image_repository:
        return images.build_repository(cfg, variant)
    parent, sep, _ = user_repository.rpartition("/")
    if not sep:
        raise BuildError(f"--image {user_repository}: give HOST/PATH/NAME so the trainer image can go beside it "
                         "(or set container.image_repository)")
    return f"{parent}/tf-trainer{images.VARIANT_SUFFIX[variant]}"


def user_repository(image: str | None) -> str:
    from jobs import images

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
    from jobs.job_image import PLACEHOLDER_PROJECT

    if f"/{PLACEHOLDER_PROJECT}/" in f"{repository}/":
        raise BuildError(f"{what} {repository} still names the presets' placeholder project {PLACEHOLDER_PROJECT!r}; "
                         "name your own, e.g. us-central1-docker.pkg.dev/PROJECT/REPO/my-trainer")


def configured_base(cfg) -> str | None:
    """``container.base_image`` checked: pinned by digest, no placeholder; None when unset."""
    from jobs import images

    base = cfg.container.base_image
    if not base:
        return None
    try:
        ref = images.parse_reference(base)
        repository, digest = ref.repository, ref.digest
    except BuildError as exc:
        raise BuildError(f"container.base_image: {exc}") from None
    if not digest:
        raise BuildError(f"container.base_image {base}: must be pinned by digest (the last line of run.py build), "
                         f"e.g. {repository}:ctx-...@sha256:<64 hex>")
    _no_placeholder("container.base_image", repository)
    return base


def build_user_image(cfg, req, builder, log: Callable[[str], None]) -> str:
    """``run.py build`` for a job with a ``trainer:`` section (``req``: ``jobs.images.build.Request``;
    ``builder``: ``jobs.images.builders.ImageBuilder``): the trainer image (built, found, or
    ``container.base_image``), then the user's image FROM it; returns the user's image by digest. Bad input is
    ``jobs.images.builders.InputError`` (nothing built); a failed build a CloudError."""
    from jobs import job_spec
    from jobs import job_image
    from jobs.images.builders import InputError
    from trainers.errors import ConfigError

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
