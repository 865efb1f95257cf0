"""Real servers for image tests: a Docker engine (dockerd, no networking) and registries, as fixtures.

Loaded as a pytest plugin (``pytest_plugins`` in conftest). The servers themselves and the trainer image's build
live in ``benchmarks/engine.py`` (``benchmarks/runners.py`` uses them too). Everything runs under a temporary
directory and is stopped and deleted at the end, including the engine's storage (several GB after building the
trainer image). Tests that use these fixtures are marked ``docker`` (``@tier``, tests/tiers.py) and, in a parallel
run, form one xdist group: one worker starts the engine and builds the trainer image, once per run. They are
skipped, with the reason, only when a binary is absent: CI (``.ci/run``) installs docker.io, docker-registry,
busybox-static and debootstrap.
"""
from __future__ import annotations

import contextlib
import os
import sys

import pytest

from benchmarks.engine import (BUSYBOX, DEBOOTSTRAP, DOCKERD, REGISTRY, Dockerd, Registry, build_trainer_image,
                               free_port, missing_binaries)
from tests.tiers import release_with_group, tier

__all__ = ["BUSYBOX", "DEBOOTSTRAP", "DOCKERD", "REGISTRY", "free_port", "require"]


def require(*paths: str) -> None:
    missing = missing_binaries(*paths)
    if missing and os.environ.get("CI"):  # .ci/run installs them: on CI a missing engine is a failure
        pytest.fail(f"CI: needs {', '.join(missing)}; .ci/run should have installed them")
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install docker.io docker-registry busybox-static "
                    "debootstrap; .ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root")


@pytest.fixture(scope="session")
@tier("docker")
def dockerd(request, tmp_path_factory):
    """The engine of the trainer image (``trainer_image``) and of the tests that run it, one per run: its users are
    one xdist group. Stopped right after the last of them, its storage deleted in the background meanwhile
    (``release_with_group``; a later stop waits for it)."""
    require(DOCKERD)
    engine = Dockerd(tmp_path_factory.mktemp("dockerd")).start()
    release_with_group(request, lambda: engine.stop(wait=False))
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
@tier("docker")
def registry(request, tmp_path_factory):
    """The registry the trainer image is pushed to (the same group as ``dockerd``)."""
    require(REGISTRY)
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    release_with_group(request, server.stop)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
@tier("docker")
def own_dockerd(tmp_path_factory):
    """An engine of this module's own (a few seconds to start), for tests that need no trainer image: not tied to
    the trainer image's group, they run on any worker beside it."""
    require(DOCKERD)
    engine = Dockerd(tmp_path_factory.mktemp("own-dockerd")).start()
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="module")
@tier("docker")
def own_registry(tmp_path_factory):
    """A registry of this module's own (see ``own_dockerd``)."""
    require(REGISTRY)
    server = Registry(tmp_path_factory.mktemp("own-registry")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
@tier("docker")
def readonly_registry(tmp_path):
    """A registry in maintenance read-only mode: it refuses every push."""
    require(REGISTRY)
    server = Registry(tmp_path / "readonly-registry", readonly=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
@tier("docker")
def trainer_image(request, dockerd, registry, tmp_path_factory):
    """The trainer image (containers/Dockerfile, cpu), built by `run.py build` in the test engine and pushed
    to the test registry once per run (its users are one xdist group: tests/tiers.py); every engine test reuses it
    (tests/test_trainer_image.py, tests/test_docker_runner.py)."""
    require(DOCKERD, REGISTRY, DEBOOTSTRAP)
    built = build_trainer_image(printer(request), dockerd, registry, tmp_path_factory.mktemp("trainer-image"))
    # no release of its own: the engine's release (``dockerd``) deletes its images with the engine's storage, which
    # removing the tags first only made slower (the group's last teardown took 45 s under the full suite's load)
    with contextlib.closing(built):
        yield next(built)


def printer(request):
    """Figures go to the terminal as they come, whatever pytest captures (never asserted)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")

    def log(line: str) -> None:
        with capman.global_and_fixture_disabled():
            print(line, file=sys.stderr, flush=True)
    return log


@pytest.fixture
def docker_env(own_dockerd, monkeypatch):
    """DOCKER_HOST -> the module's own engine for this test (and its subprocesses)."""
    monkeypatch.setenv("DOCKER_HOST", own_dockerd.host)
    monkeypatch.setenv("DOCKER_BUILDKIT", "0")
    return own_dockerd
