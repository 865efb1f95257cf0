"""The command: ``vtp ci-local`` and ``python -m jobs.commands.ci_local`` (what it does: the package's docstring). Its
flags, the checks made before anything starts (every refusal one ``error:`` line, exit 2), the order of the
run (the source, substitutions, the workspace, the steps' environment, the steps, the artifacts), the lines
said before the steps start (what stands in for what) and at the end (one line per step, the artifacts), and
the exit status (0 success, 1 failure, 2 invalid input, 130 interrupted)."""
from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import sys
import time
import uuid
from pathlib import Path

from jobs.commands.ci_local.artifacts import artifact_lines
from jobs.commands.ci_local.build_file import load_build, load_trigger
from jobs.commands.ci_local.environment import env_values, prepare_environment, python_version_note, reuse_packages, venv_steps
from jobs.commands.ci_local.errors import InputError
from jobs.commands.ci_local.runner import Runner, dependencies
from jobs.commands.ci_local.source import checkout_root, fill_workspace, head_commit, prepare_rundir, rundir_problem
from jobs.commands.ci_local.standins import (Local, cloud_problems, docker_problem, image_problems, install_small_images,
                                    link_wheels, local_problems)
from jobs.commands.ci_local.substitutions import (builtin_substitutions, comma_problems, resolve_substitutions, split_gcloud,
                                         substitution_form_problems)
from jobs.rules.command_line import plain, seconds_problem, shown
from jobs.rules.preflight import project_problems

DEFAULT_PROJECT = "local-project"
#: ``--timeout``'s ceiling: Cloud Build runs a build for at most 24 hours (its build ``timeout``'s upper bound, as
#: Cloud Build's build configuration overview states it; not re-read here).
BUILD_TIMEOUT_MAX_S = 24 * 3600.0


def _package_doc() -> str:
    """The package's docstring (the command's description), read without importing the package again."""
    return sys.modules[__package__].__doc__ or ""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py ci-local"), description=plain(_package_doc().split("\n\n")[0]),
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
    p.add_argument("--substitution", "--substitutions", dest="substitution", action="append", default=[],
                   metavar="_KEY=VALUE", help="override a substitution (repeatable), as gcloud builds submit "
                                              "--substitutions: _A=1,_B=2 is two ('^;^_A=1,2;_B=3' keeps a comma)")
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


def flag_problems(args: argparse.Namespace) -> list[str]:
    """The flags' own forms, before anything is read or started: ``--project`` a project id (empty or malformed is
    refused: PROJECT_ID reaches every step), ``--timeout`` a finite number of seconds, ``--substitution``'s comma
    form as gcloud reads it."""
    out = [str(p) for p in project_problems("--project", args.project)]
    timeout = seconds_problem("--timeout", args.timeout, BUILD_TIMEOUT_MAX_S, example="1800")
    return out + ([timeout] if timeout else []) + comma_problems(args.substitution)


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
    root = checkout_root(Path.cwd())
    config = (args.config or root / "cloudbuild.yaml").resolve()
    build = load_build(config)
    if args.timeout is not None and not flag_problems(args) and args.timeout != build.timeout_s:
        out(f"warning: --timeout {args.timeout:g} s wins over {config.name}'s timeout ({build.timeout_s:g} s)")
    root = checkout_root(config.parent)
    trigger_doc = None
    if args.trigger is not None and not args.trigger.is_file():  # named: never taken for "no trigger file"
        raise InputError(f"--trigger: {args.trigger} is not a file; give the trigger file (cloudbuild-trigger.yaml), "
                         "or leave --trigger out")
    if args.mode == "trigger":
        trigger_path = args.trigger or config.parent / "cloudbuild-trigger.yaml"
        trigger_doc = load_trigger(trigger_path) if trigger_path.is_file() else {}
    source = args.source or ("commit" if args.mode == "trigger" else "worktree")
    local = Local(args.registry, args.kfp_host, args.vertex_endpoint)
    problems, given = _input_problems(args, local)
    if problems:
        raise InputError(problems[0])

    # the commit a trigger would build
    commit = head_commit(root) if args.mode == "trigger" or source == "commit" else None
    wanted = ((trigger_doc or {}).get("github") or {}).get("push", {}).get("branch", "")
    if args.mode == "trigger" and wanted and not re.search(wanted, commit["branch"]):
        out(f"warning: the trigger runs on pushes to branches matching {wanted}; {commit['branch'] or 'a detached HEAD'} "
            "would not start it (built anyway)")
    build_id = str(uuid.uuid4())
    builtins = builtin_substitutions(args.project, build_id, commit if args.mode == "trigger" else None, trigger_doc,
                                     config.relative_to(root).as_posix() if config.is_relative_to(root) else config.name)
    trigger_subs = (trigger_doc or {}).get("substitutions") or {} if args.mode == "trigger" else None
    subs = resolve_substitutions(build, builtins, trigger_subs, {**local.substitutions(), **given})
    for name in given:  # ALLOW_LOOSE takes any name: one the build does not define is most often a typo
        if name not in build.substitutions and name not in (trigger_subs or {}):
            near = difflib.get_close_matches(name, list(build.substitutions), n=1)
            out(f"warning: --substitution {name}: {config.name} defines no such substitution (substitutionOption "
                f"ALLOW_LOOSE takes it; only a step that names it gets it)"
                + (f"; did you mean {near[0]}?" if near else ""))
    formed = substitution_form_problems(subs)
    if formed:
        raise InputError(formed[0])
    env_values(build, subs)  # a step's env is expanded as it starts: a bad value is refused now, not in its thread
    docker_host = args.docker_host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    problems = cloud_problems(build, subs, local) + _tool_problems(args, build, config, docker_host)
    if problems:
        raise InputError(problems[0])

    # the workspace: fresh, from the source alone
    rundir = (args.workspace or root / "build" / "ci-local").resolve()
    prepare_rundir(rundir)
    workspace = rundir / "workspace"
    source_line = fill_workspace(root, workspace, source, commit, out)
    if args.small_images:
        install_small_images(workspace)
    if args.wheels:
        link_wheels(workspace, args.wheels)

    # what every step gets
    environment = prepare_environment(rundir, build, subs, build_id, docker_host, local.registry, args.tests)
    if args.install == "reuse":
        reuse_packages(venv_steps(build.steps))

    # what it substitutes, said before anything runs
    out(_heading(args, config, build, trigger_doc, commit, build_id))
    rows = [("source", source_line), ("/workspace", str(workspace))]
    rows += _stand_in_rows(args, build, subs, local, docker_host, environment)
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out(f"  {key:<{width}}  {value}")
    shown = {k: v for k, v in subs.items() if k.startswith("_") or v}
    out("  substitutions: " + " ".join(f"{k}={v!r}" if (" " in v or not v) else f"{k}={v}" for k, v in shown.items()))
    return _run_steps(args, build, subs, local, workspace, rundir, environment, started, out)


def _heading(args: argparse.Namespace, config: Path, build, trigger_doc: dict | None, commit: dict | None,
             build_id: str) -> str:
    """The first line said: the build file, its steps, as what it runs (the trigger's commit and branch), the id."""
    return (f"ci-local: {config.name}, {len(build.steps)} steps, "
            + (f"as the trigger {trigger_doc.get('name') or '(unnamed)'} runs it (commit {commit['sha'][:7]}, branch "
               f"{commit['branch'] or '(detached)'})" if args.mode == "trigger" else "as gcloud builds submit runs it")
            + f", build {build_id}")


def _input_problems(args: argparse.Namespace, local: Local) -> tuple[list[str], dict[str, str]]:
    """What is wrong with the flags and the local stand-ins, before the source is read; and the substitutions
    given with ``--substitution`` (``{_KEY: VALUE}``)."""
    problems = flag_problems(args) + local_problems(local)
    given = {}
    for item in split_gcloud(args.substitution):
        key, sep, value = item.partition("=")
        if not sep:
            problems.append(f"--substitution {item!r}: give _KEY=VALUE (e.g. _REGION=europe-west4)")
        given[key] = value
    if args.timeout is not None and args.timeout <= 0:
        problems.append(f"--timeout {args.timeout:g}: give a positive number of seconds")
    problems.extend(image_problems(args.small_images, args.wheels))
    if args.workspace is not None and rundir_problem(args.workspace.resolve()):
        problems.append(rundir_problem(args.workspace.resolve()))
    return problems, given


def _tool_problems(args: argparse.Namespace, build, config: Path, docker_host: str) -> list[str]:
    """What the build's steps need of this machine and is missing: the docker CLI and its engine for the docker
    steps, a ``python -m venv .venv`` line for ``--install reuse``."""
    problems = []
    if any(s.is_docker for s in build.steps):
        if not shutil.which("docker"):
            problems.append("the docker steps need the docker CLI on PATH (apt-get install docker.io)")
        else:
            problems.extend(p for p in [docker_problem(docker_host)] if p)
    if args.install == "reuse" and not venv_steps(build.steps):
        problems.append(f"--install reuse: no step of {config.name} has a `python -m venv .venv` line to make over "
                        "this interpreter's packages; use --install fresh")
    return problems


def _stand_in_rows(args: argparse.Namespace, build, subs: dict[str, str], local: Local, docker_host: str,
                   environment) -> list[tuple[str, str]]:
    """The lines said before the steps start: the order of the steps, what stands in for each builder image
    and cloud service, the credentials, the install, and what the flags replace."""
    deps = dependencies(build.steps)
    sequential = all(deps[s.index] == set(range(s.index)) for s in build.steps)
    rows = [("order", "one after another (no step has waitFor)" if sequential else "by waitFor, concurrent where allowed")]
    for image in sorted({s.name for s in build.steps}):
        if any(s.name == image and s.is_python for s in build.steps):
            rows.append((image, f"this interpreter, Python {sys.version.split()[0]} ({sys.executable})"
                                f"{python_version_note(image)}"))
        elif any(s.name == image and s.is_docker for s in build.steps):
            rows.append((image, f"the docker CLI ({shutil.which('docker')}) on the engine {docker_host}, "
                                f"DOCKER_BUILDKIT={environment.base['DOCKER_BUILDKIT']}"))
        else:
            rows.append((image, "this machine's shell and PATH (no such container here)"))
    rows.append(("Artifact Registry (Docker)", f"{local.registry}: a `docker` on the docker steps' PATH pushes "
                 f"{subs.get('_REGION', 'REGION')}-docker.pkg.dev/PATH as {local.registry}/PATH"
                 if any(s.is_docker for s in build.steps) else "not contacted (no docker step)"))
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
    return rows


def _run_steps(args: argparse.Namespace, build, subs: dict[str, str], local: Local, workspace: Path, rundir: Path,
               environment, started: float, out) -> int:
    """Run the steps within the build's timeout; say each step's outcome, the build's, and its artifacts.
    Returns the exit status (0 success, 1 failure)."""
    deadline = time.monotonic() + (args.timeout or build.timeout_s)
    runner = Runner(build.steps, workspace, rundir, environment.for_step, deadline, args.verbose, out)
    try:
        ok = runner.run()
    finally:
        out("steps:")
        for s in build.steps:
            out(f"  {Runner.line(runner.outcomes[s.index])}")
    out(f"build {'SUCCESS' if ok else 'FAILURE'} in {time.monotonic() - started:.1f} s (logs: {rundir / 'logs'})")
    if ok:
        for line in artifact_lines(build, subs, workspace, local.registry):
            out(line)
    return 0 if ok else 1
