"""Run the training pipeline: on this machine (default), compiled to YAML, or on Vertex AI.

    python pipelines/run.py                                  # the `local` preset, end to end, on this machine
    python pipelines/run.py --config multiworker --set training.steps=50
    python pipelines/run.py --config JOB --compile-only job.pipeline.yaml    # YAML for Vertex AI Pipelines
    python pipelines/run.py --config JOB --compile-only local.yaml --target local   # YAML for kfp.local
    python pipelines/run.py --project P --region R --pipeline-root gs://B/root   # submit (jobs/cloud/submit.py)
    python pipelines/run.py --runner docker [--image REPO:TAG@sha256:...]   # every step and replica in the image
    python pipelines/run.py validate JOB [gcloud-style flags]     # check a config, print worker pools
    python pipelines/run.py plan --config JOB [--project P] [--region R] [--out plan.json]   # the Vertex request, price, placement
    python pipelines/run.py hardware [--region R] [--accelerator A]  # what the hardware catalog knows
    python pipelines/run.py build [--config JOB] [--image REPO]   # the job's image, pushed, by digest
    python pipelines/run.py upload-template --host https://R-kfp.pkg.dev/P/REPO [--tag T]
    python pipelines/run.py register-model --project P --region R --model-dir gs://B/runs/x/model
    python pipelines/run.py components --image REPO@sha256:... --out DIR   # the component YAMLs for an image
    python pipelines/run.py runs list | compare A B | prune              # past runs under runs/
    python pipelines/run.py logs RUN_FOLDER|JOB [--replica chief-0] [--follow]   # replica logs, local or Vertex
    python pipelines/run.py ci-local --registry 127.0.0.1:5000 ...       # cloudbuild.yaml's steps, here (jobs/ci_local/)

Argument parsing and dispatch only: the local run is ``jobs.local.run.pipeline_run``, the Vertex submission
``jobs.cloud.submit``, image building ``jobs.images.build``; the pipeline is ``pipelines.training_pipeline``.
Exit status: 0 ok, 2 invalid input (one line per problem), 1 the job failed, 75 the output folder is in
use by another run, 130 interrupted (Ctrl-C), 141 the reader of its output went away (``| head``).
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys

if __name__ == "__main__" and __package__ in (None, ""):  # `python pipelines/run.py` from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainers import config as config_lib  # noqa: E402
from trainers.errors import ConfigError  # noqa: E402


def _compile(*args, **kwargs):
    from pipelines.training_pipeline import compile_pipeline

    return compile_pipeline(*args, **kwargs)


def _subcommand(module: str, function: str = "main", compile_pipeline: bool = False):
    def run(argv: list[str]) -> int:
        import importlib

        command = getattr(importlib.import_module(module), function)
        return command(argv, _compile) if compile_pipeline else command(argv)
    return run


#: ``python pipelines/run.py NAME ...`` -> the job side's command (each returns an exit status).
SUBCOMMANDS = {
    "validate": _subcommand("jobs.aiplatform.cli", "validate_main"),
    "plan": _subcommand("jobs.cloud.plan"),
    "hardware": _subcommand("jobs.hardware.listing"),
    "build": _subcommand("jobs.images.build"),
    "upload-template": _subcommand("jobs.cloud.templates", compile_pipeline=True),
    "register-model": _subcommand("jobs.cloud.submit", "register_main"),
    "components": _subcommand("components.cli"),
    "runs": _subcommand("jobs.local.history.runs_cli"),
    "logs": _subcommand("jobs.local.history.logs_cli"),
    "ci-local": _subcommand("jobs.ci_local"),
}


from jobs.cli import invoked_as, shown, survives_closed_pipe  # noqa: E402  (vtp or python pipelines/run.py: usage, --help, resume lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=invoked_as(), description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=shown(__doc__))
    p.add_argument("--config", default="local", help=f"preset ({', '.join(config_lib.presets())}) or YAML file")
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
    p.add_argument("--project", help="submit to Vertex AI Pipelines in this Google Cloud project (jobs/cloud/submit.py)")
    from jobs.cloud import submit

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
    local_run.add_argument("--context", help="--runner docker without a pinned --image: the build context "
                                             "(as run.py build --context)")
    local_run.add_argument("--build-arg", dest="build_args", action="append", default=[], metavar="KEY=VALUE",
                           help="--runner docker without a pinned --image: a Dockerfile ARG (as run.py build)")
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
    from jobs.cloud import submit

    problems = submit.vertex_flag_problems(args)  # a cloud run never silently becomes a local one
    if args.runner == "docker" and (args.project is not None or args.compile_only):
        problems.append("--runner docker: a local run only; --project submits to Vertex and --compile-only writes YAML "
                        "(drop --runner, or drop those flags)")
    from jobs.cli import seconds_problem

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
        import kfp  # noqa: F401
    finally:
        if before is None:
            del os.environ["_KFP_RUNTIME"]
        else:
            os.environ["_KFP_RUNTIME"] = before


@survives_closed_pipe  # `vtp ... | head`: exit 141 quietly (jobs.cli.CLOSED_PIPE); when the command started
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import_kfp_without_its_client()
    if argv[:1] and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    if argv[:1] and not argv[0].startswith("-"):
        near = difflib.get_close_matches(argv[0], list(SUBCOMMANDS), n=1)
        return _fail([f"{argv[0]!r} is not a command{f' (did you mean {near[0]!r}?)' if near else ''}; valid "
                      f"choices: {', '.join(SUBCOMMANDS)}, or none to run the pipeline (see --help)"])
    args = parse_args(argv)
    if args.strict:
        args.overrides.append("validation.strict=true")
    problems = _flag_problems(args)
    if problems:
        return _fail(problems)
    if args.project is not None or args.compile_only or args.verbose:
        return _main(args, argv, None)
    from jobs.local.run.console import Console

    with Console() as console:  # a short console; everything to the run's log file
        return _main(args, argv, console)


def _main(args: argparse.Namespace, argv: list[str], console) -> int:
    from jobs import validate

    try:
        cfg = validate.load(args.config, args.overrides, region=args.region if args.project else None,
                            check_data=not (args.project or args.compile_only),
                            warn=lambda line: print(f"warning: {line}", file=sys.stderr))
    except ConfigError as exc:
        return _fail(exc.problems)
    if args.project:
        from jobs.cloud import submit

        return submit.submit(cfg, args, _compile)
    if args.compile_only:
        from jobs import compiled

        return compiled.compile_only(cfg, args.compile_only, _compile, config_source=args.config, target=args.target,
                                     overwrite=args.overwrite, image=args.image or "")
    from jobs.local.run import pipeline_run
    from pipelines.training_pipeline import build_pipeline

    return pipeline_run.run(cfg, pipeline_run.Options.from_args(args, argv, invoked_as()), build_pipeline, console)


if __name__ == "__main__":
    sys.exit(main())
