"""The gate before the Model Registry (``serving.gate``, ``jobs/steps/gate.py``, ``components/gate``): each rule of the
section, each comparison, the verdict and its one line, better-than-parent against the Vertex AI stand-in
(Model Registry versions and evaluations, strictly decoded), and the gate step refusing and accepting under
kfp.local, where a refused model never reaches the upload step."""

import json
import math
import re
import subprocess
import sys
import types

import pytest

from jobs.steps import gate as gate_lib
from jobs.rules.gate_section import Bar, OPS, gate_problems, known_metrics, parse_bar
from jobs.rules.errors import CloudError
from tests.conftest import ROOT
from jobfile import config as config_lib

PARENT = "projects/my-proj/locations/europe-west4/models/42"


def _gate(*thresholds: str, parent: bool = False) -> config_lib.Gate:
    return config_lib.Gate(thresholds=list(thresholds), better_than_parent=parent)


def _cfg(*overrides: str, preset: str = "local") -> config_lib.JobConfig:
    return config_lib.load(preset, list(overrides))


def _lines(problems) -> list[str]:
    return [str(p) for p in problems]


# -- the section's rules ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("accuracy >= 0.8", ("accuracy", ">=", 0.8)),
    ("accuracy>0.8", ("accuracy", ">", 0.8)),
    ("val_rmse <= 3e-1", ("val_rmse", "<=", 0.3)),
    ("  validation/epoch_loss < -1.5 ", ("validation/epoch_loss", "<", -1.5)),
])
def test_a_threshold_parses_into_metric_comparison_and_number(text, expected):
    bar = parse_bar(text, "f")
    assert isinstance(bar, Bar) and (bar.metric, bar.op, bar.value) == expected


@pytest.mark.parametrize("text,line", [
    ("accuracy", "f: 'accuracy' is not METRIC OP NUMBER; valid choices: accuracy >= 0.8, val_rmse <= 0.3"),
    (">= 0.8", "f: '>= 0.8' is not METRIC OP NUMBER; valid choices: accuracy >= 0.8, val_rmse <= 0.3"),
    ("accuracy >= 0.8 0.9", "f: 'accuracy >= 0.8 0.9' is not METRIC OP NUMBER; valid choices: accuracy >= 0.8, "
                            "val_rmse <= 0.3"),
    ("accuracy == 0.8", "f: '==' in 'accuracy == 0.8' is not a comparison the gate makes; valid choices: >=, >, <=, <"),
    ("accuracy => 0.8", "f: '=>' in 'accuracy => 0.8' is not a comparison the gate makes; valid choices: >=, >, <=, <"),
    ("accuracy != 0.8", "f: '!=' in 'accuracy != 0.8' is not a comparison the gate makes; valid choices: >=, >, <=, <"),
    ("accuracy >= high", "f: 'high' in 'accuracy >= high' is not a number; valid choices: accuracy >= 0.8"),
    ("accuracy >= nan", "f: 'nan' in 'accuracy >= nan' is not a finite number (no figure passes a NaN bar); valid "
                        "choices: accuracy >= 0.8"),
    ("loss < inf", "f: 'inf' in 'loss < inf' is not a finite number (no figure passes a NaN bar); valid choices: "
                   "loss < 0.8"),
])
def test_a_bad_threshold_is_one_problem_naming_it_and_the_valid_form(text, line):
    assert str(parse_bar(text, "f")) == line


def test_built_in_job_refuses_a_metric_no_step_measures_and_keeps_order():
    cfg = _cfg('serving.gate.thresholds=["acc >= 0.8", "accuracy == 1", "accurcy >= 0.5", "train/loss < 2"]')
    lines = _lines(gate_problems(cfg))
    known = ", ".join(known_metrics(cfg))
    assert lines == [
        f"serving.gate.thresholds[0]: no step of this job measures 'acc'; valid choices: {known}",
        "serving.gate.thresholds[1]: '==' in 'accuracy == 1' is not a comparison the gate makes; valid choices: "
        ">=, >, <=, <",
        f"serving.gate.thresholds[2]: no step of this job measures 'accurcy' (did you mean 'accuracy'?); valid "
        f"choices: {known}"]


def test_the_built_in_jobs_metrics_come_from_verify_training_evaluator_and_tuning():
    known = known_metrics(_cfg())
    assert {"accuracy", "loss", "latency_ms_median", "train_loss", "train/accuracy"} <= set(known)
    assert "validation/accuracy" not in known  # no evaluator pool in the local preset
    with_evaluator = _cfg("topology.evaluator.replica_count=1", "topology.evaluator.machine_type=n1-standard-4")
    assert {"validation/accuracy", "validation_loss"} <= set(known_metrics(with_evaluator))
    tuned = _cfg()
    tuned.tuning = types.SimpleNamespace(metric="val_accuracy")  # the tuning study's section, where one exists
    assert "val_accuracy" in known_metrics(tuned)
    assert gate_problems(_cfg('serving.gate.thresholds=["val_accuracy >= 0.5"]'))
    tuned.serving.gate.thresholds = ["val_accuracy >= 0.5"]
    assert gate_problems(tuned) == []


def test_a_user_trainer_may_name_any_metric_before_it_ran():
    cfg = _cfg("trainer.module=trainer.task", 'serving.gate.thresholds=["val_rmse <= 0.3", "anything_at_all > 1"]')
    assert known_metrics(cfg) is None and gate_problems(cfg) == []


def test_better_than_parent_needs_a_parent_model_and_thresholds():
    assert _lines(gate_problems(_cfg("serving.gate.better_than_parent=true"))) == [
        "serving.gate.better_than_parent: needs serving.parent_model, the model whose default version this model "
        "must beat; valid choices: serving.parent_model: projects/PROJECT/locations/us-central1/models/ID, "
        "better_than_parent: false",
        "serving.gate.better_than_parent: compares the metrics of serving.gate.thresholds (each in its threshold's "
        "direction); there are none; valid choices: thresholds: [\"accuracy >= 0.8\"]"]
    bad_parent = _cfg("serving.gate.better_than_parent=true", 'serving.gate.thresholds=["accuracy >= 0.8"]',
                      f"serving.parent_model={PARENT}@3")
    assert _lines(gate_problems(bad_parent)) == [
        f"serving.parent_model: '{PARENT}@3' is not a Model Registry model name (no version: its default version is "
        "compared); valid choices: projects/PROJECT/locations/us-central1/models/ID"]
    good = _cfg("serving.gate.better_than_parent=true", 'serving.gate.thresholds=["accuracy >= 0.8"]',
                f"serving.parent_model={PARENT}")
    assert gate_problems(good) == []


def test_a_set_value_split_into_words_is_one_problem_saying_how_to_give_a_list():
    cfg = _cfg("serving.gate.thresholds=accuracy >= 0.8")
    assert _lines(gate_problems(cfg)) == [
        "serving.gate.thresholds: ['accuracy', '>=', '0.8'] looks like one threshold split into words (a --set value "
        "without brackets is split on spaces); give a list; valid choices: --set 'serving.gate.thresholds="
        "[\"accuracy >= 0.8\"]'"]


def test_validation_runs_the_gate_rules_and_the_loader_refuses_unknown_keys(tmp_path):
    from jobs.rules import validate
    from jobfile.errors import ConfigError

    report = validate.validate(_cfg('serving.gate.thresholds=["accuracy => 0.8"]'), check_data=False)
    assert [str(p) for p in report.errors if p.field.startswith("serving.gate")] == [
        "serving.gate.thresholds[0]: '=>' in 'accuracy => 0.8' is not a comparison the gate makes; valid choices: "
        ">=, >, <=, <"]
    job = tmp_path / "job.yaml"
    job.write_text("serving:\n  gate:\n    treshold: ['accuracy >= 0.8']\n")
    with pytest.raises(ConfigError) as err:
        config_lib.load(str(job))
    assert str(err.value) == ("serving.gate.treshold: unknown field; did you mean 'thresholds'? serving.gate has "
                              "these fields; valid choices: thresholds, better_than_parent, better_than_baseline")


def test_run_py_validate_prints_one_error_line_per_gate_problem(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "jobfile" / "presets" / "local.yaml").read_text()
                   + "\nserving:\n  gate:\n    thresholds: ['accuracy >= 0.8', 'loss << 1']\n    better_than_parent: true\n")
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "validate", str(job)],
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() + proc.stdout.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: serving.gate.thresholds[1]: '<<' in 'loss << 1' is not a comparison the gate makes; valid choices: "
        ">=, >, <=, <",
        "error: serving.gate.better_than_parent: needs serving.parent_model, the model whose default version this "
        "model must beat; valid choices: serving.parent_model: projects/PROJECT/locations/us-central1/models/ID, "
        "better_than_parent: false"]
    assert "Traceback" not in proc.stderr


# -- the verdict ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,measured,passed", [
    (">=", 0.81, True), (">=", 0.8, True), (">=", 0.79, False),
    (">", 0.81, True), (">", 0.8, False), (">", 0.79, False),
    ("<=", 0.79, True), ("<=", 0.8, True), ("<=", 0.81, False),
    ("<", 0.79, True), ("<", 0.8, False), ("<", 0.81, False),
])
def test_each_comparison_at_and_around_its_bar(op, measured, passed):
    result = gate_lib.evaluate(_gate(f"m {op} 0.8"), {"m": measured}, None)
    assert result.passed is passed
    assert result.lines == [f"m {measured:g} {op} 0.8: {'passed' if passed else 'missed'}"]
    assert (result.missed == "") is passed


@pytest.mark.parametrize("op", list(OPS))
def test_a_nan_never_passes(op):
    result = gate_lib.evaluate(_gate(f"loss {op} 0.5"), {"loss": math.nan}, None)
    assert not result.passed
    assert result.lines == [f"loss nan {op} 0.5: missed (NaN never passes)"]
    assert result.missed == (f"serving.gate.thresholds[0]: loss nan {op} 0.5 missed (NaN never passes), so the model "
                             "is not registered; valid choices: a model whose loss is a number")
    assert json.dumps(result.to_dict(), allow_nan=False)  # the record stays JSON: the NaN is written as "nan"
    assert result.to_dict()["bars"][0]["measured"] == "nan"


def test_every_bar_is_checked_and_the_first_missed_is_the_line():
    result = gate_lib.evaluate(_gate("accuracy >= 0.8", "loss <= 0.3", "latency_ms_median < 10"),
                               {"accuracy": 0.83, "loss": 0.45, "latency_ms_median": 12.5}, None)
    assert not result.passed
    assert result.lines == ["accuracy 0.83 >= 0.8: passed", "loss 0.45 <= 0.3: missed",
                            "latency_ms_median 12.5 < 10: missed"]
    assert result.missed == ("serving.gate.thresholds[1]: loss 0.45 <= 0.3 missed, so the model is not registered; "
                             "valid choices: loss <= 0.45 (what this model measured)")


@pytest.mark.parametrize("op,measured,choice", [(">", 0.8, ">= 0.8"), ("<", 0.3, "<= 0.3"), (">=", 0.7, ">= 0.7")])
def test_the_bar_offered_is_one_this_model_meets(op, measured, choice):
    result = gate_lib.evaluate(_gate(f"m {op} {0.8 if op.startswith('>') else 0.2}"), {"m": measured}, None)
    assert result.missed.endswith(f"; valid choices: m {choice} (what this model measured)")
    assert gate_lib.evaluate(_gate(f"m {choice}"), {"m": measured}, None).passed


def test_a_metric_the_run_did_not_measure_fails_naming_those_it_did():
    result = gate_lib.evaluate(_gate("val_rmse <= 0.3"), {"train/epoch_loss": 0.2, "latency_ms_median": 3.0}, None)
    assert not result.passed
    assert result.lines == ["val_rmse not measured by this run (measured: latency_ms_median, train/epoch_loss): missed"]
    assert result.missed == ("serving.gate.thresholds[0]: val_rmse was not measured by this run, so the model is not "
                             "registered; the metrics it measured are; valid choices: latency_ms_median, train/epoch_loss")


def test_no_bar_passes_with_a_note():
    result = gate_lib.evaluate(_gate(), {"accuracy": 0.1}, None)
    assert result.passed and result.checks == [] and result.notes == [
        "no bar: serving.gate sets no thresholds; every verified model is registered"]


def test_a_bad_spec_handed_to_evaluate_directly_is_one_line():
    with pytest.raises(gate_lib.GateError, match=r"^serving.gate.thresholds\[0\]: 'oops' is not METRIC OP NUMBER"):
        gate_lib.evaluate(_gate("oops"), {}, None)


@pytest.mark.parametrize("ours,passed", [(0.83, True), (0.81, True), (0.79, False)])
def test_better_than_parent_uses_each_metrics_first_threshold_direction(ours, passed):
    gate = _gate("accuracy >= 0.7", "loss < 1.0", "accuracy <= 0.99", parent=True)
    parent = f"{PARENT}@3"
    result = gate_lib.evaluate(gate, {"accuracy": ours, "loss": 0.3}, {"accuracy": 0.81, "loss": 0.35}, parent)
    assert result.lines[3:] == [f"accuracy {ours:g} >= 0.81 (parent {parent}): {'passed' if passed else 'missed'}",
                                f"loss 0.3 < 0.35 (parent {parent}): passed"]
    assert result.passed is passed
    if not passed:
        assert result.missed == (f"serving.gate.better_than_parent: accuracy 0.79 >= 0.81 (parent {parent}) missed, so "
                                 "the model is not registered; valid choices: better_than_parent: false")


def test_a_metric_the_parents_evaluation_lacks_is_a_note_not_a_bar():
    result = gate_lib.evaluate(_gate("accuracy >= 0.5", "loss < 1", parent=True), {"accuracy": 0.6, "loss": 0.5},
                               {"auPrc": 0.9, "loss": math.nan}, "m@1")
    assert result.passed and len(result.checks) == 2
    assert result.notes == ["better_than_parent: the parent m@1 has no accuracy in its evaluation; accuracy not "
                            "compared with it",
                            "better_than_parent: the parent m@1 has no loss in its evaluation; loss not compared with it"]


# -- what a run measured ----------------------------------------------------------------------------------------
def test_measured_gathers_every_source_and_the_verified_figure_wins():
    figures = gate_lib.measured(
        training={"train_loss": 0.5, "steps": 10, "strategy": "MultiWorkerMirroredStrategy", "ok": True},
        scalars={"validation/epoch_accuracy": 0.7, "train/loss": 0.52, "accuracy": 0.1},
        tuning={"val_rmse": 0.21},
        verification={"accuracy": 0.8, "loss": 0.4, "examples": 24, "latency_ms": {"median": 1.5, "first_call": 9.0},
                      "predictions": [{"a": 1}]})
    assert figures == {"train_loss": 0.52, "steps": 10.0, "validation/epoch_accuracy": 0.7,
                       "validation_epoch_accuracy": 0.7, "train/loss": 0.52, "accuracy": 0.8, "val_rmse": 0.21,
                       "loss": 0.4, "examples": 24.0, "latency_ms_median": 1.5, "latency_ms_first_call": 9.0}


@pytest.mark.parametrize("text,study,expected", [
    ("", "", {}),
    ('{"val_rmse": 0.21}', "", {"val_rmse": 0.21}),
    ('{"id": "3", "parameters": {"units": 8}, "metric": 0.21, "state": "SUCCEEDED"}', "val_rmse", {"val_rmse": 0.21}),
    ('{"metric": "val_rmse", "value": 0.21}', "", {"val_rmse": 0.21}),
])
def test_the_tuning_studys_best_metric_in_its_shapes(text, study, expected):
    assert gate_lib.tuning_figures(text, study) == expected


@pytest.mark.parametrize("text,message", [
    ("{oops", "tuning_metric: not JSON"),
    ("[1]", "tuning_metric: expected a JSON object"),
    ('{"metric": 0.2}', "tuning_metric: a best trial's \"metric\" without the study's metric name"),
])
def test_a_bad_tuning_figure_is_one_line(text, message):
    with pytest.raises(gate_lib.GateError) as err:
        gate_lib.tuning_figures(text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_evaluation_to_beat_is_the_newest_of_the_gates_own_else_the_newest():
    ours_old = {"name": "e1", "display_name": gate_lib.EVALUATION_NAME, "create_time": "2026-11-20T00:00:00Z"}
    ours_new = {"name": "e2", "display_name": gate_lib.EVALUATION_NAME, "create_time": "2026-11-21T00:00:00Z"}
    foreign = {"name": "e3", "display_name": "automl", "create_time": "2026-11-22T00:00:00Z"}
    assert gate_lib.evaluation_figures([ours_old, foreign, ours_new])["name"] == "e2"
    assert gate_lib.evaluation_figures([foreign, {**foreign, "name": "e4", "create_time": "2026-11-23T00:00:00Z"}])[
        "name"] == "e4"
    assert gate_lib.evaluation_figures([]) is None


def test_a_local_run_skips_the_parent_with_a_note_and_writes_the_record(tmp_path):
    gate = _gate("accuracy >= 0.8", parent=True)
    result = gate_lib.run(gate, {"accuracy": 0.9}, parent_model=PARENT, dry_run=True, record_dir=str(tmp_path))
    assert result.passed and result.parent is None
    assert result.notes == [f"better_than_parent: not compared on a local run (no Model Registry call); a Vertex run "
                            f"compares with the default version of {PARENT}"]
    assert json.loads((tmp_path / "gate.json").read_text()) == result.to_dict()


# -- better than the baseline: the job as it stands, run beside the study ----------------------------------------
def _study(best: float, baseline: float | None, goal: str = "minimize", state: str = "SUCCEEDED") -> dict:
    """A study's record as jobs.tuning.local and pick_model write it: trial 3 the best, the baseline beside it."""
    from jobs.rules import tuning_rules

    trial = {"id": "3", "state": "SUCCEEDED", "metric": best, "parameters": {"units": 21}, "model_dir": "/r/3/model"}
    run = {"id": "baseline", "state": state, "metric": baseline, "model_dir": "/r/baseline/model"}
    study = {"metric": "val_rmse", "goal": goal, "trials": [trial], "best_trial": trial, "baseline": run}
    study["handed_on"] = tuning_rules.handed_on_run(trial, run, goal, "val_rmse")
    return study


def test_better_than_baseline_passes_a_trial_that_beat_the_job_as_it_stands():
    gate = config_lib.Gate(thresholds=["val_rmse <= 0.5"], better_than_baseline=True)
    result = gate_lib.evaluate(gate, {"val_rmse": 0.12}, None, study=_study(0.12, 0.166))
    assert result.passed and result.lines == ["val_rmse 0.12 <= 0.5: passed",
                                              "val_rmse 0.12 < 0.166 (the baseline's): passed"]
    bar = result.to_dict()["bars"][1]
    assert (bar["field"], bar["op"], bar["value"], bar["measured"]) == ("serving.gate.better_than_baseline", "<",
                                                                       0.166, 0.12)
    maximize = gate_lib.evaluate(config_lib.Gate(better_than_baseline=True), {}, None,
                                 study=_study(0.91, 0.88, goal="maximize"))
    assert maximize.passed and maximize.lines == ["val_rmse 0.91 > 0.88 (the baseline's): passed"]


def test_better_than_baseline_refuses_when_the_study_found_nothing_better():
    gate = config_lib.Gate(thresholds=["val_rmse <= 1.5"], better_than_baseline=True)
    study = _study(0.98, 0.166)  # the baseline's model went on: the gate refuses it, the thresholds passed
    result = gate_lib.evaluate(gate, {"val_rmse": 0.166}, None, study=study)
    assert not result.passed and result.lines == ["val_rmse 0.166 <= 1.5: passed",
                                                  "val_rmse 0.166 < 0.166 (the baseline's): missed"]
    assert result.missed == (
        "serving.gate.better_than_baseline: the study found nothing better than the job as it stands: trial 3's "
        "val_rmse 0.98 against the baseline's 0.166; the baseline's model goes on, so the model is not registered; "
        "valid choices: better_than_baseline: false, a search space around the job's own values")
    tie = gate_lib.evaluate(config_lib.Gate(better_than_baseline=True), {}, None, study=_study(0.166, 0.166))
    assert not tie.passed  # a tie goes to the baseline, which is no gain of the study


@pytest.mark.parametrize("study,why", [
    (None, "no study record reached the gate"),
    ({**_study(0.12, None, state="FAILED"), "baseline": {"id": "baseline", "state": "FAILED", "error": "exit 1"}},
     "the baseline has no val_rmse (FAILED: exit 1)"),
])
def test_better_than_baseline_never_passes_without_the_baselines_figure(study, why):
    result = gate_lib.evaluate(config_lib.Gate(better_than_baseline=True), {"val_rmse": 0.12}, None, study=study)
    assert not result.passed and result.lines == [
        f"val_rmse better than the baseline's: {why}, so nothing shows the study beat the job as it stands: missed"
        if study else
        f"metric better than the baseline's: {why}, so nothing shows the study beat the job as it stands: missed"]
    assert result.missed.startswith("serving.gate.better_than_baseline: ")
    json.dumps(result.to_dict(), allow_nan=False)  # the record stays strict JSON (no NaN bar)


def test_better_than_baseline_needs_a_study_with_its_baseline():
    tuning = str(ROOT / "examples" / "tabular-regressor" / "tune.yaml")
    assert gate_problems(config_lib.load(tuning, ["serving.gate.better_than_baseline=true"])) == []
    (line,) = _lines(gate_problems(_cfg("serving.gate.better_than_baseline=true")))
    assert line.startswith("serving.gate.better_than_baseline: needs a tuning section: the baseline is the job as it "
                           "stands, run beside a study's trials") and line.endswith("better_than_baseline: false")
    (line,) = _lines(gate_problems(config_lib.load(tuning, ["serving.gate.better_than_baseline=true",
                                                                     "tuning.baseline=false"])))
    assert line.startswith("serving.gate.better_than_baseline: needs tuning.baseline: true") and \
        "valid choices: tuning.baseline: true, better_than_baseline: false" in line
    from jobfile.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^tuning.baseline: expected true or false"):
        config_lib.load(tuning, ["tuning.baseline=sometimes"])


def test_the_gate_step_reads_the_study_and_refuses_the_baselines_own_model(tmp_path):
    """The gate component with the study's record (tune's or pick_model's ``study``): a model that is the
    baseline's own is refused with one line, nothing downstream runs."""
    from kfp.dsl import Artifact, Metrics, Model

    import components

    (tmp_path / "study.json").write_text(json.dumps(_study(0.98, 0.166)))
    cfg = config_lib.load(str(ROOT / "examples" / "tabular-regressor" / "tune.yaml"),
                          ["serving.gate.better_than_baseline=true", f"output.base_dir={tmp_path}"])
    gated = Model(uri="")
    with pytest.raises(SystemExit) as exit_:
        components.definition("gate").python_func(model=Model(uri="/r/baseline/model"), gated_model=gated,
                                    metrics=Metrics(uri=str(tmp_path / "m")), result=Artifact(uri=str(tmp_path / "r")),
                                    config_json=cfg.to_json(), tuning_metric=json.dumps({"val_rmse": 0.166}),
                                    study=Artifact(uri=str(tmp_path / "study.json")), dry_run=True,
                                    record_dir=str(tmp_path))
    assert exit_.value.code == 1 and gated.uri == ""
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["passed"] is False and record["missed"].startswith("serving.gate.better_than_baseline: the study "
                                                                     "found nothing better than the job as it stands")


# -- better than the parent, against the Vertex AI stand-in -----------------------------------------------------
def _seed(vertex, *evaluations: dict, versions=("1", "2", "3")):
    vertex.add_model(PARENT, versions=versions, evaluations={versions[-1]: list(evaluations)} if evaluations else None)


def _evaluation(metrics: dict, name: str = gate_lib.EVALUATION_NAME, when: str = "2026-11-21T10:00:00Z") -> dict:
    return {"displayName": name, "metricsSchemaUri": gate_lib.SCHEMA_URIS["classification"], "metrics": metrics,
            "createTime": when}


def test_parent_better_refuses(vertex, tmp_path):
    _seed(vertex, _evaluation({"accuracy": 0.9, "loss": 0.2}))
    result = gate_lib.run(_gate("accuracy >= 0.8", parent=True), {"accuracy": 0.85}, parent_model=PARENT,
                          api_endpoint=vertex.url, record_dir=str(tmp_path))
    assert not result.passed
    assert result.lines == ["accuracy 0.85 >= 0.8: passed", f"accuracy 0.85 >= 0.9 (parent {PARENT}@3): missed"]
    assert result.missed == (f"serving.gate.better_than_parent: accuracy 0.85 >= 0.9 (parent {PARENT}@3) missed, so "
                             "the model is not registered; valid choices: better_than_parent: false")
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["parent"]["version"] == f"{PARENT}@3" and record["parent"]["metrics"] == {"accuracy": 0.9, "loss": 0.2}
    assert [r.path for r in vertex.requests] == [f"/v1/{PARENT}", f"/v1/{PARENT}%403/evaluations"]


def test_parent_worse_accepts(vertex):
    _seed(vertex, _evaluation({"accuracy": 0.7}, name="older", when="2026-11-22T00:00:00Z"),
          _evaluation({"accuracy": 0.8}), _evaluation({"accuracy": 0.75}, when="2026-11-20T00:00:00Z"))
    result = gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.85}, parent_model=PARENT,
                          api_endpoint=vertex.url)
    assert result.passed  # the gate's own newest evaluation (0.8) is the one to beat, read over two pages
    assert result.lines[1] == f"accuracy 0.85 >= 0.8 (parent {PARENT}@3): passed"
    assert len(vertex.calls("GET", "/evaluations$")) == 2


def test_parent_without_an_evaluation_accepts_with_a_note(vertex):
    _seed(vertex)
    result = gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.6}, parent_model=PARENT,
                          api_endpoint=vertex.url)
    assert result.passed and result.lines == ["accuracy 0.6 >= 0.5: passed"]
    assert result.notes == [f"better_than_parent: the parent's default version {PARENT}@3 has no evaluation in the "
                            "Model Registry; nothing to beat (the next run compares with this model's, recorded at "
                            "registration)"]


def test_a_parent_that_does_not_exist_is_one_line(vertex):
    with pytest.raises(CloudError) as err:
        gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.6}, parent_model=PARENT,
                     api_endpoint=vertex.url)
    assert str(err.value) == (f"reading the parent model {PARENT} from the Model Registry: 404 Model {PARENT} not "
                              "found. (serving.parent_model names no model there; valid choices: a model of gcloud ai "
                              "models list --region europe-west4)")


def test_a_503_is_retried_by_the_policy(vertex):
    _seed(vertex, _evaluation({"accuracy": 0.5}))
    vertex.fault(503, path_pattern="/evaluations$", times=2)
    result = gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.6}, parent_model=PARENT,
                          api_endpoint=vertex.url)
    assert result.passed and len(vertex.calls("GET", "/evaluations$")) == 3


@pytest.mark.timeout(30)
def test_a_503_that_lasts_gives_up_after_the_policys_time_in_one_line(vertex, monkeypatch):
    monkeypatch.setenv("VTP_CLOUD_RETRY_TOTAL_S", "1")
    _seed(vertex)
    vertex.fault(503, path_pattern=r"/models/42$", times=None)
    with pytest.raises(CloudError) as err:
        gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.6}, parent_model=PARENT,
                     api_endpoint=vertex.url)
    assert str(err.value) == (f"reading the parent model {PARENT} from the Model Registry: gave up after retrying for "
                              "1 s: 503 stand-in fault 503")
    assert len(vertex.calls("GET", r"/models/42$")) > 1


def test_a_garbage_answer_is_one_line(vertex):
    _seed(vertex)
    vertex.fault("html", path_pattern="/evaluations$")
    with pytest.raises(CloudError) as err:
        gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.6}, parent_model=PARENT,
                     api_endpoint=vertex.url)
    assert str(err.value) == (f"reading the evaluations of {PARENT}@3 from the Model Registry: the answer was not the "
                              "API's JSON (an HTML page or garbage: a proxy in the way, or a wrong endpoint?)")


def test_the_figures_recorded_on_a_version_are_what_the_next_run_beats(vertex, tmp_path):
    """Run 1 registers version 4 of the parent (the upload step with the gate's record): its figures become an
    evaluation of that version, strictly decoded as an ImportModelEvaluationRequest. Run 2 reads it as the
    figures of the parent's default version."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format
    from google_cloud_pipeline_components.types.artifact_types import VertexModel
    from kfp.dsl import Artifact, Model

    from components.upload_model.component import upload_model

    _seed(vertex)
    first = gate_lib.evaluate(_gate("accuracy >= 0.5", "loss < 1"), {"accuracy": 0.8, "loss": 0.3, "x": math.nan}, None)
    (tmp_path / "gate.json").write_text(json.dumps(first.to_dict()))
    out = VertexModel(name="vertex_model", uri="", metadata={})
    upload_model.python_func(model=Model(uri="gs://b/runs/x/model", metadata={"job": "flowers"}), vertex_model=out,
                             location="europe-west4", project="my-proj", parent_model=PARENT,
                             pipeline_job="projects/my-proj/locations/europe-west4/pipelineJobs/j-1",
                             api_endpoint=vertex.url, gate_record=Artifact(uri=str(tmp_path / "gate.json")))
    (imported,) = vertex.calls("POST", "/evaluations:import$")
    assert imported.path == f"/v1/{PARENT}%404/evaluations:import"
    request = aiplatform_v1.ImportModelEvaluationRequest.pb()()
    json_format.ParseDict(imported.json(), request)  # strictly: no unknown field
    body = imported.json()["modelEvaluation"]
    assert body["displayName"] == gate_lib.EVALUATION_NAME
    assert body["metricsSchemaUri"] == "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml"
    assert body["metrics"] == {"accuracy": 0.8, "loss": 0.3}  # the NaN is left out (a Struct cannot hold it)
    assert body["metadata"]["pipeline_job_resource_name"].endswith("/pipelineJobs/j-1")
    assert out.metadata["evaluation"].startswith(f"{PARENT}/evaluations/")
    second = gate_lib.run(_gate("accuracy >= 0.5", parent=True), {"accuracy": 0.79}, parent_model=PARENT,
                          api_endpoint=vertex.url)
    assert second.lines[1] == f"accuracy 0.79 >= 0.8 (parent {PARENT}@4): missed" and not second.passed


def test_recording_is_not_repeated_after_a_5xx_and_says_what_may_exist(vertex):
    _seed(vertex)
    vertex.fault(500, path_pattern="/evaluations:import$")
    with pytest.raises(CloudError) as err:
        gate_lib.record_on_version(f"{PARENT}@3", {"metrics": {"val_rmse": 0.2}, "passed": True, "lines": []},
                                   api_endpoint=vertex.url)
    assert str(err.value) == (f"recording the gate's metrics on {PARENT}@3 as a Model Registry evaluation: 500 "
                              "stand-in fault 500; an evaluation may have been recorded even so: GET "
                              f"https://europe-west4-aiplatform.googleapis.com/v1/{PARENT}@3/evaluations")
    assert len(vertex.calls("POST", "/evaluations:import$")) == 1


def test_a_regressors_figures_use_the_regression_schema():
    assert gate_lib.schema_for({"val_rmse": 0.2}).endswith("/regression_metrics_1.0.0.yaml")
    assert gate_lib.schema_for({"validation/epoch_accuracy": 0.2}).endswith("/classification_metrics_1.0.0.yaml")


# -- the gate step ---------------------------------------------------------------------------------------------
LIGHT = """
import json, sys
from kfp.dsl import Artifact, Metrics, Model
from components.gate.component import gate
from jobfile import config as config_lib
cfg = config_lib.load("local", ['serving.gate.thresholds=["accuracy >= 0.8"]'])
out = [Model(name="gated_model", uri=""), Metrics(name="metrics", uri=sys.argv[1] + "/m"), Artifact(name="result", uri=sys.argv[1] + "/r.json")]
gate.python_func(model=Model(uri="/x/model", metadata={"job": "j"}), gated_model=out[0], metrics=out[1], result=out[2],
                 config_json=cfg.to_json(), verification=Artifact(uri=sys.argv[1] + "/v.json"), dry_run=True)
heavy = sorted(m for m in ("tensorflow", "keras", "google.cloud.aiplatform", "google.cloud.aiplatform_v1") if m in sys.modules)
print(json.dumps({"heavy": heavy, "uri": out[0].uri, "meta": out[0].metadata, "metrics": out[1].metadata}))
"""


def test_the_gate_step_imports_neither_tensorflow_nor_aiplatform_on_a_local_run(tmp_path):
    (tmp_path / "v.json").write_text(json.dumps({"accuracy": 0.9, "latency_ms": {"median": 1.0, "first_call": 2.0}}))
    proc = subprocess.run([sys.executable, "-c", LIGHT, str(tmp_path)], capture_output=True, text=True, cwd=str(ROOT),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["heavy"] == [] and seen["uri"] == "/x/model"
    assert seen["meta"] == {"job": "j", "gate": {"passed": True, "bars": ["accuracy 0.9 >= 0.8: passed"]}}
    assert seen["metrics"] == {"gate_passed": 1.0, "accuracy": 0.9}
    assert "gate: accuracy 0.9 >= 0.8: passed" in proc.stdout


def _kfp_local_run(tmp_path, cfg, accuracy: float, **gate_args) -> tuple[Exception | None, str]:
    """verify's record and train's Metrics (from a stand-in step) -> gate -> upload_model (dry run), under
    kfp.local; returns (the pipeline's exception or None, the output)."""
    import contextlib
    import io

    from kfp import dsl, local
    from kfp.dsl import Artifact, Metrics, Model, Output

    import components
    from components.base import component

    @component
    def trained(metrics: Output[Metrics]):
        metrics.log_metric("train_loss", 0.5)
        metrics.log_metric("train_accuracy", 0.7)

    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "verification.json").write_text(json.dumps({"accuracy": accuracy, "loss": 0.4,
                                                            "latency_ms": {"median": 1.0, "first_call": 5.0}}))

    @dsl.pipeline(name="gate-test")
    def pipeline(config_json: str):
        model = dsl.importer(artifact_uri=str(tmp_path / "model"), artifact_class=Model)
        verification = dsl.importer(artifact_uri=str(tmp_path / "verification.json"), artifact_class=Artifact)
        train = trained()
        gated = components.definition("gate")(model=model.output, verification=verification.output,
                                training_metrics=train.outputs["metrics"], config_json=config_json,
                                record_dir=str(tmp_path), **gate_args)
        components.definition("upload_model")(model=gated.outputs["gated_model"], location="europe-west4", dry_run=True,
                                record_dir=str(tmp_path), gate_record=gated.outputs["result"])

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            pipeline(config_json=cfg.to_json())
        except RuntimeError as exc:
            return exc, out.getvalue()
    return None, out.getvalue()


@pytest.mark.timeout(120)
@pytest.mark.process
def test_the_gate_step_refuses_and_the_upload_never_runs(tmp_path):
    cfg = _cfg('serving.gate.thresholds=["train_loss < 1", "accuracy >= 0.8"]')
    error, output = _kfp_local_run(tmp_path, cfg, accuracy=0.75, dry_run=True)
    assert error is not None and "Inner task failed" in str(error) and "'gate'" in str(error).replace("\x1b", "")
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("error:")]
    assert errors == ["error: serving.gate.thresholds[1]: accuracy 0.75 >= 0.8 missed, so the model is not registered; "
                      "valid choices: accuracy >= 0.75 (what this model measured)"]
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["passed"] is False and record["lines"] == ["train_loss 0.5 < 1: passed", "accuracy 0.75 >= 0.8: missed"]
    assert not (tmp_path / "model_upload_request.json").exists(), "a refused model must never reach the upload"


@pytest.mark.timeout(120)
@pytest.mark.process
def test_the_gate_step_accepts_and_the_upload_runs(tmp_path, vertex):
    """Not a dry run: the parent's figures come from the stand-in's Model Registry (worse than this model)."""
    vertex.add_model(PARENT, evaluations={"1": [_evaluation({"accuracy": 0.8})]})
    cfg = _cfg('serving.gate.thresholds=["train_accuracy >= 0.6", "accuracy >= 0.8"]', "serving.gate.better_than_parent=true",
               f"serving.parent_model={PARENT}")
    error, output = _kfp_local_run(tmp_path, cfg, accuracy=0.85, api_endpoint=vertex.url)
    assert error is None, output[-3000:]
    record = json.loads((tmp_path / "gate.json").read_text())
    assert record["passed"] is True and record["lines"] == [
        "train_accuracy 0.7 >= 0.6: passed", "accuracy 0.85 >= 0.8: passed",
        f"accuracy 0.85 >= 0.8 (parent {PARENT}@1): passed"]
    upload = json.loads((tmp_path / "model_upload_request.json").read_text())
    assert upload["model"]["artifactUri"] == str(tmp_path / "model")
    (gate_out,) = (tmp_path / "root").glob("*/gate/executor_output.json")
    artifacts = json.loads(gate_out.read_text())["artifacts"]
    assert artifacts["gated_model"]["artifacts"][0]["uri"] == str(tmp_path / "model")
    assert artifacts["metrics"]["artifacts"][0]["metadata"] == {"gate_passed": 1.0, "train_accuracy": 0.7, "accuracy": 0.85}
    assert re.search(r"gate: passed \(3 bars\)", output)


def test_an_upstream_record_that_is_not_json_is_one_line(tmp_path):
    """What the gate and pick_model components say of an artifact that is missing or not JSON (one line each)."""
    from jobs.run_records import records

    garbage = tmp_path / "verification"
    garbage.write_text("<html>not json</html>")
    for path in (garbage, tmp_path / "missing"):
        with pytest.raises(ValueError) as exc:
            records.artifact_json(str(path), "verification", "the verify step's JSON record",
                                  "verify_model's verification output")
        line = str(exc.value)
        assert "\n" not in line and line.startswith(f"verification: {path} is not the verify step's JSON record (")
        assert line.endswith("); valid choices: verify_model's verification output")
    (tmp_path / "ok").write_text('{"accuracy": 0.9}')
    assert records.artifact_json(str(tmp_path / "ok"), "v", "x", "y") == {"accuracy": 0.9}
