"""One run of the pipeline on this machine: ``python pipelines/run.py`` without ``--project``.

Through ``kfp.local``: by default (``--runner process``) ``SubprocessRunner``, every step a process in this
environment; with ``--runner docker`` ``DockerRunner``, every step a container of the job's image and every
replica a container too (``jobs.local.launch.containers``; without a pinned ``--image`` the image is built first
by ``jobs.images.build``). Either way the training step's worker pools are started on loopback by
``jobs.local.launch``.

What this module owns, in order: a ``gs://`` path refused before anything runs (:func:`cloud_path_problems`:
no folder made), the folder's lock and its record (``jobs.local.run.folder``: a rerun of a finished job says so
and exits 0; a run of another config or trainer code is refused before its first step, nothing in the folder
written; ``--fresh`` starts again, keeping the old folder; an unfinished job resumes from its last
checkpoint; a folder in use by another live run is refused, or waited for), the
run's log file, the docker session (probe first, every container removed on every exit path), Ctrl-C
(every step and replica stopped the preemption way, every child reaped, one line naming the checkpoint and
the command that resumes), and the run's record and summary. The pipeline itself comes from the caller
(``pipelines/``: this package never imports it).

Exit status: 0 ok, 1 the job failed, 2 invalid input (one line per problem), 75 the output folder is in use
by another run, 130 interrupted (Ctrl-C).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import signal
import sys
import time
import warnings
from typing import Callable

from jobs.local.run import step_table
from jobs.rules import validate
from jobs.rules.notify_section import local_note
from jobs.images import build
from jobs.local.launch import docker_session
from jobs.local.launch.containers import ContainerError
from jobs.local.process import lifeline
from jobs.local.run.folder import archive, check_folder, last_checkpoint, making, write_making, write_record
from jobs.local.run.lock import EXIT_BUSY, FolderBusy, NotThisJob, RunLock
from jobs.local.run.step_timer import StepTimer
from jobs.local.run.summary import run_summary, summary_lines
from jobs.rules.replica_env import PROJECT_ROOT
from jobfile import config as config_lib
from trainers.cluster import output_dirs
from jobfile.errors import problem


@dataclasses.dataclass
class Options:
    """How to run (``run.py``'s local flags)."""

    argv: list[str]                       # the command line, to print the command that resumes
    command: str = "python pipelines/run.py"  # how it was started: `vtp` or `python pipelines/run.py`
    fresh: bool = False
    wait_s: float = 0.0
    runner: str = "process"               # process | docker
    image: str = ""                       # --runner docker: pinned image, or a repository to build into
    build: Callable[[], str] | None = None  # --runner docker without a pinned image: builds it, returns it
    #: tells the run's end when Ctrl-C stops it, which ends it before its exit handler could (``notify:``; the caller's:
    #: this package never imports the steps), called with the config
    cancelled: Callable[[config_lib.JobConfig], object] | None = None

    @classmethod
    def from_args(cls, args, argv: list[str], command: str) -> "Options":
        """From ``run.py``'s parsed flags; ``build`` builds the job's image as ``run.py build`` would."""
        request = build.Request(config=args.config, overrides=list(args.overrides), image=args.image,
                                build_args=list(args.build_args), **({"context": args.context} if args.context else {}))
        return cls(argv=argv, command=command, fresh=args.fresh, wait_s=args.wait, runner=args.runner,
                   image=args.image or "", build=lambda: build.build_or_say(request))


def resume_command(opts: Options) -> str:
    return shlex.join([*opts.command.split(), *[a for a in opts.argv if a != "--fresh"]])


#: The config's paths a run here reads or writes (``gs://`` is Vertex's: no run here writes or reads there).
CLOUD_PATHS = ("output.base_dir", "data.path", "data.prepared_dir", "serving.eval_data", "serving.sample_request",
               "output.tensorboard")


def cloud_path_problems(cfg: config_lib.JobConfig, command: str = "python pipelines/run.py") -> list[str]:
    """One line per ``gs://`` path of a job run on this machine: a run here writes its folder here, and reaches
    no Cloud Storage (no credentials; TensorFlow would try www.googleapis.com). Checked before anything runs:
    no folder is made."""
    out = []
    for dotted in CLOUD_PATHS:
        section, key = dotted.split(".")
        value = str(getattr(getattr(cfg, section), key) or "")
        if value.startswith("gs://"):
            way = ("--set output.base_dir=runs/" + cfg.name if dotted == "output.base_dir"
                   else f"--set {dotted}=LOCAL_PATH")
            out.append(f"{dotted}: {value} is a Cloud Storage path, which a run on this machine cannot use; run here "
                       f"with {way}, or submit to Vertex AI: {command} --config JOB --project P --region R "
                       "--pipeline-root gs://BUCKET/root")
    return out


#: A study runs its trials as processes: the docker runner runs one training job. Said before anything runs (no
#: engine probed, no image built); the study itself refuses the same way if it is reached in containers.
STUDY_UNDER_DOCKER = problem("tuning", "a study runs its trials under the process runner (each trial is the job's "
                                       "replicas as processes here; on Vertex every trial runs in the image); "
                                       "--runner docker runs one training job: drop --runner docker, or remove the "
                                       "tuning section to run the job once in containers", ["--runner process"])


def run(cfg: config_lib.JobConfig, opts: Options, build_pipeline, console=None) -> int:
    """Run ``build_pipeline(cfg, "local", base_image)`` (a pipeline function) on this machine (see the
    module doc); returns the exit status."""
    if opts.runner == "docker" and cfg.tuning.enabled:  # before the engine is reached or an image built
        print(f"error: {STUDY_UNDER_DOCKER}", file=sys.stderr)
        return 2
    problems = cloud_path_problems(cfg, opts.command)
    if problems:  # before anything runs: no folder, no lock, no image built
        print("\n".join(f"error: {p}" for p in problems), file=sys.stderr)
        return 2
    for note in (validate.running_locally_note(cfg), local_note(cfg)):
        if note:
            print(f"note: {note}")
    image = ""
    if opts.runner == "docker":
        cfg = docker_session.for_containers(cfg)  # absolute paths: the containers see them at the same place
        if not opts.fresh and not docker_session.is_pinned(opts.image):
            # the folder's run is checked before the image is built (the image is checked once it is known)
            try:
                check_folder(config_lib.resolved_base_dir(cfg), making(cfg), ignore=("container.image_uri",))
            except NotThisJob as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        image = opts.image if docker_session.is_pinned(opts.image) else (opts.build() if opts.build else "")
        if not image:
            return 1
        cfg = cfg.with_image(image)
    base = config_lib.resolved_base_dir(cfg)
    try:
        lock = RunLock(base).acquire(wait_s=opts.wait_s)
    except FolderBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    except NotThisJob as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        made = making(cfg)
        if opts.fresh:
            kept = archive(base)
            if kept:
                print(f"--fresh: kept the previous run in {kept}; starting from step 0 in {base}")
                lock.release()
                lock = RunLock(base).acquire(wait_s=opts.wait_s)
        else:
            record = check_folder(base, made, say=lambda line: print(f"note: {line}"))  # another job's: NotThisJob
            if record:
                print(f"job {cfg.name} in {base} is already complete (finished {record.get('finished')}); "
                      "nothing to do. Its summary:")
                print("\n".join(summary_lines(record.get("summary") or {})))
                print(f"to train again from step 0 (this run is kept): {resume_command(opts)} --fresh")
                return 0
        write_making(base, made)
        os.environ[lifeline.TOKEN_ENV] = lock.token  # every process this run starts carries it (a rerun's proof)
        if console is not None:
            console.set_log_file(os.path.join(base, "logs", time.strftime("run-%Y%m%d-%H%M%S.log")))
        if image:
            return _in_containers(cfg, base, opts, console, image, build_pipeline)
        return _pipeline(cfg, base, opts, console, build_pipeline)
    except (FolderBusy, NotThisJob) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY if isinstance(exc, FolderBusy) else 2
    finally:
        if os.environ.get(lifeline.TOKEN_ENV) == lock.token:  # a later run in this process has a token of its own
            del os.environ[lifeline.TOKEN_ENV]
        lock.release()


def _in_containers(cfg, base: str, opts: Options, console, image: str, build_pipeline) -> int:
    """``--runner docker``: the probe first (one line per thing the image lacks), then the pipeline with
    every step and replica in ``image``; every container of the run removed on every exit path."""
    try:
        session = docker_session.Session(image, base, docker_session.host_folders(cfg))
    except ContainerError as exc:
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
        return _pipeline(cfg, base, opts, console, build_pipeline, session)
    finally:
        session.close()


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


def _interrupted_line(cfg, opts: Options) -> str:
    base = config_lib.resolved_base_dir(cfg)
    if cfg.tuning.enabled:  # a study: its trials' folders are <base>/<trial id>/, its record <base>/tuning.json
        return (f"\ninterrupted the study; every trial stopped, the finished ones are kept in {base}/tuning.json "
                f"(each trial's checkpoints in {base}/<trial id>/checkpoints); resume with: {resume_command(opts)}")
    checkpoints = output_dirs(None, base)["checkpoints"]
    last = last_checkpoint(checkpoints)
    if last:
        where = f"at step {last[1]}; last checkpoint {last[0]}"
    elif cfg.user_trainer:
        where = f"(your trainer's checkpoints, if it wrote any, are in {checkpoints})"
    else:
        where = "before the first checkpoint"
    return f"\ninterrupted {where}; resume with: {resume_command(opts)}"


def _pipeline(cfg, base: str, opts: Options, console, build_pipeline, session=None) -> int:
    # lazy: heavy: kfp (run.py's light commands import this module's callers)
    from kfp import local

    # kfp.local's "non-Python base image" and "display_name has no effect locally" are by design here: the
    # tasks run in this environment, which has the image's packages (pip install -e .).
    warnings.filterwarnings("ignore", module=r"kfp\.local")
    # kfp.local's task processes import this checkout, as the image's ``PYTHONPATH=/app`` makes its steps do
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH", "")) if p)
    runner = session.kfp_runner() if session else local.SubprocessRunner(use_venv=False)
    lifeline.kfp_steps_die_with_this_process()  # kill -9 of this run leaves no step
    local.init(runner=runner, pipeline_root=os.path.join(base, "pipeline_root"))
    pipeline = build_pipeline(cfg, "local", base_image=session.image if session else None)
    started = time.monotonic()
    try:
        with StepTimer() as timer, (session.engine_timeout() if session else contextlib.nullcontext()):
            pipeline(config_json=cfg.to_json())
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        if session:  # the step containers never saw the terminal's Ctrl-C
            session.interrupt()
        _wait_for_children()
        print(_interrupted_line(cfg, opts), file=sys.stderr)
        if opts.cancelled is not None:
            opts.cancelled(cfg)
        return 130
    except RuntimeError as exc:  # kfp.local: a task failed; its log is above
        # the console's last lines: the failed step's error, then the failing replica's own error and hint
        ending = console.failure_lines() if console is not None and console.drain() else []
        print("\n" + "\n".join(ending or [f"error: the pipeline failed: {exc}"]), file=sys.stderr)
        return 1
    summary = run_summary(cfg, time.monotonic() - started, log_file=console.log_path if console else None,
                               steps=timer.steps)
    summary["runner"] = {"name": "docker", "image": session.image} if session else {"name": "process"}
    write_record(base, cfg.to_json(), summary)
    if isinstance(summary.get("report"), str):  # the report step wrote its page before the last steps ended
        step_table.complete(summary["report"], timer.steps)
    print("\n".join(summary_lines(summary)))
    return 0
