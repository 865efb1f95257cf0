"""A private Docker engine, a registry, and the trainer image built in them: what the engine tests
(tests/docker_servers.py's fixtures, tests/test_trainer_image.py) and ``benchmarks/runners.py`` share. No pytest
here: the tests skip or fail around it (``tests.docker_servers.require``).

Why these dockerd flags: no iptables/bridge (no privileges needed beyond root, no network setup on the
host), its own data/exec roots and socket so it never touches a system engine (two engines, of two test runs or
of a benchmark, run side by side). Storage: overlay2 where the kernel and the file system under the temporary
directory take it (each layer stores only its own files), else vfs (works on any file system, including
overlay-in-overlay CI machines, but stores a full copy of the image per layer: ~3.5 GB per layer over the trainer
image). ``VTP_DOCKER_STORAGE=vfs`` forces one.

The trainer image: no base image can be pulled here, so the base is made locally: a Debian bookworm minbase with
python3 and its venv module (debootstrap from the machine's own apt mirror), imported into the engine. The Python
dependencies (pyproject's dependencies + the `cpu` extra, as containers/requirements.py lists them) are wheels
downloaded on the host for this Python (3.11, manylinux x86_64 = Debian bookworm's python3) and put in the
context's containers/wheels/, which the Dockerfile installs with --no-index. Both are cached between runs under
$VTP_CACHE_DIR (default ~/.cache/vertex-tf-pipelines); from scratch it all comes from the network.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKERD = shutil.which("dockerd") or "/usr/sbin/dockerd"
REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
BUSYBOX = "/bin/busybox"
DEBOOTSTRAP = shutil.which("debootstrap") or "/usr/sbin/debootstrap"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE_IMAGE = "localbase:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def missing_binaries(*paths: str) -> list[str]:
    return [p for p in paths if not (os.path.isfile(p) and os.access(p, os.X_OK))]


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
        self.removing: subprocess.Popen | None = None  # stop(wait=False)'s rm -rf of the storage

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

    def stop(self, wait: bool = True) -> None:
        """Stop the engine and delete its storage (the layers: root-owned, possibly GBs; never left in the pytest
        temp dir). ``wait=False``: the deletion (a minute or two after the trainer image) goes on in the background
        while the caller goes on; a later ``stop()`` waits for it. Safe to call again."""
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None
        # overlay2 mounts a dockerd killed mid-way may have left (lazily: nothing may hold them now)
        for mount in _mounts_under(self.root):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        if self.removing is None:
            self.removing = subprocess.Popen(["rm", "-rf", str(self.root / "data"), str(self.root / "exec")])
        if wait:
            self.removing.wait()


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


# ---- the trainer image ------------------------------------------------------------------------------
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


def run_py(*args: str) -> tuple[int, list[str], str]:
    """``python pipelines/run.py ARGS`` in this process; (status, stdout lines, stderr)."""
    import contextlib
    import io

    from pipelines.run import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue().splitlines(), err.getvalue()


@contextlib.contextmanager
def engine_env(dockerd):
    """DOCKER_HOST -> ``dockerd`` (and the classic builder the preinstalled CLI needs) in this process, then back."""
    saved = {k: os.environ.get(k) for k in ("DOCKER_HOST", "DOCKER_BUILDKIT")}
    os.environ.update(DOCKER_HOST=dockerd.host, DOCKER_BUILDKIT="0")
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def build_trainer_image(log, dockerd, registry, tmp):
    """containers/Dockerfile (cpu) built by `run.py build` over the debootstrapped base and pushed: a generator
    that yields ``{"reference", "repo", "ctx", "out", "client", "timings", "log"}`` and, when closed, removes the
    image's tags from the engine if it still runs. Once per test run (fixture ``trainer_image`` in
    tests/docker_servers.py: every engine test reuses this image) and once per ``benchmarks/runners.py``. Needs
    debootstrap (the caller checks :func:`missing_binaries`)."""
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
    with engine_env(dockerd):
        status, out, err = run_py("build", "--context", str(ctx), "--image", repo, "--variant", "cpu",
                                   "--build-arg", f"BASE_IMAGE={BASE_IMAGE}")
    timings["run.py build (build + push)"] = time.monotonic() - t0
    (tmp / "build.log").write_text("\n".join(out) + "\n" + err)
    log(f"trainer image build: {timings['run.py build (build + push)']:.0f} s on {dockerd.storage_driver}, "
        f"output in {tmp / 'build.log'}")
    if status != 0:
        raise RuntimeError("run.py build of the trainer image failed:\n" + "\n".join(out[-40:]) + err)
    image = {"reference": out[-1], "repo": repo, "ctx": ctx, "out": out, "client": client, "timings": timings,
             "log": log}
    try:
        yield image
    finally:
        # an engine already stopped took its storage with it (Dockerd.stop): nothing to remove, no one to ask
        for entry in client.images() if dockerd.proc is not None else ():
            for tag in entry.get("RepoTags") or []:
                if tag.startswith(f"{registry.host}/"):
                    client.remove_image(tag, force=True)
        client.close()
