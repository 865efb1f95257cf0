"""Errors a user can act on.

Every problem with a job (bad config field, impossible hardware, missing data) is reported as a
:class:`ConfigError` that names the field, says what is wrong and offers valid alternatives.  Command
line entry points turn these into one line per problem and exit with status 2, never a traceback.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Problem:
    """One violation: ``field: message; valid choices: a, b``."""

    field: str
    message: str
    valid: Sequence[str] = ()

    def __str__(self) -> str:
        text = f"{self.field}: {self.message}"
        if self.valid:
            text += "; valid choices: " + ", ".join(str(v) for v in self.valid)
        return text


class ConfigError(ValueError):
    """One or more problems found before anything was spent."""

    def __init__(self, problems: Problem | Iterable[Problem] | str, field: str | None = None):
        if isinstance(problems, str):
            problems = [Problem(field or "config", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def problem(field: str, message: str, valid: Sequence[object] = ()) -> Problem:
    return Problem(field, message, tuple(str(v) for v in valid))
