"""Why a local study stops, said the way that saves the user hours: a failed run's own cause (its error line, its
last lines, never another run's), a trainer that refuses the flag the study passes for a parameter, a trainer that
never reports the study's metric (:mod:`jobs.tuning.local`'s module doc tells the rules).
"""
from __future__ import annotations

from typing import Any

from jobs.local.launch.hints import UNRECOGNIZED, accepted_spelling, argparse_flag
from jobs.rules.tuning_section import Study
from jobfile.errors import problem


#: keys of a run's outcome that the study reads and never records: the failed run's own last lines and cause
OWN = "own_failure"


def failure_fields(failure) -> dict[str, Any]:
    """A failed run's ``error`` (the head line and the replica's own error line: ``chief-0 (...) exited with
    status 2: task.py: error: unrecognized arguments: --learning_rate=0.04``) and, under :data:`OWN`, what the
    study says of it when it stops: that run's own last lines, its error line and hint (never another run's)."""
    if failure is None:
        return {"error": ""}
    head = " ".join(failure.describe().splitlines()[0].split()).rstrip(".")
    own = (failure.error_line or "").strip()
    own = own[len("error: "):] if own.startswith("error: ") else own
    error = f"{head}: {own[:300]}" if own else head + "."
    where = f" ({failure.log_file})" if failure.log_file else ""
    return {"error": error, OWN: {"lines": [f"{failure.name}'s last lines{where}:",
                                           *(f"| {line}" for line in failure.last_lines[-8:])],
                                  "cause": failure.cause(), "error_line": failure.error_line or "",
                                  "last_lines": list(failure.last_lines)}}


def flag_refused(study: Study, failed: list[dict[str, Any]]):
    """The problem when every trial ended so far failed on the same argparse error naming a tuning flag (the
    trainer does not take the flag as the study spells it: every trial would fail the same way), else None:
    at once for ``unrecognized arguments`` (the flag's name is the same in every trial), after two trials for
    an ``invalid ... value``."""
    flags = [f"--{name}" for name in study.parameters]  # as Study.flags names them
    named = [argparse_flag((tr.get(OWN) or {}).get("error_line"), flags) for tr in failed]
    if not failed or None in named or len(set(named)) != 1:
        return None
    flag, own = named[0], failed[0][OWN]
    if not UNRECOGNIZED.search(own["error_line"]) and len(failed) < 2:
        return None
    name = next((n for n in study.parameters if f"--{n}" == flag), flag.lstrip("-"))
    spelled = accepted_spelling(own["last_lines"], flag)
    ids = ", ".join(tr["id"] for tr in failed)
    told = " ".join(own["error_line"].split())[:200]
    accepts = f"; it accepts {spelled}" if spelled else ""
    fix = (f"let the trainer take both spellings: parser.add_argument(\"{spelled}\", \"{flag}\", ...)" if spelled
           else f"let the trainer take {flag} (parser.add_argument(\"{flag}\", ...))")
    return problem(f"tuning.parameters.{name}", f"the trainer refuses {flag}, the flag the study passes for "
                   f"{name} as Vertex does (--NAME=VALUE): trial(s) {ids} failed with \"{told}\"{accepts}; {fix}, "
                   "or rename the parameter to the trainer's flag", [spelled.lstrip("-") if spelled else name])


def metric_problem(study: Study, trials: list[dict[str, Any]]):
    """The problem when the trials that ended exit 0 did so without a finite value of the study's metric while no
    trial reported it: a configuration error (the tag the study expects, the tags the trainer did report)."""
    tag = study.metric
    ids = ", ".join(sorted((t["id"] for t in trials), key=int))
    tags = sorted({x for t in trials for x in t.get("reported_tags") or [] if x != tag})
    nan = [t["id"] for t in trials if t.get("metric") is not None]
    said = f"trial{'s' if len(trials) > 1 else ''} {ids} ended (exit 0)"
    if nan:
        what = f"{said} reporting {tag} = nan (not a number), so no trial has a result"
    else:
        what = f"{said} without reporting {tag!r}, the study's metric, with cloudml-hypertune"
    reported = f"the trainer reported {', '.join(tags)}" if tags else (
        "the trainer reported nothing (it never wrote CLOUD_ML_HP_METRIC_FILE)")
    fix = (f"report it: hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="
           f"'{tag}', metric_value=...)" + (", or set tuning.metric to a reported tag" if tags else ""))
    return problem("tuning.metric", f"{what}; {reported}; {fix}", tags)


def say_own_failure(trial: dict[str, Any], say) -> None:
    """The failed run's own last lines, then its error line and hint: what the console shows last when the study
    stops (a run beside it, the baseline above all, must not lend it its lines)."""
    own = trial.get(OWN) or {}
    if not own:
        return
    say(f"trial {trial['id']} failed; " + own["lines"][0])
    for line in own["lines"][1:]:
        say(line)
    for line in own["cause"]:
        say(line)
