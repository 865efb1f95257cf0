"""The local launcher's command line: ``python -m jobs.local.launch [options] -- COMMAND ...``.

Runs a command as every replica of Vertex AI worker pools on 127.0.0.1 through
``jobs.local.launch.supervisor.launch`` (the supervisor; its docstring holds the environment, log, done, failure
and restart contracts). ``--env KEY=VALUE`` declares a replica variable (as ``trainer.env`` does): a replica
sees nothing else of this shell.

Exit codes: 0 success; the failing replica's status when it exited non-zero; 128+N when it died of signal
N; 124 on timeout; 2 usage error, 127 command cannot start, 130 interrupted, 128+N when the launcher got
signal N.
"""
from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

from jobs.local.launch.supervisor import DONE_RULES, WORKER_FAILURE_RULES, launch
from jobs.rules.replica_env import ROLES


class _Terminated(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _parse(argv: Sequence[str]):
    argv = list(argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(
        prog="python -m jobs.local.launch",
        description="Run a command as every replica of Vertex AI worker pools on 127.0.0.1.",
        epilog="Example: python -m jobs.local.launch --replicas 1,1,0,0 --base-output-dir runs/x "
               "-- python -m trainer.task --user_arg value")
    p.add_argument("--replicas", help="replica counts of worker pools 0..3, e.g. 1,1,0,0")
    for pool in range(4):
        p.add_argument(f"--workerpool{pool}", type=int, metavar="N",
                       help=f"replicas of worker pool {pool} ({ROLES[pool]})")
    p.add_argument("--base-output-dir", required=True)
    p.add_argument("--max-restarts", type=int, default=0)
    p.add_argument("--timeout", type=float, default=None, metavar="S")
    p.add_argument("--grace", type=float, default=5.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL when stopping replicas")
    p.add_argument("--done-when", choices=list(DONE_RULES), default="all",
                   help="all: every chief/worker/evaluator exits 0 (all-reduce); chief: the chief and evaluators "
                        "exit 0, workers and parameter servers are servers (parameter-server training)")
    p.add_argument("--on-worker-failure", choices=list(WORKER_FAILURE_RULES), default="restart",
                   help="restart: any failure restarts the job; tolerate: a dead worker is logged while "
                        "another runs (needs --done-when chief)")
    p.add_argument("--job-id", default="local")
    p.add_argument("--cwd", default=None)
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(own)
    if not command:
        p.error("missing the worker command after '--'")
    pools = [getattr(args, f"workerpool{i}") for i in range(4)]
    if args.replicas is not None:
        if any(v is not None for v in pools):
            p.error("use either --replicas or --workerpoolN, not both")
        try:
            counts = [int(x) for x in args.replicas.split(",")]
        except ValueError:
            p.error(f"--replicas must be comma-separated integers, got {args.replicas!r}")
    else:
        counts = [1 if pools[0] is None else pools[0]] + [v or 0 for v in pools[1:]]
    env = {}
    for item in args.env:
        if "=" not in item:
            p.error(f"--env expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        env[key] = value
    return args, counts, command, env


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (see the module docstring)."""
    try:
        args, counts, command, env = _parse(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # argparse: --help or a usage error (already printed)
        return e.code if isinstance(e.code, int) else 2

    def out(line: str) -> None:
        print(line, flush=True)

    try:
        res = launch(command, counts, args.base_output_dir, env=env, job_id=args.job_id,
                     max_restarts=args.max_restarts, timeout_s=args.timeout,
                     grace_s=args.grace, cwd=args.cwd, log=out, check=False, done_when=args.done_when,
                     on_worker_failure=args.on_worker_failure)
    except ValueError as e:
        print(f"launcher: error: {e}", file=sys.stderr, flush=True)
        return 2
    except OSError as e:
        print(f"launcher: error: cannot start {command[0]!r}: {e}", file=sys.stderr, flush=True)
        return 127
    except KeyboardInterrupt:
        print("launcher: interrupted; all replicas stopped", file=sys.stderr, flush=True)
        return 130
    except _Terminated as e:
        name = signal.Signals(e.signum).name
        print(f"launcher: got {name}; all replicas stopped", file=sys.stderr, flush=True)
        return 128 + e.signum
    for note in res.notes:  # a job that succeeded with a model nobody should trust yet (jobs.local.launch.model_watch)
        print(f"launcher: warning: {note}", file=sys.stderr, flush=True)
    if res.failure is not None:
        print(f"launcher: job failed (exit {res.returncode}): {res.failure.describe()}",
              file=sys.stderr, flush=True)
    return res.returncode


def _raise_terminated(signum, _frame):
    raise _Terminated(signum)


def run_as_script() -> None:
    """``python -m jobs.local.launch``: SIGTERM and SIGHUP stop every replica as Ctrl-C does."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    sys.exit(main())


if __name__ == "__main__":
    run_as_script()
