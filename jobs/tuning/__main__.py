"""``python -m jobs.tuning --config JOB [--set KEY=VALUE ...]``: a job file's study on this machine, alone.

Validates the job (one ``error:`` line per problem, exit 2), prepares the built-in trainer's data when the job
has some to prepare, runs (or resumes) the study (``jobs.tuning.local.run_local_study``, the baseline beside it)
and prints the best trial and the model handed on. Exit 0: done; 1: the study failed (one ``error:`` line); 2: a
configuration problem, the study's metric never reported included; 130: interrupted (Ctrl-C or SIGTERM: every
trial stopped the preemption way; run the same command again to resume).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys

from jobs.rules import validate
from jobs.steps import calls as steps
from jobs.tuning.local import StudyFailed, run_local_study
from jobfile import config as config_lib
from jobfile.errors import ConfigError, problem


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.tuning", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="a job file with a tuning section, or a preset (tuning)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)

    try:
        cfg = config_lib.load(args.config, args.overrides)
        validate.validate_or_raise(cfg)
        if not cfg.tuning.enabled:
            raise ConfigError([problem("tuning.parameters", f"{args.config} has no tuning section to run",
                                       ["tuning: {metric: ..., goal: ..., parameters: {...}, max_trials: 4}"])])
        if not cfg.user_trainer and cfg.data.source in ("synthetic", "images"):
            steps.prepare(cfg)
        record = run_local_study(cfg, log=lambda line: print(line, flush=True))
    except ConfigError as exc:
        for each in exc.problems:
            print(f"error: {each}", file=sys.stderr, flush=True)
        return 2
    except StudyFailed as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    print(json.dumps({"best_trial": record["best_trial"], "handed_on": record.get("handed_on"),
                      "seconds": record["seconds"]}), flush=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(main())
