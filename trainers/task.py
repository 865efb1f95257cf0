"""Worker entry point: ``python -m trainers.task --config local [--set key=value ...]``.

The same command runs on every replica, locally under ``jobs.local.launcher`` and on Vertex AI (it is the
container's command). The replica's role comes from the environment (see ``trainers.cluster``).
``--config-json`` takes the whole config as JSON (how the pipeline passes it to Vertex replicas).
``--job-dir`` (AI Platform passes it) sets ``output.base_dir``.

Exit codes: 0 done; 2 bad config/data (one line per problem); 42 preempted after saving a checkpoint
(``trainers.checkpoint.EXIT_PREEMPTED``); 3 TPU unavailable; 4 on a cloud machine, the pool asked for
GPUs/a TPU VM that this TensorFlow does not see (``trainers.strategy.EXIT_NO_ACCELERATOR``: one line naming
the pool, what it asked for and what TF sees; never a silent CPU run); killed by SIGKILL after one
``ERROR: ... did not finish within N s`` line when the cluster never came up (``scheduling.startup_timeout_s``).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from trainers import config as config_lib
from trainers.errors import ConfigError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainers.task", description=__doc__.split("\n")[0])
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", default="local", help="preset name or YAML file (default: local)")
    src.add_argument("--config-json", help="the whole job config as JSON")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--job-dir", help="AI Platform's job dir: sets output.base_dir")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        overrides = list(args.overrides) + ([f"output.base_dir={args.job_dir}"] if args.job_dir else [])
        if args.config_json:
            cfg = config_lib.apply_overrides_to(config_lib.load_json(args.config_json), overrides)
        else:
            cfg = config_lib.load(args.config, overrides)
        from trainers import cluster as cluster_lib
        from trainers.strategy import check_accelerators
        from trainers.train import train_and_evaluate

        note = check_accelerators(cfg, cluster_lib.read_cluster())
        if note:
            print(f"note: {note}", flush=True)
        train_and_evaluate(cfg)
    except ConfigError as exc:
        for p in exc.problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    except Exception as exc:  # TPU missing and similar: one clear line, not a traceback
        from trainers.strategy import EXIT_NO_ACCELERATOR, AcceleratorMissing, TPUUnavailable

        if isinstance(exc, TPUUnavailable):
            print(f"error: topology.strategy: {exc}", file=sys.stderr)
            return 3
        if isinstance(exc, AcceleratorMissing):
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return EXIT_NO_ACCELERATOR
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
