"""Local mode in containers (``python pipelines/run.py --runner docker``): every pipeline step and every
training replica runs in the job's image, on the Docker engine at ``DOCKER_HOST``.

What the process runner proves is the code in this Python environment; what Vertex runs is an image. Here
the same pipeline runs with every step in the image (``kfp.local.DockerRunner``, the same component
definitions as the Vertex YAML) and the train step's launcher (``jobs.local.launch``, unchanged) starts
each replica as a container: the command is the worker pool's ``container_spec`` exactly as the Vertex
CustomJob gets it (``jobs.rules.job_spec``, what ``validate_config`` outputs), ``command`` replacing the
image's ENTRYPOINT and ``args`` its CMD, in the image's WORKDIR, with the Vertex environment the launcher
gives every replica (``CLUSTER_SPEC``, ``TF_CONFIG``, ``AIP_*``) and nothing else of the host's.

    host: run.py ── kfp.local DockerRunner ── step containers (validate, prepare, train, verify, ...)
                                                   └ train: jobs.local.launch ── one replica process
                                                       per replica: ``python -m
                                                       jobs.local.launch.replica_container`` ── its container

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

One module per process: this one holds what they share (the settings, the engine client, labels,
mounts, the clean-up); ``jobs.local.launch.docker_session`` is the host side (``run.py``: the probe, the kfp
runner, Ctrl-C, removing everything at the end); ``jobs.local.launch.replica_container`` is the replica stand-in.

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
import sys
import time
from typing import Any, Callable, Iterable

from jobs.rules.image_reference import BuildError, parse_reference
from jobs.images.docker import client as engine
from trainers import fileio

LABEL_RUN, LABEL_BASE, LABEL_KIND, LABEL_NAME = "vtp.run", "vtp.base", "vtp.kind", "vtp.replica"
#: creating a container copies nothing on overlay2 (< 1 s) but a whole image on vfs (~50 s for 3 GB, idle)
CREATE_TIMEOUT_S = 300.0


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


def engine_client(timeout_s: float = CREATE_TIMEOUT_S):
    """The engine's client (``jobs.images.docker.client``, the one factory) with this runner's timeout; an
    unreachable engine is one ContainerError line."""
    try:
        return engine(timeout_s)
    except BuildError as exc:
        raise ContainerError(str(exc)) from None


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
    # lazy: heavy: docker
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
    # lazy: heavy: docker
    import docker

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


# -- clean-up --------------------------------------------------------------------------------------------
def remove_labelled(c, filters: dict[str, str], log: Callable[[str], None] | None = None,
                    wait_s: float = 0.0) -> list[str]:
    """Force-remove every container carrying all ``filters`` labels; returns their names. With ``wait_s``, then
    wait up to that long until the engine lists none of them: a step container kfp started with ``auto_remove``
    is being removed by the engine once it stopped (our own removal of it is refused as already in progress)
    and is listed until the engine is done, longer on a busy machine; one still listed then is one warning."""
    removed = []
    label = {"label": [f"{k}={v}" for k, v in filters.items()]}
    try:
        found = c.containers.list(all=True, filters=label)
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
    deadline = time.monotonic() + wait_s
    while found and wait_s > 0:
        try:
            found = c.containers.list(all=True, filters=label)
        except Exception:
            found = []
        if found and time.monotonic() >= deadline:
            if log:
                log(f"warning: {len(found)} container(s) still being removed after {wait_s:g} s: "
                    + ", ".join(x.name for x in found))
            break
        if found:
            time.sleep(0.2)
    return removed


# -- the replica stand-ins, as the launcher starts them -------------------------------------------------------------------
def worker_pool_specs_file(base: str, specs: list[dict[str, Any]]) -> str:
    """The job's worker pool specs, as the Vertex CustomJob gets them, beside the replicas' logs."""
    path = os.path.join(base, "logs", "replicas", "worker_pool_specs.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fileio.write_json_atomic(path, specs)
    return path


def launcher_command(specs_file: str) -> list[str]:
    """What the launcher runs for every replica under the docker runner: the replica process, which reads
    its pool from ``CLUSTER_SPEC`` and runs that pool's container."""
    return [sys.executable, "-m", "jobs.local.launch.replica_container", specs_file]


def stand_in_environment() -> dict[str, str]:
    """What the launcher gives each replica stand-in process: this process's environment (the stand-in is
    ours, not the user's trainer: it needs ``DOCKER_HOST`` and this runner's ``VTP_*`` settings). The
    container it starts gets only :func:`replica_environment`."""
    return dict(os.environ)
