"""Worker entry point: ``python -m trainers.task --config local [--set key=value ...]``.

The same command runs on every replica, locally under ``jobs.local.launch`` and on Vertex AI (it is the
container's command). The replica's role comes from the environment (``trainers.cluster.replica_role``): the
evaluator runs the side-car loop (``trainers.evaluator``); under ``parameter_server`` the chief coordinates
(``trainers.train_ps``) while workers and parameter servers serve it; otherwise every replica trains
(``trainers.train``); a parameter server that no strategy uses says so and exits 0.
``--config-json`` takes the whole config as JSON (how the pipeline passes it to Vertex replicas).
``--job-dir`` (AI Platform passes it) sets ``output.base_dir``. ``--SECTION.FIELD=VALUE`` is an override like
``--set SECTION.FIELD=VALUE``: how a Vertex hyperparameter tuning trial passes its values (``--NAME=VALUE`` after
the job's own arguments; ``tuning.parameters`` names them ``training.learning_rate`` etc.).

Exit codes: 0 done; 2 bad config/data (one line per problem); 42 preempted after saving a checkpoint
(``trainers.checkpoint.EXIT_PREEMPTED``); 3 TPU unavailable; 5 a parameter server was lost (parameter-server
training: restart the job, it resumes from the last checkpoint; ``trainers.train_ps.EXIT_PS_LOST``); 4 on a cloud machine, the pool asked for
GPUs/a TPU VM that this TensorFlow does not see (``trainers.strategy.EXIT_NO_ACCELERATOR``: one line naming
the pool, what it asked for and what TF sees; never a silent CPU run); killed by SIGKILL after one
``ERROR: ... did not finish within N s`` line when the cluster never came up (``scheduling.startup_timeout_s``).
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys

from trainers import cluster as cluster_lib
from jobfile import config as config_lib
from jobfile.errors import ConfigError
from trainers.evaluator import run_evaluator
from trainers.strategy import AcceleratorMissing, EXIT_NO_ACCELERATOR, TPUUnavailable, check_accelerators
from trainers.train import train_and_evaluate
from trainers.train_ps import EXIT_PS_LOST, ParameterServerLost, serve, train_ps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m trainers.task", description=__doc__.split("\n")[0])
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", default="local", help="preset name or YAML file (default: local)")
    src.add_argument("--config-json", help="the whole job config as JSON")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--job-dir", help="AI Platform's job dir: sets output.base_dir")
    args, extra = parser.parse_known_args(argv)
    bad = [a for a in extra if not HYPERPARAMETER_RE.match(a)]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (a hyperparameter is --SECTION.FIELD=VALUE, e.g. "
                     "--training.learning_rate=0.01)")
    args.overrides += [a[2:] for a in extra]
    return args


#: A Vertex tuning trial's flag for the built-in trainer: ``--training.learning_rate=0.01``.
HYPERPARAMETER_RE = re.compile(r"^--[A-Za-z_]\w*\.[A-Za-z_]\w*=")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        overrides = list(args.overrides) + ([f"output.base_dir={args.job_dir}"] if args.job_dir else [])
        if args.config_json:
            cfg = config_lib.load_json(args.config_json).with_overrides(overrides)
        else:
            cfg = config_lib.load(args.config, overrides)

        info = cluster_lib.read_cluster()
        note = check_accelerators(cfg, info)
        if note:
            print(f"note: {note}", flush=True)
        run_role(cfg, info)
    except ConfigError as exc:
        for p in exc.problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    except Exception as exc:  # TPU missing and similar: one clear line, not a traceback

        if isinstance(exc, TPUUnavailable):
            print(f"error: topology.strategy: {exc}", file=sys.stderr)
            return 3
        if isinstance(exc, AcceleratorMissing):
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return EXIT_NO_ACCELERATOR

        if isinstance(exc, ParameterServerLost):
            print(f"error: topology.parameter_server: {exc}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_PS_LOST)  # the coordinator's threads would keep a process with a lost cluster alive
        raise
    return 0


def run_role(cfg: config_lib.JobConfig, info) -> None:
    """Run what this replica does in the job (``trainers.cluster.replica_role``)."""
    role = cluster_lib.replica_role(info, cfg.topology.strategy)
    if role == cluster_lib.ROLE_EVALUATE:
        run_evaluator(cfg)
    elif role == cluster_lib.ROLE_SERVE:
        serve(info)
    elif role == cluster_lib.ROLE_IDLE:
        print(f"warning: topology.parameter_server: {info.replica_id} has nothing to do: strategy "
              f"{cfg.topology.strategy} does not use parameter servers; exiting 0", flush=True)
    elif cfg.topology.strategy == "parameter_server":
        train_ps(cfg)
        # Everything is written (atomically) by now; left to itself, the interpreter then spends seconds
        # winding down the coordinator's connections to servers that the launcher is about to kill.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    else:
        train_and_evaluate(cfg)


if __name__ == "__main__":
    sys.exit(main())
