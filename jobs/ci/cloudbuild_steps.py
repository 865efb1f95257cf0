"""Helpers for the steps of ``cloudbuild.yaml`` (``python -m jobs.ci.cloudbuild_steps ...``), kept here so the YAML stays
a readable list of commands and the decisions live in tested Python.

    python -m jobs.ci.cloudbuild_steps tags --repository R --variants "cpu gpu tpu" --alias ALIAS --out build/ci
    python -m jobs.ci.cloudbuild_steps image-for --config PRESET --images build/ci

``tags`` writes, per variant, ``<out>/<variant>.image`` (``<variant repository>:<content tag>``, the same
tag ``run.py build`` gives the same sources, so CI and local builds agree) and ``<variant>.alias``
(``<variant repository>:<ALIAS>``, the commit's short SHA, or ``manual-<BUILD_ID>`` when there is none).
The push step then writes ``<variant>.digest`` (``REPO:TAG@sha256:...``). ``image-for`` prints the
digest-pinned image of the variant a preset needs (its accelerators decide), for
``--set container.image_uri=...``. :func:`source_files` is what a build's source is: the
tracked files, never a virtualenv, build outputs or caches that lie in the checkout (the tests' workspaces and
``vtp ci-local`` use it). Errors: one ``error:`` line, exit 2.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from jobs import images
from jobs.images.context import content_tag, make_context
from jobs.rules.errors import CloudError
from jobfile import config as config_lib
from jobfile.errors import ConfigError

DOCKERFILE = "containers/Dockerfile"


def write_tags(context: Path, repository: str, variants: list[str], alias: str, out: Path,
               dockerfile: str = DOCKERFILE) -> dict[str, tuple[str, str]]:
    """{variant: (image by content tag, image by alias)}, also written to ``out``."""
    if not alias:
        raise ValueError("--alias is empty: give the commit's short SHA or manual-<BUILD_ID>")
    images.parse_reference(f"{repository}:{alias}")  # a bad alias/repository fails here, not in docker
    ctx = make_context(context, dockerfile)
    out.mkdir(parents=True, exist_ok=True)
    tags = {}
    for variant in variants:
        repo = images.repository_for(repository, variant)
        tags[variant] = (f"{repo}:{content_tag(ctx, {'VARIANT': variant})}", f"{repo}:{alias}")
        (out / f"{variant}.image").write_text(tags[variant][0] + "\n")
        (out / f"{variant}.alias").write_text(tags[variant][1] + "\n")
    return tags


def image_for(config: str, images_dir: Path, overrides: list[str] | None = None) -> str:
    """The pushed ``REPO:TAG@sha256:...`` of the variant ``config`` needs."""
    variant = images.variant_for(config_lib.load(config, overrides or []))
    digest = images_dir / f"{variant}.digest"
    if not digest.is_file():
        raise ValueError(f"{config} needs the {variant} image, which this build did not push "
                         f"({digest} is missing): add {variant} to _VARIANTS")
    ref = digest.read_text().strip()
    if not images.parse_reference(ref).pinned:
        raise ValueError(f"{digest} holds {ref!r}, not an image pinned by digest (REPO:TAG@sha256:<64 hex>)")
    return ref


def git(root: Path, *args: str) -> str:
    """``git ARGS`` in ``root``: its output, or ValueError with one line."""
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode:
        raise ValueError(f"git {' '.join(args)} in {root} failed: {(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout


def gitignore_patterns(root: Path) -> list[str]:
    """``root/.gitignore`` as ``.dockerignore`` patterns (Docker's matcher, ``docker.utils.build``): a name
    without a slash matches at any depth (``**/name``), a leading slash anchors it."""
    path = root / ".gitignore"
    patterns = [".git"]
    for line in (path.read_text().splitlines() if path.is_file() else []):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        body = line.rstrip("/")
        if body.startswith("/"):
            patterns.append(body.lstrip("/"))
        elif "/" in body:
            patterns.append(body)
        else:
            patterns.append(f"**/{body}")
    return patterns


def source_files(root: Path, mode: str = "tracked") -> list[str]:
    """The files (relative posix paths, sorted) a build gets from ``root``:

    * ``tracked``: git's tracked files as they are in the working tree (``git ls-files``; deleted ones left
      out): what the commit will hold;
    * ``worktree``: every file git does not ignore, untracked ones included (``git ls-files -co
      --exclude-standard``): what ``gcloud builds submit`` uploads (it follows ``.gitignore``).

    Without git (inside Cloud Build: the workspace has no ``.git``): every file ``.gitignore`` does not
    ignore, by Docker's matcher. Never a virtualenv, build outputs or caches: ``.gitignore`` covers them."""
    root = Path(root)
    if (root / ".git").exists() and shutil.which("git"):
        args = ["ls-files", "-z"] + (["-co", "--exclude-standard"] if mode == "worktree" else [])
        names = [n for n in git(root, *args).split("\0") if n]
    else:
        from docker.utils.build import exclude_paths

        names = exclude_paths(str(root), gitignore_patterns(root))
    return sorted({n for n in names if (root / n).is_file() or (root / n).is_symlink()})


def copy_source(root: Path, dest: Path, mode: str = "tracked") -> int:
    """Copy :func:`source_files` of ``root`` into ``dest`` (links kept as links); returns the count."""
    files = source_files(root, mode)
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (root / rel).is_symlink():
            os.symlink(os.readlink(root / rel), target)
        else:
            shutil.copy2(root / rel, target)
    return len(files)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.ci.cloudbuild_steps", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("tags", help="write <variant>.image / <variant>.alias for the docker steps")
    t.add_argument("--repository", required=True, help="cpu repository; gpu/tpu get -gpu/-tpu")
    t.add_argument("--variants", required=True, help='space-separated, e.g. "cpu gpu tpu"')
    t.add_argument("--alias", required=True, help="second tag: the short commit SHA or manual-<BUILD_ID>")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--context", type=Path, default=Path("."))
    i = sub.add_parser("image-for", help="print the pushed image (by digest) a preset needs")
    i.add_argument("--config", required=True)
    i.add_argument("--images", type=Path, required=True)
    args = p.parse_args(argv)

    try:
        if args.command == "tags":
            for variant, (image, alias) in write_tags(args.context, args.repository, args.variants.split(),
                                                      args.alias, args.out).items():
                print(f"{variant}: {image} (also {alias.rsplit(':', 1)[1]})")
        else:
            print(image_for(args.config, args.images))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except (ValueError, CloudError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
