"""``gcloud ai-platform jobs submit training`` flags -> overrides in ``trainingInput`` form.

Only the cluster/hardware flags of the seeds are translated; gcloud's other flags (``--package-path``,
``--staging-bucket``..., :data:`IGNORED_FLAGS`) and positionals (the job name) are ignored; any other flag
is collected in ``ParsedFlags.unknown`` for the caller to refuse.  Everything after a bare ``--`` is
user args.  A flag overrides the same setting of the ``--config`` file (seed rule): :func:`merge`.
Malformed flags raise :class:`ConfigError` naming the flag; values that parse but are wrong (a count
that is not a number) are kept as given, for ``translate`` to report against the flag.
"""
from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, Mapping, Sequence

from jobfile.errors import ConfigError, Problem, problem

# flag -> (path under trainingInput, kind)
FLAGS: dict[str, tuple[tuple[str, ...], str]] = {
    "--scale-tier": (("scaleTier",), "enum"),
    "--master-machine-type": (("masterType",), "str"),
    "--master-accelerator": (("masterConfig", "acceleratorConfig"), "accelerator"),
    "--master-image-uri": (("masterConfig", "imageUri"), "str"),
    "--worker-count": (("workerCount",), "int"),
    "--worker-machine-type": (("workerType",), "str"),
    "--worker-accelerator": (("workerConfig", "acceleratorConfig"), "accelerator"),
    "--worker-image-uri": (("workerConfig", "imageUri"), "str"),
    "--parameter-server-count": (("parameterServerCount",), "int"),
    "--parameter-server-machine-type": (("parameterServerType",), "str"),
    "--parameter-server-accelerator": (("parameterServerConfig", "acceleratorConfig"), "accelerator"),
    "--parameter-server-image-uri": (("parameterServerConfig", "imageUri"), "str"),
    "--evaluator-count": (("evaluatorCount",), "int"),
    "--evaluator-machine-type": (("evaluatorType",), "str"),
    "--evaluator-accelerator": (("evaluatorConfig", "acceleratorConfig"), "accelerator"),
    "--evaluator-image-uri": (("evaluatorConfig", "imageUri"), "str"),
    "--tpu-tf-version": (("workerConfig", "tpuTfVersion"), "str"),
    "--region": (("region",), "str"),
    "--runtime-version": (("runtimeVersion",), "str"),
    "--python-version": (("pythonVersion",), "str"),
    "--module-name": (("pythonModule",), "str"),
    "--job-dir": (("jobDir",), "str"),
}
BOOLEAN_FLAGS = {"--stream-logs", "--async", "--enable-web-access", "--quiet", "-q", "--no-user-output-enabled",
                 "--use-chief-in-tf-config"}
#: flags of ``gcloud ai-platform jobs submit training`` (and gcloud's global ones) with no hardware meaning:
#: accepted and ignored, so a pasted command validates; any other flag is an error (a typo must not pass).
IGNORED_FLAGS = {"--package-path", "--packages", "--staging-bucket", "--labels", "--service-account", "--network",
                 "--kms-key", "--kms-keyring", "--kms-location", "--kms-project", "--project", "--account",
                 "--billing-project", "--impersonate-service-account", "--format", "--verbosity", "--configuration"}
REPLACED_WHOLE = {"acceleratorConfig"}  # a flag replaces the file's acceleratorConfig as a whole


@dataclasses.dataclass
class ParsedFlags:
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    user_args: list[str] = dataclasses.field(default_factory=list)
    config: str | None = None
    positionals: list[str] = dataclasses.field(default_factory=list)
    sources: dict[str, str] = dataclasses.field(default_factory=dict)  # "trainingInput.x.y" -> flag
    unknown: list[str] = dataclasses.field(default_factory=list)  # flags that are neither ours nor gcloud's


def _maybe_int(text: str) -> int | str:
    """An int for decimal text, else the text itself (reported by translate against the flag)."""
    stripped = text.strip()
    return int(stripped) if re.fullmatch(r"-?[0-9]+", stripped) else text


def _accelerator(flag: str, text: str, problems: list[Problem]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("count", "type") or not value.strip():
            problems.append(problem(flag, f"expected count=N,type=ACCELERATOR, got {text!r}",
                                    ["count=4,type=nvidia-tesla-t4"]))
            return out
        value = value.strip()
        if key == "type":
            out["type"] = value.upper().replace("-", "_")
        else:
            out["count"] = _maybe_int(value)
    if "type" not in out and not problems:
        problems.append(problem(flag, f"names no accelerator type in {text!r}", ["count=4,type=nvidia-tesla-t4"]))
    return out


def parse_flags(argv: Sequence[str]) -> ParsedFlags:
    """Parse gcloud-style argv; raises ConfigError (one Problem per bad flag)."""
    parsed, problems = ParsedFlags(), []
    args = [str(a) for a in argv]
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            parsed.user_args = args[i:]
            break
        if not token.startswith("-") or token == "-":
            parsed.positionals.append(token)
            continue
        flag, eq, value = token.partition("=")
        if flag in BOOLEAN_FLAGS:
            continue
        if flag not in FLAGS and flag not in IGNORED_FLAGS and flag != "--config":
            parsed.unknown.append(flag)
            if not eq and i < len(args) and not args[i].startswith("-"):
                i += 1  # its value
            continue
        if not eq:
            following = args[i] if i < len(args) else "--"
            if following.startswith("--"):
                if flag in FLAGS or flag == "--config":
                    problems.append(problem(flag, "needs a value"))
                continue
            value = following
            i += 1
        if flag == "--config":
            parsed.config = value
            continue
        if flag not in FLAGS:
            continue  # gcloud flags without hardware meaning (--package-path, --staging-bucket, ...)
        path, kind = FLAGS[flag]
        if kind == "accelerator":
            converted: Any = _accelerator(flag, value, problems)
        elif kind == "int":
            converted = _maybe_int(value)
        elif kind == "enum":
            converted = value.strip().upper().replace("-", "_")
        else:
            converted = value
        node = parsed.overrides
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = converted
        parsed.sources["trainingInput." + ".".join(path)] = flag
    if problems:
        raise ConfigError(problems)
    return parsed


def parse_gcloud_flags(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """(overrides in trainingInput form, user args after ``--``).  ``--config`` is read by the caller
    (``parse_flags(argv).config``).  Raises ConfigError for malformed flags."""
    parsed = parse_flags(argv)
    return parsed.overrides, parsed.user_args


def merge(training_input: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Flags over file: nested mappings merge key by key, except acceleratorConfig (replaced whole)."""
    out: dict[str, Any] = copy.deepcopy(dict(training_input or {}))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key not in REPLACED_WHOLE:
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
