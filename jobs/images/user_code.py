"""A user trainer's code: which files of ``trainer.source_dir`` go into its image (:func:`collect_code`), and which
code ran (:func:`trainer_version`: its git commit and the SHA-256 of those very files).

What never reaches the image (:data:`ALWAYS_EXCLUDED_DIRS`, :data:`CREDENTIAL_NAMES`, :func:`credential_reason`),
whatever the user's own ``.dockerignore`` (applied first, Docker's rules) says: version control and caches,
``runs/`` and the job's ``output.base_dir`` when inside ``source_dir``, this product's own files (``jobs.run_records.own_outputs``:
compiled pipelines, saved plans, job files, run folders, the precision cache) and anything that looks like a
credential. Every excluded path is named with its reason. The image itself is ``jobs.images.user``'s.

One selection, two uses: the image's code layer (``jobs.images.user.plan``) and the code hash a local run's folder is
compared by (:func:`trainer_version`, ``jobs.local.run.folder``) take the same files, so a file that is not in the
image never makes a finished run "another job", and one that is always does. Only ``.dockerignore`` is read, as the
builds here read it (``jobs.images.context``: the Docker engine and Cloud Build are sent this context);
``.gcloudignore`` is ``gcloud builds submit``'s, which no build here runs.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from jobs.run_records import own_outputs
from jobs.run_records.provenance import commit_text, git_state
from jobfile.regular_file import NotARegularFile, read_regular

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
            elif own_outputs.folder_kind(Path(current) / d):
                why = f"always: this product's: {own_outputs.folder_kind(Path(current) / d)}"
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
            if rel == ".dockerignore":  # the selection's rule, not code: a change shows as the files it moves
                excluded.append((rel, "always: the selection's own rules"))
                continue
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
            kind = own_outputs.file_kind(full)
            if kind:
                excluded.append((rel, f"always: this product's: {kind}"))
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
    """Which code of a user's trainer ran, apart from this tool's (``jobs.run_records.provenance.code_version``):
    ``{"source_dir", "git_commit", "git_dirty", "content_sha256", "files", "file_sha256", "text"}``. The git commit
    of ``trainer.source_dir``'s repository (and whether its files there had changes), when it is in one; always the
    SHA-256 of the files the trainer's image would hold (:func:`collect_code`: the same files, the same
    exclusions), so a copy outside any repository is named by its content; ``files`` their count and
    ``file_sha256`` each one's SHA-256 by path (what a refusal names: ``jobs.local.run.folder``). None for the
    built-in trainer; on Vertex (no ``source_dir``: the code is the image's) the image names it."""
    if cfg is None or not cfg.user_trainer:
        return None
    root = cfg.trainer.source_dir
    if not root or not os.path.isdir(root):
        image = cfg.container.image_uri or "the job's image"
        return {"source_dir": root or None, "git_commit": None, "git_dirty": None, "content_sha256": None,
                "files": None, "file_sha256": None, "text": f"the code in {image} (its WORKDIR)"}
    commit, dirty = git_state(root, paths=["."])  # its repository's commit; changes under the trainer's folder
    out: dict[str, Any] = {"source_dir": root, "git_commit": commit, "git_dirty": dirty}
    digest = hashlib.sha256()
    files, _ = collect_code(Path(root), cfg.output.base_dir)
    each = {}
    for rel in files:
        try:
            data = read_regular(str(Path(root, rel)), "trainer.source_dir")
        except (OSError, NotARegularFile):  # a link to a pipe or a device: named, never read
            data = b"(unreadable)"
        digest.update(rel.encode() + b"\0" + data + b"\0")
        each[rel] = hashlib.sha256(data).hexdigest()
    out.update(content_sha256=digest.hexdigest(), files=len(files), file_sha256=each)
    content = f"sha256 {out['content_sha256'][:12]} of its {len(files)} file(s)"
    if out["git_commit"]:
        out["text"] = f"{commit_text(out['git_commit'], out['git_dirty'])} ({content})"
    else:
        out["text"] = f"{content} in {root} (not in a git repository)"
    return out
