"""The source and the run folder: the git checkout a build file is in, the commit a trigger would build
(its sha and branch), the workspace filled from the source alone (``git archive`` of the commit, as a
trigger's build gets it, or the working tree's files that git does not ignore, as ``gcloud builds submit``
uploads them), and the run folder (``--workspace``), marked as ci-local's so that the next run replaces it
and a folder that is not one is never wiped."""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from jobs.ci.cloudbuild_steps import copy_source, git
from jobs.commands.ci_local.errors import InputError

RUN_MARKER = ".ci-local-run"


def export_commit(root: Path, dest: Path, rev: str = "HEAD") -> None:
    """The commit's files, as a trigger's build gets them (``git archive``: no ``.git``, nothing untracked)."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["git", "archive", "--format=tar", rev], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        tar.extractall(dest, filter="tar")
    err = proc.stderr.read().decode()
    if proc.wait():
        raise InputError(f"git archive {rev} in {root} failed: {err.strip()[:300]}")


def _git(root: Path, *args: str) -> str:
    try:
        return git(root, *args)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def checkout_root(start: Path) -> Path:
    """The git checkout ``start`` is in (``start`` itself when none, or without git)."""
    if not shutil.which("git"):
        return start
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else start


def head_commit(root: Path) -> dict[str, str]:
    """The commit a trigger would build: ``{"sha", "branch"}`` of HEAD (branch empty on a detached HEAD)."""
    if not (root / ".git").exists() or not shutil.which("git"):
        raise InputError(f"{root} is not a git checkout (or git is missing): --as trigger and --source commit need one "
                         "(or use --as submit --source worktree)")
    sha = _git(root, "rev-parse", "HEAD").strip()
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD").strip()
    return {"sha": sha, "branch": "" if branch == "HEAD" else branch}


def rundir_problem(rundir: Path) -> str | None:
    """Why ``rundir`` cannot be a run folder (it, or a folder above it, is a file), or None: said with the other
    flags' problems, before anything starts."""
    for path in (rundir, *rundir.parents):
        if path.is_dir():
            return None
        if os.path.lexists(path):
            what = "is a file" if path == rundir else f"is under {path}, a file"
            return f"--workspace {rundir}: {what}, not a folder; give an empty or new folder (default: build/ci-local/ " \
                   "in the checkout)"
    return None


def prepare_rundir(rundir: Path) -> None:
    """A fresh run folder: an earlier run's (it holds the marker) is replaced; anything else is refused."""
    problem = rundir_problem(rundir)
    if problem:
        raise InputError(problem)
    try:
        if rundir.exists() and any(rundir.iterdir()):
            if not (rundir / RUN_MARKER).is_file():
                raise InputError(f"--workspace {rundir}: not empty and not an earlier ci-local run; give an empty or new "
                                 "folder")
            shutil.rmtree(rundir)
        rundir.mkdir(parents=True, exist_ok=True)
        (rundir / RUN_MARKER).write_text("a vtp ci-local run: replaced by the next one\n")
    except OSError as exc:
        raise InputError(f"--workspace {rundir}: {exc.strerror or exc}; give a folder you can write") from None


def fill_workspace(root: Path, workspace: Path, source: str, commit: dict[str, str] | None, out=print) -> str:
    """``workspace`` (new) filled from ``source`` ("commit": the files of ``commit``; "worktree": the working
    tree's files that git does not ignore); returns the line that says which. Uncommitted changes left out
    of a commit's files: a warning through ``out``."""
    if source == "commit":
        export_commit(root, workspace)
        source_line = f"the files of commit {commit['sha'][:12]} (git archive: no .git, as a trigger's build gets them)"
        dirty = [line for line in _git(root, "status", "--porcelain", "--untracked-files=no").splitlines() if line]
        if dirty:
            out(f"warning: {len(dirty)} uncommitted change(s) in {root} are not in this build "
                "(commit them, or --source worktree)")
        return source_line
    workspace.mkdir()
    count = copy_source(root, workspace, "worktree")
    return f"{count} files of the working tree that git does not ignore (as gcloud builds submit uploads)"
