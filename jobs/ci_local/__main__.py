"""``python -m jobs.ci_local``: the command of :mod:`jobs.ci_local.cli`."""
import sys

from jobs.ci_local.cli import main

if __name__ == "__main__":
    sys.exit(main())
