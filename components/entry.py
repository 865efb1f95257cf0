"""THE entry point of every published component: the one module of this package a ``component.yaml`` names.

A component YAML is published once and runs for a long time in images of later versions (a KFP user's compiled
pipeline, a template in an Artifact Registry KFP repository, a schedule). Whatever it names must therefore keep its
meaning; nothing else of this package may appear in it, so that every other module can move freely. This is the
model of Google Cloud Pipeline Components' ``v1/custom_job``, whose YAML names a container and one launcher module
with flags, never the code behind it. The contract, version 1 (stable: a change to it is a new version beside it):

* **Lightweight components** (every component but the two below): the function KFP embeds in the YAML keeps the
  component's typed signature (its parameters, input and output artifacts, return value) and docstring, and its
  whole body is::

      arguments = dict(locals())
      from components.entry import v1
      return v1("<component>", arguments)

  :func:`v1` runs the component's work with the arguments kfp's executor passed (parameters as values, artifacts
  as ``kfp.dsl`` artifact objects, output artifacts to fill) and returns its outputs (a NamedTuple's fields by
  name). A YAML compiled by an earlier v1 version may pass fewer arguments (the work's defaults fill in); one passing
  an argument this version does not know is refused in one ``error:`` line, exit 2.

* **Container components** (``custom_training_job``, ``hyperparameter_tuning_job``: Python must be the container's
  own process to receive a cancelled pipeline's SIGTERM)::

      python3 -u -m components.entry <component> --flag value ...

  The flags are the component's inputs (lists and dicts as JSON, booleans as true/false) and its output paths, as
  each component's definition lists them; the exit status is the step's.

Behind the entry point each component's work lives beside its definition, in ``components/<name>/body.py``
(a function named as the component, or ``main(argv)`` for a container component): this module finds it by the
component's name, so the work (and everything it imports) can move without the YAMLs noticing.

YAMLs compiled before this entry point existed (before 2026-11-29) name internal modules directly; they keep
running until the removal date in CHANGELOG.md (``jobs/moved.py``, ``tests/test_published_compat.py``).
"""
from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

import components

#: the version of the contract above; a YAML names the function of its version (:func:`v1`)
VERSION = 1
#: the components that run as a command (``python3 -u -m components.entry NAME ...``), not through kfp's executor
COMMANDS = ("custom_training_job", "hyperparameter_tuning_job")
EXIT_BAD_CALL = 2


def _body(component: str):
    """``components/<component>/body.py`` (the work behind the entry point); an unknown name: one line, exit 2."""
    if component not in components.NAMES:
        print(f"error: component: {component!r} is not a component of this image's version; valid choices: "
              f"{', '.join(components.NAMES)} (republish the YAMLs for this image: python pipelines/run.py components "
              "--image IMAGE --out DIR)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_CALL)
    return importlib.import_module(f"components.{component}.body")


def v1(component: str, arguments: dict[str, Any]) -> Any:
    """Run lightweight component ``component`` with ``arguments`` (its function's ``locals()``, as kfp's executor
    called it); returns what the component returns. See the module docstring for the contract."""
    if component in COMMANDS:
        print(f"error: component: {component} runs as a command (python3 -u -m components.entry {component} "
              "--flag ...), not through kfp's executor", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_CALL)
    work = getattr(_body(component), component)
    known = inspect.signature(work).parameters
    unknown = sorted(set(arguments) - set(known))
    if unknown:
        print(f"error: {component}: this image's version takes no input {', '.join(unknown)}; valid inputs: "
              f"{', '.join(known)} (a YAML of a newer version: republish the YAMLs for this image: python "
              "pipelines/run.py components --image IMAGE --out DIR)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_CALL)
    return work(**arguments)


def main(argv: list[str] | None = None) -> int:
    """``python3 -u -m components.entry <component> --flag value ...``: a container component's step."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print(f"error: component: name one first; valid choices: {', '.join(COMMANDS)} (the other components run "
              "through kfp's executor: components.entry.v1)", file=sys.stderr, flush=True)
        return EXIT_BAD_CALL
    component, flags = argv[0], argv[1:]
    if component in components.NAMES and component not in COMMANDS:
        print(f"error: component: {component} runs through kfp's executor (components.entry.v1), not as a command; "
              f"valid choices: {', '.join(COMMANDS)}", file=sys.stderr, flush=True)
        return EXIT_BAD_CALL
    return _body(component).main(flags)


if __name__ == "__main__":
    raise SystemExit(main())
