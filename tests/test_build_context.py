"""Build context: what is sent (docker's .dockerignore rules), the tar is deterministic, the tag is its hash."""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from jobs.build_context import BuildError, content_tag, make_context, write_tar

ROOT = Path(__file__).resolve().parent.parent


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def ctx_dir(tmp_path) -> Path:
    return _tree(tmp_path / "ctx", {
        "containers/Dockerfile": "FROM scratch\n",
        "app/main.py": "print('hi')\n",
        "app/__pycache__/main.cpython-311.pyc": "x",
        "runs/local/model.bin": "big",
        "runs/keep.txt": "kept by an exception",
        "deep/a/b/c.tmp": "tmp",
        "deep/a/b/c.txt": "txt",
        ".dockerignore": "# comment\nruns/\n!runs/keep.txt\n**/__pycache__\n**/*.tmp\n",
    })


def test_dockerignore_rules_are_dockers(ctx_dir):
    ctx = make_context(ctx_dir)
    assert ctx.files == (".dockerignore", "app/main.py", "containers/Dockerfile", "deep/a/b/c.txt", "runs/keep.txt")
    assert ctx.dockerfile == "containers/Dockerfile"


def test_dockerfile_is_sent_even_when_ignored(ctx_dir):
    (ctx_dir / ".dockerignore").write_text("containers/\n")
    assert "containers/Dockerfile" in make_context(ctx_dir).files


def test_tar_is_deterministic_and_normalised(ctx_dir):
    ctx = make_context(ctx_dir)
    first = io.BytesIO()
    digest = write_tar(ctx, first)
    assert digest == hashlib.sha256(first.getvalue()).hexdigest()
    os.utime(ctx_dir / "app" / "main.py", (1, 1))
    os.chmod(ctx_dir / "app" / "main.py", 0o600)  # no execute bit: still 0644 in the tar
    second = io.BytesIO()
    assert write_tar(ctx, second) == digest
    assert first.getvalue() == second.getvalue()
    members = tarfile.open(fileobj=io.BytesIO(first.getvalue())).getmembers()
    assert [m.name for m in members] == list(ctx.files)
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, 0, "", "", 0o644)}
    assert not any(m.pax_headers for m in members)


def test_gzip_is_deterministic_too(ctx_dir):
    ctx = make_context(ctx_dir)
    a, b = io.BytesIO(), io.BytesIO()
    assert write_tar(ctx, a, gzip=True) == write_tar(ctx, b, gzip=True) == write_tar(ctx, None)
    assert a.getvalue() == b.getvalue()
    assert a.getvalue()[4:8] == b"\0\0\0\0"  # gzip header mtime
    assert tarfile.open(fileobj=io.BytesIO(gzip.decompress(a.getvalue()))).getnames() == list(ctx.files)


def test_tag_follows_content_not_metadata(ctx_dir, tmp_path):
    tag = content_tag(make_context(ctx_dir))
    assert tag.startswith("ctx-") and len(tag) == 20
    os.utime(ctx_dir / "app" / "main.py", (12345, 12345))
    (ctx_dir / "runs" / "local" / "model.bin").write_text("ignored: changes nothing")
    assert content_tag(make_context(ctx_dir)) == tag
    # the same tree elsewhere (another checkout): same tag
    copy = _tree(tmp_path / "copy", {str(p.relative_to(ctx_dir)): p.read_text()
                                     for p in ctx_dir.rglob("*") if p.is_file()})
    assert content_tag(make_context(copy)) == tag

    (ctx_dir / "app" / "main.py").write_text("print('changed')\n")
    changed = content_tag(make_context(ctx_dir))
    assert changed != tag
    os.chmod(ctx_dir / "app" / "main.py", 0o755)  # an execute bit is content for an image
    assert content_tag(make_context(ctx_dir)) not in (tag, changed)


def test_tag_includes_build_args_and_dockerfile(ctx_dir):
    (ctx_dir / "Dockerfile.other").write_text("FROM scratch\n")
    ctx = make_context(ctx_dir)
    assert content_tag(ctx, {"VARIANT": "cpu"}) != content_tag(ctx, {"VARIANT": "gpu"})
    assert content_tag(ctx) != content_tag(make_context(ctx_dir, "Dockerfile.other"))


def test_symlinks_are_archived_as_links(ctx_dir):
    os.symlink("main.py", ctx_dir / "app" / "link.py")
    ctx = make_context(ctx_dir)
    out = io.BytesIO()
    write_tar(ctx, out)
    link = tarfile.open(fileobj=io.BytesIO(out.getvalue())).getmember("app/link.py")
    assert link.issym() and link.linkname == "main.py"


def test_missing_context_or_dockerfile_is_one_line(tmp_path):
    with pytest.raises(BuildError, match=r"is not a directory$"):
        make_context(tmp_path / "absent")
    with pytest.raises(BuildError, match=r"Dockerfile containers/Dockerfile not found in build context"):
        make_context(tmp_path)
    with pytest.raises(BuildError, match="outside the build context"):
        make_context(tmp_path, str(ROOT / "containers" / "Dockerfile"))


def test_repository_context_sends_the_packages_and_not_the_junk():
    """The real context: what containers/Dockerfile needs, without runs/, .git or caches."""
    files = set(make_context(ROOT).files)
    for needed in ("pyproject.toml", "README.md", "containers/Dockerfile", "trainers/task.py", "jobs/images.py",
                   "components/train/component.py", "components/train/component.yaml", "pipelines/run.py", "trainers/configs/local.yaml",
                   "jobs/hardware/catalog.yaml"):
        assert needed in files, needed
    assert not [f for f in files if f.startswith((".git/", "runs/", "tests/")) or "__pycache__" in f
                or f.endswith(".pyc") or ".egg-info/" in f]
