"""Local mode in containers (``python pipelines/run.py --runner docker``): every pipeline step and every
training replica runs in the job's image, on the Docker engine at ``DOCKER_HOST``.

What the process runner proves is the code in this Python environment; what Vertex runs is an image. Here
the same pipeline runs with every step in the image (``kfp.local.DockerRunner``, the same component
definitions as the Vertex YAML) and the train step's launcher (``jobs.local.launcher``, unchanged) starts
each replica as a container: the command is the worker pool's ``container_spec`` exactly as the Vertex
CustomJob gets it (``jobs.stages.vertex_job``, what ``validate_config`` outputs), ``command`` replacing the
image's ENTRYPOINT and ``args`` its CMD, in the image's WORKDIR, with the Vertex environment the launcher
gives every replica (``CLUSTER_SPEC``, ``TF_CONFIG``, ``AIP_*``) and nothing else of the host's.

    host: run.py ── kfp.local DockerRunner ── step containers (validate, prepare, train, verify, ...)
                                                   └ train: jobs.local.launcher ── one replica process
                                                       per replica: ``python -m jobs.local.containers
                                                       replica`` ── its replica container

The replica process is the container's stand-in for the launcher: its output is the container's, its
exit status the container's (``docker kill`` → 137, the launcher's ``128+SIGKILL``), SIGTERM goes to the
container (the trainer saves and exits 42, as on a Vertex preemption) and the container is removed when
it ends. So restarts, exact resume, Ctrl-C, the done rules and the console are the launcher's own.

Containers share the host network (replicas reach each other on 127.0.0.1, as the launcher's ports say)
and see the run's folders at the same paths (the base output folder and any local data folder are bind
mounted; kfp mounts the pipeline root). The train step gets the engine's socket and ``DOCKER_HOST``.
Every container carries the labels ``vtp.run`` (this run), ``vtp.base`` (its output folder) and
``vtp.kind`` (step | replica | probe), and is removed by label on every exit path: a replica's process
removes its own; the launcher removes the attempt's leftovers (a replica process killed with SIGKILL
cannot); ``run.py`` removes everything of the run when it ends, and, holding the folder's lock, whatever
a killed earlier run on the same folder left behind.

Before anything runs, a probe container checks that the image can run the job (``probe_problems``):
``tensorflow``, kfp and this project's packages importable, the user's ``trainer.module`` importable
from the image's working directory, every ``trainer.requirements`` line installed.

Engine calls use the docker SDK with one timeout, :data:`CREATE_TIMEOUT_S` (300 s; the step containers
get it as ``VTP_DOCKER_TIMEOUT_S``), not the cloud policy's 60 s read timeout: creating one container of
the 3 GB image on vfs storage took ~50 s idle and more under load, and a ``ReadTimeout`` there leaves a
created container behind. kfp's DockerRunner makes its own client with docker's 60 s default, which
:meth:`Session.engine_timeout` replaces while the pipeline runs (kfp has no setting for it).

The environment this module reads (set by ``run.py`` for the step containers; one reader,
:meth:`Settings.from_env`): ``VTP_RUNNER=docker``, ``VTP_RUN_ID``, ``VTP_RUN_BASE``, ``VTP_DOCKER_MOUNTS``
(JSON list of host folders), ``VTP_DOCKER_TIMEOUT_S``, ``DOCKER_HOST``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from trainers import fileio

LABEL_RUN, LABEL_BASE, LABEL_KIND, LABEL_NAME = "vtp.run", "vtp.base", "vtp.kind", "vtp.replica"
#: creating a container copies nothing on overlay2 (< 1 s) but a whole image on vfs (~50 s for 3 GB, idle)
CREATE_TIMEOUT_S = 300.0
#: the longest the probe container may take (it imports nothing heavy: find_spec and metadata only)
PROBE_TIMEOUT_S = 180.0
#: after Ctrl-C: how long the step containers get to stop their replicas (SIGTERM, save, exit 42)
STOP_WAIT_S = 90.0
#: the Vertex variables a replica container gets (besides the container spec's own ``env``)
FORWARDED = ("CLUSTER_SPEC", "TF_CONFIG", "PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL", "VTP_LOCAL_LAUNCHER")
FORWARDED_PREFIXES = ("AIP_", "CLOUD_ML_")


class ContainerError(RuntimeError):
    """One line: what failed with the engine or the image, and what to do."""


def _first_line(exc: BaseException | str) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- settings: the one reader of the runner's environment ------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Settings:
    run_id: str
    base: str                                 # the run's output folder (absolute; same path everywhere)
    image: str = ""                           # the job's image, as the engine knows it
    mounts: tuple[str, ...] = ()              # host folders bind-mounted at the same path (base included)
    timeout_s: float = CREATE_TIMEOUT_S
    docker_host: str = ""

    @classmethod
    def from_env(cls, env: "dict[str, str] | os._Environ | None" = None) -> "Settings | None":
        """The settings ``run.py --runner docker`` gave this step container; None under the process runner."""
        env = os.environ if env is None else env
        if env.get("VTP_RUNNER") != "docker":
            return None
        try:
            mounts = tuple(json.loads(env.get("VTP_DOCKER_MOUNTS") or "[]"))
            timeout = float(env.get("VTP_DOCKER_TIMEOUT_S") or CREATE_TIMEOUT_S)
        except ValueError as exc:
            raise ContainerError(f"VTP_DOCKER_MOUNTS / VTP_DOCKER_TIMEOUT_S: not valid ({exc})") from None
        return cls(run_id=env.get("VTP_RUN_ID", ""), base=env.get("VTP_RUN_BASE", ""), mounts=mounts,
                   timeout_s=timeout, docker_host=env.get("DOCKER_HOST", ""))

    def to_env(self) -> dict[str, str]:
        return {"VTP_RUNNER": "docker", "VTP_RUN_ID": self.run_id, "VTP_RUN_BASE": self.base,
                "VTP_DOCKER_MOUNTS": json.dumps(list(self.mounts)), "VTP_DOCKER_TIMEOUT_S": f"{self.timeout_s:g}",
                **({"DOCKER_HOST": self.docker_host} if self.docker_host else {})}

    def labels(self, kind: str, **extra: str) -> dict[str, str]:
        return {LABEL_RUN: self.run_id, LABEL_BASE: self.base, LABEL_KIND: kind, **extra}


def client(timeout_s: float = CREATE_TIMEOUT_S):
    """A ``docker.DockerClient`` for ``DOCKER_HOST``, pinged; ContainerError (one line) when unreachable."""
    import docker
    import requests

    where = os.environ.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    try:
        c = docker.DockerClient(version="auto", timeout=timeout_s, **docker.utils.kwargs_from_env())
        c.ping()
        return c
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise ContainerError(f"no Docker engine reachable at {where}: {_first_line(exc)} "
                             "(start dockerd or set DOCKER_HOST)") from None


def socket_path(docker_host: str) -> str | None:
    """The engine's unix socket on this host (``unix:///path`` or the default), None for ``tcp://``."""
    if not docker_host:
        return "/var/run/docker.sock"
    if docker_host.startswith("unix://"):
        return docker_host[len("unix://"):]
    if docker_host.startswith("tcp://"):
        return None
    raise ContainerError(f"DOCKER_HOST={docker_host}: --runner docker takes unix:// or tcp:// engines "
                         "(the train step starts the replica containers through it); e.g. unix:///var/run/docker.sock")


def _mounts(paths: Iterable[str], socket: str | None = None) -> list:
    from docker.types import Mount

    out = [Mount(target=p, source=p, type="bind") for p in dict.fromkeys(paths)]
    if socket:
        out.append(Mount(target=socket, source=socket, type="bind"))
    return out


def _identity(socket: str | None = None) -> dict[str, Any]:
    """Containers write into the run's folders as this user (root: the image's default, root)."""
    if os.geteuid() == 0:
        return {}
    extra: dict[str, Any] = {"user": f"{os.getuid()}:{os.getgid()}"}
    if socket and os.path.exists(socket):
        extra["group_add"] = [str(os.stat(socket).st_gid)]
    return extra


# -- images ----------------------------------------------------------------------------------------------
def local_reference(c, reference: str, pull: bool = True) -> str:
    """``reference`` in the form the engine lists it (``REPO@sha256:...`` from its RepoDigests, else
    ``REPO:TAG``), pulling it first when absent. kfp's DockerRunner pulls any image whose exact string is
    not in an image's tags or RepoDigests, and ``REPO:TAG@sha256:...`` never is."""
    import docker

    from jobs.images import parse_reference

    try:
        ref = parse_reference(reference)
    except ValueError as exc:
        raise ContainerError(f"--image {reference}: {exc}") from None
    wanted = [f"{ref.repository}@{ref.digest}"] if ref.digest else []
    wanted.append(f"{ref.repository}:{ref.tag or 'latest'}")
    for attempt in ("local", "pulled"):
        for image in c.images.list(name=ref.repository):
            names = set(image.tags) | set(image.attrs.get("RepoDigests") or [])
            for name in wanted:
                if name in names and (not ref.digest or f"{ref.repository}@{ref.digest}" in names):
                    return name
        if attempt == "pulled" or not pull:
            break
        try:
            c.images.pull(ref.repository, tag=ref.digest or ref.tag or "latest")
        except (docker.errors.DockerException, OSError) as exc:
            raise ContainerError(f"image {reference} is not in the engine and cannot be pulled: {_first_line(exc)}; "
                                 "build it with: python pipelines/run.py build [--config JOB]") from None
    raise ContainerError(f"image {reference} is not in the engine at {os.environ.get('DOCKER_HOST') or 'the default socket'}; "
                         "build it with: python pipelines/run.py build [--config JOB]")


_PROBE = r"""
import importlib, importlib.metadata as md, importlib.util, json, os, sys
out = {"cwd": os.getcwd(), "python": sys.version.split()[0], "modules": {}, "versions": {}}
for name in sys.argv[1].split(","):
    if not name:
        continue
    try:
        out["modules"][name] = "ok" if importlib.util.find_spec(name) else "No module named %r" % name
    except Exception as exc:
        out["modules"][name] = ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0]
for name in sys.argv[2].split(","):
    if not name:
        continue
    try:
        out["versions"][name] = md.version(name)
    except md.PackageNotFoundError:
        out["versions"][name] = None
print("VTP-PROBE " + json.dumps(out))
"""
#: what every step and replica of this project imports in the image
PROJECT_MODULES = ("kfp", "trainers.task", "jobs.stages", "components")


def requirement_names(cfg) -> list[tuple[str, str, Any]]:
    """``(line, distribution name, SpecifierSet)`` of the job's ``trainer.requirements`` file."""
    from packaging.requirements import InvalidRequirement, Requirement

    t = cfg.trainer
    if not (t.module and t.requirements):
        return []
    path = Path(t.source_dir or ".") / t.requirements
    out = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue  # `run.py build` refuses these; the probe checks what it can read
        if req.marker is None or req.marker.evaluate():
            out.append((line, req.name, req.specifier))
    return out


def probe_problems(c, image: str, cfg, settings: Settings) -> list[str]:
    """What ``image`` lacks to run ``cfg``, one line each (empty: it can run the job), from a probe
    container started as a replica would be (the image's WORKDIR, its python)."""
    user_module = cfg.trainer.module if cfg.trainer.module else ""
    modules = ["tensorflow", *PROJECT_MODULES, *([user_module] if user_module else [])]
    reqs = requirement_names(cfg)
    names = ["tensorflow", *[name for _, name, _ in reqs]]
    container = None
    try:
        container = c.containers.create(image, entrypoint=["python", "-c", _PROBE, ",".join(modules), ",".join(names)],
                                        command=None, network_mode="none", labels=settings.labels("probe"),
                                        **_identity())
        container.start()
        code = container.wait(timeout=PROBE_TIMEOUT_S)["StatusCode"]
        text = container.logs().decode("utf-8", "replace")
    except Exception as exc:  # docker errors, the engine's timeout: one line
        return [f"--image {image}: the probe container could not run python in it: {_first_line(exc)}"]
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
    line = next((ln for ln in text.splitlines() if ln.startswith("VTP-PROBE ")), None)
    if code != 0 or line is None:
        last = (text.strip().splitlines() or ["(no output)"])[-1]
        return [f"--image {image}: `python` in the image failed (exit {code}): {last}; an image for this project "
                "has python 3.11 on PATH: build it with python pipelines/run.py build"]
    found = json.loads(line[len("VTP-PROBE "):])
    problems = []
    rebuild = ("python pipelines/run.py build --config JOB --image REPO" if user_module
               else "python pipelines/run.py build")
    if found["modules"].get("tensorflow") != "ok":
        problems.append(f"--image {image}: tensorflow is not installed in the image (every replica imports it); "
                        f"build the image with {rebuild}")
    missing = [m for m in PROJECT_MODULES if found["modules"].get(m) != "ok"]
    if missing:
        problems.append(f"--image {image}: {', '.join(missing)} not importable in the image (the pipeline's steps "
                        f"run in it): build it with {rebuild} (a user's image is built FROM the trainer image)")
    if user_module and found["modules"].get(user_module) != "ok":
        problems.append(f"trainer.module: {user_module} is not importable in {image} from its working directory "
                        f"{found['cwd']} ({found['modules'].get(user_module)}): the image lacks your code; "
                        f"build it with {rebuild}")
    for line_, name, spec in reqs:
        version = found["versions"].get(name)
        if version is None:
            problems.append(f"trainer.requirements: {line_} is not installed in {image}; build the image with {rebuild}")
        elif spec and not spec.contains(version, prereleases=True):
            problems.append(f"trainer.requirements: {line_} but {image} has {name} {version}; rebuild it with {rebuild}")
    return problems


# -- the job's config, as the containers see it -------------------------------------------------------------
def is_pinned(image: str | None) -> bool:
    """A reference with a tag or digest is used as is; a bare repository (or none) means: build first."""
    if not image:
        return False
    from jobs.images import parse_reference

    try:
        ref = parse_reference(image)
    except ValueError:
        return True  # Session reports it, one line
    return bool(ref.digest or ref.tag)


def for_containers(cfg):
    """``cfg`` with its local folders absolute (a step container's working directory is the image's, so a
    relative path would land elsewhere; the folders are mounted at the same absolute path)."""
    d = cfg.data
    data = dataclasses.replace(d, **{k: os.path.abspath(getattr(d, k)) for k in ("path", "prepared_dir")
                                      if getattr(d, k) and "://" not in getattr(d, k)})
    out = dataclasses.replace(cfg.output, base_dir=os.path.abspath(cfg.output.base_dir)) \
        if "://" not in cfg.output.base_dir else cfg.output
    return dataclasses.replace(cfg, data=data, output=out)


def host_folders(cfg) -> list[str]:
    """The host folders the containers must see: the base output folder and any local data folder."""
    from trainers.config import resolved_base_dir

    base = resolved_base_dir(cfg)
    os.makedirs(base, exist_ok=True)
    extra = [p for p in (cfg.data.path, cfg.data.prepared_dir) if p and "://" not in p and os.path.isdir(p)
             and not os.path.abspath(p).startswith(base.rstrip("/") + "/")]
    return [base, *[os.path.abspath(p) for p in extra]]


# -- clean-up --------------------------------------------------------------------------------------------
def remove_labelled(c, filters: dict[str, str], log: Callable[[str], None] | None = None) -> list[str]:
    """Force-remove every container carrying all ``filters`` labels; returns their names."""
    removed = []
    try:
        found = c.containers.list(all=True, filters={"label": [f"{k}={v}" for k, v in filters.items()]})
    except Exception as exc:
        if log:
            log(f"warning: could not list containers to remove ({_first_line(exc)})")
        return removed
    for container in found:
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    if removed and log:
        log(f"removed {len(removed)} container(s) left behind: {', '.join(removed)}")
    return removed


# -- the replica process: one container -------------------------------------------------------------------
def worker_pool_specs_file(base: str, specs: list[dict[str, Any]]) -> str:
    """The job's worker pool specs, as the Vertex CustomJob gets them, beside the replicas' logs."""
    path = os.path.join(base, "logs", "replicas", "worker_pool_specs.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fileio.write_json_atomic(path, specs)
    return path


def launcher_command(specs_file: str) -> list[str]:
    """What the launcher runs for every replica under the docker runner: the replica process, which reads
    its pool from ``CLUSTER_SPEC`` and runs that pool's container."""
    return [sys.executable, "-m", "jobs.local.containers", "replica", specs_file]


def replica_spec(specs: list[dict[str, Any]], env: dict[str, str]) -> tuple[int, int, dict[str, Any]]:
    """(pool, index, container_spec) of the replica ``env``'s ``CLUSTER_SPEC`` names."""
    task = json.loads(env["CLUSTER_SPEC"])["task"]
    pool = int(str(task["type"]).removeprefix("workerpool"))
    return pool, int(task.get("index", 0)), specs[pool]["container_spec"]


def replica_environment(env: dict[str, str], spec: dict[str, Any]) -> dict[str, str]:
    """The replica container's environment: the Vertex variables the launcher set, the spec's own ``env``."""
    out = {k: v for k, v in env.items() if k in FORWARDED or k.startswith(FORWARDED_PREFIXES)}
    out.update({e["name"]: e.get("value", "") for e in spec.get("env") or []})
    return out


def run_replica(specs_file: str) -> int:
    """Run this replica's container to its end; its exit status is the container's."""
    from jobs.local.vertex_env import ROLES

    settings = Settings.from_env()
    if settings is None:
        print("error: jobs.local.containers replica runs under run.py --runner docker only", file=sys.stderr)
        return 2
    with open(specs_file, encoding="utf-8") as f:
        specs = json.load(f)
    pool, index, spec = replica_spec(specs, dict(os.environ))
    name = f"{ROLES[pool]}-{index}"
    stopping = {"signal": None}
    container = None

    def forward(signum, _frame):  # SIGTERM: the launcher stops this replica -> the container's trainer
        stopping["signal"] = signum
        if container is not None:
            with contextlib.suppress(Exception):
                container.kill(signal=signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which stops us with SIGTERM
    c = client(settings.timeout_s)
    try:
        image = local_reference(c, spec["image_uri"], pull=False)
        container = c.containers.create(
            image, entrypoint=spec.get("command") or None, command=spec.get("args") or None,
            environment=replica_environment(dict(os.environ), spec), network_mode="host",
            mounts=_mounts(settings.mounts), labels=settings.labels("replica", **{LABEL_NAME: name}),
            name=f"vtp-{settings.run_id}-{name}-{uuid.uuid4().hex[:6]}", **_identity())
        if stopping["signal"] is not None:
            return 128 + stopping["signal"]
        container.start()
        for chunk in container.logs(stream=True, follow=True):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        return int(container.wait()["StatusCode"])
    except ContainerError as exc:
        print(f"error: {exc}", flush=True)
        return 125
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        c.close()


# -- the host side: run.py --runner docker -----------------------------------------------------------------
class Session:
    """One ``--runner docker`` run: the engine, the image, the labels, the clean-up."""

    def __init__(self, image: str, base: str, mounts: Sequence[str], log: Callable[[str], None] = print):
        self.c = client(CREATE_TIMEOUT_S)
        self.log = log
        self.socket = socket_path(os.environ.get("DOCKER_HOST", ""))
        self.image = local_reference(self.c, image)
        self.settings = Settings(run_id=time.strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6],
                                 base=base, image=self.image, mounts=tuple(dict.fromkeys([base, *mounts])),
                                 docker_host=os.environ.get("DOCKER_HOST", ""))
        # holding the folder's lock: whatever a killed earlier run on this folder left is ours to remove
        remove_labelled(self.c, {LABEL_BASE: base}, log)

    def probe(self, cfg) -> list[str]:
        return probe_problems(self.c, self.image, cfg, self.settings)

    def kfp_runner(self):
        from kfp import local

        env = {**self.settings.to_env(), "PYTHONUNBUFFERED": "1",
               "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
               **{k: v for k, v in os.environ.items() if k.startswith("VTP_CLOUD_")}}
        return local.DockerRunner(network_mode="host", environment=env, labels=self.settings.labels("step"),
                                  mounts=_mounts(self.settings.mounts, self.socket), **_identity(self.socket))

    @contextlib.contextmanager
    def engine_timeout(self):
        """kfp's DockerRunner calls ``docker.from_env()`` (60 s): give it this run's timeout instead."""
        import functools

        import docker

        original = docker.from_env
        docker.from_env = functools.partial(original, timeout=self.settings.timeout_s)
        try:
            yield
        finally:
            docker.from_env = original

    def interrupt(self) -> None:
        """Ctrl-C: the step containers do not get the terminal's SIGINT; deliver it to every process in
        them (the train step's launcher then stops its replicas: SIGTERM, save, exit 42) and wait."""
        steps = self._containers("step")
        for container in steps:
            with contextlib.suppress(Exception):
                container.exec_run(["python", "-c", "import os, signal; os.kill(-1, signal.SIGINT)"], detach=True)
        deadline = time.monotonic() + STOP_WAIT_S
        while self._containers("step") and time.monotonic() < deadline:
            time.sleep(0.5)

    def _containers(self, kind: str) -> list:
        try:
            return self.c.containers.list(filters={"label": [f"{LABEL_RUN}={self.settings.run_id}",
                                                             f"{LABEL_KIND}={kind}"]})
        except Exception:
            return []

    def close(self) -> None:
        remove_labelled(self.c, {LABEL_RUN: self.settings.run_id}, self.log)
        self.c.close()


def main(argv: Sequence[str]) -> int:
    if len(argv) == 2 and argv[0] == "replica":
        return run_replica(argv[1])
    print("usage: python -m jobs.local.containers replica WORKER_POOL_SPECS.json (the launcher runs it)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
