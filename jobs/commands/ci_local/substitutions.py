"""Substitutions, as Cloud Build makes them: the built-ins it gives a build (PROJECT_ID, BUILD_ID, COMMIT_SHA,
SHORT_SHA, BRANCH_NAME, TRIGGER_NAME, ...), every substitution's value for this build (the file's defaults <
the trigger's < the command line's; with dynamic substitutions ``$NAME`` in a value resolved against the
built-ins and the others), and ``$NAME`` / ``${NAME}`` expansion of one value (``$$`` a literal ``$``; a
bash-style operation refused)."""
from __future__ import annotations

import re

from jobs.commands.ci_local.build_file import Build
from jobs.commands.ci_local.errors import InputError
from trainers.resource_names import REGION_RE, fits

SUBSTITUTION_NAME = re.compile(r"_[A-Z0-9_]+")
#: Cloud Build's limits on user-defined substitutions ("Substituting variable values", User-defined substitutions:
#: https://cloud.google.com/build/docs/configuring-builds/substitute-variable-values, read 2026-11-27 through stored
#: copies; the key's 100 characters seen quoted from "Build Requests - User-defined substitutions" in the Jenkins
#: google-cloudbuild plugin's help; the 200 parameters and 4,000-byte values as the page states them, not re-seen):
#: a build past them is refused by Cloud Build, so ci-local refuses it before a step runs.
MAX_SUBSTITUTIONS = 200
MAX_KEY_LENGTH = 100
MAX_VALUE_BYTES = 4000


def limit_problems(values: dict[str, str], where: str = "substitution") -> list[str]:
    """User-defined substitutions past Cloud Build's limits (:data:`MAX_SUBSTITUTIONS`, :data:`MAX_KEY_LENGTH`,
    :data:`MAX_VALUE_BYTES`), one line each."""
    out = []
    user = {k: v for k, v in values.items() if k.startswith("_")}
    if len(user) > MAX_SUBSTITUTIONS:
        out.append(f"{len(user)} user-defined substitutions: Cloud Build takes at most {MAX_SUBSTITUTIONS}")
    for key, value in user.items():
        if len(key) > MAX_KEY_LENGTH:
            out.append(f"{where} {key[:40]}...: its name has {len(key)} characters; Cloud Build takes at most "
                       f"{MAX_KEY_LENGTH}")
        size = len(str(value).encode("utf-8"))
        if size > MAX_VALUE_BYTES:
            out.append(f"{where} {key}: its value has {size:,} bytes; Cloud Build takes at most {MAX_VALUE_BYTES:,} "
                       "(put a long value in a file of the source and pass its path)")
    return out


def split_gcloud(items: list[str]) -> list[str]:
    """``--substitution`` values as gcloud's ``--substitutions`` reads them: ``_A=1,_B=2`` is two, and a value
    that needs a comma is written with gcloud's own escaping, ``^;^_A=1,2;_B=3`` (``gcloud topic escaping``). An
    item whose comma-separated pieces are not each ``KEY=VALUE`` is kept whole (:func:`comma_problems` says
    why)."""
    out = []
    for item in items:
        delimiter = ","
        m = re.match(r"\^(.)\^", item)
        if m:
            delimiter, item = m.group(1), item[m.end():]
        pieces = item.split(delimiter)
        if delimiter != "," or all("=" in piece for piece in pieces):
            out.extend(pieces)
        else:
            out.append(item)
    return out


def comma_problems(items: list[str]) -> list[str]:
    """A ``--substitution`` of the comma form that is not a list of ``KEY=VALUE`` (``_L=a,b``): gcloud would
    refuse it, and taking ``a,b`` as the value would build something else than the cloud does."""
    out = []
    for item in items:
        pieces = item.split(",")
        bad = [piece for piece in pieces[1:] if "=" not in piece]
        if not item.startswith("^") and bad:
            out.append(f"--substitution {item!r}: gcloud reads ',' as between two substitutions, and {bad[0]!r} is "
                       f"no KEY=VALUE; to keep the comma in the value write it with gcloud's escaping, '^;^{item}'")
    return out
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
    past = limit_problems(raw)
    if past:
        raise InputError(past[0])
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
    past = limit_problems(resolved)
    if past:
        raise InputError(past[0])
    return {**builtins, **resolved}


#: the substitutions of this project's cloudbuild.yaml that name a resource, and the form each must have
#: (``trainers.resource_names``): a step builds host names and URLs from them
RESOURCE_SUBSTITUTIONS = {"_REGION": (REGION_RE, "a region name such as us-central1")}


def substitution_form_problems(subs: dict[str, str]) -> list[str]:
    """One line per resource-naming substitution whose value is not of its form (empty: not used, left alone)."""
    return [f"substitution {name}: {subs[name][:120]!r} is not {what}" for name, (form, what) in
            RESOURCE_SUBSTITUTIONS.items() if subs.get(name) and not fits(form, subs[name])]


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
