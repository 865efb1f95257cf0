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


def seconds_problem(flag: str, value: float | None, most: float, *, zero: bool = False, example: str = "") -> str | None:
    """Why a flag's number of seconds cannot be used (not finite, negative, 0 where 0 means nothing, past ``most``),
    in one line naming the flag and a valid value; None when it can (or was not given). The one check of every
    command's duration flags (``--wait``, ``--poll-seconds``, ``vtp ci-local --timeout``): ``float()`` reads
    ``nan`` and ``inf``, which no wait, deadline or sleep takes (``threading`` raises OverflowError past
    ``threading.TIMEOUT_MAX``)."""
    import math

    if value is None:
        return None
    lowest = "0 or more" if zero else "more than 0"
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero) or value > most:
        return (f"{flag} {value:g}: give a finite number of seconds, {lowest} and at most {most:,.0f}"
                + (f" (e.g. {flag} {example})" if example else ""))
    return None


def plan_hint(config: str) -> str:
    """The line ``validate`` and ``--compile-only`` end with: where to see the exact request, its price and where
    it can run (``jobs.cloud.plan``)."""
    return shown(f"see the exact Vertex request, its price and where it can run: python pipelines/run.py plan "
                 f"--config {config}")
