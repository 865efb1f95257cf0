"""The independent verdict on any model (``serving.eval_data``, jobs.evaluation.examples_file + jobs.steps.verify): a regressor and a
classifier trained here, exported, and judged on held-out examples in a process that never trained; every
figure checked against numpy on the Keras model's own predictions. The file's rules, one ``error:`` line per
line at fault; the task rule; the gate, the preflight and the pipeline carrying it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.evaluation import examples_file
from jobs.evaluation.verdict import decide_task, judge
from tests.conftest import ROOT
from jobfile import config as config_lib

FEATURES = 4


def _write_jsonl(path: Path, x, labels) -> Path:
    path.write_text("".join(json.dumps({"instance": [round(float(v), 6) for v in row], "label": label}) + "\n"
                            for row, label in zip(x, labels)))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A regressor (one output) and a 3-class softmax classifier, trained here on seeded data and exported as
    SavedModels; held-out examples for each and what the Keras models themselves predict on them."""
    import keras

    root = tmp_path_factory.mktemp("trained")
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(400, FEATURES)).astype("float32")
    held = rng.normal(size=(120, FEATURES)).astype("float32")  # never trained on
    w = rng.normal(size=(FEATURES, 1)).astype("float32")
    y, y_held = x @ w + 0.3, held @ w + 0.3

    def classes(a):
        return ((a[:, 0] > 0).astype(int) + (a[:, 1] > 0.6).astype(int)).tolist()

    regressor = keras.Sequential([keras.Input((FEATURES,), name="features"), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])
    regressor.compile("adam", "mse")
    regressor.fit(x, y, epochs=4, verbose=0)
    regressor.export(str(root / "regressor"), verbose=False)
    classifier = keras.Sequential([keras.Input((FEATURES,), name="features"), keras.layers.Dense(3, activation="softmax")])
    classifier.compile("adam", "sparse_categorical_crossentropy")
    classifier.fit(x, np.asarray(classes(x)), epochs=6, verbose=0)
    classifier.export(str(root / "classifier"), verbose=False)
    # the instances exactly as the file holds them (rounded), so numpy and the model see the same numbers
    held = np.round(held, 6).astype("float32")
    predicted = {"regressor": regressor.predict(held, verbose=0)[:, 0].astype("float64"),
                 "classifier": classifier.predict(held, verbose=0).argmax(axis=1).tolist()}
    keras.backend.clear_session()  # Keras' names (adam, adam_2, ...) start again for the tests after these
    return {"root": root,
            "regressor": {"dir": root / "regressor", "labels": [round(float(v), 6) for v in y_held[:, 0]],
                          "predicted": predicted["regressor"], "x": held},
            "classifier": {"dir": root / "classifier", "labels": classes(held),
                           "predicted": predicted["classifier"], "x": held}}


def _verify_in_a_fresh_process(model_dir: Path, eval_data: Path, sample: dict) -> dict:
    """jobs.steps.verify.verify in a process of its own (the verify step's): the record it returns."""
    code = ("import json, sys; from jobs.steps.verify import verify; "
            "print(json.dumps(verify(sys.argv[1], sys.argv[2], eval_data=sys.argv[3])['eval']))")
    proc = subprocess.run([sys.executable, "-c", code, str(model_dir), json.dumps(sample), str(eval_data)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_a_regressor_is_judged_on_held_out_examples_as_numpy_computes_it(trained, tmp_path):
    case = trained["regressor"]
    data = _write_jsonl(tmp_path / "eval.jsonl", case["x"], case["labels"])
    got = _verify_in_a_fresh_process(case["dir"], data, {"instances": [case["x"][0].tolist()]})
    y, p = np.asarray(case["labels"]), case["predicted"]
    assert got["task"] == "regression" and got["examples"] == 120 and got["output"] == "output_0"
    assert got["rmse"] == pytest.approx(np.sqrt(np.mean((p - y) ** 2)), rel=1e-4)
    assert got["mae"] == pytest.approx(np.mean(np.abs(p - y)), rel=1e-4)
    assert got["baseline_rmse"] == pytest.approx(np.std(y), rel=1e-6)  # always predicting the labels' mean
    assert got["r2"] == pytest.approx(1 - np.mean((p - y) ** 2) / np.var(y), rel=1e-3)
    assert got["task_rule"] == "the labels are numbers, not all whole" and got["data"] == str(data)


@pytest.mark.integration
def test_a_classifier_is_judged_with_per_class_figures_and_the_majority_baseline(trained, tmp_path):
    case = trained["classifier"]
    data = _write_jsonl(tmp_path / "eval.jsonl", case["x"], case["labels"])
    got = _verify_in_a_fresh_process(case["dir"], data, {"instances": [case["x"][0].tolist()]})
    y, p = np.asarray(case["labels"]), np.asarray(case["predicted"])
    assert got["task"] == "classification" and got["examples"] == 120
    assert got["accuracy"] == pytest.approx(float(np.mean(y == p)))
    counts = np.bincount(y, minlength=3)
    assert got["baseline_accuracy"] == pytest.approx(counts.max() / len(y)) and got["baseline_class"] == int(counts.argmax())
    for row in got["per_class"]:
        c = row["class"]
        predicted, support = int(np.sum(p == c)), int(np.sum(y == c))
        hit = int(np.sum((p == c) & (y == c)))
        assert (row["support"], row["predicted"], row["correct"]) == (support, predicted, hit)
        assert row["precision"] == (pytest.approx(hit / predicted) if predicted else None)
        assert row["recall"] == (pytest.approx(hit / support) if support else None)
    matrix = np.zeros((len(got["classes"]), len(got["classes"])), dtype=int)
    for t, q in zip(y, p):
        matrix[got["classes"].index(int(t)), got["classes"].index(int(q))] += 1
    assert got["confusion_matrix"] == matrix.tolist()
    assert got["task_rule"].startswith("whole-number labels and 3 scores per instance")


def test_evaluate_model_is_the_one_call_for_any_exported_folder(trained, tmp_path):
    """What a step comparing two models on the same examples calls (the baseline against the best trial)."""
    from jobs.steps.verify import VerifyError, evaluate_model

    case = trained["regressor"]
    data = _write_jsonl(tmp_path / "eval.jsonl", case["x"][:10], case["labels"][:10])
    got = evaluate_model(str(case["dir"]), str(data))
    assert got["examples"] == 10 and got["rmse"] == pytest.approx(
        np.sqrt(np.mean((case["predicted"][:10] - np.asarray(case["labels"][:10])) ** 2)), rel=1e-4)
    # an override: the same whole-number labels judged as a regression, not as classes
    ints = _write_jsonl(tmp_path / "ints.jsonl", case["x"][:10], [1, 0, 2, 1, 0, 2, 1, 0, 2, 1])
    classified = evaluate_model(str(trained["classifier"]["dir"]), str(ints))
    assert classified["task"] == "classification"
    regressed = evaluate_model(str(case["dir"]), str(ints), task="regression")
    assert regressed["task"] == "regression" and regressed["task_rule"] == "serving.eval_task"
    # instances that do not fit the signature: one line naming the field and the signature's inputs
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"instance": [1, 2], "label": 1.0}\n')
    with pytest.raises(VerifyError, match=r"^serving\.eval_data: input 'features' has shape \[1, 2\], the signature "
                                          r"serving_default takes features: float32 \[None, 4\]"):
        evaluate_model(str(case["dir"]), str(wrong))


# -- the rule: regression or classification ------------------------------------------------------------------
@pytest.mark.parametrize("labels, width, task", [
    (["cat", "dog"], 3, "classification"), ([True, False], 1, "classification"),
    ([0.5, 1.0], 1, "regression"), ([[1.0, 2.0]], 2, "regression"),
    ([0, 2, 1], 3, "classification"), ([0, 1, 1], 1, "classification"), ([3, 7, 12], 1, "regression")])
def test_the_task_follows_the_labels_and_the_outputs_width(labels, width, task):
    assert decide_task(labels, width)[0] == task


def test_a_binary_classifier_with_one_score_and_string_labels_through_a_class_name_output():
    arrays = {"score": np.array([[0.9], [0.2], [0.6], [0.4]])}
    got = judge(arrays, [1, 0, 0, 0])
    assert got["accuracy"] == 0.75 and got["prediction_rule"] == "score >= 0.5 is class 1"
    logits = judge({"logit": np.array([[2.0], [-1.0]])}, [1, 0])
    assert logits["accuracy"] == 1.0 and logits["prediction_rule"] == "score >= 0 is class 1"
    named = judge({"class_name": np.array([b"cat", b"dog", b"dog"], dtype=object),
                              "probabilities": np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]])},
                             ["cat", "cat", "dog"])
    assert named["output"] == "class_name" and named["accuracy"] == pytest.approx(2 / 3)
    assert named["baseline_class"] == "cat" and named["baseline_accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(examples_file.EvalError, match=r"^serving\.eval_output: serving_default has several outputs"):
        judge({"a": np.zeros((2, 1)), "b": np.zeros((2, 1))}, [0.5, 0.1])


# -- the file's rules (no TensorFlow) -------------------------------------------------------------------------
def _problems(tmp_path: Path, text: str, sample=None) -> list[str]:
    path = tmp_path / "eval.jsonl"
    path.write_text(text)
    request = ""
    if sample is not None:
        (tmp_path / "sample.json").write_text(json.dumps({"instances": [sample]}))
        request = str(tmp_path / "sample.json")
    return [str(p) for p in examples_file.eval_data_problems(str(path), request)]


@pytest.mark.parametrize("text, sample, expected", [
    ('{"instance": [1, 2], "label": 1}\nnot json\n', None, "line 2: not JSON"),
    ('{"instance": [1, 2]}\n', None, "line 1: has no 'label'; each line is"),
    ('[1, 2]\n', None, "line 1: is list [1, 2], not an object"),
    ('{"instance": [1, 2, 3], "label": 1}\n', [0.1, 0.2], "line 1: the instance is a list of 3 numbers; the sample "
                                                          "request's instances are a list of 2 numbers"),
    ('{"instance": [1, 2], "label": 1}\n{"instance": [1], "label": 1}\n', None,
     "line 2: the instance is a list of 1 numbers; line 1's instance is a list of 2 numbers"),
    ('{"instance": {"x": [1]}, "label": 1}\n', {"x": [1], "tag": "a"}, "the instance is an object with x (a list of "
                                                                      "1 numbers); the sample request's instances are"),
    ('{"instance": [1], "label": 1.5}\n{"instance": [2], "label": "cat"}\n', None,
     "line 2: label \"cat\" is a string; line 1's is a number: every label is of one kind"),
    ('{"instance": [1], "label": null}\n', None, "line 1: label null is not a label"),
    ('\n\n', None, "holds no example"),
])
def test_each_bad_line_is_one_problem_naming_the_line(tmp_path, text, sample, expected):
    problems = _problems(tmp_path, text, sample)
    assert len(problems) == 1 and problems[0].startswith("serving.eval_data: ") and expected in problems[0], problems
    assert "valid choices: " in problems[0] or "holds no example" in problems[0]


def test_many_bad_lines_are_five_lines_and_a_count(tmp_path):
    problems = _problems(tmp_path, "x\n" * 12)
    assert len(problems) == 6 and problems[-1].endswith("7 more line(s) with problems like these")


def test_a_missing_file_and_the_settings_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert [str(p) for p in examples_file.eval_data_problems(str(tmp_path / "nope.jsonl"))] == [
        f"serving.eval_data: {tmp_path / 'nope.jsonl'} does not exist (a --set value is relative to the current "
        "folder, a job file's to the file's folder); valid choices: a JSON Lines file of held-out examples here, one "
        'per line: {"instance": [0.1, 0.2], "label": 1.5}, no serving.eval_data (no held-out verdict)']
    assert examples_file.eval_data_problems("gs://b/eval.jsonl") == []  # read by the verify step, where it is
    cfg = config_lib.load("local", ["serving.eval_task=regression"])
    assert [p.field for p in examples_file.settings_problems(cfg.serving)] == ["serving.eval_task"]


def test_the_example_ships_held_out_examples_generated_as_its_data():
    """examples/tabular-regressor/eval.jsonl is what ``python -m trainer.data`` writes: new features of the
    trainer's own problem (its weights), none of them in the training data."""
    project = ROOT / "examples" / "tabular-regressor"
    sys.path.insert(0, str(project))
    try:
        from trainer import data
    finally:
        sys.path.remove(str(project))
    shipped = [json.loads(line) for line in (project / "eval.jsonl").read_text().splitlines()]
    made = [json.loads(line) for line in data.eval_lines()]
    assert [e["instance"] for e in shipped] == [e["instance"] for e in made]
    # a label is a float32 product rounded to 5 places: numpy's kernels differ by CPU (AVX-512 or AVX2), and the
    # 5th place of a few labels with them (seen: 2 of 256 by 1e-5)
    np.testing.assert_allclose([e["label"] for e in shipped], [e["label"] for e in made], rtol=0, atol=2e-5)
    (x, _), (vx, _) = data.make_data(2048, 7)
    held = np.asarray([json.loads(line)["instance"] for line in data.eval_lines()])
    seen = np.round(np.concatenate([x, vx]), 5)
    assert not any((seen == row).all(axis=1).any() for row in held)
    cfg = config_lib.load(str(project / "job.yaml"))
    assert cfg.serving.eval_data == str(project / "eval.jsonl")
    from jobs.rules import validate

    assert validate.validate(cfg).errors == []


def test_run_py_says_a_bad_eval_file_in_one_line_per_line(tmp_path):
    project = tmp_path / "p"
    import shutil

    shutil.copytree(ROOT / "examples" / "tabular-regressor", project, ignore=shutil.ignore_patterns("runs"))
    (project / "eval.jsonl").write_text('{"instance": [1, 2], "label": 1}\n')
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "run.py"), "validate", str(project / "job.yaml")],
                          capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"error: serving.eval_data: {project / 'eval.jsonl'}: line 1: the instance is a list of "
                                "2 numbers; the sample request's instances are a list of 8 numbers")


# -- where the verdict goes: the gate, the preflight, the pipeline ---------------------------------------------
def test_the_gate_sees_the_eval_figures_and_refuses_them_without_eval_data():
    from jobs.steps import gate
    from jobs.rules.gate_section import gate_problems

    record = {"eval": {"task": "regression", "rmse": 0.2, "mae": 0.1, "baseline_rmse": 1.0, "examples": 5,
                       "r2": 0.96}}
    figures = gate.verification_figures(record)
    assert figures["eval_rmse"] == 0.2 and figures["eval_baseline_rmse"] == 1.0 and figures["eval_examples"] == 5
    cfg = config_lib.load(str(ROOT / "examples" / "tabular-regressor" / "job.yaml"),
                          ['serving.gate.thresholds=["eval_rmse <= 0.3"]'])
    assert gate_problems(cfg) == []
    assert gate.evaluate(cfg.serving.gate, figures, None).passed
    without = cfg.with_overrides(["serving.eval_data="])
    assert [str(p) for p in gate_problems(without)] == [
        "serving.gate.thresholds[0]: eval_rmse is measured on serving.eval_data (held-out examples), which this job "
        "does not set; valid choices: serving.eval_data: eval.jsonl"]


def test_on_vertex_eval_data_is_a_cloud_storage_path_like_every_other():
    from jobs.rules import preflight

    cfg = config_lib.load(str(ROOT / "examples" / "tabular-regressor" / "job.yaml"),
                          ["output.base_dir=gs://team-bucket/runs/r"])
    errors, _ = preflight.job_problems(cfg, "team-proj", "us-central1")
    assert [str(e) for e in errors if e.field == "serving.eval_data"] == [
        f"serving.eval_data: {cfg.serving.eval_data!r}: only Cloud Storage (gs://) works here, not a path on this "
        "machine (Vertex cannot see it); valid choices: gs://<your bucket>/eval.jsonl"]
    for path in ("gs://team-bucket/eval.jsonl", "/gcs/team-bucket/eval.jsonl"):
        errors, _ = preflight.job_problems(cfg.with_overrides([f"serving.eval_data={path}"]), "team-proj", "us-central1")
        assert not [e for e in errors if e.field == "serving.eval_data"], errors
