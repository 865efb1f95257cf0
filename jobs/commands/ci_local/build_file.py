"""The build file and its trigger as data: ``cloudbuild.yaml`` read as the Cloud Build API reads it (a
``Build``, unknown fields refused) into :class:`Build` and its :class:`Step` s, with what ci-local cannot run
here refused in one line; ``cloudbuild-trigger.yaml`` read as a ``BuildTrigger``. Which builder a step names
(docker, python, gcloud) is said here; what stands in for it is :mod:`jobs.commands.ci_local.environment`'s."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from jobs.commands.ci_local.errors import InputError
from jobfile.regular_file import NotARegularFile, read_regular

DOCKER_BUILDERS = ("gcr.io/cloud-builders/docker", "docker")
GCLOUD_BUILDERS = ("gcr.io/cloud-builders/gcloud", "gcr.io/google.com/cloudsdktool/", "google/cloud-sdk")


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


def _parse(path: Path, message, flag: str, what: str):
    """The YAML document at ``path`` and ``message`` (a protobuf message) filled from it as the API reads it:
    unknown fields refused. A file that cannot be read or parsed: one line naming ``flag``."""
    import yaml
    from google.protobuf import json_format

    try:
        doc = yaml.safe_load(read_regular(str(path), flag).decode("utf-8"))
        if not isinstance(doc, dict):  # an empty file is None, which ParseDict fails on with a TypeError
            raise InputError(f"{flag}: {path} is {'empty' if doc is None else f'a YAML {type(doc).__name__}'}, not "
                             f"{what}: write a mapping (e.g. `steps: [{{name: python, script: ...}}]`)")
        return doc, json_format.ParseDict(doc, message)
    except OSError as exc:
        raise InputError(f"{flag}: cannot read {path}: {exc.strerror}") from None
    except NotARegularFile as exc:
        raise InputError(str(exc.problems[0])) from None
    except (yaml.YAMLError, json_format.ParseError, ValueError, TypeError) as exc:
        raise InputError(f"{flag}: {path} is not {what}: {' '.join(str(exc).split())[:300]}") from None


def load_build(path: Path) -> Build:
    """``cloudbuild.yaml`` read as the Cloud Build API reads it (``Build``, unknown fields refused), with
    what this runner cannot do here refused in one line."""
    from google.cloud.devtools import cloudbuild_v1

    _, build = _parse(path, cloudbuild_v1.Build.pb(cloudbuild_v1.Build()), "--config", "a Cloud Build config")
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
    step_rules(path, build)
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
        if "" in s.wait_for:  # an id-less step is no id: '' would match it, and the runner's wait would not
            raise InputError(f"{path}: step {label}: waitFor has an empty id; name the id of an earlier step, or '-' "
                             "to start at once")
        missing = [w for w in s.wait_for if w != "-" and w not in ids]
        if missing:
            raise InputError(f"{path}: step {label}: waitFor {missing[0]!r} is not the id of an earlier step")
        if s.id:
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


def step_rules(path: Path, build) -> None:
    """What the Cloud Build API reads without complaint and no build can mean, refused in one line before anything
    starts: two steps with one ``id`` (``BuildStep.id`` is the step's "unique identifier", what ``waitFor`` names:
    a second one makes a wait ambiguous), a negative ``timeout`` of the build or of a step (a Duration may be
    negative; a build given one would stop at once, without a line naming it)."""
    if build.timeout.seconds < 0 or build.timeout.nanos < 0:
        raise InputError(f"{path}: timeout {build.timeout.ToJsonString()} is negative; give a positive duration "
                         "(e.g. 600s), or leave it out for Cloud Build's default of 60 minutes")
    seen: dict[str, int] = {}
    for i, s in enumerate(build.steps):
        label = s.id or f"step #{i}"
        if s.id and s.id in seen:
            raise InputError(f"{path}: step #{i}: id {s.id!r} is already step #{seen[s.id]}'s; every step id is "
                             f"unique (waitFor names it), e.g. {s.id}-{i}")
        seen.setdefault(s.id, i)
        if s.timeout.seconds < 0 or s.timeout.nanos < 0:
            raise InputError(f"{path}: step {label}: timeout {s.timeout.ToJsonString()} is negative; give a positive "
                             "duration (e.g. 300s), or leave it out (the build's timeout bounds it)")


def load_trigger(path: Path) -> dict:
    """``cloudbuild-trigger.yaml`` as a ``BuildTrigger`` (unknown fields refused), as a plain dict."""
    from google.cloud.devtools import cloudbuild_v1

    doc, _ = _parse(path, cloudbuild_v1.BuildTrigger.pb(cloudbuild_v1.BuildTrigger()), "--trigger", "a build trigger")
    return doc
