"""Errors a user can act on.

Every problem with a job (bad config field, impossible hardware, missing data) is reported as a
:class:`ConfigError` that names the field, says what is wrong and offers valid alternatives.  Command
line entry points turn these into one line per problem and exit with status 2, never a traceback.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Sequence

#: the longest line a problem is said in: a value quoted from a 20 MB config field is shown cut (its length said)
MAX_LINE = 4000
_LONG_WORD = re.compile(r"\S{200,}")


def shortened(text: str, limit: int = MAX_LINE) -> str:
    """``text`` as one readable line: when it is longer than ``limit``, each run of 200+ characters without a space
    is cut to its head and tail with its length between, and what is still too long is cut at ``limit``."""
    if len(text) <= limit:
        return text
    text = _LONG_WORD.sub(lambda m: f"{m.group()[:60]}...[{len(m.group()):,} characters]...{m.group()[-20:]}", text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


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
        return shortened(text)


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
