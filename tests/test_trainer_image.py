"""The real trainer image: containers/Dockerfile built by `run.py build`, pushed, then trained in.

No base image can be pulled here, so the base is made locally: a Debian bookworm minbase with python3
and its venv module (debootstrap from the machine's own apt mirror), imported into the test engine. The
Python dependencies (the `cpu` extra: tensorflow-cpu, kfp, ...) are wheels downloaded on the host for
this Python (3.11, manylinux x86_64 = Debian bookworm's python3) and put in the context's
containers/wheels/, which the Dockerfile installs with --no-index. Both are cached between runs under
$VTP_CACHE_DIR (default ~/.cache/vertex-tf-pipelines); from scratch it all comes from the network.
Durations and the engine's disk use are printed (vfs stores a full copy per layer).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.docker_servers import DOCKERD, REGISTRY, require

ROOT = Path(__file__).resolve().parent.parent
DEBOOTSTRAP = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_IMAGE = "localbase:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def cache_dir() -> Path:
    path = Path(os.environ.get("VTP_CACHE_DIR") or Path.home() / ".cache" / "vertex-tf-pipelines")
    path.mkdir(parents=True, exist_ok=True)
    return path


def debian_mirror(suite: str = "bookworm", sources: Path = Path("/etc/apt")) -> str:
    """The main Debian archive this machine's apt uses (deb822 *.sources or one-line sources.list)."""
    texts = []
    for path in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]:
        if path.is_file() and path.suffix in ("", ".list", ".sources"):
            texts.append((path.suffix, path.read_text(errors="replace")))
    for suffix, text in texts:
        if suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, re.M))
                if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                    return fields["URIs"].split()[0].rstrip("/")
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if len(parts) >= 3 and parts[0] == "deb":
                    uri_at = 2 if parts[1].startswith("[") else 1
                    if len(parts) > uri_at + 1 and parts[uri_at + 1] == suite:
                        return parts[uri_at].rstrip("/")
    return DEFAULT_MIRROR


def base_rootfs(log) -> Path:
    """A tar of a bookworm minbase + python3 + venv, made once by debootstrap and cached."""
    tar = cache_dir() / f"bookworm-minbase-{'-'.join(BASE_PACKAGES)}.tar"
    if tar.is_file():
        log(f"base rootfs: cached {tar}")
        return tar
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        root = Path(tmp) / "root"
        mirror = debian_mirror()
        subprocess.run([DEBOOTSTRAP, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", "bookworm",
                        str(root), mirror], check=True, capture_output=True, timeout=1200)
        # what the image never needs: downloaded .debs, docs, man pages, apt lists (~100 MB)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                     "usr/share/locale", "usr/share/info"):
            shutil.rmtree(root / junk, ignore_errors=True)
        partial = tar.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.rename(tar)
    log(f"base rootfs: debootstrap from {mirror} in {time.monotonic() - started:.0f} s, "
        f"{tar.stat().st_size / 2**20:.0f} MiB")
    return tar


def cpu_wheels(log) -> Path:
    """Wheels for this package's dependencies with the `cpu` extra (+ setuptools to build it), cached."""
    wheels = cache_dir() / "wheels-cpu-cp311"
    wheels.mkdir(exist_ok=True)
    started = time.monotonic()
    base = [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), "--find-links", str(wheels),
            f"{ROOT}[cpu]", "setuptools>=68"]
    offline = subprocess.run([*base[:5], "--no-index", *base[5:]], capture_output=True, text=True, timeout=600)
    if offline.returncode != 0:  # something missing from the cache: resolve against the index
        subprocess.run(base, check=True, capture_output=True, text=True, timeout=1800)
    for own in wheels.glob("vertex_tf_pipelines-*.whl"):  # the image builds this package from its sources
        own.unlink()
    size = sum(p.stat().st_size for p in wheels.glob("*.whl"))
    log(f"wheels: {len(list(wheels.glob('*.whl')))} in {time.monotonic() - started:.0f} s, {size / 2**20:.0f} MiB")
    return wheels


def context_with_wheels(dest: Path, wheels: Path) -> Path:
    """This repository's build context (as .dockerignore selects it) plus containers/wheels/ (hard links)."""
    from jobs.build_context import make_context

    for rel in make_context(ROOT).files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    (dest / "containers" / "wheels").mkdir(parents=True, exist_ok=True)
    for wheel in wheels.glob("*.whl"):
        target = dest / "containers" / "wheels" / wheel.name
        try:
            os.link(wheel, target)
        except OSError:
            shutil.copy2(wheel, target)
    return dest


def test_debian_mirror_is_read_from_apt_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n")
    assert debian_mirror(sources=tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("# x\ndeb [arch=amd64] http://one.example/debian bookworm main\n")
    assert debian_mirror(sources=tmp_path) == "http://one.example/debian"
    (tmp_path / "sources.list").write_text("")
    assert debian_mirror(sources=tmp_path) == DEFAULT_MIRROR


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_trainer_image_builds_pushes_and_trains(docker_env, registry, tmp_path, capsys):
    require(DOCKERD, REGISTRY, DEBOOTSTRAP)
    from pipelines.run import main

    timings: dict[str, float] = {}

    def log(line: str) -> None:  # figures, printed as they come (never asserted)
        with capsys.disabled():
            print(line, file=sys.stderr, flush=True)
    t0 = time.monotonic()
    rootfs, wheels = base_rootfs(log), cpu_wheels(log)
    timings["inputs (debootstrap + wheels, cached or not)"] = time.monotonic() - t0

    client = docker_env.client(timeout_s=1800)
    t0 = time.monotonic()
    with open(rootfs, "rb") as f:
        client.import_image_from_data(f, repository="localbase", tag="bookworm")
    timings["docker import of the base"] = time.monotonic() - t0

    ctx = context_with_wheels(tmp_path / "ctx", wheels)
    repo = f"{registry.host}/training/tf-trainer"
    t0 = time.monotonic()
    status = main(["build", "--context", str(ctx), "--image", repo, "--variant", "cpu",
                   "--build-arg", f"BASE_IMAGE={BASE_IMAGE}"])
    out, err = capsys.readouterr()
    timings["run.py build (build + push)"] = time.monotonic() - t0
    (tmp_path / "build.log").write_text(out + err)
    log(f"build: {timings['run.py build (build + push)']:.0f} s, output in {tmp_path / 'build.log'}")
    assert status == 0, out[-3000:] + err
    reference = out.splitlines()[-1]
    tag, digest = reference.split(":", 2)[-1].split("@")
    assert registry.manifest("training/tf-trainer", tag)[1] == digest
    assert "tensorflow 2.21" in out  # the Dockerfile's own import check ran in the image
    image = client.inspect_image(f"{repo}:{tag}")
    layers = len(image["RootFS"]["Layers"])

    outdir = tmp_path / "out"
    outdir.mkdir()
    script = ("set -e; python -m trainers.prepare --synthesize /out/images --classes 3 --per-class 10 "
              "--image-size 32 --shards 2 --out /out/data; "
              "python -m trainers.task --config local --set topology.strategy=one_device "
              "--set topology.worker.replica_count=0 --set training.steps=3 --set checkpoint.every_steps=3 "
              "--set data.source=tfrecord --set data.path=/out/data --set output.base_dir=/out/run")
    t0 = time.monotonic()
    container = client.create_container(
        f"{repo}:{tag}", entrypoint=["sh", "-c"], command=[script], network_disabled=True,
        host_config=client.create_host_config(binds={str(outdir): {"bind": "/out", "mode": "rw"}},
                                              network_mode="none"))
    try:
        client.start(container)
        code = client.wait(container, timeout=900)["StatusCode"]
        logs = client.logs(container).decode(errors="replace")
    finally:
        client.remove_container(container, force=True)
    timings["docker run: prepare + 3 training steps + export"] = time.monotonic() - t0
    assert code == 0, logs[-3000:]
    assert "step 3/3" in logs and "exported model to /out/run/model" in logs
    assert (outdir / "run" / "model" / "saved_model.pb").is_file()
    assert (outdir / "run" / "metrics.json").is_file()
    assert list((outdir / "run" / "checkpoints").glob("ckpt-3.index"))

    log(f"trainer image {reference}: {image['Size'] / 2**20:.0f} MiB, {layers} layers; "
        f"engine disk (vfs) {docker_env.disk_usage_bytes() / 2**30:.2f} GiB")
    for what, seconds in timings.items():
        log(f"  {seconds:6.0f} s  {what}")
    client.remove_image(f"{repo}:{tag}", force=True)
    client.close()
