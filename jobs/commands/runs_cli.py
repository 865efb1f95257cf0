"""``python pipelines/run.py runs list|show|compare|prune``: the run history's command line.

``list``, ``show`` and ``compare`` read run folders back (``jobs.local.history``, the one reader of a run folder) and show
them (``jobs.local.history.views``);
``prune`` removes old ``--fresh`` copies (``jobs.local.history.prune``, the one command that deletes). Bad input is one
``error:`` line and exit status 2.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

from jobs.rules.command_line import shown
from jobs.local.history.prune import Interrupted, prune
from jobs.local.history.reader import DEFAULT_KEEP, DEFAULT_ROOT, PROG, UsageError, list_runs, resolve
from jobs.local.history.views import show_compare, show_list, show_run


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one ``error:`` line (the house rule), raised rather than printed + exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise UsageError(f"{self.prog}: {message}; see {self.prog} --help")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"--keep must be a whole number >= 0, got {text!r} (e.g. --keep 3)")
    return value


def _days(text: str) -> float:
    """A finite number of days >= 0 (``inf`` and ``nan`` are refused; a huge number means "none that old")."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"--older-than must be a finite number of days >= 0, got {text!r} "
                                         "(e.g. --older-than 7)")
    return value


def _root(text: str) -> str:
    """A folder named: an empty one is refused (it would silently mean the default, which the user did not name)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"--root is empty: name the folder that holds the run folders (e.g. --root "
                                         f"{DEFAULT_ROOT}), or leave --root out for {DEFAULT_ROOT}")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog=shown(PROG), description="List, show, compare and prune the local runs under an output root.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    root_help = f"the folder holding the run folders (default: {DEFAULT_ROOT}, the parent of the default output.base_dir)"
    ls = sub.add_parser("list", help="one row per run: job, status, steps, final metrics, wall time, when, report")
    ls.add_argument("--root", type=_root, default=None, help=root_help)
    ls.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    one = sub.add_parser("show", help="one run whole: status, its cause when it failed (the failing replica's error "
                                      "line and hint), steps, metrics, code version, report")
    one.add_argument("run", metavar="RUN", help="a run folder name under --root, or a path")
    one.add_argument("--root", default=None, help=root_help)
    one.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    cmp = sub.add_parser("compare", help="two runs side by side: status, metrics, step times, config keys that differ")
    cmp.add_argument("a", metavar="A", help="a run folder name under --root, or a path")
    cmp.add_argument("b", metavar="B", help="a run folder name under --root, or a path")
    cmp.add_argument("--root", type=_root, default=None, help=root_help)
    cmp.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    pr = sub.add_parser("prune", help="remove old copies that --fresh kept (<base>.<YYYYmmdd-HHMMSS>); never a live "
                                      "run, never a run folder itself")
    pr.add_argument("--keep", type=_non_negative_int, default=None, metavar="N",
                    help=f"keep the newest N copies of each run folder (default {DEFAULT_KEEP}; 0 with --older-than "
                         "alone)")
    pr.add_argument("--older-than", type=_days, default=None, metavar="DAYS",
                    help="only remove copies made (by --fresh) more than DAYS days ago")
    pr.add_argument("--dry-run", action="store_true", help="say what would be removed and the bytes it would free")
    pr.add_argument("--root", type=_root, default=None, help=root_help)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``python pipelines/run.py runs ...``: 0 done, 2 bad input (one ``error:`` line), 130 Ctrl-C during a prune
    (one ``interrupted:`` line saying what was removed)."""
    try:
        try:
            args = parse_args(list(sys.argv[1:] if argv is None else argv))
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        if args.command == "list":
            if args.root is None and not os.path.isdir(DEFAULT_ROOT):  # nothing ran from this folder yet
                print("[]" if args.json else f"no runs here: no {DEFAULT_ROOT}/ folder in {os.getcwd()} (a run writes "
                                             f"to its output.base_dir, {DEFAULT_ROOT}/<name> by default); --root names "
                                             "the folder that holds your runs")
                return 0
            show_list(list_runs(args.root or DEFAULT_ROOT), args.root or DEFAULT_ROOT, args.json)
        elif args.command == "show":
            show_run(resolve(args.root or DEFAULT_ROOT, args.run, "RUN"), args.json)
        elif args.command == "compare":
            a = resolve(args.root or DEFAULT_ROOT, args.a, "A")
            b = resolve(args.root or DEFAULT_ROOT, args.b, "B")
            show_compare(a, b, args.json)
        else:
            keep = args.keep if args.keep is not None else (0 if args.older_than is not None else DEFAULT_KEEP)
            prune(args.root or DEFAULT_ROOT, keep, args.older_than, args.dry_run)
    except Interrupted as exc:
        print(str(exc), file=sys.stderr)
        return 130
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # `runs compare ... | head`: a BrokenPipeError goes up to the entry point's one rule (jobs.rules.command_line.survives_closed_pipe:
    # exit 141 quietly, as every command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
