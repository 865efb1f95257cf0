"""What a step gets here in place of its container: the environment (this machine's, less another
interpreter's paths and every way to Google credentials; an empty gcloud configuration, ``NO_GCE_CHECK``,
``$BUILDER_OUTPUT``; ``options.env``, the step's ``env``, with ``automapSubstitutions`` every substitution;
the marker the runner finds its processes by), ``python`` of the ``python:*`` steps (this interpreter),
``docker`` of the docker steps (the shim of :mod:`jobs.commands.ci_local.standins`, on ``--docker-host``), and with
``--install reuse`` the install step's ``.venv`` made over this interpreter's packages."""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

from jobs.commands.ci_local.build_file import Build, Step
from jobs.commands.ci_local.runner import STEP_MARKER
from jobs.commands.ci_local.standins import write_docker_shim
from jobs.commands.ci_local.substitutions import expand

# Environment a step never gets: another interpreter's paths, and every way to Google credentials.
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
               "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE", "CLOUDSDK_CORE_ACCOUNT",
               "CLOUDSDK_CORE_PROJECT", "GCE_METADATA_HOST", "GCE_METADATA_IP")
# The line of an install step that --install reuse makes over this interpreter's packages.
VENV_LINE = re.compile(r"^(\s*)python -m venv \.venv\s*$", re.M)


@dataclasses.dataclass
class StepEnvironment:
    """The environment every step starts from, and what each one adds to it (:meth:`for_step`)."""
    base: dict[str, str]
    subs: dict[str, str]
    build_id: str
    python_bin: Path
    docker_bin: Path
    docker_host: str

    def for_step(self, step: Step) -> dict[str, str]:
        env = dict(self.base)
        env[STEP_MARKER] = f"{self.build_id}:{step.index}"
        if step.automap:
            env.update(self.subs)
        for entry in step.env:
            key, _, value = entry.partition("=")
            env[key] = expand(value, lambda n: self.subs.get(n, ""), f"step {step.label} env {key}")
        if step.is_python:
            env["PATH"] = f"{self.python_bin}{os.pathsep}{env.get('PATH', '')}"
        if step.is_docker:
            env["DOCKER_HOST"] = self.docker_host
            env["PATH"] = f"{self.docker_bin}{os.pathsep}{env.get('PATH', '')}"
        return env


def env_values(build: Build, subs: dict[str, str]) -> None:
    """Expand every ``options.env`` and step ``env`` value once, before anything runs: one that cannot be
    expanded here (a bash-style operation) is an InputError (one ``error:`` line, exit 2), not a failure inside
    the step's thread after other steps have run."""
    for entry in build.env:
        key, _, value = entry.partition("=")
        expand(value, lambda n: subs.get(n, ""), f"options.env {key}")
    for step in build.steps:
        for entry in step.env:
            key, _, value = entry.partition("=")
            expand(value, lambda n: subs.get(n, ""), f"step {step.label} env {key}")


def prepare_environment(rundir: Path, build: Build, subs: dict[str, str], build_id: str, docker_host: str,
                        registry: str | None, tests: str | None) -> StepEnvironment:
    """The folders the steps get in ``rundir`` (an empty gcloud configuration, ``python`` and ``docker`` of
    their builders, ``$BUILDER_OUTPUT``) and the environment they start from."""
    gcloud_config = rundir / "gcloud-config"  # empty: no gcloud credentials
    python_bin = rundir / "python-bin"  # `python` of the python:* steps: this interpreter
    outputs = rundir / "builder-outputs"  # $BUILDER_OUTPUT, as Cloud Build gives it
    for folder in (gcloud_config, python_bin, outputs):
        folder.mkdir(exist_ok=True)
    for name in ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        os.symlink(sys.executable, python_bin / name)
    docker_bin = rundir / "docker-bin"  # `docker` of the docker steps: Artifact Registry -> --registry
    docker_steps = any(s.is_docker for s in build.steps)
    if docker_steps:
        write_docker_shim(docker_bin, registry)
    base_env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    base_env.update({"CLOUDSDK_CONFIG": str(gcloud_config), "NO_GCE_CHECK": "true", "BUILDER_OUTPUT": str(outputs)})
    if tests:
        base_env["PYTEST_ADDOPTS"] = tests
    for entry in build.env:
        key, _, value = entry.partition("=")
        base_env[key] = expand(value, lambda n: subs.get(n, ""), f"options.env {key}")
    if docker_steps:
        base_env.setdefault("DOCKER_BUILDKIT", "0")
    return StepEnvironment(base_env, subs, build_id, python_bin, docker_bin, docker_host)


def venv_steps(steps: list[Step]) -> list[Step]:
    """The steps with a ``python -m venv .venv`` line: what ``--install reuse`` changes."""
    return [s for s in steps if VENV_LINE.search(s.script)]


def reuse_packages(steps: list[Step]) -> None:
    """``--install reuse``: each step's ``python -m venv .venv`` line made ``--system-site-packages`` (in a
    virtualenv, this one's packages added by a ``.pth``), so that pip finds every dependency installed."""
    site = [p for p in sys.path if p.endswith("-packages") and os.path.isdir(p)]
    in_venv = sys.prefix != sys.base_prefix
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for step in steps:
        line = "python -m venv --system-site-packages .venv"
        if in_venv:  # --system-site-packages reaches the base interpreter's packages, not this venv's: add them
            line += (f"\nprintf '%s\\n' {' '.join(repr(p) for p in site)} "
                     f"> .venv/lib/python{version}/site-packages/_ci_local_host.pth")
        step.script = VENV_LINE.sub(lambda m: m.group(1) + line, step.script)


def python_version_note(image: str) -> str:
    """A warning when the ``python:X.Y`` image of a step is not this interpreter's version (else empty)."""
    m = re.match(r"python:(\d+)\.(\d+)", image)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if m and f"{m.group(1)}.{m.group(2)}" != here:
        return f"  (warning: the image has Python {m.group(1)}.{m.group(2)}, this is {here})"
    return ""
