"""Run the training pipeline: on this machine (default), compiled to YAML, or on Vertex AI.

    python pipelines/run.py                                  # the `local` preset, end to end, on this machine
    python pipelines/run.py --config multiworker --set training.steps=50
    python pipelines/run.py --config JOB --compile-only job.pipeline.yaml    # YAML for Vertex AI Pipelines
    python pipelines/run.py --config JOB --compile-only local.yaml --target local   # YAML for kfp.local
    python pipelines/run.py --project P --region R --pipeline-root gs://B/root   # submit (jobs/cloud/submit.py)
    python pipelines/run.py --runner docker [--image REPO:TAG@sha256:...]   # every step and replica in the image
    python pipelines/run.py validate JOB [gcloud-style flags]     # check a config, print worker pools
    python pipelines/run.py plan --config JOB [--project P] [--region R] [--out plan.json]   # the Vertex request, price, placement
    python pipelines/run.py apply plan.json --pipeline-root gs://B/root   # submit a saved plan exactly (or refuse it stale)
    python pipelines/run.py hardware [--region R] [--accelerator A]  # what the hardware catalog knows
    python pipelines/run.py build [--config JOB] [--image REPO]   # the job's image, pushed, by digest
    python pipelines/run.py upload-template --host https://R-kfp.pkg.dev/P/REPO [--tag T]
    python pipelines/run.py schedule create --cron "TZ=America/New_York 0 3 * * *" --host ... | list | pause | resume | delete
    python pipelines/run.py register-model --project P --region R --model-dir gs://B/runs/x/model
    python pipelines/run.py components --image REPO@sha256:... --out DIR   # the component YAMLs for an image
    python pipelines/run.py runs list | compare A B | prune              # past runs under runs/
    python pipelines/run.py logs RUN_FOLDER|JOB [--replica chief-0] [--follow]   # replica logs, local or Vertex
    python pipelines/run.py ci-local --registry 127.0.0.1:5000 ...       # cloudbuild.yaml's steps, here (jobs/ci/local/)

Wiring only: the command is ``jobs.steps.run_command`` (arguments, validation, dispatch: the local run is
``jobs.local.run.pipeline_run``, the Vertex submission ``jobs.cloud.submit``), each subcommand a module of the job
side (:data:`SUBCOMMANDS`); the pipeline is ``pipelines.training_pipeline``, handed to the command here.
Exit status: 0 ok, 2 invalid input (one line per problem), 1 the job failed, 75 the output folder is in
use by another run, 130 interrupted (Ctrl-C), 141 the reader of its output went away (``| head``).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__" and __package__ in (None, ""):  # `python pipelines/run.py` from a checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs.steps import run_command
from jobs.spec.command_line import survives_closed_pipe  # noqa: E402

#: ``python pipelines/run.py NAME ...`` -> the job side's command (each returns an exit status).
SUBCOMMANDS = {
    "validate": run_command.Subcommand("jobs.spec.validate_cli", "validate_main"),
    "plan": run_command.Subcommand("jobs.steps.saved_plan", "plan_main"),
    "apply": run_command.Subcommand("jobs.steps.saved_plan", "apply_main", compiles=True),
    "hardware": run_command.Subcommand("jobs.spec.hardware.listing"),
    "build": run_command.Subcommand("jobs.images.build"),
    "upload-template": run_command.Subcommand("jobs.cloud.templates", compiles=True),
    "schedule": run_command.Subcommand("jobs.cloud.schedule", compiles=True),
    "register-model": run_command.Subcommand("jobs.cloud.submit", "register_main"),
    "components": run_command.Subcommand("components.cli"),
    "runs": run_command.Subcommand("jobs.local.history.runs_cli"),
    "logs": run_command.Subcommand("jobs.local.history.logs_cli"),
    "ci-local": run_command.Subcommand("jobs.ci.local"),
}


def compile_pipeline(*args, **kwargs):
    # lazy: heavy: kfp (the pipeline's definition; a subcommand that compiles nothing never loads it)
    from pipelines.training_pipeline import compile_pipeline

    return compile_pipeline(*args, **kwargs)


def build_pipeline(*args, **kwargs):
    # lazy: heavy: kfp (as compile_pipeline)
    from pipelines.training_pipeline import build_pipeline

    return build_pipeline(*args, **kwargs)


PIPELINE = run_command.Pipeline(__doc__, compile_pipeline, build_pipeline)


@survives_closed_pipe  # `vtp ... | head`: exit 141 quietly (jobs.spec.command_line.CLOSED_PIPE); when the command started
def main(argv: list[str] | None = None) -> int:
    return run_command.main(list(sys.argv[1:] if argv is None else argv), SUBCOMMANDS, PIPELINE)


if __name__ == "__main__":
    sys.exit(main())
