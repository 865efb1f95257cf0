"""Every number is finite and in the API's range (issue 44): each numeric field of the job config's schema, and
each duration flag of the commands, given NaN, an infinity, a negative or a huge value, is ONE ``error:`` line
naming that field, never a traceback and never accepted.

Rules (owners): every float of the schema is finite and every int an int32, by field, before any rule reads it
(``jobfile.coerce``); the fields' own ranges (``jobs.rules.validate``, ``jobs.rules.tuning_section``, ``jobs.rules.placement``,
``jobs.rules.hardware.vertex_rules``); a duration flag is finite and in range (``jobs.rules.command_line.seconds_problem``)."""
from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import typing

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jobs.rules.validate import validate_document
from tests.conftest import ROOT
from jobfile import config as config_lib

BASE = config_lib.load("local").to_dict()


def _numeric_fields(cls=config_lib.JobConfig, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _numeric_fields(tp, f"{prefix}{f.name}.")
        elif tp in (int, float):
            yield f"{prefix}{f.name}", tp


FIELDS = dict(_numeric_fields())
#: fields where a negative number is a valid setting (its meaning said in the schema)
NEGATIVE_OK = {"data.cache_budget_mb": -1}
#: fields whose rule is checked only where they are used (a Dataflow option without the Dataflow runner)
ONLY_WHEN_USED = {"data.dataflow.max_num_workers"}


def _errors(path: str, value) -> list[str]:
    doc = config_lib.load("tuning" if path.startswith("tuning.") else "local").to_dict()
    section = doc
    *parents, leaf = path.split(".")
    for key in parents:
        section = section[key]
    section[leaf] = value
    _, report = validate_document(doc, check_data=False)
    return [str(e) for e in report.errors]


def test_the_sweep_covers_the_schema():
    assert len(FIELDS) >= 40 and "topology.chief.disk_spec.boot_disk_size_gb" in FIELDS
    assert _errors("training.steps", 30) == []  # the presets themselves are valid
    assert _errors("tuning.max_trials", 4) == []


NON_FINITE = [float("nan"), float("inf"), float("-inf")]
BEYOND_INT32 = [2**31, -2**31 - 1, 2**63, 10**30]
#: every field with every value no API takes: non-finite numbers for all; past int32 for the integer fields (a huge
#: finite float is the field's own range, tested below)
CASES = [(path, value) for path, tp in sorted(FIELDS.items()) for value in NON_FINITE + (BEYOND_INT32 if tp is int else [])]


@pytest.mark.parametrize("path, value", CASES)
def test_a_value_no_api_takes_is_one_line_naming_the_field(path, value):
    errors = _errors(path, value)
    mine = [e for e in errors if e.startswith(path + ":")]
    assert len(mine) == 1, errors
    assert "valid choices: " in mine[0]


@pytest.mark.parametrize("path", sorted(set(FIELDS) - set(NEGATIVE_OK) - ONLY_WHEN_USED
                                        - {"training.learning_rate"}))  # learning_rate: "must be positive", below
def test_a_negative_count_size_or_duration_is_one_line_naming_the_field(path):
    errors = _errors(path, -5)
    mine = [e for e in errors if e.startswith(path + ":")]
    assert len(mine) == 1, errors


def test_the_named_fields_keep_their_meaning():
    assert _errors("data.cache_budget_mb", -1) == []
    assert [e.split(":")[0] for e in _errors("data.cache_budget_mb", -2)] == ["data.cache_budget_mb"]
    assert [e.split(":")[0] for e in _errors("training.learning_rate", -0.1)] == ["training.learning_rate"]
    assert [e.split(":")[0] for e in _errors("checkpoint.every_seconds", -1)] == ["checkpoint.every_seconds"]
    assert _errors("scheduling.startup_timeout_s", 0) == []  # 0: no bound
    assert [e.split(":")[0] for e in _errors("scheduling.startup_timeout_s", 1e30)] == ["scheduling.startup_timeout_s"]
    assert _errors("training.seed", 2**31 - 1) == []  # the largest int32 is one


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(sorted(FIELDS)),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not math.isfinite(x)),
                       st.integers(min_value=2**31), st.integers(max_value=-2**31 - 1)))
def test_any_non_finite_or_huge_number_is_refused_by_its_field(path, value):
    if FIELDS[path] is float and isinstance(value, int):
        value = float("inf")
    assert any(e.startswith(path + ":") for e in _errors(path, value))


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**12, 10**12).map(float)))
def test_every_duration_flag_takes_only_finite_seconds_in_range(value):
    from jobs.rules.command_line import seconds_problem

    line = seconds_problem("--wait", value, 604800.0, zero=True)
    ok = math.isfinite(value) and 0 <= value <= 604800
    assert (line is None) == ok
    if line:
        assert line.startswith("--wait ") and "finite number of seconds" in line


@pytest.mark.parametrize("argv, fragment", [
    (["--wait", "nan"], "error: --wait nan: give a finite number of seconds"),
    (["--wait", "inf"], "error: --wait inf: give a finite number of seconds"),
    (["--wait", "-3"], "error: --wait -3: give a finite number of seconds"),
    (["--wait", "1e15"], "error: --wait 1e+15: give a finite number of seconds, 0 or more and at most 604,800"),
    (["--project", "my-project-1", "--poll-seconds", "inf"], "error: --poll-seconds: must be a finite number"),
    (["--project", "my-project-1", "--poll-seconds", "nan"], "error: --poll-seconds: must be a finite number"),
    (["--set", "training.learning_rate=.inf"], "error: training.learning_rate: inf is not a finite number"),
    (["--set", "topology.worker.replica_count=99999999999"], "error: topology.worker.replica_count: 99999999999 is "
                                                             "beyond a 32-bit integer"),
])
@pytest.mark.process
def test_the_command_says_one_line_and_exits_2(argv, fragment):
    result = subprocess.run([sys.executable, "pipelines/run.py", *argv], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(fragment), result.stderr
    assert "Traceback" not in result.stderr
