"""Which code ran: the project's git commit (and whether tracked files had changes) or the installed package's
version, recorded in ``run.json`` and ``provenance.json`` (``jobs.local.run``), shown by the report and stamped
on a user's image (``jobs.images.user``).
"""
from __future__ import annotations

import os
import subprocess
from importlib import metadata
from typing import Any, Sequence

from jobs.rules.replica_env import PROJECT_ROOT

PACKAGE = "vertex-tf-pipelines"
ROOT = PROJECT_ROOT  # this checkout (the one home of that path)


def git_state(root: str, *, own_checkout: bool = False, paths: Sequence[str] = ()) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files, under ``paths`` when given, have uncommitted changes) of the git
    checkout holding ``root``; (None, None) outside one, or without git. ``own_checkout``: only when ``root`` is
    the checkout's top (a package installed inside some other repository must not report that repository's
    commit)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()

    try:
        top = git("rev-parse", "--show-toplevel")
        if own_checkout and not os.path.samefile(top, root):
            return None, None
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no", "--", *paths))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None, None


def commit_text(commit: str, dirty: bool | None) -> str:
    """``git 0123456789ab`` (+ `` + uncommitted changes``), as the report and the run summary show a commit."""
    return f"git {commit[:12]}" + (" + uncommitted changes" if dirty else "")


def code_version(root: str = ROOT) -> dict[str, Any]:
    """Which code ran: ``{"git_commit", "git_dirty", "package_version", "text"}``. The project's git commit
    (and whether tracked files had changes) when ``root`` is the top of a git checkout, else the installed
    package's version (an image, a wheel: no ``.git``). Why not only the version: it stays 0.1.0 across
    every commit, so two runs from different code would look the same."""
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = None
    commit, dirty = git_state(root, own_checkout=True)
    out: dict[str, Any] = {"git_commit": commit, "git_dirty": dirty, "package_version": version}
    if commit:
        out["text"] = commit_text(commit, dirty)
    else:
        out["text"] = f"{PACKAGE} {version}" if version else "unknown (no git checkout, package not installed)"
    return out
