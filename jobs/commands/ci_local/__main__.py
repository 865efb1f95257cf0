"""``python -m jobs.commands.ci_local``: the command of :mod:`jobs.commands.ci_local.cli`."""
import sys

from jobs.commands.ci_local.cli import main

if __name__ == "__main__":
    sys.exit(main())
