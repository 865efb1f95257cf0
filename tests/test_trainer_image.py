"""The real trainer image (containers/Dockerfile built by `run.py build`, pushed, trained in), a source-only
rebuild of it, and a user's trainer image built over it (jobs/images/user.py), run and rebuilt.

How the image is made here (a debootstrapped base, wheels downloaded on the host, both cached between runs):
``benchmarks/engine.py``. The trainer image is built once per run (fixture ``trainer_image``) and shared by every
engine test. Durations, sizes, layers and the engine's disk use are printed, never asserted.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from benchmarks.engine import BASE_IMAGE, DEFAULT_MIRROR, debian_mirror, link_tree, run_py

ROOT = Path(__file__).resolve().parent.parent


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


# ---- the engine tests: one trainer image per run, shared --------------------------------------------

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
    status, out, err = run_py("build", "--context", str(ctx), "--image", repo, "--variant", "cpu",
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
        status, out, err = run_py(*args)
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
