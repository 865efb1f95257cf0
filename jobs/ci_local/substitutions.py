"""Substitutions, as Cloud Build makes them: the built-ins it gives a build (PROJECT_ID, BUILD_ID, COMMIT_SHA,
SHORT_SHA, BRANCH_NAME, TRIGGER_NAME, ...), every substitution's value for this build (the file's defaults <
the trigger's < the command line's; with dynamic substitutions ``$NAME`` in a value resolved against the
built-ins and the others), and ``$NAME`` / ``${NAME}`` expansion of one value (``$$`` a literal ``$``; a
bash-style operation refused)."""
from __future__ import annotations

import re

from jobs.ci_local.build_file import Build
from jobs.ci_local.errors import InputError

SUBSTITUTION_NAME = re.compile(r"_[A-Z0-9_]+")
REFERENCE = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


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
