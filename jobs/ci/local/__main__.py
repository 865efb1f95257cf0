"""``python -m jobs.ci.local``: the command of :mod:`jobs.ci.local.cli`."""
import sys

from jobs.ci.local.cli import main

if __name__ == "__main__":
    sys.exit(main())
