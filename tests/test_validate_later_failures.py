"""Validation catches what would fail later (issue 35): each class of input that ``validate`` and
``--compile-only`` once accepted and a later step, the API or the kernel refused, is now one ``error:`` line
naming the field, the rule and a valid alternative. Also the chief's one replica and a mistyped preset."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from jobs.rules.validate import validate_document
from tests.conftest import ROOT
from jobfile import config as config_lib
from jobfile.config_files import load_document, presets
from jobfile.errors import ConfigError

TUNING = load_document("tuning")


def _errors(change) -> list[str]:
    doc = copy.deepcopy(TUNING)
    change(doc)
    cfg, report = validate_document(doc, check_data=False)
    return [str(e) for e in report.errors]


def _param(doc, name):
    return doc["tuning"]["parameters"][name]


CASES = {
    "an infinite parameter bound": (
        lambda d: _param(d, "training.learning_rate").update(max=float("inf")),
        "tuning.parameters.training.learning_rate.max: inf is not a finite number; valid choices: a finite number"),
    "a NaN parameter bound": (
        lambda d: _param(d, "training.learning_rate").update(min=float("nan")),
        "tuning.parameters.training.learning_rate.min: nan is not a finite number"),
    "max_trials beyond int32": (
        lambda d: d["tuning"].update(max_trials=2**31),
        "tuning.max_trials: 2147483648 is beyond a 32-bit integer (the API's counts and sizes are int32: at most "
        "2,147,483,647); valid choices: 2147483647"),
    "parallel_trials beyond int32": (
        lambda d: d["tuning"].update(parallel_trials=2**40),
        "tuning.parallel_trials: 1099511627776 is beyond a 32-bit integer"),
    "max_failed_trials beyond int32": (
        lambda d: d["tuning"].update(max_failed_trials=2**33),
        "tuning.max_failed_trials: 8589934592 is beyond a 32-bit integer"),
    "a timeout beyond the API's durations": (
        lambda d: d.setdefault("scheduling", {}).update(timeout="999999999999s"),
        "scheduling.timeout: 999999999999s is longer than a duration the Vertex API can carry (google.protobuf.Duration: "
        "at most 315,576,000,000 s); valid choices: 86400s"),
    "a max_wait_duration beyond the API's durations": (
        lambda d: d.setdefault("scheduling", {}).update(strategy="FLEX_START", max_wait_duration="999999999999s"),
        "scheduling.max_wait_duration: 999999999999s is longer than a duration the Vertex API can carry"),
    "discrete values equal as numbers": (
        lambda d: _param(d, "training.per_replica_batch_size").update(values=[16, 16.0]),
        "tuning.parameters.training.per_replica_batch_size.values: 16.0 is listed twice (as 16: the same number); every "
        "value must be distinct; valid choices: [16]"),
    "a metric the built-in trainer never reports": (
        lambda d: d["tuning"].update(metric="val_acc"),
        "tuning.metric: the built-in trainer never reports 'val_acc' (did you mean 'val_accuracy'?): it reports these "
        "with cloudml-hypertune; valid choices: val_accuracy, val_loss"),
    "a range outside the field's own rules": (
        lambda d: _param(d, "training.learning_rate").update(min=-0.1, scale="linear"),
        "tuning.parameters.training.learning_rate: the study would try -0.1, which training.learning_rate refuses: "
        "must be positive, got -0.1; valid choices: min: 0.002"),
    "a listed value outside the field's own rules": (
        lambda d: _param(d, "training.per_replica_batch_size").update(values=[0, 8]),
        "tuning.parameters.training.per_replica_batch_size: the study would try 0, which "
        "training.per_replica_batch_size refuses: must be at least 1, got 0; valid choices: values without 0"),
    "an environment value no process starts with": (
        lambda d: d.setdefault("trainer", {}).update(env={"BIG": "x" * (128 * 1024)}),
        "trainer.env.BIG: 131,072 bytes: Linux starts no process with an environment string of 128 KiB or more "
        "(NAME=value); put the content in a file of your trainer's source and pass its path; valid choices: BIG: "
        "path/in/source_dir.json"),
    "an environment too large in all": (
        lambda d: d.setdefault("trainer", {}).update(env={f"V{i}": "x" * 120_000 for i in range(18)}),
        "trainer.env: 2,160,224 bytes in all: with the command and Vertex's own variables a process's environment "
        "must stay under 2 MiB (ARG_MAX)"),
}


@pytest.mark.parametrize("case", CASES)
def test_each_class_is_one_error_line_naming_field_rule_and_alternative(case):
    change, expected = CASES[case]
    errors = [e for e in _errors(change) if not e.startswith("topology.")]  # FLEX_START's own GPU rules aside
    assert len(errors) == 1 and errors[0].startswith(expected), errors
    assert "valid choices: " in errors[0]


def test_the_limits_are_where_the_kernel_and_the_library_put_them():
    """Just inside each limit passes: an environment string of 128 KiB less one byte (NUL included, what Linux
    takes), the largest Duration, the largest int32."""
    ok = {"a value just under 128 KiB": lambda d: d.setdefault("trainer", {}).update(env={"B": "x" * (131072 - 3)}),
          "the largest Duration": lambda d: d.setdefault("scheduling", {}).update(timeout="315576000000s"),
          "the largest int32": lambda d: d["tuning"].update(max_trials=2**31 - 1)}
    for name, change in ok.items():
        assert _errors(change) == [], name
    env = {"B": "x" * (131072 - 3)}  # "B=" + value + NUL = 131,072 bytes: the kernel starts it
    assert subprocess.run(["/bin/true"], env=env).returncode == 0
    with pytest.raises(OSError):  # one more byte: E2BIG, "Argument list too long"
        subprocess.run(["/bin/true"], env={"B": "x" * (131072 - 2)})


def test_a_user_trainer_may_report_any_tag():
    doc = copy.deepcopy(TUNING)
    doc["tuning"]["metric"] = "val_rmse"
    doc["tuning"]["parameters"] = {"learning_rate": {"type": "double", "min": -1, "max": 1}}
    doc["trainer"] = {"module": "trainer.task", "source_dir": str(ROOT / "examples" / "tabular-regressor")}
    doc["data"] = {"source": "none"}
    cfg, report = validate_document(doc, check_data=False)
    assert report.errors == []  # its flags are its own: no field rules to check them against


def test_the_chief_always_has_its_one_replica():
    cfg = config_lib.from_dict({"topology": {"strategy": "one_device", "chief": {"machine_type": "n1-standard-8"}}})
    assert cfg.topology.chief.replica_count == 1 and cfg.topology.chief.machine_type == "n1-standard-8"
    cfg, report = validate_document({"topology": {"strategy": "one_device", "chief": {"machine_type": "n1-standard-8"}}},
                                    check_data=False)
    assert report.errors == []
    _, report = validate_document({"topology": {"chief": {"replica_count": 0}}}, check_data=False)
    assert any(e.field == "topology.chief.replica_count" for e in report.errors)  # said out loud: still refused


def test_a_mistyped_preset_gets_did_you_mean():
    with pytest.raises(ConfigError) as e:
        config_lib.load("multiwroker")
    assert str(e.value) == ("--config: no preset or file named 'multiwroker' (did you mean 'multiworker'?); valid "
                            "choices: " + ", ".join(presets()))
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "validate", "multiwroker"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "(did you mean 'multiworker'?)" in proc.stderr and proc.stderr.count("\n") == 1
