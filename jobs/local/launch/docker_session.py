"""``run.py --runner docker`` on the host: the session of one run (the engine, the image, the labels, the
kfp DockerRunner, Ctrl-C, removing every container of the run), the probe of the image before anything
runs, and the job's config as the containers see it. What the processes share is ``jobs.local.launch.containers``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

from jobs.rules.command_line import shown
from jobs.rules.image_reference import parse_reference
from jobs.rules.image_requirements import read_pins
from jobs.local.launch.containers import (CREATE_TIMEOUT_S, LABEL_BASE, LABEL_KIND, LABEL_RUN, Settings, _first_line,
                                   _identity, _mounts, engine_client, local_reference, remove_labelled, socket_path)
from jobfile.config import resolved_base_dir

#: the longest the probe container may take (it imports nothing heavy: find_spec and metadata only)
PROBE_TIMEOUT_S = 180.0
#: after Ctrl-C: how long the step containers get to stop their replicas (SIGTERM, save, exit 42)
STOP_WAIT_S = 90.0
#: at the end of a run: how long the engine gets to finish removing the run's containers (a stopped step
#: container of kfp's is removed by the engine itself, ``auto_remove``), so that none is left when run.py ends
REMOVE_WAIT_S = 60.0


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
PROJECT_MODULES = ("kfp", "trainers.task", "jobs.steps.calls", "components")


def requirement_names(cfg) -> list[tuple[str, str, Any]]:
    """``(line, distribution name, SpecifierSet)`` of the job's ``trainer.requirements`` file, read as the image's
    pip reads it (``jobs.rules.image_requirements.read_pins``: markers for the image's Python on Linux)."""
    t = cfg.trainer
    if not (t.module and t.requirements):
        return []
    path = Path(t.source_dir or ".") / t.requirements
    return [(pin.text, pin.name, pin.specifier) for pin in read_pins(path.read_text(encoding="utf-8"))]


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
        return [shown(f"--image {image}: `python` in the image failed (exit {code}): {last}; an image for this "
                      "project has python 3.11 on PATH: build it with python pipelines/run.py build")]
    found = json.loads(line[len("VTP-PROBE "):])
    problems = []
    rebuild = shown("python pipelines/run.py build --config JOB --image REPO" if user_module
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
    """The host folders the containers must see: the base output folder and any local data folder; and the
    held-out examples' file (``serving.eval_data``, which the verify step reads), bound alone."""
    base = resolved_base_dir(cfg)
    os.makedirs(base, exist_ok=True)
    extra = [p for p in (cfg.data.path, cfg.data.prepared_dir) if p and "://" not in p and os.path.isdir(p)
             and not os.path.abspath(p).startswith(base.rstrip("/") + "/")]
    held_out = cfg.serving.eval_data
    if held_out and "://" not in held_out and os.path.isfile(held_out):
        extra.append(held_out)
    return [base, *[os.path.abspath(p) for p in extra]]


# -- the host side: run.py --runner docker -----------------------------------------------------------------
class Session:
    """One ``--runner docker`` run: the engine, the image, the labels, the clean-up."""

    def __init__(self, image: str, base: str, mounts: Sequence[str], log: Callable[[str], None] = print):
        self.c = engine_client(CREATE_TIMEOUT_S)
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
        # lazy: heavy: kfp
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

        # lazy: heavy: docker
        import docker

        original = docker.from_env
        docker.from_env = functools.partial(original, timeout=self.settings.timeout_s)
        try:
            yield
        finally:
            docker.from_env = original

    def interrupt(self) -> None:
        """Ctrl-C: the step containers do not get the terminal's SIGINT; deliver it to every process in
        them (the train step's launcher then stops its replicas: SIGTERM, save, exit 42) and wait; then remove
        whatever of the run is still there (a step past :data:`STOP_WAIT_S`, a replica container whose stand-in
        was killed before it could remove it), so that nothing writes a checkpoint after the interrupted line
        has named the last one (that line is read once this returns)."""
        steps = self._containers("step")
        for container in steps:
            with contextlib.suppress(Exception):
                container.exec_run(["python", "-c", "import os, signal; os.kill(-1, signal.SIGINT)"], detach=True)
        deadline = time.monotonic() + STOP_WAIT_S
        while self._containers("step") and time.monotonic() < deadline:
            time.sleep(0.5)
        remove_labelled(self.c, {LABEL_RUN: self.settings.run_id}, self.log, wait_s=REMOVE_WAIT_S)

    def _containers(self, kind: str) -> list:
        try:
            return self.c.containers.list(filters={"label": [f"{LABEL_RUN}={self.settings.run_id}",
                                                             f"{LABEL_KIND}={kind}"]})
        except Exception:
            return []

    def close(self) -> None:
        """Remove every container of the run and wait until the engine lists none (see :func:`remove_labelled`)."""
        remove_labelled(self.c, {LABEL_RUN: self.settings.run_id}, self.log, wait_s=REMOVE_WAIT_S)
        self.c.close()
