"""``vtp`` (``python pipelines/run.py``): the pipeline command and the dispatch of the subcommands.

With no subcommand, ``vtp`` runs the training pipeline: on this machine (``jobs.local.run.pipeline_run``), compiled
to YAML (``jobs.steps.compiled``) or submitted to Vertex AI Pipelines (``jobs.commands.submit``), the job validated first
(``jobs.rules.validate.load``). ``vtp NAME ...`` runs the subcommand the entry point's table names (a module of the
job side, imported when it is run: each loads only what it needs). The pipeline itself is on the pipelines side:
``pipelines/run.py`` passes its compile and build functions in (``Pipeline``), and its docstring is the usage.
Exit status: 0 ok, 2 invalid input (one line per problem), 1 the job failed, 75 the output folder is in use by
another run, 130 interrupted (Ctrl-C), 141 the reader of its output went away (``| head``).
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import shlex
import sys
from typing import Callable, Mapping, NamedTuple

from jobs.steps import calls, compiled
from jobs.rules import validate
from jobs.rules.command_line import invoked_as, seconds_problem, shown
from jobs.commands import submit
from jobs.local.run import pipeline_run
from jobs.local.run.console import Console
from jobfile.config_files import presets
from jobfile.errors import ConfigError


class Pipeline(NamedTuple):
    """What the pipelines side gives the command: its usage text, ``compile_pipeline(cfg, path, ...)`` and
    ``build_pipeline(cfg, target, base_image)`` (``pipelines.training_pipeline``)."""

    usage: str
    compile_pipeline: Callable
    build_pipeline: Callable


class Subcommand(NamedTuple):
    """``vtp NAME ...``: the module and function that run it; ``compiles``: it is given the compile function."""

    module: str
    function: str = "main"
    compiles: bool = False

    def run(self, argv: list[str], pipeline: Pipeline) -> int:
        command = getattr(importlib.import_module(self.module), self.function)
        return command(argv, pipeline.compile_pipeline) if self.compiles else command(argv)


def main(argv: list[str], subcommands: Mapping[str, Subcommand], pipeline: Pipeline) -> int:
    """``vtp ARGV``: a subcommand, or the pipeline command; returns the exit status."""
    import_kfp_without_its_client()
    if argv[:1] and argv[0] in subcommands:
        return subcommands[argv[0]].run(argv[1:], pipeline)
    if argv[:1] and not argv[0].startswith("-"):
        return _fail([_not_a_command(argv, subcommands)])
    args = parse_args(argv, pipeline.usage)
    if args.strict:
        args.overrides.append("validation.strict=true")
    problems = _flag_problems(args)
    if problems:
        return _fail(problems)
    if args.project is not None or args.compile_only or args.verbose:
        return _run(args, argv, pipeline, None)
    with Console() as console:  # a short console; everything to the run's log file
        return _run(args, argv, pipeline, console)


#: what users type for "run the pipeline", which takes no command name
RUN_GUESSES = ("run", "train", "start", "pipeline")


def _not_a_command(argv: list[str], subcommands: Mapping[str, Subcommand]) -> str:
    """The one line for ``vtp WORD ...`` where WORD names no command: a job file given where the pipeline takes
    ``--config FILE``, a word that means "run it", or a typo; each says the command that does what was meant."""
    word, rest = argv[0], argv[1:]
    if word in RUN_GUESSES or os.path.isfile(word) or word.endswith((".yaml", ".yml")):
        if word in RUN_GUESSES:
            meant = shlex.join([invoked_as(), *rest]) if rest else f"{invoked_as()} --config JOB"
            why = f"{word!r} is not a command: the pipeline runs with no command name"
        else:
            meant = shlex.join([invoked_as(), "--config", word, *rest])
            why = f"{word!r} is a job file, not a command: the pipeline takes it as --config"
        return f"{why}: {meant} (see {invoked_as()} --help)"
    near = difflib.get_close_matches(word, list(subcommands), n=1)
    return (f"{word!r} is not a command{f' (did you mean {near[0]!r}?)' if near else ''}; valid choices: "
            f"{', '.join(subcommands)}, or none to run the pipeline (see --help)")


def _run(args: argparse.Namespace, argv: list[str], pipeline: Pipeline, console) -> int:
    try:
        cfg = validate.load(args.config, args.overrides, region=args.region if args.project else None,
                            check_data=not (args.project or args.compile_only),
                            warn=lambda line: print(f"warning: {line}", file=sys.stderr))
    except ConfigError as exc:
        return _fail(exc.problems)
    if args.project:
        return submit.submit(cfg, args, pipeline.compile_pipeline)
    if args.compile_only:
        return compiled.compile_only(cfg, args.compile_only, pipeline.compile_pipeline, config_source=args.config,
                                     target=args.target, overwrite=args.overwrite, image=args.image or "")
    opts = pipeline_run.Options.from_args(args, argv, invoked_as())
    opts.cancelled = calls.notify_cancelled  # Ctrl-C ends the run before its exit handler could tell its end
    return pipeline_run.run(cfg, opts, pipeline.build_pipeline, console)


#: the widest the first column of ``--help``'s two-column lines gets
COLUMN_MOST = 46


def _aligned(text: str) -> str:
    """``text`` with each block of two-column lines (``  command   what it does``) aligned again: spelling the command
    as the user typed it (``vtp`` or ``python pipelines/run.py``) changes the first column's width."""
    rows = [re.match(r"^(  \S.*?)\s{3,}(\S.*)$", line) for line in text.split("\n")]
    out, block = [], []

    def flush() -> None:  # a first column wider than COLUMN_MOST puts its second on the next line
        width = min(COLUMN_MOST, max((len(m.group(1)) for m in block), default=0))
        for m in block:
            left, right = m.group(1), m.group(2)
            out.extend([left, f"{'':<{width}}   {right}"] if len(left) > width else [f"{left:<{width}}   {right}"])
        block.clear()

    for line, m in zip(text.split("\n"), rows):
        if m:
            block.append(m)
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


#: the end of ``--help``
EXIT_STATUS = ("exit status: 0 ok, 2 invalid input (one line per problem), 1 the job failed, 75 the output folder is "
               "in use by another run,\n130 interrupted (Ctrl-C), 141 the reader of its output went away (| head).")


def parse_args(argv: list[str], usage: str) -> argparse.Namespace:
    """The pipeline command's arguments; ``usage`` (the entry point's plain text) opens its ``--help``: what a user
    can do, before the options."""
    p = argparse.ArgumentParser(prog=invoked_as(), usage="%(prog)s [--config JOB] [--set KEY=VALUE] [options]\n"
                                                         "       %(prog)s COMMAND ... (see below)",
                                description=_aligned(shown(usage)), formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=EXIT_STATUS)
    p.add_argument("--config", default="local", help=f"preset ({', '.join(presets())}) or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set training.steps=50 (repeatable)")
    p.add_argument("--strict", action="store_true",
                   help="refuse what the hardware catalog does not know (as validation.strict: true)")
    p.add_argument("--image", help="the image of the pipeline's components (default: container.image_uri); "
                                    "--runner docker: the image everything runs in, REPO:TAG@sha256:... as is, "
                                    "a bare REPO: built into it first")
    compiling = p.add_argument_group("compiling (the YAML is checked as submit checks it unless --target local)")
    compiling.add_argument("--compile-only", metavar="OUT.yaml", help="compile the pipeline to YAML and stop")
    compiling.add_argument("--target", choices=("vertex", "local"),
                           help="vertex (default): the Vertex AI pipeline, which creates the CustomJob; local: the "
                                "pipeline kfp.local runs on this machine")
    compiling.add_argument("--overwrite", action="store_true",
                           help="let --compile-only replace a file that is not a compiled pipeline")
    p.add_argument("--project", help="submit to Vertex AI Pipelines in this Google Cloud project (jobs/commands/submit.py)")
    submit.add_arguments(p)
    local_run = p.add_argument_group("local runs (one run per output folder; see jobs/local/run/)")
    local_run.add_argument("--verbose", action="store_true",
                           help="stream every task's and replica's full output (default: a short console; "
                                "the full log goes to <base>/logs/run-*.log)")
    local_run.add_argument("--fresh", action="store_true",
                           help="start again from step 0: the existing output folder is kept, renamed "
                                "<base>.<timestamp>")
    local_run.add_argument("--runner", choices=("process", "docker"), default="process",
                           help="process: every step and replica a process here (fast iteration); docker: every "
                                "step and replica a container of the job's image (the last check before Vertex)")
    local_run.add_argument("--context", help=shown("--runner docker without a pinned --image: the build context "
                                                   "(as python pipelines/run.py build --context)"))
    local_run.add_argument("--build-arg", dest="build_args", action="append", default=[], metavar="KEY=VALUE",
                           help=shown("--runner docker without a pinned --image: a Dockerfile ARG (as python "
                                      "pipelines/run.py build)"))
    local_run.add_argument("--wait", nargs="?", type=float, const=24 * 3600.0, default=0.0, metavar="SECONDS",
                           help="if another run is using the output folder, wait for it (default: refuse at once)")
    return p.parse_args(argv)


#: ``--wait``'s ceiling: a week, Vertex's default job timeout; a run another holds longer is not one to wait for.
WAIT_MAX_S = 7 * 24 * 3600.0


def _fail(problems) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2


def _flag_problems(args: argparse.Namespace) -> list:
    problems = submit.vertex_flag_problems(args)  # a cloud run never silently becomes a local one
    if args.runner == "docker" and (args.project is not None or args.compile_only):
        problems.append("--runner docker: a local run only; --project submits to Vertex and --compile-only writes YAML "
                        "(drop --runner, or drop those flags)")
    waited = seconds_problem("--wait", getattr(args, "wait", None), WAIT_MAX_S, zero=True, example="600")
    problems += [waited] if waited else []
    for flag, given in (("--target", args.target is not None), ("--overwrite", args.overwrite)):
        if given and not args.compile_only:
            problems.append(f"{flag}: only with --compile-only OUT.yaml; add it or remove {flag}")
    args.target = args.target or "vertex"
    return problems


def import_kfp_without_its_client() -> None:
    """Import kfp without ``kfp.client``: kfp's ``__init__`` imports its API client (``kfp.client`` ->
    kubernetes, requests, google-auth; ~0.5 s of a fresh process, most of ``import kfp``) unless
    ``_KFP_RUNTIME=true``, the switch kfp's own task command sets for the same reason. No command here uses
    ``kfp.Client`` (``kfp.dsl``, ``kfp.local``, ``kfp.compiler`` and ``kfp.registry`` import on their own). The
    switch is on only while kfp's ``__init__`` runs (it is read there alone), so no child process inherits it.
    A no-op where kfp is already imported."""
    if "kfp" in sys.modules:
        return
    before = os.environ.get("_KFP_RUNTIME")
    os.environ["_KFP_RUNTIME"] = "true"
    try:
        import kfp  # noqa: F401  (kfp's __init__ with the switch on is the point)
    finally:
        if before is None:
            del os.environ["_KFP_RUNTIME"]
        else:
            os.environ["_KFP_RUNTIME"] = before
