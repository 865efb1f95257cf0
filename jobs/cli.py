"""How the user started this command line, for its usage lines, ``--help`` and the lines that say how to go on:
``vtp`` (the console script ``pip install`` puts on the PATH, which works from any folder) or
``python pipelines/run.py`` (from a checkout). A help text written for the checkout is shown with the name the
user typed (:func:`shown`), so ``vtp --help`` never suggests a path that does not exist where it was run."""
from __future__ import annotations

import os
import sys

SCRIPT = "vtp"
CHECKOUT = "python pipelines/run.py"


def invoked_as() -> str:
    """``vtp`` when this process was started as the console script, else ``python pipelines/run.py``."""
    return SCRIPT if os.path.basename(sys.argv[0]) == SCRIPT else CHECKOUT


def shown(text: str) -> str:
    """``text`` with ``python pipelines/run.py`` spelled as the user started the command."""
    return text.replace(CHECKOUT, invoked_as())


def plan_hint(config: str) -> str:
    """The line ``validate`` and ``--compile-only`` end with: where to see the exact request, its price and where
    it can run (``jobs.cloud.plan``)."""
    return shown(f"see the exact Vertex request, its price and where it can run: python pipelines/run.py plan "
                 f"--config {config}")
