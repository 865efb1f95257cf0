"""Real servers for image tests: a Docker engine (dockerd, vfs storage, no networking) and registries.

Loaded as a pytest plugin (``pytest_plugins`` in conftest). Everything runs under a temporary directory
and is stopped and deleted at the end, including the engine's vfs storage (several GB after building
the trainer image). Tests that use these fixtures are skipped, with the reason, only when a binary is
absent: CI (``.ci/run``) installs docker.io, docker-registry, busybox-static and debootstrap.

Why these dockerd flags: no iptables/bridge (no privileges needed beyond root, no network setup on the
host), its own data/exec roots and socket so it never touches a system engine. Storage: overlay2 where
the kernel and the file system under the temporary directory take it (each layer stores only its own
files), else vfs (works on any file system, including overlay-in-overlay CI machines, but stores a full
copy of the image per layer: ~3.5 GB per layer over the trainer image). ``VTP_DOCKER_STORAGE=vfs`` forces one.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
BUSYBOX = "/bin/busybox"


def missing_binaries(*paths: str) -> list[str]:
    return [p for p in paths if not (os.path.isfile(p) and os.access(p, os.X_OK))]


def require(*paths: str) -> None:
    missing = missing_binaries(*paths)
    if missing and os.environ.get("CI"):  # .ci/run installs them: on CI a missing engine is a failure
        pytest.fail(f"CI: needs {', '.join(missing)}; .ci/run should have installed them")
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install docker.io docker-registry busybox-static "
                    "debootstrap; .ci/run does)")
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, grace_s: float = 20) -> None:
    """SIGTERM our own process (and its session: dockerd's managed containerd), SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of that session is left
    except ProcessLookupError:
        pass
    proc.wait(5)


class Dockerd:
    def __init__(self, root: Path):
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log = root / "dockerd.log"
        self.proc: subprocess.Popen | None = None
        self.storage_driver = ""

    def start(self, timeout_s: float = 60) -> "Dockerd":
        """The first storage driver of ``VTP_DOCKER_STORAGE`` (default ``overlay2,vfs``) that starts."""
        drivers = [d for d in os.environ.get("VTP_DOCKER_STORAGE", "overlay2,vfs").split(",") if d.strip()]
        for driver in drivers:
            try:
                return self._start(driver.strip(), timeout_s)
            except RuntimeError:
                if driver == drivers[-1]:
                    raise
        raise RuntimeError("VTP_DOCKER_STORAGE names no storage driver")

    def _start(self, driver: str, timeout_s: float) -> "Dockerd":
        import docker

        self.storage_driver = driver
        cmd = [DOCKERD, "--iptables=false", "--ip6tables=false", "--bridge=none", f"--storage-driver={driver}",
               f"--data-root={self.root / 'data'}", f"--exec-root={self.root / 'exec'}",
               f"--pidfile={self.root / 'docker.pid'}", "-H", self.host]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, self.proc = self.proc.returncode, None
                subprocess.run(["rm", "-rf", str(self.root / "data"), str(self.root / "exec")], check=False)
                raise RuntimeError(f"dockerd ({driver}) exited {code}: {self.log.read_text()[-2000:]}")
            if self.socket.exists():
                try:
                    client = docker.APIClient(base_url=self.host, version="auto", timeout=5)
                    client.ping()
                    client.close()
                    return self
                except Exception:
                    pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"dockerd ({driver}) not ready within {timeout_s} s: {self.log.read_text()[-2000:]}")

    def client(self, timeout_s: float = 600):
        import docker

        return docker.APIClient(base_url=self.host, version="auto", timeout=timeout_s)

    def disk_usage_bytes(self) -> int:
        out = subprocess.run(["du", "-sb", str(self.root / "data")], capture_output=True, text=True)
        return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None
        # overlay2 mounts a dockerd killed mid-way may have left (lazily: nothing may hold them now)
        for mount in _mounts_under(self.root):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        # the engine's layers: root-owned, possibly GBs; never leave them in the pytest temp dir
        subprocess.run(["rm", "-rf", str(self.root / "data"), str(self.root / "exec")], check=False)


def _mounts_under(root: Path) -> list[str]:
    """Mount points under ``root``, deepest first (from /proc/self/mounts; octal escapes decoded)."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    prefix = str(root).rstrip("/") + "/"
    points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[1]) for line in lines
              if len(line.split()) > 1]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


class Registry:
    """``docker-registry serve`` (distribution 2.8) on 127.0.0.1 with filesystem storage."""

    def __init__(self, root: Path, readonly: bool = False):
        self.root, self.readonly = root, readonly
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self.proc: subprocess.Popen | None = None
        self.storage_driver = ""

    def start(self, timeout_s: float = 20) -> "Registry":
        import requests

        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.yml"
        readonly = "\n  maintenance:\n    readonly:\n      enabled: true" if self.readonly else ""
        config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                          f"    rootdirectory: {self.root / 'storage'}\n  delete:\n    enabled: true{readonly}\n"
                          f"http:\n  addr: {self.host}\n")
        with open(self.root / "registry.log", "ab") as log:
            self.proc = subprocess.Popen([REGISTRY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"registry exited {self.proc.returncode}: "
                                   f"{(self.root / 'registry.log').read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/v2/", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"registry not ready within {timeout_s} s")

    def manifest(self, name: str, reference: str) -> tuple[dict, str, bytes]:
        """(parsed manifest, Docker-Content-Digest, raw body) of ``name:reference`` from ``/v2/``."""
        import requests

        accept = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json",
                            "application/vnd.oci.image.index.v1+json"])
        r = requests.get(f"{self.url}/v2/{name}/manifests/{reference}", headers={"Accept": accept}, timeout=10)
        r.raise_for_status()
        return r.json(), r.headers["Docker-Content-Digest"], r.content

    def tags(self, name: str) -> list[str]:
        import requests

        r = requests.get(f"{self.url}/v2/{name}/tags/list", timeout=10)
        return (r.json().get("tags") or []) if r.status_code == 200 else []

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc, grace_s=5)
            self.proc = None
        shutil.rmtree(self.root / "storage", ignore_errors=True)  # pushed blobs: GBs after the trainer image


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory):
    """One engine for the session; DOCKER_HOST points at it only inside tests that ask (see ``docker_env``)."""
    require(DOCKERD)
    engine = Dockerd(tmp_path_factory.mktemp("dockerd")).start()
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    require(REGISTRY)
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def readonly_registry(tmp_path):
    """A registry in maintenance read-only mode: it refuses every push."""
    require(REGISTRY)
    server = Registry(tmp_path / "readonly-registry", readonly=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def trainer_image(request, dockerd, registry, tmp_path_factory):
    """The trainer image (containers/Dockerfile, cpu), built by `run.py build` in the test engine and pushed
    to the test registry once per session; every engine test reuses it (tests/test_trainer_image.py)."""
    from tests.test_trainer_image import build_trainer_image, printer

    yield from build_trainer_image(printer(request), dockerd, registry, tmp_path_factory.mktemp("trainer-image"))


@pytest.fixture
def docker_env(dockerd, monkeypatch):
    """DOCKER_HOST -> the test engine for this test (and its subprocesses)."""
    monkeypatch.setenv("DOCKER_HOST", dockerd.host)
    monkeypatch.setenv("DOCKER_BUILDKIT", "0")
    return dockerd
