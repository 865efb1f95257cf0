"""Run the training pipeline.

    python pipelines/run.py                                  # the `local` preset, end to end, on this machine
    python pipelines/run.py --config multiworker --set training.steps=50
    python pipelines/run.py --config gpu-1x4 --compile-only gpu-1x4.yaml   # YAML for Vertex AI Pipelines
    python pipelines/run.py validate config.yaml [gcloud-style flags]     # check a config, print worker pools
    python pipelines/run.py --project P --region R --pipeline-root gs://B/root   # submit to Vertex (jobs/cloud/submit.py)
    python pipelines/run.py upload-template --host https://R-kfp.pkg.dev/P/REPO [--tag T]   # jobs/cloud/templates.py
    python pipelines/run.py register-model --project P --region R --model-dir gs://B/runs/x/model
    python pipelines/run.py components --image REPO@sha256:... --out DIR   # the component YAMLs for an image
    python pipelines/run.py --runner docker [--image REPO:TAG@sha256:...]   # every step and replica in the image

Local runs go through kfp.local: by default (``--runner process``) SubprocessRunner, every step a process
in this environment; with ``--runner docker`` DockerRunner, every step a container of the job's image and
every replica a container too (``jobs.local.containers``; without ``--image`` the image is built first, as
``run.py build`` does, against the engine at ``DOCKER_HOST``). Either way the training step's worker pools
are started on loopback by ``jobs.local.launcher``.

A rerun of a finished job says so and exits 0; ``--fresh`` starts again (the old folder is kept); an
unfinished job resumes from its last checkpoint; a folder in use by another live run is refused
(``--wait`` waits); Ctrl-C checkpoints, stops every process and prints the command that resumes.
Exit status: 0 ok, 2 invalid config (one line per problem), 1 the job failed, 75 the output folder is in
use by another run, 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# kfp.local runs each task in a new Python process: let them import this repository too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from trainers import config as config_lib  # noqa: E402
from trainers.errors import ConfigError  # noqa: E402


#: ``python pipelines/run.py NAME ...`` -> ``module:function(argv)`` on the job side (each returns an exit status).
SUBCOMMANDS = {
    "validate": "jobs.hardware.cli:validate_main",
    "build": "jobs.cloud.build:main",
    "upload-template": "jobs.cloud.templates:main",
    "register-model": "jobs.cloud.submit:register_main",
    "components": "components.cli:main",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python pipelines/run.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", default="local", help=f"preset ({', '.join(config_lib.presets())}) or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set training.steps=50 (repeatable)")
    p.add_argument("--compile-only", metavar="OUT.yaml", help="compile the pipeline to YAML and stop")
    p.add_argument("--project", help="submit to Vertex AI Pipelines in this Google Cloud project (jobs/cloud/submit.py)")
    p.add_argument("--image", help="the image of the pipeline's components (default: container.image_uri); "
                                    "--runner docker: the image everything runs in, REPO:TAG@sha256:... as is, "
                                    "a bare REPO: built into it first")
    from jobs.cloud import submit

    submit.add_arguments(p)
    local_run = p.add_argument_group("local runs (one run per output folder; see jobs/local/runs.py)")
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


def _fail(exc: ConfigError) -> int:
    for problem in exc.problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2


def _resume_command(argv: list[str]) -> str:
    import shlex

    return shlex.join(["python", "pipelines/run.py"] + [a for a in argv if a != "--fresh"])


def _wait_for_children(timeout_s: float = 60.0) -> None:
    """After Ctrl-C: kfp.local's task processes got the same SIGINT and are stopping their replicas
    (checkpoint at the next step); reap them so nothing outlives this command."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.1)


def run_locally(cfg: config_lib.JobConfig, args: argparse.Namespace, argv: list[str], console=None,
                image: str = "") -> int:
    from jobs.local import runs

    base = config_lib.resolved_base_dir(cfg)
    try:
        lock = runs.RunLock(base).acquire(wait_s=args.wait)
    except runs.FolderBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return runs.EXIT_BUSY
    try:
        if args.fresh:
            kept = runs.archive(base)
            if kept:
                print(f"--fresh: kept the previous run in {kept}; starting from step 0 in {base}")
                lock.release()
                lock = runs.RunLock(base).acquire(wait_s=args.wait)
        else:
            record = runs.finished_record(base, cfg.to_json())
            if record:
                print(f"job {cfg.name} in {base} is already complete (finished {record.get('finished')}); "
                      "nothing to do. Its summary:")
                print("\n".join(runs.summary_lines(record.get("summary") or {})))
                print(f"to train again from step 0 (this run is kept): {_resume_command(argv)} --fresh")
                return 0
        if console is not None:
            console.set_log_file(os.path.join(base, "logs", time.strftime("run-%Y%m%d-%H%M%S.log")))
        if image:
            return _run_in_containers(cfg, base, argv, console, image)
        return _run_pipeline(cfg, base, argv, console)
    except runs.FolderBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return runs.EXIT_BUSY
    finally:
        lock.release()


def _run_in_containers(cfg: config_lib.JobConfig, base: str, argv: list[str], console, image: str) -> int:
    """``--runner docker``: the probe first (one line per thing the image lacks), then the pipeline with
    every step and replica in ``image``; every container of the run removed on every exit path."""
    from jobs.local import containers

    try:
        session = containers.Session(image, base, containers.host_folders(cfg))
    except containers.ContainerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            problems = session.probe(cfg)
        except KeyboardInterrupt:
            print("\ninterrupted before the pipeline started; nothing ran", file=sys.stderr)
            return 130
        if problems:
            print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
            return 2
        print(f"runner docker: every step and replica in {session.image} (engine "
              f"{os.environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'})", flush=True)
        return _run_pipeline(cfg, base, argv, console, session)
    finally:
        session.close()


def _run_pipeline(cfg: config_lib.JobConfig, base: str, argv: list[str], console=None, session=None) -> int:
    import contextlib

    from kfp import local

    from jobs import stages
    from jobs.local import runs
    from pipelines.training_pipeline import build_pipeline

    import warnings

    # kfp.local's "non-Python base image" and "display_name has no effect locally" are by design here: the
    # tasks run in this environment, which has the image's packages (pip install -e .).
    warnings.filterwarnings("ignore", module=r"kfp\.local")
    runner = session.kfp_runner() if session else local.SubprocessRunner(use_venv=False)
    local.init(runner=runner, pipeline_root=os.path.join(base, "pipeline_root"))
    pipeline = build_pipeline(cfg, base_image=session.image if session else None)
    started = time.monotonic()
    try:
        with runs.StepTimer() as timer, (session.engine_timeout() if session else contextlib.nullcontext()):
            pipeline(config_json=cfg.to_json(), target="local")
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        if session:  # the step containers never saw the terminal's Ctrl-C
            session.interrupt()
        _wait_for_children()
        checkpoints = stages.output_dirs(cfg)["checkpoints"]
        last = runs.last_checkpoint(checkpoints)
        if last:
            where = f"at step {last[1]}; last checkpoint {last[0]}"
        elif cfg.user_trainer:
            where = f"(your trainer's checkpoints, if it wrote any, are in {checkpoints})"
        else:
            where = "before the first checkpoint"
        print(f"\ninterrupted {where}; resume with: {_resume_command(argv)}", file=sys.stderr)
        return 130
    except RuntimeError as exc:  # kfp.local: a task failed; its log is above
        print(f"\nerror: the pipeline failed: {exc}", file=sys.stderr)
        return 1
    summary = runs.run_summary(cfg, time.monotonic() - started, log_file=console.log_path if console else None,
                               steps=timer.steps)
    summary["runner"] = {"name": "docker", "image": session.image} if session else {"name": "process"}
    runs.write_record(base, cfg.to_json(), summary)
    print("\n".join(runs.summary_lines(summary)))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in SUBCOMMANDS:
        import importlib

        module, function = SUBCOMMANDS[argv[0]].split(":")
        return getattr(importlib.import_module(module), function)(argv[1:])
    args = parse_args(argv)
    from jobs.cloud import submit

    flag_problems = submit.vertex_flag_problems(args)  # a cloud run never silently becomes a local one
    if flag_problems:
        return _fail(ConfigError(flag_problems))
    if args.runner == "docker" and (args.project is not None or args.compile_only):
        return _fail(ConfigError(["--runner docker: a local run only; --project submits to Vertex and --compile-only "
                                  "writes YAML (drop --runner, or drop those flags)"]))
    if args.project is not None or args.compile_only or args.verbose:
        return _main(args, argv, None)
    from jobs.local.console import Console

    with Console() as console:  # a short console; everything to the run's log file
        return _main(args, argv, console)


def _main(args: argparse.Namespace, argv: list[str], console) -> int:
    from jobs.cloud import submit

    try:
        from jobs import validate

        # a Vertex job runs in --region: its machines and accelerators are checked there (a malformed
        # --region is reported by the submit preflight)
        from jobs.hardware.rules import REGION_RE

        region = [f"topology.region={args.region}"] if args.project and REGION_RE.match(args.region or "") else []
        doc = config_lib.load_document(args.config, args.overrides + region)
        cfg, report = validate.validate_document(doc, check_data=not (args.compile_only or args.project))
        if report.warnings:
            print("\n".join(f"warning: {w}" for w in report.warnings), file=sys.stderr)
        if report.errors:
            raise ConfigError(report.errors)
    except ConfigError as exc:
        return _fail(exc)
    if args.project:
        return submit.submit(cfg, args)
    if args.compile_only:
        from pipelines.training_pipeline import compile_pipeline

        out = compile_pipeline(cfg, args.compile_only, base_image=args.image)
        print(f"compiled pipeline {cfg.name!r} to {out}")
        print(json.dumps({"parameters": {"config_json": "(the config)", "target": "local | vertex",
                                         "location": cfg.topology.region,
                                         "build_context_uri": "(optional) gs://B/PATH/ctx-<hash>.tgz: build the "
                                                              "image with Cloud Build first"}}, indent=1))
        return 0
    note = validate.running_locally_note(cfg)
    if note:
        print(f"note: {note}")
    image = ""
    if args.runner == "docker":
        from jobs.local import containers

        cfg = containers.for_containers(cfg)  # absolute paths: the containers see them at the same place
        image = args.image if containers.is_pinned(args.image) else _build_image(args)
        if not image:
            return 1
        from jobs import stages

        cfg = stages.with_image(cfg, image)
    return run_locally(cfg, args, argv, console, image=image)


def _build_image(args: argparse.Namespace) -> str:
    """``run.py build`` for this job (``--image REPO`` the repository, else the config's), echoing its lines;
    the image reference it printed last, or "" when it failed (its error line is printed)."""
    import contextlib
    import io

    from jobs.cloud import build

    argv = ["--config", args.config, *[x for o in args.overrides for x in ("--set", o)],
            *(["--image", args.image] if args.image else []), *(["--context", args.context] if args.context else []),
            *[x for b in args.build_args for x in ("--build-arg", b)]]
    print("runner docker: building the job's image (python pipelines/run.py build " + " ".join(argv) + ")", flush=True)
    shown, seen = sys.stdout, io.StringIO()

    class Tee(io.TextIOBase):  # the build's progress as it comes, and its last line kept
        def write(self, text: str) -> int:
            seen.write(text)
            shown.write(text)
            shown.flush()
            return len(text)

    with contextlib.redirect_stdout(Tee()):
        status = build.main(argv)
    lines = seen.getvalue().splitlines()
    return lines[-1].strip() if status == 0 and lines else ""


if __name__ == "__main__":
    sys.exit(main())
