"""``vtp`` (``python pipelines/run.py``): the training pipeline's command line, its entry point.

Wiring only: the command is ``jobs.commands.run_command`` (arguments, validation, dispatch: the local run is
``jobs.local.run.pipeline_run``, the Vertex submission ``jobs.commands.submit``), each subcommand a module of the job
side (:data:`SUBCOMMANDS`); the pipeline is ``pipelines.training_pipeline``, handed to the command here. What a
user reads in ``--help`` is :data:`USAGE` (plain text, no markup); the exit statuses are
``jobs.commands.run_command.EXIT_STATUS``.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__" and __package__ in (None, ""):  # `python pipelines/run.py` from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs.commands import run_command
from jobs.rules.command_line import survives_closed_pipe  # noqa: E402

#: what ``--help`` opens with: what a user can do, as the user typed the command (``jobs.rules.command_line.shown``)
USAGE = """\
Train your TensorFlow job from source to a verified, exported model: on this machine (the default), compiled
for Vertex AI Pipelines, or submitted to Vertex AI.

run the pipeline (no command name):
  python pipelines/run.py                                   the `local` preset, end to end, on this machine
  python pipelines/run.py --config job.yaml                 your job file: validate, train, verify, report, here
  python pipelines/run.py --config job.yaml --set training.steps=50    a field changed for one run (repeatable)
  python pipelines/run.py --config job.yaml --fresh         train again from step 0 (the old run is kept)
  python pipelines/run.py --config job.yaml --runner docker --image REPO    every step and replica in a container
  python pipelines/run.py --config job.yaml --compile-only out.yaml    YAML for Vertex AI Pipelines
  python pipelines/run.py --config job.yaml --project P ...    run it on Vertex AI (with --region R
                                                 --pipeline-root gs://B/root)

commands:
  validate JOB                      check a job file; print its Vertex worker pools
  plan JOB [--project P] [--out plan.json]    the exact Vertex request, its price, where it can run
  apply plan.json --pipeline-root gs://B/root   submit a saved plan exactly (or refuse it, stale)
  hardware [--region R]             the machines, GPUs and TPUs the hardware catalog knows
  build --config JOB --image REPO   the job's image, pushed, pinned by digest
  runs list | show RUN | compare A B | prune      your past runs (under runs/)
  logs RUN_FOLDER [--replica chief-0] [--follow]   a run's replica logs, here or on Vertex
  schedule create --config JOB --cron "TZ=America/New_York 0 3 * * *" ... | list | pause | resume | delete
                                    the same job on a schedule, on Vertex AI
  upload-template, register-model, components, ci-local    templates, the Model Registry, component YAMLs, CI

python pipelines/run.py COMMAND --help: a command's own options. Presets for --config: local (default),
gpu-1x4, multiworker, parameter-server, tpu, tuning."""

#: ``python pipelines/run.py NAME ...`` -> the job side's command (each returns an exit status).
SUBCOMMANDS = {
    "validate": run_command.Subcommand("jobs.commands.validate_cli", "validate_main"),
    "plan": run_command.Subcommand("jobs.commands.saved_plan", "plan_main"),
    "apply": run_command.Subcommand("jobs.commands.saved_plan", "apply_main", compiles=True),
    "hardware": run_command.Subcommand("jobs.commands.hardware_cli"),
    "build": run_command.Subcommand("jobs.images.build"),
    "upload-template": run_command.Subcommand("jobs.commands.templates", compiles=True),
    "schedule": run_command.Subcommand("jobs.commands.schedule", compiles=True),
    "register-model": run_command.Subcommand("jobs.commands.submit", "register_main"),
    "components": run_command.Subcommand("components.cli"),
    "runs": run_command.Subcommand("jobs.commands.runs_cli"),
    "logs": run_command.Subcommand("jobs.commands.logs_cli"),
    "ci-local": run_command.Subcommand("jobs.commands.ci_local"),
}


def compile_pipeline(*args, **kwargs):
    # lazy: heavy: kfp (the pipeline's definition; a subcommand that compiles nothing never loads it)
    from pipelines.training_pipeline import compile_pipeline

    return compile_pipeline(*args, **kwargs)


def build_pipeline(*args, **kwargs):
    # lazy: heavy: kfp (as compile_pipeline)
    from pipelines.training_pipeline import build_pipeline

    return build_pipeline(*args, **kwargs)


PIPELINE = run_command.Pipeline(USAGE, compile_pipeline, build_pipeline)


@survives_closed_pipe  # `vtp ... | head`: exit 141 quietly (jobs.rules.command_line.CLOSED_PIPE); when the command started
def main(argv: list[str] | None = None) -> int:
    return run_command.main(list(sys.argv[1:] if argv is None else argv), SUBCOMMANDS, PIPELINE)


if __name__ == "__main__":
    sys.exit(main())
