"""The one error of ``vtp ci-local``: bad input or an unmet need (a build file that cannot run here, a
substitution, a flag, a folder, a missing tool), said by the command as one ``error:`` line, exit status 2.
Every part of the package raises it; it lives here, below them all."""
from __future__ import annotations


class InputError(Exception):
    """Bad input or an unmet need: ``str(exc)`` is the one ``error:`` line."""
