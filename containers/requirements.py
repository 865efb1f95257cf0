"""The trainer image's dependency list, read from pyproject.toml alone (standard library only).

    python3 containers/requirements.py pyproject.toml VARIANT [EXTRAS]            # -> requirements, one a line
    python3 containers/requirements.py --no-deps pyproject.toml VARIANT           # -> to install with --no-deps

containers/Dockerfile runs this in its first stage, where only pyproject.toml, this file and the offline
wheels (containers/wheels/) are copied: the dependency layer then changes only when one of them changes,
never with the sources. The list is ``[project] dependencies`` + the variant's extra (``cpu``, ``gpu`` or
``tpu``) + ``EXTRAS`` (comma- or space-separated extra names, e.g. ``beam``), with this package's own
extras (``vertex-tf-pipelines[cpu,beam]``) expanded in place. ``--no-deps`` prints
``[tool.vertex-tf-pipelines.no-deps].VARIANT``: packages whose metadata names a TensorFlow distribution the
variant does not install (tf_keras 2.20 asks for ``tensorflow``; the tpu variant has ``tensorflow-tpu``).

Exit 2 with one line on stderr for an unknown variant or extra.
"""
from __future__ import annotations

import re
import sys
import tomllib

VARIANTS = ("cpu", "gpu", "tpu")
_SELF = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*\[([^\]]*)\]\s*$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(project: dict, variant: str, extras: list[str]) -> list[str]:
    """``project`` is pyproject.toml's ``[project]`` table."""
    own = _canonical(project["name"])
    optional = project.get("optional-dependencies") or {}
    out: list[str] = []
    seen: set[str] = set()

    def add_extra(extra: str) -> None:
        if extra in seen:
            return
        if extra not in optional:
            raise ValueError(f"unknown extra {extra!r}; valid choices: {', '.join(sorted(optional))}")
        seen.add(extra)
        add(optional[extra])

    def add(items: list[str]) -> None:
        for item in items:
            match = _SELF.match(item)
            if match and _canonical(match.group(1)) == own:
                for extra in re.split(r"[,\s]+", match.group(2).strip()):
                    if extra:
                        add_extra(extra)
            elif item not in out:
                out.append(item)

    add(list(project.get("dependencies") or []))
    add_extra(variant)
    for extra in extras:
        add_extra(extra)
    return out


def main(argv: list[str]) -> int:
    no_deps = bool(argv) and argv[0] == "--no-deps"
    args = argv[1:] if no_deps else argv
    if len(args) not in (2, 3):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(args[0], "rb") as f:
        doc = tomllib.load(f)
    variant = args[1]
    if variant not in VARIANTS:
        print(f"error: VARIANT must be one of {', '.join(VARIANTS)}, not {variant!r}", file=sys.stderr)
        return 2
    if no_deps:
        table = ((doc.get("tool") or {}).get("vertex-tf-pipelines") or {}).get("no-deps") or {}
        lines = list(table.get(variant) or [])
    else:
        extras = [e for e in re.split(r"[,\s]+", args[2] if len(args) == 3 else "") if e]
        try:
            lines = requirements(doc["project"], variant, extras)
        except ValueError as exc:
            print(f"error: EXTRAS: {exc}", file=sys.stderr)
            return 2
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
