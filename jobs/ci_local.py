"""``vtp ci-local``: ``cloudbuild.yaml`` run on this machine, step by step, as Cloud Build runs it, before a
trigger runs it in the cloud.

    vtp ci-local --registry 127.0.0.1:5000 --substitution _TEMPLATE_REPOSITORY=      # the images, no upload
    vtp ci-local --registry 127.0.0.1:5000 --kfp-host http://127.0.0.1:8888/local-project/pipelines \\
        --vertex-endpoint http://127.0.0.1:8889 --substitution _SUBMIT=true ...       # every step, stand-ins
    vtp ci-local --install reuse --small-images --tests tests/test_cloudbuild.py ...  # the quick check (CI)

What Cloud Build does, and what this does in its place:

* **the source**: a trigger builds the pushed commit (its files, no ``.git``): ``--source commit`` (default)
  is ``git archive HEAD`` unpacked; ``gcloud builds submit`` uploads the working tree minus what
  ``.gitignore`` ignores: ``--source worktree`` (``git ls-files -co --exclude-standard``). Either way the
  workspace is made fresh under ``--workspace`` (default ``build/ci-local/``), never the checkout itself,
  so a virtualenv, build outputs and caches lying in the checkout never reach the build;
* **substitutions**: the file's defaults, overridden by the trigger's (``cloudbuild-trigger.yaml``, with
  ``--as trigger``) and then by ``--substitution``; the built-ins (PROJECT_ID, BUILD_ID, COMMIT_SHA,
  SHORT_SHA, BRANCH_NAME, TRIGGER_NAME, ...) from the commit and ``--project``; with
  ``options.dynamicSubstitutions`` (always on for triggered builds) ``$VAR``/``${VAR}`` in a user
  substitution's value is resolved against the built-ins and the other substitutions; with
  ``automapSubstitutions`` every step gets them all as environment variables (a ``script`` is never
  rewritten: bash expands them);
* **order**: a step without ``waitFor`` waits for every step before it; ``waitFor: ['-']`` starts at once;
  ``waitFor: [ids]`` waits for those. Steps whose waits are met run at the same time, as on Cloud Build.
  A failed step (unless ``allowFailure``/``allowExitCodes``) fails the build: running steps are stopped,
  later ones never start. ``timeout`` (per step, and the build's, or ``--timeout``) stops a step's whole
  process group;
* **steps**: each ``script`` is written to a file and executed (its ``#!`` line: bash) in the workspace (or
  its ``dir``), in its own process group; a step stopped (timeout, another step failed, Ctrl-C) gets SIGINT
  first (pytest and Python run their clean-ups), then SIGTERM, then SIGKILL; what a step leaves running,
  its own sessions included (found by a variable in its environment), is stopped when it ends, as a
  step's container is. ``python:*`` steps run on this interpreter (``python`` on their PATH is
  ``sys.executable``); ``gcr.io/cloud-builders/docker`` steps run this machine's ``docker`` CLI against
  ``--docker-host`` (default ``$DOCKER_HOST``, else ``unix:///var/run/docker.sock``);
* **the cloud**: never contacted. Artifact Registry for Docker is a local registry (``--registry
  HOST:PORT``: any registry, e.g. ``docker-registry`` or ``docker run -d -p 5000:5000 registry:2``): the
  docker steps get a ``docker`` on their PATH that pushes an image named ``REGION-docker.pkg.dev/P/R/I:T``
  (or ``*gcr.io/...``) as ``HOST:PORT/P/R/I:T`` and is the real CLI for everything else, so every name,
  tag and compiled YAML is what the cloud build makes and the digests are those the registry answered.
  Artifact Registry for KFP and Vertex AI are reached through two substitutions of ``cloudbuild.yaml``,
  ``_TEMPLATE_HOST`` (``--kfp-host http://127.0.0.1:P/PROJECT/REPO``) and ``_API_ENDPOINT``
  (``--vertex-endpoint http://127.0.0.1:P``). When a step would reach one that was not given, the run is
  refused before anything starts, with one line saying what it needs (loopback addresses only). Why not
  start stand-ins itself: the Vertex and KFP stand-ins are the test suite's (``tests/standins``, not part
  of the installed package) and a private Docker engine needs root; the test that runs this command
  starts them and passes their addresses. The steps get no Google credentials
  (``GOOGLE_APPLICATION_CREDENTIALS`` dropped, gcloud's configuration folder an empty one,
  ``NO_GCE_CHECK=true``);
* **install**: ``--install fresh`` (default) runs the step as written (a new ``.venv``, pip from the
  index: ~2 min); ``--install reuse`` makes ``.venv`` over this interpreter's packages
  (``python -m venv --system-site-packages .venv``; the rest of the step as written: pip finds every
  dependency installed and installs the workspace itself, ~10 s);
* **images**: ``--small-images`` puts a FROM-scratch busybox Dockerfile (the sources copied in, VARIANT
  recorded) in place of ``containers/Dockerfile`` in the workspace: every docker command of the steps runs
  for real, in seconds, with no base image and no PyPI. ``--wheels DIR`` links DIR's wheels into
  ``containers/wheels/`` (the Dockerfile then installs offline);
* **tests**: ``--tests ARGS`` hands ARGS to every pytest the steps start (``PYTEST_ADDOPTS``): a bounded
  selection of the ``unit-tests`` step (the test that runs this command is an integration test, which that
  step's ``-m "not integration"`` never selects: it is never run recursively).

At the end: one line per step (outcome, wall time), then the build's artifacts as Cloud Build would upload
them (``artifacts.objects``: every file, where it would go; the image and template lists they hold, each
image checked by digest in the local registry). Exit status: 0 the build succeeded, 1 it failed,
2 invalid input (one ``error:`` line), 130 interrupted.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

from jobs.ci import copy_source, git

DOCKER_BUILDERS = ("gcr.io/cloud-builders/docker", "docker")
GCLOUD_BUILDERS = ("gcr.io/cloud-builders/gcloud", "gcr.io/google.com/cloudsdktool/", "google/cloud-sdk")
SUBSTITUTION_NAME = re.compile(r"_[A-Z0-9_]+")
REFERENCE = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
RUN_MARKER = ".ci-local-run"
DEFAULT_PROJECT = "local-project"
# Environment a step never gets: another interpreter's paths, and every way to Google credentials.
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
               "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE", "CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE", "CLOUDSDK_CORE_ACCOUNT",
               "CLOUDSDK_CORE_PROJECT", "GCE_METADATA_HOST", "GCE_METADATA_IP")
SMALL_DOCKERFILE = """\
# vtp ci-local --small-images: in place of the trainer image, FROM scratch + busybox-static and the sources,
# VARIANT recorded in /etc/variant. No base image, no PyPI: every docker command of the steps runs for real.
FROM scratch
ARG VARIANT=cpu
COPY containers/busybox /bin/busybox
COPY trainers /app/trainers
COPY jobs /app/jobs
COPY components /app/components
COPY pipelines /app/pipelines
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox test -f /app/jobs/ci.py && /bin/busybox mkdir -p /etc && echo \\"$VARIANT\\" > /etc/variant"]
CMD ["/bin/busybox", "cat", "/etc/variant"]
"""
BUSYBOX = "/bin/busybox"
# Registry hosts that are Google's: what the docker shim sends to the local registry instead.
GOOGLE_REGISTRY = re.compile(r"^(?:[a-z0-9-]+-docker\.pkg\.dev|gcr\.io|[a-z]+\.gcr\.io)/")
DOCKER_SHIM = """\
#!{python}
\"\"\"vtp ci-local: the `docker` of the build's docker steps. An image on an Artifact Registry or gcr.io host is
pushed to (pulled from) the local registry {local} under the same path; a push to any other host that is not
loopback is refused; every other command is the real docker ({real}).\"\"\"
import os, re, subprocess, sys
REAL, LOCAL = {real!r}, {local!r}
GOOGLE = re.compile({pattern!r})
args = sys.argv[1:]
verb = args[1] if args[:1] == ["image"] and len(args) > 1 else (args[0] if args else "")
image = args[-1] if verb in ("push", "pull") and len(args) > 1 and not args[-1].startswith("-") else ""
match = GOOGLE.match(image)
if match:
    local = LOCAL + "/" + image[match.end():]
    if verb == "push":
        code = subprocess.call([REAL, "tag", image, local])
        if code == 0:
            print("ci-local: push " + image + " -> " + local, file=sys.stderr, flush=True)
            code = subprocess.call([REAL] + args[:-1] + [local])
    else:
        code = subprocess.call([REAL] + args[:-1] + [local]) or subprocess.call([REAL, "tag", local, image])
    sys.exit(code)
host = image.split("/")[0] if "/" in image else ""
if verb == "push" and ("." in host or ":" in host) and not host.startswith(("127.", "localhost")):
    print("ci-local: docker push " + image + ": a local run pushes only to the local registry " + LOCAL, file=sys.stderr)
    sys.exit(1)
os.execv(REAL, [REAL] + args)
"""


class InputError(Exception):
    """Bad input or an unmet need: ``str(exc)`` is the one ``error:`` line."""


# ---- the source, as the build gets it --------------------------------------------------------------------

def export_commit(root: Path, dest: Path, rev: str = "HEAD") -> None:
    """The commit's files, as a trigger's build gets them (``git archive``: no ``.git``, nothing untracked)."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["git", "archive", "--format=tar", rev], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        tar.extractall(dest, filter="tar")
    err = proc.stderr.read().decode()
    if proc.wait():
        raise InputError(f"git archive {rev} in {root} failed: {err.strip()[:300]}")


def _git(root: Path, *args: str) -> str:
    try:
        return git(root, *args)
    except ValueError as exc:
        raise InputError(str(exc)) from None


# ---- the build file ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Step:
    index: int
    id: str
    name: str
    script: str
    wait_for: list[str]
    env: list[str]
    dir: str
    timeout_s: float | None
    automap: bool
    allow_failure: bool
    allow_exit_codes: list[int]

    @property
    def label(self) -> str:
        return self.id or f"step #{self.index}"

    @property
    def is_docker(self) -> bool:
        return self.name.split("@")[0].split(":")[0] in DOCKER_BUILDERS

    @property
    def is_python(self) -> bool:
        return self.name.split("/")[-1].startswith("python:") and "/" not in self.name.split(":")[0]


@dataclasses.dataclass
class Build:
    path: Path
    steps: list[Step]
    substitutions: dict[str, str]
    dynamic: bool
    loose: bool
    env: list[str]
    timeout_s: float
    artifacts_location: str
    artifacts_paths: list[str]


def _seconds(duration) -> float | None:
    value = duration.seconds + duration.nanos / 1e9
    return value or None


def load_build(path: Path) -> Build:
    """``cloudbuild.yaml`` read as the Cloud Build API reads it (``Build``, unknown fields refused), with
    what this runner cannot do here refused in one line."""
    import yaml
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    try:
        doc = yaml.safe_load(Path(path).read_text())
        build = json_format.ParseDict(doc, cloudbuild_v1.Build.pb(cloudbuild_v1.Build()))
    except OSError as exc:
        raise InputError(f"--config: cannot read {path}: {exc.strerror}") from None
    except (yaml.YAMLError, json_format.ParseError, ValueError) as exc:
        raise InputError(f"--config: {path} is not a Cloud Build config: {' '.join(str(exc).split())[:300]}") from None
    unsupported = [name for name, present in (
        ("images", bool(build.images)), ("availableSecrets", build.HasField("available_secrets")),
        ("secrets", bool(build.secrets)), ("options.volumes", bool(build.options.volumes)),
        ("options.secretEnv", bool(build.options.secret_env)), ("options.pool", build.options.HasField("pool")),
        ("artifacts.images", bool(build.artifacts.images)),
        ("artifacts.mavenArtifacts/pythonPackages/npmPackages/goModules",
         bool(build.artifacts.maven_artifacts or build.artifacts.python_packages or build.artifacts.npm_packages
              or build.artifacts.go_modules))) if present]
    if unsupported:
        raise InputError(f"{path}: {', '.join(unsupported)} cannot run here (ci-local runs `script` steps and lists "
                         "artifacts.objects); remove them or build in the cloud")
    steps = []
    ids = set()
    for i, s in enumerate(build.steps):
        label = s.id or f"step #{i}"
        if not s.script or s.args or s.entrypoint:
            raise InputError(f"{path}: step {label}: only `script` steps run here (this one gives args/entrypoint "
                             f"to {s.name}); write it as a script")
        if s.secret_env or s.volumes:
            raise InputError(f"{path}: step {label}: secretEnv/volumes cannot run here; remove them")
        if s.name.startswith(GCLOUD_BUILDERS):
            raise InputError(f"{path}: step {label} runs {s.name}: gcloud reaches the cloud, which a local run "
                             "never does")
        missing = [w for w in s.wait_for if w != "-" and w not in ids]
        if missing:
            raise InputError(f"{path}: step {label}: waitFor {missing[0]!r} is not the id of an earlier step")
        ids.add(s.id)
        steps.append(Step(i, s.id, s.name, s.script, list(s.wait_for), list(s.env), s.dir_, _seconds(s.timeout),
                          s.automap_substitutions if s.HasField("automap_substitutions")
                          else build.options.automap_substitutions,
                          s.allow_failure, list(s.allow_exit_codes)))
    if not steps:
        raise InputError(f"{path}: no steps")
    loose = build.options.substitution_option == cloudbuild_v1.BuildOptions.SubstitutionOption.ALLOW_LOOSE
    return Build(Path(path), steps, dict(build.substitutions), build.options.dynamic_substitutions, loose,
                 list(build.options.env), _seconds(build.timeout) or 600.0, build.artifacts.objects.location,
                 list(build.artifacts.objects.paths))


def load_trigger(path: Path) -> dict:
    """``cloudbuild-trigger.yaml`` as a ``BuildTrigger`` (unknown fields refused), as a plain dict."""
    import yaml
    from google.cloud.devtools import cloudbuild_v1
    from google.protobuf import json_format

    try:
        doc = yaml.safe_load(Path(path).read_text())
        json_format.ParseDict(doc, cloudbuild_v1.BuildTrigger.pb(cloudbuild_v1.BuildTrigger()))
    except OSError as exc:
        raise InputError(f"--trigger: cannot read {path}: {exc.strerror}") from None
    except (yaml.YAMLError, json_format.ParseError, ValueError) as exc:
        raise InputError(f"--trigger: {path} is not a build trigger: {' '.join(str(exc).split())[:300]}") from None
    return doc


# ---- substitutions ----------------------------------------------------------------------------------------

def expand(value: str, lookup, what: str) -> str:
    """``$NAME`` / ``${NAME}`` in ``value`` replaced through ``lookup(name)``; ``$$`` is a literal ``$``.
    Bash-style operations (``${NAME:0:7}``, ``${NAME/a/b}``...) are refused: ci-local does not apply them."""
    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("braced") if m.group("braced") is not None else m.group("plain")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise InputError(f"{what}: ${{{name}}} uses a bash-style operation, which ci-local does not apply; "
                             "use a plain ${NAME}")
        return lookup(name)
    return REFERENCE.sub(one, value)


def resolve_substitutions(build: Build, builtins: dict[str, str], trigger: dict[str, str] | None,
                          given: dict[str, str]) -> dict[str, str]:
    """Every substitution's value for this build: the file's defaults < the trigger's < ``given``; with
    dynamic substitutions (always for a triggered build) ``$NAME`` in a value resolved against the built-ins
    and the other substitutions. ALLOW_LOOSE: an unknown name is empty; MUST_MATCH: refused."""
    for name in given:
        if not SUBSTITUTION_NAME.fullmatch(name):
            raise InputError(f"--substitution {name}=...: a user substitution is _ then capitals, digits, _ "
                             "(e.g. _REGION)")
        if not build.loose and name not in build.substitutions:
            raise InputError(f"--substitution {name}: not a substitution of {build.path.name} and "
                             "substitutionOption is MUST_MATCH; valid choices: " + ", ".join(sorted(build.substitutions)))
    raw = {**build.substitutions, **(trigger or {}), **given}
    dynamic = build.dynamic or trigger is not None
    if not dynamic:
        return {**builtins, **raw}
    resolved: dict[str, str] = {}

    def lookup(name: str, chain: tuple[str, ...] = ()) -> str:
        if name in builtins:
            return builtins[name]
        if name in resolved:
            return resolved[name]
        if name not in raw:
            if build.loose:
                return ""
            raise InputError(f"substitution ${{{name}}} is not defined and substitutionOption is MUST_MATCH")
        if name in chain:
            raise InputError(f"substitutions refer to each other in a circle: {' -> '.join(chain + (name,))}")
        resolved[name] = expand(str(raw[name]), lambda n: lookup(n, chain + (name,)), f"substitution {name}")
        return resolved[name]

    for name in sorted(raw):  # a map: its order is not the file's
        lookup(name)
    return {**builtins, **resolved}


def builtin_substitutions(project: str, build_id: str, commit: dict[str, str] | None,
                          trigger: dict | None, config_path: str) -> dict[str, str]:
    """The built-ins Cloud Build gives: for every build, and those of a triggered build (empty for
    ``gcloud builds submit``)."""
    commit = commit or {}
    github = (trigger or {}).get("github") or {}
    sha = commit.get("sha", "")
    branch = commit.get("branch", "")
    values = {"PROJECT_ID": project, "PROJECT_NUMBER": "0", "BUILD_ID": build_id, "LOCATION": "global",
              "COMMIT_SHA": sha, "REVISION_ID": sha, "SHORT_SHA": sha[:7], "BRANCH_NAME": branch, "TAG_NAME": "",
              "REF_NAME": branch, "REPO_NAME": github.get("name", ""),
              "REPO_FULL_NAME": f"{github['owner']}/{github['name']}" if github.get("owner") and github.get("name") else "",
              "TRIGGER_NAME": (trigger or {}).get("name", ""),
              "TRIGGER_BUILD_CONFIG_PATH": config_path if trigger else "",
              "SERVICE_ACCOUNT_EMAIL": "", "SERVICE_ACCOUNT": ""}
    if trigger is None:
        for key in ("COMMIT_SHA", "REVISION_ID", "SHORT_SHA", "BRANCH_NAME", "REF_NAME", "REPO_NAME", "REPO_FULL_NAME"):
            values[key] = ""
    return values


# ---- order ------------------------------------------------------------------------------------------------

def dependencies(steps: list[Step]) -> dict[int, set[int]]:
    """Step index -> the indices it waits for: none for ``waitFor: ['-']`` (and the first step), the named
    ids, or every earlier step when ``waitFor`` is empty (Cloud Build's rule)."""
    by_id = {s.id: s.index for s in steps if s.id}
    deps = {}
    for s in steps:
        if not s.wait_for:
            deps[s.index] = set(range(s.index))
        else:
            deps[s.index] = {by_id[w] for w in s.wait_for if w != "-"}
    return deps


# ---- running ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    step: Step
    status: str = "QUEUED"  # QUEUED (never started), WORKING, SUCCESS, FAILURE, TIMEOUT, CANCELLED
    seconds: float = 0.0
    exit_code: int | None = None
    log: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS" or (self.status == "FAILURE" and (
            self.step.allow_failure or self.exit_code in self.step.allow_exit_codes))


STEP_MARKER = "VTP_CI_LOCAL_STEP"  # in every step's environment: <build id>:<step index>


def _stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop a step's process group: SIGINT (pytest and Python steps run their clean-ups: a test's dockerd is
    stopped and its files removed), SIGTERM after ``grace_s``, SIGKILL 5 s later."""
    for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _sweep(marker: str, grace_s: float = 10.0) -> list[int]:
    """Stop whatever a step left running, its own sessions included (a test's dockerd, a registry: they call
    setsid and escape the step's process group, never its environment): SIGTERM, SIGKILL after ``grace_s``.
    As a step's container ends with it. Returns the pids found."""
    from jobs.local.faults import pids_with_env

    found = pids_with_env(marker)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in pids_with_env(marker):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while pids_with_env(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not pids_with_env(marker):
            break
    return found


class Runner:
    """Runs the steps by their waits, several at once where Cloud Build would."""

    def __init__(self, steps: list[Step], workspace: Path, rundir: Path, env_for, deadline: float,
                 verbose: bool, out=print):
        self.steps, self.workspace, self.rundir = steps, workspace, rundir
        self.env_for, self.deadline, self.verbose, self.out = env_for, deadline, verbose, out
        self.outcomes = {s.index: Outcome(s) for s in steps}
        self.procs: dict[int, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.done: queue.Queue[int] = queue.Queue()
        self.stopping: set[int] = set()  # steps to stop because another failed (or the build timed out)
        self.cancelled: set[int] = set()  # of those, the ones whose process was running and was stopped

    def _run_one(self, step: Step) -> None:
        outcome = self.outcomes[step.index]
        script = self._script(step)
        outcome.log = self.rundir / "logs" / f"{script.stem}.log"
        outcome.log.parent.mkdir(parents=True, exist_ok=True)
        cwd = self.workspace / step.dir if step.dir else self.workspace
        started = time.monotonic()
        limit = self.deadline - started
        if step.timeout_s:
            limit = min(limit, step.timeout_s)
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            env = self.env_for(step)
            with open(outcome.log, "wb") as log:
                with self.lock:  # started and registered at once: stop_all either sees it or it never starts
                    if step.index in self.stopping:
                        outcome.status = "CANCELLED"
                        return
                    proc = subprocess.Popen([str(script)], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
                    self.procs[step.index] = proc
                reader = threading.Thread(target=self._copy, args=(proc.stdout, log, step.label), daemon=True)
                reader.start()
                try:
                    outcome.exit_code = proc.wait(max(limit, 0.01))
                    outcome.status = "SUCCESS" if outcome.exit_code == 0 else "FAILURE"
                except subprocess.TimeoutExpired:
                    outcome.status = "TIMEOUT"
                    _stop_group(proc)
                    outcome.exit_code = proc.returncode
                left = _sweep(f"{STEP_MARKER}={env[STEP_MARKER]}\0")  # the whole entry: step 1 is not step 10
                if left:
                    log.write(f"ci-local: stopped {len(left)} process(es) the step left running\n".encode())
                reader.join(10)
                with self.lock:
                    if step.index in self.cancelled and outcome.status == "FAILURE":
                        outcome.status = "CANCELLED"
        except OSError as exc:
            outcome.status, outcome.exit_code = "FAILURE", None
            outcome.log.write_text(f"could not start {script}: {exc}\n")
        finally:
            outcome.seconds = time.monotonic() - started
            with self.lock:
                self.procs.pop(step.index, None)
            self.done.put(step.index)

    def _script(self, step: Step) -> Path:
        return self.rundir / "scripts" / f"{step.index:02d}-{step.label.replace(' ', '_').replace('#', '')}.sh"

    def write_scripts(self) -> None:
        """Every step's script, written before any step starts: a file still open for writing when another
        thread forks cannot be executed (ETXTBSY)."""
        for step in self.steps:
            script = self._script(step)
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(step.script if step.script.startswith("#!") else "#!/bin/sh\n" + step.script)
            script.chmod(0o755)

    def _copy(self, pipe, log, label: str) -> None:
        for line in iter(pipe.readline, b""):
            log.write(line)
            log.flush()
            if self.verbose:
                self.out(f"{label} | {line.decode(errors='replace').rstrip()}")
        pipe.close()

    def stop_all(self, running: set[int]) -> None:
        with self.lock:
            self.stopping |= running
            procs = [p for i, p in self.procs.items() if i in running and p.poll() is None]
            self.cancelled |= {i for i, p in self.procs.items() if p in procs}
        threads = [threading.Thread(target=_stop_group, args=(proc,), daemon=True) for proc in procs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run(self) -> bool:
        self.write_scripts()
        deps = dependencies(self.steps)
        running: set[int] = set()
        finished: set[int] = set()  # steps whose end this loop has taken in (and said)
        failed = False
        try:
            while True:
                if not failed:
                    for s in self.steps:
                        o = self.outcomes[s.index]
                        if o.status == "QUEUED" and all(d in finished and self.outcomes[d].ok for d in deps[s.index]):
                            o.status = "WORKING"
                            running.add(s.index)
                            self.out(f"--> {s.label} ({s.name})")
                            threading.Thread(target=self._run_one, args=(s,), daemon=True).start()
                if not running:
                    break
                try:
                    index = self.done.get(timeout=max(0.05, min(1.0, self.deadline - time.monotonic())))
                except queue.Empty:
                    if time.monotonic() >= self.deadline and not failed:
                        failed = True  # the build's timeout: every running step is stopped
                        self.out(f"build timeout reached: stopping {len(running)} running step(s)")
                        self.stop_all(running)
                    continue
                running.discard(index)
                finished.add(index)
                o = self.outcomes[index]
                self.out(f"<-- {self._line(o)}")
                if not o.ok and not failed:
                    failed = True
                    self._tail(o)
                    if running:
                        self.stop_all(running)
        except KeyboardInterrupt:
            self.stop_all(running)
            deadline = time.monotonic() + 20  # their ends, so that the table says CANCELLED
            while running and time.monotonic() < deadline:
                try:
                    running.discard(self.done.get(timeout=0.5))
                except queue.Empty:
                    pass
            raise
        return not failed and all(o.ok for o in self.outcomes.values())

    @staticmethod
    def _line(o: Outcome) -> str:
        status = o.status
        if o.status == "FAILURE":
            status += f" (exit {o.exit_code}{', allowed' if o.ok else ''})"
        elif o.status == "QUEUED":
            status = "NOT RUN"
        return f"{o.step.label:<20} {status:<22} {o.seconds:8.1f} s" if o.status != "QUEUED" \
            else f"{o.step.label:<20} {status:<22} {'-':>8}"

    def _tail(self, o: Outcome, lines: int = 40) -> None:
        if o.log and o.log.is_file() and not self.verbose:
            tail = o.log.read_text(errors="replace").splitlines()[-lines:]
            self.out(f"    last {len(tail)} lines of {o.log}:")
            for line in tail:
                self.out(f"    | {line}")


# ---- what replaces the cloud ------------------------------------------------------------------------------

@dataclasses.dataclass
class Local:
    """The local endpoints given, and the substitution of ``cloudbuild.yaml`` each one sets."""
    registry: str | None = None        # HOST:PORT of a Docker registry: Artifact Registry's Docker hosts
    kfp_host: str | None = None        # _TEMPLATE_HOST: http://127.0.0.1:P/PROJECT/REPO
    vertex_endpoint: str | None = None  # _API_ENDPOINT: http://127.0.0.1:P

    def substitutions(self) -> dict[str, str]:
        pairs = (("_TEMPLATE_HOST", self.kfp_host), ("_API_ENDPOINT", self.vertex_endpoint))
        return {name: value for name, value in pairs if value}


def local_problems(local: Local) -> list[str]:
    from jobs.cloud.credentials import is_local_endpoint

    problems = []
    for flag, value in (("--registry", local.registry), ("--kfp-host", local.kfp_host),
                        ("--vertex-endpoint", local.vertex_endpoint)):
        if value and not is_local_endpoint(value):
            problems.append(f"{flag} {value}: not a loopback address; a local run contacts no cloud "
                            "(give 127.0.0.1:PORT / http://127.0.0.1:PORT/...)")
    return problems


def cloud_problems(build: Build, subs: dict[str, str], given: Local) -> list[str]:
    """What a step of this build would reach in the cloud with these substitutions: each one line saying
    what the local run needs instead (this project's cloudbuild.yaml reaches Google through its docker pushes,
    _TEMPLATE_HOST / _TEMPLATE_REPOSITORY and _API_ENDPOINT / _SUBMIT)."""
    from jobs.cloud.credentials import is_local_endpoint

    problems = []
    if any(s.is_docker for s in build.steps) and not given.registry:
        problems.append("the docker steps would push to Artifact Registry "
                        f"({subs.get('_REGION', 'REGION')}-docker.pkg.dev): give --registry 127.0.0.1:PORT (a local "
                        "registry: docker-registry, or docker run -d -p 5000:5000 registry:2)")
    template_host = subs.get("_TEMPLATE_HOST", "")
    if template_host and not is_local_endpoint(template_host):
        problems.append(f"upload-templates would upload to {template_host}: give --kfp-host "
                        "http://127.0.0.1:PORT/PROJECT/REPO (a local KFP registry stand-in)")
    elif not template_host and subs.get("_TEMPLATE_REPOSITORY"):
        problems.append(f"upload-templates would upload to https://{subs.get('_REGION')}-kfp.pkg.dev/"
                        f"{subs.get('PROJECT_ID')}/{subs['_TEMPLATE_REPOSITORY']}: give --kfp-host "
                        "http://127.0.0.1:PORT/PROJECT/REPO (a local KFP registry stand-in), or "
                        "--substitution _TEMPLATE_REPOSITORY= (nothing uploaded)")
    if subs.get("_SUBMIT") == "true" and not is_local_endpoint(subs.get("_API_ENDPOINT", "")):
        problems.append(f"submit would send {subs.get('_SUBMIT_PRESET')} to Vertex AI "
                        f"({subs.get('_API_ENDPOINT') or subs.get('_REGION', '') + '-aiplatform.googleapis.com'}): "
                        "give --vertex-endpoint http://127.0.0.1:PORT (a local Vertex AI stand-in), or leave _SUBMIT false")
    return problems


def docker_problem(host: str) -> str | None:
    """None when a Docker engine answers at ``host``, else the one line that says so."""
    import docker

    try:
        client = docker.APIClient(base_url=host, version="auto", timeout=10)
        client.ping()
        client.close()
        return None
    except Exception as exc:  # docker raises DockerException, requests' errors, OSError...
        return (f"no Docker engine reachable at {host} ({' '.join(str(exc).split())[:160]}): start one, or give "
                "--docker-host")


# ---- the artifacts ----------------------------------------------------------------------------------------

def artifact_lines(build: Build, subs: dict[str, str], workspace: Path, registry: str | None = None) -> list[str]:
    """``artifacts.objects`` as Cloud Build would upload them (location, each file), the image and template
    lists they hold, each pinned image on a loopback registry checked there by digest."""
    if not build.artifacts_paths:
        return ["artifacts: none declared"]
    location = expand(build.artifacts_location, lambda n: subs.get(n, ""), "artifacts.objects.location")
    lines = [f"artifacts (artifacts.objects, not uploaded: Cloud Build would put them in {location}):"]
    for pattern in build.artifacts_paths:
        matches = sorted(p for p in workspace.glob(pattern) if p.is_file())
        if not matches:
            lines.append(f"  {pattern}: no file matches (Cloud Build fails the build on that)")
        for path in matches:
            data = path.read_bytes()
            lines.append(f"  {path.relative_to(workspace).as_posix()}  {len(data)} bytes  "
                         f"sha256:{hashlib.sha256(data).hexdigest()[:16]}...  -> {location.rstrip('/')}/{path.name}")
            if path.suffix == ".txt":
                for entry in data.decode(errors="replace").splitlines():
                    if entry.strip():
                        lines.append(f"      {entry.strip()}{_pinned_check(entry.strip(), registry)}")
    return lines


def _pinned_check(entry: str, registry: str | None) -> str:
    """`` (in HOST:PORT)`` when ``entry`` is an image pinned by digest that the local registry holds (an
    Artifact Registry name is looked up there under the same path), `` (NOT in ...)`` when it does not;
    empty for anything else."""
    if "@sha256:" not in entry or "://" in entry or not registry:
        return ""
    from jobs.images import parse_reference

    try:
        ref = parse_reference(entry)
    except Exception:
        return ""
    if not ref.pinned or not GOOGLE_REGISTRY.match(ref.registry + "/"):
        return ""
    import requests

    name = ref.path
    accept = ", ".join(["application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
                        "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json"])
    digest = entry.rsplit("@", 1)[1]
    try:
        r = requests.head(f"http://{registry}/v2/{name}/manifests/{digest}", headers={"Accept": accept}, timeout=10)
        return f"  (in {registry})" if r.status_code == 200 else f"  (NOT in {registry}: HTTP {r.status_code})"
    except requests.RequestException as exc:
        return f"  (not checked: {type(exc).__name__})"


# ---- the command ------------------------------------------------------------------------------------------

def _checkout_root(start: Path) -> Path:
    """The git checkout ``start`` is in (``start`` itself when none, or without git)."""
    if not shutil.which("git"):
        return start
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=start, capture_output=True, text=True)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else start


def _prepare_rundir(rundir: Path) -> None:
    """A fresh run folder: an earlier run's (it holds the marker) is replaced; anything else is refused."""
    if rundir.exists() and any(rundir.iterdir()):
        if not (rundir / RUN_MARKER).is_file():
            raise InputError(f"--workspace {rundir}: not empty and not an earlier ci-local run; give an empty or new folder")
        shutil.rmtree(rundir)
    rundir.mkdir(parents=True, exist_ok=True)
    (rundir / RUN_MARKER).write_text("a vtp ci-local run: replaced by the next one\n")


def _python_version_note(image: str) -> str:
    m = re.match(r"python:(\d+)\.(\d+)", image)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if m and f"{m.group(1)}.{m.group(2)}" != here:
        return f"  (warning: the image has Python {m.group(1)}.{m.group(2)}, this is {here})"
    return ""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vtp ci-local", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, help="the build file (default: cloudbuild.yaml at the checkout's root)")
    p.add_argument("--as", dest="mode", choices=("trigger", "submit"), default="trigger",
                   help="trigger (default): as cloudbuild-trigger.yaml runs it on a push (its substitutions, the "
                        "commit's built-ins); submit: as `gcloud builds submit` (no commit: SHORT_SHA empty)")
    p.add_argument("--trigger", type=Path, help="the trigger file (default: cloudbuild-trigger.yaml beside --config)")
    p.add_argument("--source", choices=("commit", "worktree"),
                   help="commit: the files of HEAD (default with --as trigger); worktree: the working tree minus what "
                        ".gitignore ignores (default with --as submit)")
    p.add_argument("--workspace", type=Path, help="run folder (default: build/ci-local/ in the checkout); holds "
                                                  "workspace/ (Cloud Build's /workspace), logs/, scripts/")
    p.add_argument("--project", default=DEFAULT_PROJECT, help=f"PROJECT_ID (default {DEFAULT_PROJECT})")
    p.add_argument("--substitution", action="append", default=[], metavar="_KEY=VALUE",
                   help="override a substitution (repeatable), as gcloud builds submit --substitutions")
    p.add_argument("--registry", help="HOST:PORT of a local Docker registry: the images pushed to Artifact Registry go there")
    p.add_argument("--kfp-host", help="http://127.0.0.1:P/PROJECT/REPO, a local KFP registry (_TEMPLATE_HOST)")
    p.add_argument("--vertex-endpoint", help="http://127.0.0.1:P, a local Vertex AI stand-in (_API_ENDPOINT)")
    p.add_argument("--docker-host", help="the engine of the docker steps (default: $DOCKER_HOST, else "
                                         "unix:///var/run/docker.sock)")
    p.add_argument("--install", choices=("fresh", "reuse"), default="fresh",
                   help="fresh: the install step as written (pip from the index); reuse: .venv over this "
                        "interpreter's packages (python -m venv --system-site-packages)")
    p.add_argument("--small-images", action="store_true",
                   help="build a FROM-scratch busybox image in place of containers/Dockerfile (needs /bin/busybox)")
    p.add_argument("--wheels", type=Path, help="a folder of wheels linked into containers/wheels/ (offline image build)")
    p.add_argument("--tests", metavar="PYTEST_ARGS", help="extra pytest arguments for the steps' pytest "
                                                          "(PYTEST_ADDOPTS), e.g. a bounded selection")
    p.add_argument("--timeout", type=float, help="the build's timeout in seconds (default: the file's)")
    p.add_argument("--verbose", action="store_true", help="stream every step's output (always in logs/)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C): every step stopped", file=sys.stderr)
        return 130


def run(args: argparse.Namespace, out=print) -> int:
    started = time.monotonic()
    root = _checkout_root(Path.cwd())
    config = (args.config or root / "cloudbuild.yaml").resolve()
    build = load_build(config)
    root = _checkout_root(config.parent)
    trigger_doc = None
    if args.mode == "trigger":
        trigger_path = args.trigger or config.parent / "cloudbuild-trigger.yaml"
        trigger_doc = load_trigger(trigger_path) if trigger_path.is_file() else {}
    source = args.source or ("commit" if args.mode == "trigger" else "worktree")
    local = Local(args.registry, args.kfp_host, args.vertex_endpoint)
    problems = local_problems(local)
    given = {}
    for item in args.substitution:
        key, sep, value = item.partition("=")
        if not sep:
            problems.append(f"--substitution {item!r}: give _KEY=VALUE (e.g. _REGION=europe-west4)")
        given[key] = value
    if args.timeout is not None and args.timeout <= 0:
        problems.append(f"--timeout {args.timeout:g}: give a positive number of seconds")
    if args.small_images and not (os.path.isfile(BUSYBOX) and os.access(BUSYBOX, os.X_OK)):
        problems.append(f"--small-images needs {BUSYBOX} (apt-get install busybox-static)")
    if args.wheels and not any(args.wheels.glob("*.whl")):
        problems.append(f"--wheels {args.wheels}: no *.whl there")
    if problems:
        raise InputError(problems[0])

    # the commit a trigger would build
    commit = None
    if args.mode == "trigger" or source == "commit":
        if not (root / ".git").exists() or not shutil.which("git"):
            raise InputError(f"{root} is not a git checkout (or git is missing): --as trigger and --source commit need one "
                             "(or use --as submit --source worktree)")
        sha = _git(root, "rev-parse", "HEAD").strip()
        branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD").strip()
        commit = {"sha": sha, "branch": "" if branch == "HEAD" else branch}
    wanted = ((trigger_doc or {}).get("github") or {}).get("push", {}).get("branch", "")
    if args.mode == "trigger" and wanted and not re.search(wanted, commit["branch"]):
        out(f"warning: the trigger runs on pushes to branches matching {wanted}; {commit['branch'] or 'a detached HEAD'} "
            "would not start it (built anyway)")
    build_id = str(uuid.uuid4())
    builtins = builtin_substitutions(args.project, build_id, commit if args.mode == "trigger" else None, trigger_doc,
                                     config.relative_to(root).as_posix() if config.is_relative_to(root) else config.name)
    trigger_subs = (trigger_doc or {}).get("substitutions") or {} if args.mode == "trigger" else None
    subs = resolve_substitutions(build, builtins, trigger_subs, {**local.substitutions(), **given})
    problems = cloud_problems(build, subs, local)
    docker_host = args.docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    docker_steps = [s for s in build.steps if s.is_docker]
    if docker_steps:
        if not shutil.which("docker"):
            problems.append("the docker steps need the docker CLI on PATH (apt-get install docker.io)")
        else:
            problems.extend(p for p in [docker_problem(docker_host)] if p)
    reuse_steps = [s for s in build.steps if re.search(r"^\s*python -m venv \.venv\s*$", s.script, re.M)]
    if args.install == "reuse" and not reuse_steps:
        problems.append(f"--install reuse: no step of {config.name} has a `python -m venv .venv` line to make over "
                        "this interpreter's packages; use --install fresh")
    if problems:
        raise InputError(problems[0])

    # the workspace: fresh, from the source alone
    rundir = (args.workspace or root / "build" / "ci-local").resolve()
    _prepare_rundir(rundir)
    workspace = rundir / "workspace"
    if source == "commit":
        export_commit(root, workspace)
        source_line = f"the files of commit {commit['sha'][:12]} (git archive: no .git, as a trigger's build gets them)"
        dirty = [line for line in _git(root, "status", "--porcelain", "--untracked-files=no").splitlines() if line]
        if dirty:
            out(f"warning: {len(dirty)} uncommitted change(s) in {root} are not in this build "
                "(commit them, or --source worktree)")
    else:
        workspace.mkdir()
        count = copy_source(root, workspace, "worktree")
        source_line = f"{count} files of the working tree that git does not ignore (as gcloud builds submit uploads)"
    if args.small_images:
        (workspace / "containers").mkdir(exist_ok=True)
        (workspace / "containers" / "Dockerfile").write_text(SMALL_DOCKERFILE)
        shutil.copy2(BUSYBOX, workspace / "containers" / "busybox")
    if args.wheels:
        wheels = workspace / "containers" / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        for wheel in sorted(args.wheels.glob("*.whl")):
            try:
                os.link(wheel, wheels / wheel.name)
            except OSError:
                shutil.copy2(wheel, wheels / wheel.name)

    # what every step gets
    gcloud_config = rundir / "gcloud-config"  # empty: no gcloud credentials
    python_bin = rundir / "python-bin"  # `python` of the python:* steps: this interpreter
    outputs = rundir / "builder-outputs"  # $BUILDER_OUTPUT, as Cloud Build gives it
    for folder in (gcloud_config, python_bin, outputs):
        folder.mkdir(exist_ok=True)
    for name in ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}"):
        os.symlink(sys.executable, python_bin / name)
    docker_bin = rundir / "docker-bin"  # `docker` of the docker steps: Artifact Registry -> --registry
    if docker_steps:
        docker_bin.mkdir()
        (docker_bin / "docker").write_text(DOCKER_SHIM.format(python=sys.executable, real=shutil.which("docker"),
                                                              local=local.registry, pattern=GOOGLE_REGISTRY.pattern))
        (docker_bin / "docker").chmod(0o755)
    base_env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    base_env.update({"CLOUDSDK_CONFIG": str(gcloud_config), "NO_GCE_CHECK": "true", "BUILDER_OUTPUT": str(outputs)})
    if args.tests:
        base_env["PYTEST_ADDOPTS"] = args.tests
    for entry in build.env:
        key, _, value = entry.partition("=")
        base_env[key] = expand(value, lambda n: subs.get(n, ""), f"options.env {key}")
    if docker_steps:
        base_env.setdefault("DOCKER_BUILDKIT", "0")

    def env_for(step: Step) -> dict[str, str]:
        env = dict(base_env)
        env[STEP_MARKER] = f"{build_id}:{step.index}"
        if step.automap:
            env.update(subs)
        for entry in step.env:
            key, _, value = entry.partition("=")
            env[key] = expand(value, lambda n: subs.get(n, ""), f"step {step.label} env {key}")
        if step.is_python:
            env["PATH"] = f"{python_bin}{os.pathsep}{env.get('PATH', '')}"
        if step.is_docker:
            env["DOCKER_HOST"] = docker_host
            env["PATH"] = f"{docker_bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    if args.install == "reuse":
        site = [p for p in sys.path if p.endswith("-packages") and os.path.isdir(p)]
        in_venv = sys.prefix != sys.base_prefix
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        for step in reuse_steps:
            line = "python -m venv --system-site-packages .venv"
            if in_venv:  # --system-site-packages reaches the base interpreter's packages, not this venv's: add them
                line += (f"\nprintf '%s\\n' {' '.join(repr(p) for p in site)} "
                         f"> .venv/lib/python{version}/site-packages/_ci_local_host.pth")
            step.script = re.sub(r"^(\s*)python -m venv \.venv\s*$", lambda m: m.group(1) + line, step.script,
                                 flags=re.M)

    # what it substitutes, said before anything runs
    deps = dependencies(build.steps)
    sequential = all(deps[s.index] == set(range(s.index)) for s in build.steps)
    out(f"ci-local: {config.name}, {len(build.steps)} steps, "
        + (f"as the trigger {trigger_doc.get('name') or '(unnamed)'} runs it (commit {commit['sha'][:7]}, branch "
           f"{commit['branch'] or '(detached)'})" if args.mode == "trigger" else "as gcloud builds submit runs it")
        + f", build {build_id}")
    rows = [("source", source_line), ("/workspace", str(workspace)),
            ("order", "one after another (no step has waitFor)" if sequential else "by waitFor, concurrent where allowed")]
    for image in sorted({s.name for s in build.steps}):
        if any(s.name == image and s.is_python for s in build.steps):
            rows.append((image, f"this interpreter, Python {sys.version.split()[0]} ({sys.executable})"
                                f"{_python_version_note(image)}"))
        elif any(s.name == image and s.is_docker for s in build.steps):
            rows.append((image, f"the docker CLI ({shutil.which('docker')}) on the engine {docker_host}, "
                                f"DOCKER_BUILDKIT={base_env['DOCKER_BUILDKIT']}"))
        else:
            rows.append((image, "this machine's shell and PATH (no such container here)"))
    rows.append(("Artifact Registry (Docker)", f"{local.registry}: a `docker` on the docker steps' PATH pushes "
                 f"{subs.get('_REGION', 'REGION')}-docker.pkg.dev/PATH as {local.registry}/PATH" if docker_steps
                 else "not contacted (no docker step)"))
    rows.append(("Artifact Registry (KFP)", f"{subs['_TEMPLATE_HOST']} (_TEMPLATE_HOST)" if subs.get("_TEMPLATE_HOST")
                 else "not contacted (_TEMPLATE_REPOSITORY is empty: nothing uploaded)"))
    rows.append(("Vertex AI", f"{subs['_API_ENDPOINT']} (_API_ENDPOINT)" if subs.get("_SUBMIT") == "true"
                 else f"not contacted (_SUBMIT is {subs.get('_SUBMIT', '')!r})"))
    rows.append(("credentials", "none: GOOGLE_APPLICATION_CREDENTIALS dropped, CLOUDSDK_CONFIG empty, NO_GCE_CHECK=true"))
    if args.install == "reuse":
        rows.append(("install", "python -m venv --system-site-packages .venv: this interpreter's packages are the "
                                "dependencies (pip installs the workspace itself)"))
    else:
        rows.append(("install", "as written: a new .venv, pip from the index"))
    if args.small_images:
        rows.append(("containers/Dockerfile", "replaced by FROM scratch + busybox + the sources (--small-images)"))
    if args.wheels:
        rows.append(("PyPI in docker build", f"{len(list(args.wheels.glob('*.whl')))} wheels from {args.wheels} "
                                              "in containers/wheels/ (--wheels)"))
    if args.tests:
        rows.append(("pytest", f"PYTEST_ADDOPTS={args.tests!r} (--tests: the steps' pytest runs that selection)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out(f"  {key:<{width}}  {value}")
    shown = {k: v for k, v in subs.items() if k.startswith("_") or v}
    out("  substitutions: " + " ".join(f"{k}={v!r}" if (" " in v or not v) else f"{k}={v}" for k, v in shown.items()))

    deadline = time.monotonic() + (args.timeout or build.timeout_s)
    runner = Runner(build.steps, workspace, rundir, env_for, deadline, args.verbose, out)
    try:
        ok = runner.run()
    finally:
        out("steps:")
        for s in build.steps:
            out(f"  {Runner._line(runner.outcomes[s.index])}")
    out(f"build {'SUCCESS' if ok else 'FAILURE'} in {time.monotonic() - started:.1f} s (logs: {rundir / 'logs'})")
    if ok:
        for line in artifact_lines(build, subs, workspace, local.registry):
            out(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
