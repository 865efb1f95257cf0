"""Hyperparameter tuning here: the ``tuning:`` section's rules (one line each), the search (values inside the
declared space, grid without repeats across a resume), the trial contract Vertex gives (flags after the job's
arguments, CLOUD_ML_TRIAL_ID, ``<base>/<trial>/model``, one hypertune file per replica, the last report
counts), and a user's trainer written as Vertex's tuning docs write one, tuned with 4 trials, 2 at once: the
record, the wrong tag caught after the first batch, Ctrl-C and the resume."""
from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from jobs.local.process.faults import replica_pid
from jobs.rules.tuning_rules import format_value
from tests.conftest import ROOT, assert_no_processes_left
from jobfile import config as config_lib
from jobfile.config_files import load_document
from jobfile.errors import ConfigError

PROJECT = ROOT / "tests" / "fakes" / "tuning_project"
JOB = str(PROJECT / "job.yaml")


def job(tmp_path, *sets: str) -> config_lib.JobConfig:
    return config_lib.load(JOB, [f"output.base_dir={tmp_path / 'study'}", *sets])


def with_tuning(cfg: config_lib.JobConfig, **tuning) -> config_lib.JobConfig:
    doc = cfg.to_dict()
    doc["tuning"] = {**doc["tuning"], **tuning}
    return config_lib.from_dict(doc)


def errors(cfg) -> list[str]:
    from jobs.rules.validate import validate

    return [str(p) for p in validate(cfg, check_data=False).errors]


# -- the section's shape and rules ----------------------------------------------------------------------
def test_the_example_job_and_the_tuning_preset_are_valid(tmp_path):
    assert errors(job(tmp_path)) == []
    assert errors(config_lib.load("tuning")) == []
    example = config_lib.load(str(ROOT / "examples" / "tabular-regressor" / "tune.yaml"))
    assert errors(example) == [] and example.tuning.metric == "val_rmse"


def test_no_parameters_is_no_tuning_and_a_lonely_setting_is_an_error(tmp_path):
    assert not config_lib.load("local").tuning.enabled and errors(config_lib.load("local")) == []
    lonely = config_lib.load("local", ["tuning.metric=val_accuracy"])
    assert [e.split(":")[0] for e in errors(lonely)] == ["tuning.parameters"]


@pytest.mark.parametrize("doc,field,needle", [
    ({"parameters": {"lr": {"type": "double", "min": 0.1, "max": 0.2, "scael": "log"}}},
     "tuning.parameters.lr.scael", "unknown field; did you mean 'scale'?"),
    ({"parameters": {"lr": {"type": "float", "min": 0.1, "max": 0.2}}}, "tuning.parameters.lr.type", "'float' is not allowed"),
    ({"parameters": {"lr": {"type": "double", "min": "low", "max": 0.2}}}, "tuning.parameters.lr.min", "expected a number"),
    ({"parameters": {"o": {"type": "categorical", "values": [{"a": 1}]}}}, "tuning.parameters.o.values[0]",
     "expected a string or a number"),
    ({"goal": "max"}, "tuning.goal", "valid choices: minimize, maximize"),
    ({"max_trials": "many"}, "tuning.max_trials", "expected an integer"),
    ({"parameters": ["lr"]}, "tuning.parameters", "expected a mapping"),
])
def test_shape_problems_name_the_field(tmp_path, doc, field, needle):
    data = job(tmp_path).to_dict()
    data["tuning"] = {**data["tuning"], **doc}
    with pytest.raises(ConfigError) as err:
        config_lib.from_dict(data)
    (line,) = [str(p) for p in err.value.problems]
    assert line.startswith(field + ":") and needle in line


RULES = {  # a change to the test job's tuning section -> (the field, words of the one error line)
    "double without max": ({"parameters": {"lr": {"type": "double", "min": 0.1}}}, "tuning.parameters.lr",
                           "needs max"),
    "min above max": ({"parameters": {"lr": {"type": "double", "min": 0.5, "max": 0.1}}}, "tuning.parameters.lr.max",
                      "must be greater than min"),
    "log scale from 0": ({"parameters": {"lr": {"type": "double", "min": 0, "max": 0.1, "scale": "log"}}},
                         "tuning.parameters.lr.min", "log scale needs a range above 0"),
    "reverse_log from -1": ({"parameters": {"u": {"type": "integer", "min": -1, "max": 8, "scale": "reverse_log"}}},
                            "tuning.parameters.u.min", "reverse_log scale needs a range above 0"),
    "integer with a fraction": ({"parameters": {"u": {"type": "integer", "min": 1.5, "max": 8}}},
                                "tuning.parameters.u.min", "whole number"),
    "range with values": ({"parameters": {"u": {"type": "integer", "min": 1, "max": 8, "values": [1, 2]}}},
                          "tuning.parameters.u.values", "values belong to categorical and discrete"),
    "categorical numbers": ({"parameters": {"o": {"type": "categorical", "values": ["adam", 3]}}},
                            "tuning.parameters.o.values", "categorical values are strings"),
    "categorical with a scale": ({"parameters": {"o": {"type": "categorical", "values": ["a"], "scale": "log"}}},
                                 "tuning.parameters.o.scale", "no scale"),
    "discrete names": ({"parameters": {"b": {"type": "discrete", "values": [16, "big"]}}},
                       "tuning.parameters.b.values", "discrete values are numbers"),
    "discrete twice": ({"parameters": {"b": {"type": "discrete", "values": [16, 16]}}},
                       "tuning.parameters.b.values", "listed twice"),
    "discrete empty": ({"parameters": {"b": {"type": "discrete"}}}, "tuning.parameters.b.values", "at least one value"),
    "no type": ({"parameters": {"b": {"values": [1]}}}, "tuning.parameters.b.type", "missing"),
    "not a flag name": ({"parameters": {"learning rate": {"type": "double", "min": 0.1, "max": 1}}},
                        "tuning.parameters.learning rate", "not a flag name"),
    "grid with a double": ({"algorithm": "grid"}, "tuning.parameters.learning_rate", "grid search takes integer"),
    "parallel above max": ({"parallel_trials": 5}, "tuning.parallel_trials", "more than max_trials (4)"),
    "no max_trials": ({"max_trials": 0, "parallel_trials": 1}, "tuning.max_trials", "at least 1"),
    "failed above max": ({"max_failed_trials": 9}, "tuning.max_failed_trials", "more than max_trials"),
    "no metric": ({"metric": ""}, "tuning.metric", "missing: the tag your trainer reports"),
    "metric with a space": ({"metric": "val rmse"}, "tuning.metric", "not a metric tag"),
    "no goal": ({"goal": None}, "tuning.goal", "whether a lower or a higher val_rmse is better"),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_is_one_error_line(tmp_path, rule):
    change, field, words = RULES[rule]
    cfg = job(tmp_path)
    if "parameters" in change:  # replace one declared parameter by the faulty one
        doc = cfg.to_dict()
        doc["tuning"]["parameters"] = {**{k: v for k, v in doc["tuning"]["parameters"].items()
                                          if k not in ("learning_rate",)}, **change["parameters"]}
        cfg = config_lib.from_dict(doc)
    else:
        cfg = with_tuning(cfg, **change)
    (line,) = errors(cfg)
    assert line.startswith(field + ":") and words in line, line
    assert "; valid choices: " in line or rule in ("discrete twice",)


def warnings(cfg) -> list[str]:
    from jobs.rules.validate import validate

    return [str(p) for p in validate(cfg, check_data=False).warnings]


def test_a_parameter_the_trainer_args_also_give_is_a_warning_naming_what_trials_and_baseline_run(tmp_path):
    """A tuning lab's spec repeats its fixed flags: Vertex appends each trial's --NAME=VALUE after them and argparse
    keeps the last, so it runs there; here too, with one warning saying which value runs where."""
    for args in ('["--units", "8"]', '["--units=8"]', '["--units", "4", "--epochs", "3", "--units=8"]'):
        cfg = job(tmp_path, f"trainer.args={args}")
        assert errors(cfg) == []
        (line,) = [w for w in warnings(cfg) if w.startswith("tuning.parameters.")]
        assert line == ("tuning.parameters.units: trainer.args also gives --units 8; each trial's --units=VALUE comes "
                        "after it and wins (argparse keeps the last, as on Vertex, which appends a trial's flags to the "
                        "fixed ones), so each trial runs with its own units and the baseline runs the job as it "
                        "stands, with --units 8"), line
    assert not [w for w in warnings(job(tmp_path, 'trainer.args=["--units_extra", "8"]')) if "tuning" in w]
    cfg = job(tmp_path, 'trainer.args=["--units", "8"]', "tuning.baseline=false")
    assert any("without the study the job runs with --units 8" in w for w in warnings(cfg))


def test_the_builtin_trainer_takes_config_fields_with_valid_values():
    doc = load_document("tuning")
    doc["tuning"]["parameters"] = {"training.optimizer": {"type": "categorical", "values": ["adam", "rmsprop"]},
                                   "learning_rate": {"type": "double", "min": 0.001, "max": 0.01},
                                   "tuning.max_trials": {"type": "integer", "min": 1, "max": 3}}
    lines = errors(config_lib.from_dict(doc))
    assert lines[0].startswith("tuning.parameters.training.optimizer: rmsprop is not a valid training.optimizer")
    assert lines[1].startswith("tuning.parameters.learning_rate: the built-in trainer takes a parameter as an "
                               "override of its config: the name must be SECTION.FIELD")
    assert lines[2].startswith("tuning.parameters.tuning.max_trials: the built-in trainer")
    assert len(lines) == 3


def test_the_builtin_trainer_takes_vertex_style_flags():
    from trainers.task import parse_args

    args = parse_args(["--config-json", "{}", "--set", "training.steps=3", "--training.learning_rate=0.01",
                       "--training.optimizer=sgd"])
    assert args.overrides == ["training.steps=3", "training.learning_rate=0.01", "training.optimizer=sgd"]
    cfg = config_lib.load("local").with_overrides(args.overrides)
    assert (cfg.training.learning_rate, cfg.training.optimizer, cfg.training.steps) == (0.01, "sgd", 3)
    with pytest.raises(SystemExit):
        parse_args(["--learning_rate=0.01"])


def test_the_trial_record_folder_comes_from_aip_model_dir():
    from trainers import cluster

    info = cluster.read_cluster({"AIP_MODEL_DIR": "gs://b/runs/x/3/model/"})
    assert cluster.record_dir(info, "gs://b/runs/x") == "gs://b/runs/x/3"
    assert cluster.record_dir(cluster.read_cluster({"AIP_MODEL_DIR": "/r/x/model/"}), "/r/x") == "/r/x"
    assert cluster.record_dir(cluster.read_cluster({}), "/r/x") == "/r/x"


def test_flags_are_written_as_vertex_writes_them(tmp_path):
    from jobs.rules.tuning_section import parse

    cfg = job(tmp_path)
    # by name: a job file and the config JSON the pipeline passes on (sorted keys) give one command
    assert parse(cfg.tuning).flags({"learning_rate": 0.001, "units": 8.0, "optimizer": "adam", "batch_size": 32.0}) == [
        "--batch_size=32", "--learning_rate=0.001", "--optimizer=adam", "--units=8"]


# -- the section parsed once, and THE best-trial rule ---------------------------------------------------------
def test_the_section_is_parsed_once_into_one_frozen_study_from_the_typed_section_or_its_dict(tmp_path):
    import dataclasses

    from jobs.rules.tuning_section import parse

    cfg = job(tmp_path)
    study = parse(cfg.tuning)
    assert parse(cfg.to_dict()["tuning"]) == study  # the dict a pipeline passes gives the same study
    assert study.algorithm == (cfg.tuning.algorithm or "bayesian")
    assert list(study.parameters) == list(cfg.tuning.parameters)
    with pytest.raises(dataclasses.FrozenInstanceError):
        study.metric = "other"
    with pytest.raises(TypeError):
        study.parameters["units"] = None
    with pytest.raises(ConfigError) as empty:
        parse({})
    assert [p.field for p in empty.value.problems] == ["tuning.parameters"]
    bad = cfg.to_dict()["tuning"]
    bad["parameters"]["learning_rate"]["min"] = 0.0
    with pytest.raises(ConfigError) as refused:
        parse(bad)
    assert str(refused.value.problems[0]) == ("tuning.parameters.learning_rate.min: a log scale needs a range above 0, "
                                              "got min 0; valid choices: a positive min, scale: linear")


@pytest.mark.parametrize("goal,best", [("minimize", "3"), ("maximize", "2")])
def test_the_best_trial_rule_goal_ties_to_the_lowest_id_and_only_succeeded_finite_trials(goal, best):
    from jobs.rules.tuning_rules import best_of

    trials = [{"id": "10", "state": "SUCCEEDED", "metric": 0.1, "seconds": 1.0},  # 10 after 3: number order
              {"id": "2", "state": "SUCCEEDED", "metric": 0.9, "model_dir": "/b/2/model"},
              {"id": "3", "state": "SUCCEEDED", "metric": 0.1},
              {"id": "1", "state": "FAILED", "metric": 0.0}, {"id": "4", "state": "INFEASIBLE", "metric": None},
              {"id": "5", "state": "SUCCEEDED", "metric": float("nan")}, {"id": "6", "state": "STOPPED", "metric": -1}]
    found = best_of(trials, goal)
    assert found["id"] == best and set(found) <= {"id", "parameters", "metric", "model_dir"}
    assert best_of(trials[3:5], goal) is None


# -- the hypertune file ------------------------------------------------------------------------------------
def test_the_last_report_counts_and_the_tags_are_listed(tmp_path):
    from jobs.run_records.trial_files import last_value, read_reports, reported_tags

    path = tmp_path / "chief-0.metrics"
    path.write_text('{"timestamp": 1, "trial": "1", "val_rmse": "0.5", "global_step": "1", "checkpoint_path": ""}\n'
                    "not json\n"
                    '{"timestamp": 2, "trial": "1", "val_rmse": "0.25", "global_step": "2", "checkpoint_path": ""}\n'
                    '{"timestamp": 3, "trial": "1", "loss": "nan", "global_step": "2", "checkpoint_path": ""}\n')
    reports = read_reports(str(path))
    assert last_value(reports, "val_rmse") == 0.25 and math.isnan(last_value(reports, "loss"))
    assert last_value(reports, "accuracy") is None and reported_tags(reports) == ["loss", "val_rmse"]
    assert read_reports(str(tmp_path / "none")) == []


# -- the search ----------------------------------------------------------------------------------------------
def _inside(cfg, params: dict) -> bool:
    for name, p in cfg.tuning.parameters.items():
        v = params[name]
        if p.type in ("double", "integer"):
            if not p.min <= v <= p.max or (p.type == "integer" and not isinstance(v, int)):
                return False
        elif v not in p.values:
            return False
    return True


@pytest.mark.parametrize("algorithm", [None, "random"])
def test_every_proposal_lies_in_the_declared_space_reverse_log_leaning_to_the_top(tmp_path, algorithm):
    from jobs.tuning.search import Search
    from jobs.rules.tuning_section import parse

    doc = job(tmp_path).to_dict()
    doc["tuning"]["algorithm"] = algorithm
    doc["tuning"]["parameters"]["learning_rate"]["scale"] = "reverse_log"
    cfg = config_lib.from_dict(doc)
    search = Search(parse(cfg.tuning), cfg.training.seed)
    rates = []
    for i in range(40):
        handle, params = search.ask()
        assert _inside(cfg, params), params
        rates.append(params["learning_rate"])
        search.tell(handle, float(i % 7))
    top = sum(r > (0.0001 + 0.1) / 2 for r in rates[:10])  # the first 10 are random under both samplers
    assert top >= 8, rates[:10]  # log-uniform reflected: most mass near max


def test_grid_search_covers_the_grid_without_repeats_across_a_resume(tmp_path):
    from jobs.tuning.search import Search
    from jobs.rules.tuning_section import parse

    doc = job(tmp_path).to_dict()
    doc["tuning"].update(algorithm="grid", max_trials=12)
    doc["tuning"]["parameters"] = {"units": {"type": "integer", "min": 4, "max": 5},
                                   "optimizer": {"type": "categorical", "values": ["adam", "sgd"]},
                                   "batch_size": {"type": "discrete", "values": [32, 16, 64]}}
    cfg = config_lib.from_dict(doc)
    first = Search(parse(cfg.tuning), cfg.training.seed)
    trials = []
    for i in range(5):
        handle, params = first.ask()
        trials.append({"id": str(i + 1), "parameters": params, "metric": float(i), "handle": handle})
        if i < 4:
            first.tell(handle, float(i))
    again = Search(parse(cfg.tuning), cfg.training.seed)  # trial 5 never finished; 3 did not succeed either (no metric)
    trials[2]["metric"] = None
    handles = again.replay(trials, kept={"1", "2", "4"})
    assert set(handles) == {"3", "5"} and again.parameters(handles["5"]) == trials[4]["parameters"]
    rest = [again.ask()[1] for _ in range(7)]
    points = [tuple(sorted(t["parameters"].items())) for t in trials] + [tuple(sorted(p.items())) for p in rest]
    assert len(set(points)) == 12 == len(points)


# -- the study's loop, with trials faked -----------------------------------------------------------------------
class Ran(list):
    """The trial ids run, in order; ``baseline``: how often the baseline ran."""
    baseline = 0


def fake_trials(monkeypatch, outcomes):
    """``jobs.tuning.trial.run_trial`` answers from ``outcomes``: trial id -> the outcome dict (a default for the others; the
    baseline's id is ``baseline``). Returns the trial ids run (the baseline counted apart)."""
    from jobs.tuning import trial as trial_lib

    ran = Ran()

    def run(cfg, study, trial, base, log, stop):
        if trial["id"] == "baseline":
            ran.baseline += 1
        else:
            ran.append(trial["id"])
        out = outcomes.get(trial["id"], outcomes.get("*"))
        return {"seconds": 0.1, "reported_tags": ["val_rmse"], **out}
    monkeypatch.setattr(trial_lib, "run_trial", run)
    return ran


OK = {"state": "SUCCEEDED", "metric": 0.5}
NO_METRIC = {"state": "INFEASIBLE", "metric": None, "reported_tags": ["loss"]}
FAILED = {"state": "FAILED", "metric": None, "error": "chief-0 (workerpool0-0, attempt 1) exited with status 1."}


def test_a_trial_without_the_metric_is_a_failed_trial_once_another_reports_it(tmp_path, monkeypatch):
    from jobs.tuning.local import run_local_study

    fake_trials(monkeypatch, {"1": NO_METRIC, "*": OK})
    cfg = with_tuning(job(tmp_path), max_failed_trials=2)
    record = run_local_study(cfg, log=lambda _: None)
    assert [t["state"] for t in record["trials"]] == ["INFEASIBLE", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
    assert record["best_trial"]["id"] == "2"


def test_max_failed_trials_stops_the_study_and_zero_means_the_first(tmp_path, monkeypatch):
    from jobs.tuning.local import StudyFailed, run_local_study

    ran = fake_trials(monkeypatch, {"*": FAILED})
    with pytest.raises(StudyFailed) as err:
        run_local_study(with_tuning(job(tmp_path), parallel_trials=1), log=lambda _: None)
    assert ran == ["1"] and str(err.value).startswith(
        "the study stopped after 1 failed trial(s) (tuning.max_failed_trials is 0: here the first failed trial stops "
        "the study); trial 1 FAILED: chief-0")
    ran.clear()
    with pytest.raises(StudyFailed, match=r"after 2 failed trial\(s\) \(tuning.max_failed_trials is 2\)"):
        run_local_study(with_tuning(job(tmp_path / "b"), parallel_trials=1, max_failed_trials=2), log=lambda _: None)
    assert ran == ["1", "2"]
    record = json.loads((tmp_path / "b" / "study" / "tuning.json").read_text())
    assert [t["state"] for t in record["trials"]] == ["FAILED", "FAILED"] and record["best_trial"] is None


def test_a_rerun_keeps_succeeded_trials_and_runs_the_others_again(tmp_path, monkeypatch):
    from jobs.run_records.records import read_study
    from jobs.tuning.local import run_local_study

    ran = fake_trials(monkeypatch, {"2": FAILED, "*": OK})
    with pytest.raises(Exception):
        run_local_study(with_tuning(job(tmp_path), parallel_trials=1), log=lambda _: None)
    first = read_study(str(tmp_path / "study"))
    assert ran == ["1", "2"] and [t["state"] for t in first["trials"]] == ["SUCCEEDED", "FAILED"]
    ran.clear()
    fake_trials(monkeypatch, {"*": {"state": "SUCCEEDED", "metric": 0.1}})
    record = run_local_study(with_tuning(job(tmp_path), parallel_trials=1), log=lambda _: None)
    assert [t["id"] for t in record["trials"]] == ["1", "2", "3", "4"]
    assert record["trials"][0] == first["trials"][0]  # kept as it was
    assert record["trials"][1]["parameters"] == first["trials"][1]["parameters"]  # run again, same values
    assert record["trials"][1]["state"] == "SUCCEEDED" and record["best_trial"]["id"] == "2"


# -- the baseline beside the study: the job as it stands ---------------------------------------------------------
def study_lines(cfg, monkeypatch, outcomes) -> tuple[dict, list[str], Ran]:
    from jobs.tuning.local import run_local_study

    ran, lines = fake_trials(monkeypatch, outcomes), []
    record = run_local_study(cfg, log=lines.append)
    return record, lines, ran


def test_a_study_worse_than_the_job_hands_on_the_baselines_model_and_says_so(tmp_path, monkeypatch):
    base = tmp_path / "study"
    record, lines, ran = study_lines(job(tmp_path), monkeypatch, {
        "baseline": {"state": "SUCCEEDED", "metric": 0.166}, "3": {"state": "SUCCEEDED", "metric": 0.98},
        "*": {"state": "SUCCEEDED", "metric": 1.2}})
    assert ran == ["1", "2", "3", "4"] and ran.baseline == 1  # one more run of the study, never a trial
    assert record["best_trial"]["id"] == "3"
    assert record["baseline"] == {"id": "baseline", "state": "SUCCEEDED", "metric": 0.166, "seconds": 0.1,
                                  "reported_tags": ["val_rmse"], "model_dir": str(base / "baseline" / "model")}
    reason = ("the study found nothing better than the job as it stands: trial 3's val_rmse 0.98 against the "
              "baseline's 0.166; the baseline's model goes on")
    assert record["handed_on"] == {"run": "baseline", "id": "baseline", "parameters": {}, "metric": 0.166,
                                   "model_dir": str(base / "baseline" / "model"), "reason": reason}
    assert lines[-1] == reason and lines[0].startswith("baseline started: the job as it stands (its own arguments: "
                                                       "--epochs 3, no tuning flags)")
    assert json.loads((base / "tuning.json").read_text())["handed_on"] == record["handed_on"]


def test_a_study_that_beats_the_job_hands_on_the_trials_model(tmp_path, monkeypatch):
    record, lines, _ = study_lines(job(tmp_path), monkeypatch, {
        "baseline": {"state": "SUCCEEDED", "metric": 0.166}, "2": {"state": "SUCCEEDED", "metric": 0.12},
        "*": {"state": "SUCCEEDED", "metric": 0.3}})
    handed = record["handed_on"]
    assert (handed["run"], handed["id"], handed["metric"]) == ("trial", "2", 0.12)
    assert handed["model_dir"] == record["best_trial"]["model_dir"] == str(tmp_path / "study" / "2" / "model")
    assert lines[-1] == ("the study beat the job as it stands: trial 2's val_rmse 0.12 against the baseline's 0.166; "
                         "trial 2's model goes on")


def test_a_tie_goes_to_the_baseline_and_maximize_is_the_other_way(tmp_path, monkeypatch):
    record, _, _ = study_lines(job(tmp_path / "tie"), monkeypatch, {"*": {"state": "SUCCEEDED", "metric": 0.2}})
    assert record["handed_on"]["run"] == "baseline"
    record, _, _ = study_lines(with_tuning(job(tmp_path / "max"), goal="maximize"), monkeypatch, {
        "baseline": {"state": "SUCCEEDED", "metric": 0.7}, "4": {"state": "SUCCEEDED", "metric": 0.9},
        "*": {"state": "SUCCEEDED", "metric": 0.5}})
    assert (record["handed_on"]["run"], record["handed_on"]["id"]) == ("trial", "4")


def test_baseline_false_skips_it_and_the_best_trial_goes_on(tmp_path, monkeypatch):
    cfg = job(tmp_path, "tuning.baseline=false")
    record, lines, ran = study_lines(cfg, monkeypatch, {"*": OK})
    assert ran.baseline == 0 and "baseline" not in record and not (tmp_path / "study" / "baseline").exists()
    assert record["handed_on"]["id"] == record["best_trial"]["id"]
    assert record["handed_on"]["reason"].startswith("no baseline ran (tuning.baseline is false): the best trial, trial ")
    assert not any(line.startswith("baseline ") for line in lines)


def test_a_failed_baseline_leaves_the_best_trial_to_go_on_and_a_rerun_runs_it_again(tmp_path, monkeypatch):
    record, lines, _ = study_lines(job(tmp_path), monkeypatch, {"baseline": FAILED, "*": OK})
    assert record["baseline"]["state"] == "FAILED" and record["handed_on"]["run"] == "trial"
    assert record["handed_on"]["reason"].startswith("the baseline FAILED (chief-0 (workerpool0-0, attempt 1) exited "
                                                    "with status 1.): nothing to compare with; the best trial, trial ")
    assert any(line.startswith("baseline FAILED in 0.1 s: chief-0") and line.endswith(
        "; the best trial goes on without a comparison") for line in lines)
    again, lines, ran = study_lines(job(tmp_path), monkeypatch, {"baseline": {"state": "SUCCEEDED", "metric": 0.1},
                                                                  "*": OK})
    assert ran == [] and ran.baseline == 1  # the trials kept, the baseline run again
    assert lines[0].endswith("4 finished trial(s) kept; the baseline runs again")
    assert again["handed_on"]["run"] == "baseline"
    _, lines, ran = study_lines(job(tmp_path), monkeypatch, {"*": OK})
    assert ran == [] and ran.baseline == 0 and lines[0].endswith("; the baseline's result kept")


def test_each_trial_and_the_baseline_is_one_line_with_its_values_metric_time_and_the_best_so_far(tmp_path,
                                                                                               monkeypatch):
    cfg = with_tuning(job(tmp_path), parallel_trials=1, max_failed_trials=2)
    record, lines, _ = study_lines(cfg, monkeypatch, {
        "baseline": {"state": "SUCCEEDED", "metric": 0.5}, "1": {"state": "SUCCEEDED", "metric": 0.4},
        "2": FAILED, "*": {"state": "SUCCEEDED", "metric": 0.45}})
    trials = {t["id"]: t for t in record["trials"]}
    ended = [line for line in lines if re.match(r"trial \d (SUCCEEDED|FAILED) ", line)]
    values = {i: " ".join(f"{k}={format_value(v)}" for k, v in trials[i]["parameters"].items()) for i in trials}
    done = {line.split()[1]: line for line in ended}
    assert done["1"] == f"trial 1 SUCCEEDED in 0.1 s (1/4 done): val_rmse 0.4 with {values['1']}; best so far: trial 1 " \
                        "(0.4)" + ("; baseline 0.5" if lines.index(done["1"]) > _index(lines, "baseline SUCCEEDED") else "")
    assert done["2"] == "trial 2 FAILED in 0.1 s (2/4 done): chief-0 (workerpool0-0, attempt 1) exited with status 1."
    assert done["4"] == (f"trial 4 SUCCEEDED in 0.1 s (4/4 done): val_rmse 0.45 with {values['4']}; best so far: "
                         "trial 1 (0.4); baseline 0.5")
    assert lines[0].startswith("baseline started: the job as it stands")  # first, in a slot of its own
    assert [line.split()[1] for line in lines if re.match(r"trial \d started: --batch_size=", line)] == ["1", "2", "3", "4"]
    (said,) = [line for line in lines if line.startswith("baseline SUCCEEDED")]
    assert said.startswith("baseline SUCCEEDED in 0.1 s: val_rmse 0.5 (the job as it stands); ")


def _index(lines: list[str], prefix: str) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(prefix))


def test_another_study_in_the_same_folder_is_refused(tmp_path, monkeypatch):
    from jobs.tuning.local import run_local_study

    fake_trials(monkeypatch, {"*": OK})
    run_local_study(job(tmp_path), log=lambda _: None)
    with pytest.raises(ConfigError) as err:
        run_local_study(with_tuning(job(tmp_path), goal="maximize"), log=lambda _: None)
    assert str(err.value).startswith("output.base_dir: ") and "holds another study" in str(err.value)


# -- the launcher's hooks ------------------------------------------------------------------------------------
PRINT_ENV = "import os, sys, time; print('metric file', os.environ.get('CLOUD_ML_HP_METRIC_FILE')); " \
            "sys.stdout.flush(); time.sleep(float(sys.argv[1]))"


@pytest.mark.timeout(60)
def test_launch_gives_each_replica_its_env_and_stops_on_the_event(tmp_path):
    from jobs.local.launch.outcome import Stopped
    from jobs.local.launch.supervisor import launch

    lines = []
    launch([sys.executable, "-c", PRINT_ENV, "0"], [1, 1], str(tmp_path / "a"), log=lines.append,
           replica_env=lambda role, index: {"CLOUD_ML_HP_METRIC_FILE": f"/x/{role}-{index}"})
    assert "[chief-0] metric file /x/chief-0" in lines and "[worker-0] metric file /x/worker-0" in lines
    stop, lines = threading.Event(), []
    timer = threading.Timer(1.0, stop.set)
    timer.start()
    with pytest.raises(Stopped):
        launch([sys.executable, "-c", PRINT_ENV, "60"], [1, 1], str(tmp_path / "b"), log=lines.append, grace_s=1,
               stop=stop)
    assert "[launcher] stop requested; stopping all replicas" in lines
    # stopped on the event, not after the replicas' 60 s: SIGTERM to both, SIGKILL after the grace
    assert "[launcher] stopping chief-0, worker-0 (SIGTERM, then SIGKILL after 1 s)" in lines
    assert_no_processes_left(str(tmp_path / "b"))


# -- a user's trainer tuned here -------------------------------------------------------------------------------
def study(tmp_path, *sets: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.tuning", "--config", JOB,
                           "--set", f"output.base_dir={tmp_path / 'study'}", *[a for s in sets for a in ("--set", s)]],
                          capture_output=True, text=True, cwd=str(ROOT), timeout=timeout)


@pytest.mark.timeout(180)
def test_a_users_trainer_is_tuned_with_4_trials_2_at_once(tmp_path):
    proc = study(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    base = tmp_path / "study"
    record = json.loads((base / "tuning.json").read_text())
    cfg = job(tmp_path)
    assert [t["id"] for t in record["trials"]] == ["1", "2", "3", "4"]
    for t in record["trials"]:
        assert t["state"] == "SUCCEEDED" and _inside(cfg, t["parameters"]), t
        folder = base / t["id"]
        assert t["model_dir"] == str(folder / "model") and (folder / "model" / "model.npz").is_file()
        trained = json.loads((folder / "model" / "trained.json").read_text())
        assert t["metric"] == trained["val_rmse"] and t["reported_tags"] == ["val_rmse"]
        assert {k: trained["args"][k] for k in t["parameters"]} == t["parameters"]  # the flags reached the trainer
        chief = [json.loads(line) for line in (folder / "hypertune" / "chief-0.metrics").read_text().splitlines()]
        worker = (folder / "hypertune" / "worker-0.metrics").read_text().splitlines()
        assert len(chief) == 3 == len(worker) and {r["trial"] for r in chief} == {t["id"]}  # CLOUD_ML_TRIAL_ID
        assert float(chief[-1]["val_rmse"]) == t["metric"]  # the last report counts
    best = min(record["trials"], key=lambda t: t["metric"])
    assert record["best_trial"] == {k: best[k] for k in ("id", "parameters", "metric", "model_dir")}
    out = proc.stdout.splitlines()
    (second,) = [i for i, line in enumerate(out) if line.startswith("trial 2 started: --batch_size=")]
    assert second < min(i for i, line in enumerate(out) if " SUCCEEDED in " in line)  # 2 trials at once
    assert json.loads(out[-1])["best_trial"] == record["best_trial"]


@pytest.mark.timeout(120)
def test_a_wrong_tag_stops_the_study_after_the_first_batch_with_one_line(tmp_path):
    proc = study(tmp_path, "tuning.metric=val_loss")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line == ("error: tuning.metric: trials 1, 2 ended (exit 0) without reporting 'val_loss', the study's "
                    "metric, with cloudml-hypertune; the trainer reported val_rmse; report it: hypertune.HyperTune()"
                    ".report_hyperparameter_tuning_metric(hyperparameter_metric_tag='val_loss', metric_value=...), or "
                    "set tuning.metric to a reported tag; valid choices: val_rmse")
    record = json.loads((tmp_path / "study" / "tuning.json").read_text())
    assert [t["id"] for t in record["trials"]] == ["1", "2"] and record["error"] == line.removeprefix("error: ")


@pytest.mark.timeout(240)
def test_ctrl_c_stops_every_trial_and_a_rerun_resumes_the_study(tmp_path):
    base = tmp_path / "study"
    slow = 'trainer.args=["--epochs", "12", "--seconds_per_epoch", "0.25"]'
    proc = subprocess.Popen([sys.executable, "-m", "jobs.tuning", "--config", JOB, "--set", f"output.base_dir={base}",
                             "--set", slow], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))

    def second_batch_running() -> bool:
        """Trials 3 and 4 active, and each one's chief and worker processes up (found by their environment, which
        names the trial's folder), however long that took on this machine."""
        try:
            states = [t["state"] for t in json.loads((base / "tuning.json").read_text())["trials"]]
        except (OSError, ValueError):
            return False
        return states == ["SUCCEEDED", "SUCCEEDED", "ACTIVE", "ACTIVE"] and all(
            replica_pid(str(base / trial) + "/", pool) for trial in ("3", "4") for pool in ("workerpool0", "workerpool1"))

    try:
        deadline = time.monotonic() + 120
        while not second_batch_running() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert second_batch_running(), proc.poll()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert_no_processes_left(str(base))
    assert "Traceback" not in stderr
    assert stdout.splitlines()[-1] == ("interrupted: trial(s) 3, 4 stopped; run the same command again to resume the "
                                       "study (finished trials are kept)")
    assert "[trial 3] [launcher] stopping chief-0, worker-0 (SIGTERM, then SIGKILL after 5 s)" in stdout
    first = json.loads((base / "tuning.json").read_text())
    assert [t["state"] for t in first["trials"]] == ["SUCCEEDED", "SUCCEEDED", "STOPPED", "STOPPED"]
    kept_model = (base / "1" / "model" / "model.npz").stat().st_mtime_ns

    again = study(tmp_path, slow)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "resuming the study in " in again.stdout and "2 finished trial(s) kept, trial(s) 3, 4 run again" in again.stdout
    assert "trial 1 started" not in again.stdout and "trial 5 started" not in again.stdout
    record = json.loads((base / "tuning.json").read_text())
    assert record["trials"][:2] == first["trials"][:2]
    assert [t["parameters"] for t in record["trials"][2:]] == [t["parameters"] for t in first["trials"][2:]]
    assert [t["state"] for t in record["trials"]] == ["SUCCEEDED"] * 4
    assert (base / "1" / "model" / "model.npz").stat().st_mtime_ns == kept_model


@pytest.mark.timeout(120)
@pytest.mark.process
def test_the_tune_component_gives_the_best_trials_model_and_the_study(tmp_path):
    from kfp.dsl import Artifact, Metrics, Model

    import components

    cfg = job(tmp_path)
    model, metrics, record = Model(uri=""), Metrics(uri=str(tmp_path / "m")), Artifact(uri="")
    logs, checkpoints = Artifact(uri=""), Artifact(uri="")
    components.definition("tune").python_func(config_json=cfg.to_json(), model=model, metrics=metrics, study=record,
                                tensorboard=logs, checkpoints=checkpoints)
    study_record = json.loads((tmp_path / "study" / "tuning.json").read_text())
    best, handed = study_record["best_trial"], study_record["handed_on"]  # the model that goes on: the better one
    folder = tmp_path / "study" / handed["id"]
    assert handed["id"] == (best["id"] if best["metric"] < study_record["baseline"]["metric"] else "baseline")
    assert model.uri == handed["model_dir"] == str(folder / "model")
    assert model.metadata["trial_id"] == handed["id"] and model.metadata["val_rmse"] == handed["metric"]
    assert metrics.metadata["val_rmse"] == handed["metric"] and metrics.metadata["trials"] == 4
    assert metrics.metadata["baseline_val_rmse"] == study_record["baseline"]["metric"]
    assert record.uri == str(tmp_path / "study" / "tuning.json") and record.metadata["best_trial"] == best
    assert record.metadata["handed_on"] == handed
    assert (logs.uri, checkpoints.uri) == (str(folder / "logs"), str(folder / "checkpoints"))
    wrong = job(tmp_path / "w", "tuning.metric=val_loss")
    with pytest.raises(SystemExit) as exit_:
        components.definition("tune").python_func(config_json=wrong.to_json(), model=Model(uri=""), metrics=metrics, study=record,
                                    tensorboard=logs, checkpoints=checkpoints)
    assert exit_.value.code == 2


#: search spaces for the test trainer, whose own values (--learning_rate 0.01 --units 8) give val_rmse ~0.27: far
#: below them (every trial worse), and around better ones (every trial better: ~0.15-0.21)
WORSE = {"learning_rate": {"type": "double", "min": 0.00001, "max": 0.00005, "scale": "log"},
         "units": {"type": "integer", "min": 4, "max": 8}}
BETTER = {"learning_rate": {"type": "double", "min": 0.03, "max": 0.06, "scale": "log"},
          "units": {"type": "integer", "min": 24, "max": 32}}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("space,goes_on", [(WORSE, "baseline"), (BETTER, "trial")])
@pytest.mark.process
def test_the_tune_step_hands_on_the_better_of_the_best_trial_and_the_job_as_it_stands(tmp_path, space, goes_on, capsys):
    """Real trials and a real baseline of the test trainer: a search space worse than the job's own values hands
    over the baseline's model and says so; one whose best trial is better hands over the trial's."""
    from kfp.dsl import Artifact, Metrics, Model

    import components

    cfg = with_tuning(job(tmp_path), parameters=space, max_trials=2, parallel_trials=2)
    model = Model(uri="")
    components.definition("tune").python_func(config_json=cfg.to_json(), model=model, metrics=Metrics(uri=str(tmp_path / "m")),
                                study=Artifact(uri=""), tensorboard=Artifact(uri=""), checkpoints=Artifact(uri=""))
    base = tmp_path / "study"
    record = json.loads((base / "tuning.json").read_text())
    baseline, best = record["baseline"], record["best_trial"]
    assert baseline["state"] == "SUCCEEDED" and baseline["reported_tags"] == ["val_rmse"]
    trained = json.loads((base / "baseline" / "model" / "trained.json").read_text())
    assert trained["args"]["learning_rate"] == 0.01 and trained["args"]["units"] == 8  # the job as it stands
    assert trained["val_rmse"] == baseline["metric"]
    out = capsys.readouterr().out
    if goes_on == "baseline":
        assert best["metric"] > baseline["metric"] and model.uri == str(base / "baseline" / "model")
        reason = (f"the study found nothing better than the job as it stands: trial {best['id']}'s val_rmse "
                  f"{format_value(best['metric'])} against the baseline's {format_value(baseline['metric'])}; the "
                  "baseline's model goes on")
    else:
        assert best["metric"] < baseline["metric"] and model.uri == best["model_dir"]
        reason = (f"the study beat the job as it stands: trial {best['id']}'s val_rmse {format_value(best['metric'])} "
                  f"against the baseline's {format_value(baseline['metric'])}; trial {best['id']}'s model goes on")
    assert record["handed_on"]["reason"] == reason and out.splitlines()[-1] == reason


CHECK_TRIAL = ("import json, os, sys; f = os.environ['CLOUD_ML_HP_METRIC_FILE']; "
               "print('seen', json.dumps({'dir': os.path.isdir(os.path.dirname(f)), 'file': f, 'argv': sys.argv[1:], "
               "'trial': os.environ['CLOUD_ML_TRIAL_ID'], 'model': os.environ['AIP_MODEL_DIR']}))")


@pytest.mark.timeout(60)
@pytest.mark.process
def test_a_trial_gets_its_flags_after_the_args_its_id_its_folders_and_a_ready_metric_folder(tmp_path):
    """cloudml-hypertune creates its file's folder check-then-create: replicas starting together would race
    there, so the folder exists before any replica starts."""
    from jobs.tuning.trial import trial_launch
    from jobs.rules.tuning_section import parse

    cfg = config_lib.load(JOB, [f"output.base_dir={tmp_path}", "trainer.module=", "trainer.args=[]",
                                f'container.command=["python", "-c", "{CHECK_TRIAL}"]', 'container.args=["--epochs=1"]'])
    lines = []
    trial = {"id": "7", "parameters": {"learning_rate": 0.5, "units": 9, "optimizer": "sgd", "batch_size": 64}}
    result = trial_launch(cfg, parse(cfg.tuning), trial, str(tmp_path), log=lines.append)
    assert result.returncode == 0, lines
    seen = {line.split("] ", 1)[0] + "]": json.loads(line.split(" seen ", 1)[1]) for line in lines if " seen " in line}
    assert set(seen) == {"[chief-0]", "[worker-0]"}
    for role, s in seen.items():
        assert s["dir"] and s["trial"] == "7" and s["model"] == f"{tmp_path}/7/model/"
        assert s["argv"] == ["--epochs=1", "--batch_size=64", "--learning_rate=0.5", "--optimizer=sgd", "--units=9"]
        assert s["file"] == f"{tmp_path}/7/hypertune/{role[1:-1]}.metrics"


CHECK_RUN = ("import json, os, sys; f = os.environ['CLOUD_ML_HP_METRIC_FILE']; "
             "print('seen', json.dumps({'dir': os.path.isdir(os.path.dirname(f)), 'file': f, 'argv': sys.argv[1:], "
             "'trial': os.environ.get('CLOUD_ML_TRIAL_ID'), 'job': os.environ['CLOUD_ML_JOB_ID'], "
             "'model': os.environ['AIP_MODEL_DIR'], 'declared': os.environ.get('DECLARED')}))")


@pytest.mark.timeout(60)
@pytest.mark.process
def test_a_run_beside_the_trials_is_the_job_as_it_is_in_its_own_study_folder(tmp_path):
    """measured_run (what a trial is made of) runs the job without a trial's flags or id: its own folder under
    the study's, the job's own arguments and declared variables, a ready hypertune file per replica."""
    from jobs.tuning.trial import measured_run

    cfg = config_lib.load(JOB, [f"output.base_dir={tmp_path}", "trainer.module=", "trainer.args=[]",
                                f'container.command=["python", "-c", "{CHECK_RUN}"]', 'container.args=["--epochs=1"]',
                                "trainer.env={DECLARED: 'yes'}"])
    lines = []
    result = measured_run(cfg, str(tmp_path), "baseline", job_id="tuning-fake-baseline", log=lines.append)
    assert result.returncode == 0, lines
    seen = {line.split("] ", 1)[0] + "]": json.loads(line.split(" seen ", 1)[1]) for line in lines if " seen " in line}
    assert set(seen) == {"[chief-0]", "[worker-0]"}
    for role, s in seen.items():
        assert s["dir"] and s["trial"] is None and s["job"] == "tuning-fake-baseline" and s["declared"] == "yes"
        assert s["model"] == f"{tmp_path}/baseline/model/" and s["argv"] == ["--epochs=1"]
        assert s["file"] == f"{tmp_path}/baseline/hypertune/{role[1:-1]}.metrics"


@pytest.mark.unit  # names a launcher, starts nothing: the launch is refused first
def test_the_docker_runner_takes_the_job_as_its_spec_says_and_refuses_extras(tmp_path, monkeypatch):
    """The docker runner's replicas read the job spec from a file, which carries no caller's arguments or
    variables: the one local launch refuses them there, before anything starts; a study says so in one line."""
    from jobs.local.launch import custom_job
    from jobs.tuning.trial import trial_launch
    from jobs.rules.tuning_section import parse

    monkeypatch.setenv("VTP_RUNNER", "docker")
    cfg = job(tmp_path)
    for extras in ({"args": ["--x=1"]}, {"env": {"A": "1"}}, {"replica_env": lambda role, index: {}}):
        with pytest.raises(ValueError, match="need the process runner"):
            custom_job.launch(cfg, str(tmp_path / "b"), **extras)
    with pytest.raises(ConfigError, match="a study runs its trials under the process runner"):
        trial_launch(cfg, parse(cfg.tuning), {"id": "1", "parameters": {"learning_rate": 0.5, "units": 9,
                                                                        "optimizer": "sgd", "batch_size": 64}},
                     str(tmp_path))
    assert not (tmp_path / "b").exists() and not (tmp_path / "1").exists()
