"""The real trainer image (containers/Dockerfile built by `run.py build`, pushed, trained in), a source-only
rebuild of it, and a user's trainer image built over it (jobs/images/user.py), run and rebuilt.

No base image can be pulled here, so the base is made locally: a Debian bookworm minbase with python3
and its venv module (debootstrap from the machine's own apt mirror), imported into the test engine. The
Python dependencies (pyproject's dependencies + the `cpu` extra, as containers/requirements.py lists them)
are wheels downloaded on the host for this Python (3.11, manylinux x86_64 = Debian bookworm's python3)
and put in the context's containers/wheels/, which the Dockerfile installs with --no-index. Both are
cached between runs under $VTP_CACHE_DIR (default ~/.cache/vertex-tf-pipelines); from scratch it all
comes from the network. The trainer image is built once per module (fixture `trainer_image`) and shared.
Durations, sizes, layers and the engine's disk use are printed, never asserted.
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


def image_wheels(log, dest: Path, variant: str = "cpu") -> list[Path]:
    """Exactly the wheels the image installs (containers/requirements.py's list for ``variant``), hard-linked
    into ``dest`` from a cache that only grows (wheels-cp311, plus the older wheels-cpu-cp311 if present)."""
    cache = cache_dir() / "wheels-cp311"
    cache.mkdir(exist_ok=True)
    started = time.monotonic()
    reqs = dest.parent / f"requirements-{variant}.txt"
    reqs.write_text(subprocess.run([sys.executable, str(ROOT / "containers" / "requirements.py"),
                                    str(ROOT / "pyproject.toml"), variant], check=True, capture_output=True,
                                   text=True).stdout)
    links = [arg for d in (cache, cache_dir() / "wheels-cpu-cp311") if d.is_dir() for arg in ("--find-links", str(d))]
    report = dest.parent / f"resolved-{variant}.json"
    resolve = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--only-binary=:all:",
               "--report", str(report), *links, "-r", str(reqs)]
    if subprocess.run([*resolve[:4], "--no-index", *resolve[4:]], capture_output=True, text=True, timeout=600).returncode:
        # something missing from the cache: fetch what the index has into it, then resolve offline again
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(cache), *links, "-r", str(reqs)],
                       check=True, capture_output=True, text=True, timeout=1800)
        subprocess.run([*resolve[:4], "--no-index", *resolve[4:]], check=True, capture_output=True, text=True,
                       timeout=600)
    import json
    from urllib.parse import unquote, urlparse

    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for item in json.loads(report.read_text())["install"]:
        source = Path(unquote(urlparse(item["download_info"]["url"]).path))
        target = dest / source.name
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
        wheels.append(target)
    size = sum(w.stat().st_size for w in wheels)
    log(f"wheels ({variant}): {len(wheels)} in {time.monotonic() - started:.0f} s, {size / 2**20:.0f} MiB")
    return wheels


def context_with_wheels(dest: Path, wheels_from: Path | None = None, log=print) -> Path:
    """This repository's build context (as .dockerignore selects it) plus containers/wheels/."""
    from jobs.images.context import make_context

    for rel in make_context(ROOT).files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    wheels = dest / "containers" / "wheels"
    if wheels_from is None:
        image_wheels(log, wheels)
    else:
        link_tree(wheels_from, wheels)
    return dest


def link_tree(src: Path, dest: Path) -> Path:
    """A copy of ``src`` made of hard links (copies where links fail): cheap for gigabytes of wheels."""
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
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




# ---- the engine tests: one trainer image per module, shared --------------------------------------------

def printer(request):
    """Figures go to the terminal as they come, whatever pytest captures (never asserted)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def log(line: str) -> None:
        with capman.global_and_fixture_disabled():
            print(line, file=sys.stderr, flush=True)
    return log


def _run_py(*args: str) -> tuple[int, list[str], str]:
    """``python pipelines/run.py ARGS`` in this process; (status, stdout lines, stderr)."""
    import contextlib
    import io

    from pipelines.run import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue().splitlines(), err.getvalue()


def _tag(reference: str) -> str:
    return reference.split(":", 2)[-1].split("@")[0]


def _layers(registry, repository: str, reference: str) -> list[str]:
    """The pushed manifest's layer digests (what a Vertex replica pulls), base first."""
    name = repository.split("/", 1)[1]
    return [layer["digest"] for layer in registry.manifest(name, _tag(reference))[0]["layers"]]


def _history(client, image: str, log) -> None:
    for entry in reversed(client.history(image)):
        created = " ".join(str(entry.get("CreatedBy", "")).replace("/bin/sh -c #(nop) ", "").split())
        log(f"    {entry['Size'] / 2**20:9.1f} MiB  {created[:110]}")


@pytest.fixture(scope="module")
def engine(dockerd):
    """DOCKER_HOST -> the session's test engine for this whole module (the trainer image is module-wide)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", dockerd.host)
        mp.setenv("DOCKER_BUILDKIT", "0")
        yield dockerd


def build_trainer_image(log, dockerd, registry, tmp):
    """containers/Dockerfile (cpu) built by `run.py build` over the debootstrapped base and pushed, once per
    session (fixture ``trainer_image`` in tests/docker_servers.py): every engine test reuses this image."""
    require(DOCKERD, REGISTRY, DEBOOTSTRAP)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    rootfs = base_rootfs(log)
    ctx = context_with_wheels(tmp / "ctx", log=log)
    timings["inputs (debootstrap + wheels, cached or not)"] = time.monotonic() - t0
    client = dockerd.client(timeout_s=1800)
    t0 = time.monotonic()
    with open(rootfs, "rb") as f:
        client.import_image_from_data(f, repository="localbase", tag="bookworm")
    timings["docker import of the base"] = time.monotonic() - t0
    repo = f"{registry.host}/training/tf-trainer"
    t0 = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DOCKER_HOST", dockerd.host)
        mp.setenv("DOCKER_BUILDKIT", "0")
        status, out, err = _run_py("build", "--context", str(ctx), "--image", repo, "--variant", "cpu",
                                   "--build-arg", f"BASE_IMAGE={BASE_IMAGE}")
    timings["run.py build (build + push)"] = time.monotonic() - t0
    (tmp / "build.log").write_text("\n".join(out) + "\n" + err)
    log(f"trainer image build: {timings['run.py build (build + push)']:.0f} s on {dockerd.storage_driver}, "
        f"output in {tmp / 'build.log'}")
    assert status == 0, "\n".join(out[-40:]) + err
    image = {"reference": out[-1], "repo": repo, "ctx": ctx, "out": out, "client": client, "timings": timings,
             "log": log}
    try:
        yield image
    finally:
        for entry in client.images():
            for tag in entry.get("RepoTags") or []:
                if tag.startswith(f"{registry.host}/"):
                    client.remove_image(tag, force=True)
        client.close()


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_trainer_image_builds_pushes_and_trains(trainer_image, engine, registry, tmp_path):
    client, log, timings, out = (trainer_image[k] for k in ("client", "log", "timings", "out"))
    reference, repo = trainer_image["reference"], trainer_image["repo"]
    tag, digest = _tag(reference), reference.split("@")[1]
    assert registry.manifest("training/tf-trainer", tag)[1] == digest
    assert any("tensorflow 2.21" in line and "tf_keras 2.21" in line for line in out), out[-20:]  # the import check
    image = client.inspect_image(f"{repo}:{tag}")
    assert image["Config"]["Entrypoint"] in (None, [])  # Vertex and KFP give the command
    assert image["Config"]["Cmd"] == ["python", "-m", "trainers.task"]
    assert image["Config"]["WorkingDir"] == "/app"
    # no wheels, no requirement lists, no containers/ folder in the image; no Beam without EXTRAS=beam
    probe = "ls /deps /app/containers 2>&1; python -c 'import apache_beam' 2>&1 | tail -1"
    listing = client.create_container(f"{repo}:{tag}", command=["sh", "-c", probe])
    try:
        client.start(listing)
        client.wait(listing, timeout=120)
        text = client.logs(listing).decode()
    finally:
        client.remove_container(listing, force=True)
    assert "'/deps': No such file" in text and "'/app/containers': No such file" in text, text
    assert "No module named 'apache_beam'" in text  # the beam extra only with EXTRAS=beam

    outdir = tmp_path / "out"
    outdir.mkdir()
    script = ("set -e; python -m trainers.prepare --synthesize /out/images --classes 3 --per-class 10 "
              "--image-size 32 --shards 2 --out /out/data; "
              "python -m trainers.task --config local --set topology.strategy=one_device "
              "--set topology.worker.replica_count=0 --set training.steps=3 --set checkpoint.every_steps=3 "
              "--set data.source=tfrecord --set data.path=/out/data --set output.base_dir=/out/run")
    t0 = time.monotonic()
    code, logs = _run(client, f"{repo}:{tag}", ["sh", "-c", script], outdir)
    timings["docker run: prepare + 3 training steps + export"] = time.monotonic() - t0
    assert code == 0, logs[-3000:]
    assert "step 3/3" in logs and "exported model to /out/run/model" in logs
    assert (outdir / "run" / "model" / "saved_model.pb").is_file()
    assert (outdir / "run" / "metrics.json").is_file()
    assert list((outdir / "run" / "checkpoints").glob("ckpt-3.index"))

    log(f"trainer image {reference}: {image['Size'] / 2**20:.0f} MiB, {len(image['RootFS']['Layers'])} layers; "
        f"engine disk ({engine.storage_driver}) {engine.disk_usage_bytes() / 2**30:.2f} GiB; layers:")
    _history(client, f"{repo}:{tag}", log)
    for what, seconds in timings.items():
        log(f"  {seconds:6.0f} s  {what}")


def _run(client, image: str, command: list[str], outdir: Path, env: dict | None = None) -> tuple[int, str]:
    container = client.create_container(
        image, command=command, environment=env or {}, network_disabled=True,
        host_config=client.create_host_config(binds={str(outdir): {"bind": "/out", "mode": "rw"}},
                                              network_mode="none"))
    try:
        client.start(container)
        code = client.wait(container, timeout=900)["StatusCode"]
        return code, client.logs(container).decode(errors="replace")
    finally:
        client.remove_container(container, force=True)


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_a_source_change_rebuilds_only_the_source_layers(trainer_image, engine, registry, tmp_path):
    """The dependency layer (the venv, ~3 GB) is reused after a source-only change: same layer digests."""
    log, repo, first = trainer_image["log"], trainer_image["repo"], trainer_image["reference"]
    ctx = link_tree(trainer_image["ctx"], tmp_path / "ctx")
    task = ctx / "trainers" / "task.py"
    text = task.read_text()
    task.unlink()  # a hard link to the shared context: replace it, never write through it
    task.write_text(text + "\n# a source-only change\n")
    t0 = time.monotonic()
    status, out, err = _run_py("build", "--context", str(ctx), "--image", repo, "--variant", "cpu",
                               "--build-arg", f"BASE_IMAGE={BASE_IMAGE}")
    seconds = time.monotonic() - t0
    assert status == 0, "\n".join(out[-40:]) + err
    second = out[-1]
    assert _tag(second) != _tag(first)
    before, after = _layers(registry, repo, first), _layers(registry, repo, second)
    same = [a == b for a, b in zip(before, after)]
    log(f"trainer image after a source-only change: rebuilt and pushed in {seconds:.0f} s (first build "
        f"{trainer_image['timings']['run.py build (build + push)']:.0f} s); layers reused: {same}")
    assert len(before) == len(after)
    # base + venv reused; the sources layer is new (the import check's layer is empty in both)
    assert same[:2] == [True, True] and False in same[2:], same
    assert any("Using cache" in line for line in out)
    trainer_image["client"].remove_image(f"{repo}:{_tag(second)}", force=True)


@pytest.mark.docker
@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_a_users_trainer_image_over_the_trainer_image_runs_and_rebuilds_only_what_changed(
        trainer_image, engine, registry, tmp_path):
    """The example project copied outside the repository: `run.py build --config JOB --image REPO` reuses the
    trainer image (already in the registry), builds the user's image over it by digest; it trains and
    exports in `docker run`; a code change rebuilds only the code layer, a requirements change the
    requirements layers too."""
    client, log, ctx = trainer_image["client"], trainer_image["log"], trainer_image["ctx"]
    project = tmp_path / "elsewhere" / "my-project"
    shutil.copytree(ROOT / "examples" / "tabular-regressor", project)
    (project / ".env").write_text("SECRET=never-in-an-image\n")
    repo = f"{registry.host}/training/tabular-regressor"
    args = ("build", "--config", str(project / "job.yaml"), "--image", repo, "--context", str(ctx),
            "--build-arg", f"BASE_IMAGE={BASE_IMAGE}")
    times = {}

    def build(what: str) -> tuple[str, list[str]]:
        t0 = time.monotonic()
        status, out, err = _run_py(*args)
        times[what] = time.monotonic() - t0
        assert status == 0, "\n".join(out[-40:]) + err
        return out[-1], out

    first, out = build("first build (requirements + code over the trainer image)")
    assert any("already built" in line and "/training/tf-trainer:" in line for line in out), out[:10]
    assert f"trainer image: {trainer_image['reference']}" in out
    assert "  excluded .env (always: credential: .env file)" in out
    image = client.inspect_image(f"{repo}:{_tag(first)}")
    assert image["Config"]["WorkingDir"] == "/workspace/code"
    assert image["Config"]["Entrypoint"] in (None, [])
    assert image["Config"]["Cmd"] == ["python", "-m", "trainer.task", "--epochs", "3"]

    outdir = tmp_path / "out"
    outdir.mkdir()
    t0 = time.monotonic()
    code, logs = _run(client, f"{repo}:{_tag(first)}",
                      ["sh", "-c", "test ! -e .env && python -m trainer.task --epochs 1 --examples 256"], outdir,
                      env={"AIP_MODEL_DIR": "/out/model", "AIP_CHECKPOINT_DIR": "/out/checkpoints",
                           "AIP_TENSORBOARD_LOG_DIR": "/out/logs"})
    times["docker run: python -m trainer.task --epochs 1"] = time.monotonic() - t0
    assert code == 0, logs[-3000:]
    assert (outdir / "model" / "saved_model.pb").is_file(), logs[-2000:]

    task = project / "trainer" / "task.py"
    task.write_text(task.read_text().replace('default=32, help="per replica"', 'default=16, help="per replica"'))
    code_changed, out = build("rebuild after a one-line change in trainer/task.py")
    base_layers = _layers(registry, trainer_image["repo"], trainer_image["reference"])
    one, two = _layers(registry, repo, first), _layers(registry, repo, code_changed)
    log(f"user image {first}: {image['Size'] / 2**20:.0f} MiB, {len(one)} layers ({len(base_layers)} from the "
        f"trainer image); layers:")
    _history(client, f"{repo}:{_tag(first)}", log)
    assert one[:len(base_layers)] == base_layers  # FROM the trainer image, layer for layer
    assert len(one) == len(two) == len(base_layers) + 3  # requirements COPY, pip RUN, code COPY
    assert one[:-1] == two[:-1] and one[-1] != two[-1]  # only the code layer is new

    (project / "requirements.txt").write_text("numpy>=1.26\nPyYAML>=6\n")  # satisfied by the base: no index
    reqs_changed, out = build("rebuild after a requirements change")
    three = _layers(registry, repo, reqs_changed)
    assert three[:len(base_layers)] == base_layers and three[len(base_layers)] != two[len(base_layers)]
    for what, seconds in times.items():
        log(f"  {seconds:6.1f} s  user image: {what}")
    for reference in (first, code_changed, reqs_changed):
        client.remove_image(f"{repo}:{_tag(reference)}", force=True)
