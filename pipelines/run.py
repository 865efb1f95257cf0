"""Run the training pipeline.

    python pipelines/run.py                                  # the `local` preset, end to end, on this machine
    python pipelines/run.py --config multiworker --set training.steps=50
    python pipelines/run.py --config gpu-1x4 --compile-only gpu-1x4.yaml   # YAML for Vertex AI Pipelines
    python pipelines/run.py validate config.yaml [gcloud-style flags]     # check a config, print worker pools

Local runs go through kfp.local (SubprocessRunner): the same pipeline definition Vertex runs, with the
training step's worker pools started as real processes on loopback by ``jobs.launcher``.
Exit status: 0 ok, 2 invalid config (one line per problem), 1 the job failed.
"""
from __future__ import annotations

import argparse
import json
import os
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
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python pipelines/run.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", default="local", help=f"preset ({', '.join(config_lib.presets())}) or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set training.steps=50 (repeatable)")
    p.add_argument("--compile-only", metavar="OUT.yaml", help="compile the pipeline to YAML and stop")
    p.add_argument("--project", help="Google Cloud project for a Vertex AI run (not available yet)")
    p.add_argument("--image", help="base image for the pipeline's components (default: container.image_uri)")
    return p.parse_args(argv)


def _fail(exc: ConfigError) -> int:
    for problem in exc.problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2


def run_locally(cfg: config_lib.JobConfig) -> int:
    from kfp import local

    from pipelines.training_pipeline import build_pipeline
    from jobs import stages

    base = config_lib.resolved_base_dir(cfg)
    os.makedirs(base, exist_ok=True)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=os.path.join(base, "pipeline_root"))
    pipeline = build_pipeline(cfg)
    started = time.monotonic()
    try:
        pipeline(config_json=cfg.to_json(), target="local")
    except RuntimeError as exc:  # kfp.local: a task failed; its log is above
        print(f"\nerror: the pipeline failed: {exc}", file=sys.stderr)
        return 1
    dirs = stages.output_dirs(cfg)
    trained, verified = stages.read_metrics(cfg), stages.read_verification(cfg)
    print("\n" + "=" * 72)
    print(f"pipeline {cfg.name} finished in {time.monotonic() - started:.0f} s")
    print(f"  model (SavedModel)  {dirs['model']}")
    print(f"  checkpoints         {dirs['checkpoints']}")
    print(f"  TensorBoard logs    {dirs['logs']}    (tensorboard --logdir {dirs['logs']})")
    print(f"  pipeline artifacts  {os.path.join(base, 'pipeline_root')}")
    if trained:
        print(f"  training            {trained['steps']} steps, {trained['replicas']} replicas "
              f"({trained['strategy']}), global batch {trained['global_batch_size']}, "
              f"final train loss {trained['train_loss']:.4f}, train accuracy {trained['train_accuracy']:.3f}")
    if verified:
        print(f"  verification        accuracy {verified['accuracy']:.3f}, loss {verified['loss']:.4f} on "
              f"{verified['examples']} {verified['split']} examples (SavedModel loaded in a fresh process)")
    print("=" * 72)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in SUBCOMMANDS:
        import importlib

        module, function = SUBCOMMANDS[argv[0]].split(":")
        return getattr(importlib.import_module(module), function)(argv[1:])
    args = parse_args(argv)
    try:
        from jobs import validate

        doc = config_lib.load_document(args.config, args.overrides)
        cfg, report = validate.validate_document(doc, check_data=not args.compile_only)
        if report.warnings:
            print("\n".join(f"warning: {w}" for w in report.warnings), file=sys.stderr)
        if report.errors:
            raise ConfigError(report.errors)
    except ConfigError as exc:
        return _fail(exc)
    if args.project:
        print("error: --project: submitting to Vertex AI from run.py is not available yet. Today: compile with "
              "--compile-only pipeline.yaml and upload that file to Vertex AI Pipelines (run it with "
              "target=vertex), or run locally without --project.", file=sys.stderr)
        return 2
    if args.compile_only:
        from pipelines.training_pipeline import compile_pipeline

        out = compile_pipeline(cfg, args.compile_only, base_image=args.image)
        print(f"compiled pipeline {cfg.name!r} to {out}")
        print(json.dumps({"parameters": {"config_json": "(the config)", "target": "local | vertex",
                                         "location": cfg.topology.region}}, indent=1))
        return 0
    note = validate.running_locally_note(cfg)
    if note:
        print(f"note: {note}")
    return run_locally(cfg)


if __name__ == "__main__":
    sys.exit(main())
