"""Build context: what is sent (docker's .dockerignore rules), the tar is deterministic, the tag is its hash."""
from __future__ import annotations

import fnmatch
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from jobs.images.context import BuildError, content_tag, make_context, write_tar

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
    for needed in ("pyproject.toml", "containers/Dockerfile", "containers/requirements.py", "trainers/task.py", "jobs/rules/image_reference.py",
                   "components/train/component.py", "components/train/component.yaml", "pipelines/run.py", "jobfile/presets/local.yaml",
                   "jobs/rules/hardware/catalog.yaml"):
        assert needed in files, needed
    assert not [f for f in files if f.startswith((".git/", "runs/", "tests/", "examples/", "README")) or "__pycache__" in f
                or f.endswith(".pyc") or ".egg-info/" in f]


# ---- containers/Dockerfile's layers: dependencies first (pyproject.toml + wheels), sources last ----------

def _stages(text: str) -> dict[str, list[str]]:
    """Dockerfile instructions (continuations joined) per stage name (the last, unnamed stage is "final")."""
    stages: dict[str, list[str]] = {}
    current = None
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            parts = line.split()
            current = parts[3] if len(parts) > 3 and parts[2].upper() == "AS" else "final"
            stages[current] = []
        if current is not None:
            stages[current].append(line)
    return stages


def _copy_sources(instructions: list[str]) -> list[str]:
    """The context paths of every COPY without --from (the last word is the destination)."""
    out = []
    for line in instructions:
        words = line.split()
        if words[0].upper() == "COPY" and not any(w.startswith("--from") for w in words):
            out += words[1:-1]
    return out


def _matching(ctx_files, patterns: list[str]) -> set[str]:
    """Context files a COPY of ``patterns`` sends (a pattern naming a folder takes what is under it)."""
    return {f for f in ctx_files for pat in patterns
            if fnmatch.fnmatchcase(f, pat) or any(fnmatch.fnmatchcase(parent, pat) for parent in _parents(f))}


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _repo_context_copy(dest: Path) -> Path:
    """The repository's build context from its source alone: never wheels or anything else lying in the
    checkout (containers/wheels/ of an offline build, for one)."""
    from jobs.ci.cloudbuild_steps import source_files

    for rel in sorted(set(make_context(ROOT).files) & set(source_files(ROOT))):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    return dest


def test_the_dependency_layer_depends_only_on_pyproject_and_the_wheels(tmp_path):
    """A source-only change leaves every input of the `deps` stage (the venv layer) byte for byte unchanged."""
    stages = _stages((ROOT / "containers" / "Dockerfile").read_text())
    assert list(stages) == ["deps", "sources", "final"]
    ctx_dir = _repo_context_copy(tmp_path / "ctx")
    (ctx_dir / "containers" / "wheels").mkdir()
    (ctx_dir / "containers" / "wheels" / "tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl").write_bytes(b"w")

    def deps_inputs() -> dict[str, bytes]:
        files = make_context(ctx_dir).files
        return {f: (ctx_dir / f).read_bytes() for f in _matching(files, _copy_sources(stages["deps"]))}

    before = deps_inputs()
    assert sorted(before) == ["containers/requirements.py",
                              "containers/wheels/tensorflow-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl",
                              "pyproject.toml"]
    (ctx_dir / "trainers" / "task.py").write_text("# a source edit\n" + (ctx_dir / "trainers" / "task.py").read_text())
    (ctx_dir / "jobs" / "new_module.py").write_text("X = 1\n")
    assert deps_inputs() == before
    # the sources stage takes the four packages alone; the final image takes the venv from `deps` and the
    # sources from `sources`, in that order, and copies nothing from the context itself
    assert _copy_sources(stages["sources"]) == ["jobfile", "trainers", "jobs", "components", "pipelines"]
    final = stages["final"]
    copies = [line for line in final if line.upper().startswith("COPY")]
    assert copies == ["COPY --from=deps /opt/venv /opt/venv", "COPY --from=sources /app /app"]
    assert not any(line.upper().startswith("ENTRYPOINT") for line in final)
    assert any(line.startswith("CMD ") for line in final)


def _requirements(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, str(ROOT / "containers" / "requirements.py"), *args],
                         capture_output=True, text=True, check=False)
    return [out.returncode, out.stdout.splitlines(), out.stderr.strip()]


def test_the_image_requirements_come_from_pyproject():
    pyproject = str(ROOT / "pyproject.toml")
    status, cpu, _ = _requirements(pyproject, "cpu")
    assert status == 0 and "tensorflow==2.21.*" in cpu and "tf_keras==2.21.*" in cpu and "kfp==2.17.*" in cpu
    assert not [r for r in cpu if r.startswith(("apache-beam", "tensorflow-cpu", "vertex-tf-pipelines"))]
    assert "apache-beam[gcp]==2.77.*" in _requirements(pyproject, "cpu", "beam")[1]
    assert "tensorflow[and-cuda]==2.21.*" in _requirements(pyproject, "gpu")[1]
    _, tpu, _ = _requirements(pyproject, "tpu")
    assert "tensorflow-tpu==2.20.*" in tpu and not [r for r in tpu if r.startswith(("tf_keras", "tensorflow=="))]
    assert _requirements("--no-deps", pyproject, "tpu")[1] == ["tf_keras==2.20.*"]
    assert _requirements("--no-deps", pyproject, "cpu")[1] == []
    # dev is the test tools alone (the README's test command names cpu and beam beside it)
    status, dev, _ = _requirements(pyproject, "cpu", "dev")
    assert "pytest>=8" in dev and not [r for r in dev if r.startswith("apache-beam")]
    status, everything, _ = _requirements(pyproject, "cpu", "beam,dev")
    assert "apache-beam[gcp]==2.77.*" in everything and everything.count("tensorflow==2.21.*") == 1
    assert _requirements(pyproject, "xpu")[::2] == [2, "error: VARIANT must be one of cpu, gpu, tpu, not 'xpu'"]
    status, _, err = _requirements(pyproject, "cpu", "beem")
    assert status == 2 and err.startswith("error: EXTRAS: unknown extra 'beem'; valid choices: beam, cpu, dev")
