"""The run report (jobs.steps.reporting.page): built from a run folder (the built-in classifier's, a Keras trainer's),
every scalar plotted and named, classifier sections only for a classifier; rendered in a real headless
Chromium."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from jobs.rules import tuning_rules
from jobs.run_records import provenance, records
from jobs.steps.reporting import data as report_data
from jobs.images.user_code import trainer_version
from jobfile import config as config_lib

CLASSES = ["daisy", "dandelion", "roses"]


def _png_b64() -> str:
    import tensorflow as tf

    pixels = tf.cast(tf.fill((8, 8, 3), 200), tf.uint8)
    return base64.b64encode(tf.io.encode_png(pixels).numpy()).decode("ascii")


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A run folder as a finished run leaves it: event files (with a resume that rewrote steps 20..30),
    metrics.json, verification.json with a confusion matrix and a gallery, checkpoints, two attempts."""
    import tensorflow as tf

    base = tmp_path_factory.mktemp("run")
    writer = tf.summary.create_file_writer(str(base / "logs"))
    with writer.as_default():
        for step, loss in [(10, 1.0), (20, 0.9), (30, 0.8), (20, 0.5), (30, 0.25), (40, 0.125)]:
            tf.summary.scalar("train/loss", loss, step=step)
            tf.summary.scalar("train/accuracy", 1 - loss / 2, step=step)
    writer.flush()
    validation = tf.summary.create_file_writer(str(base / "logs" / "validation"))  # the chief's validation passes
    with validation.as_default():
        for step, loss in [(20, 0.7), (40, 0.35)]:
            tf.summary.scalar("loss", loss, step=step)
            tf.summary.scalar("accuracy", 1 - loss / 2, step=step)
    validation.flush()
    (base / "data").mkdir()
    (base / "data" / "manifest.json").write_text(json.dumps({  # the prepared data's, as trainers.prepare writes it
        "format_version": 1, "classes": CLASSES, "image_size": 32, "encoding": "raw",
        "counts": {"train": {"daisy": 31, "dandelion": 33, "roses": 29}, "validation": {c: 9 for c in CLASSES}},
        "num_examples": {"train": 93, "validation": 27}}))
    (base / "steps.json").write_text(json.dumps({
        "started": "2026-11-24T20:44:47+00:00", "running": ["report"],
        "steps": [{"name": "validate-config", "seconds": 0.15, "status": "SUCCESS"},
                  {"name": "train", "seconds": 14.04, "status": "SUCCESS"}]}))
    for attempt in (1, 2):
        (base / "logs" / "replicas" / f"attempt-{attempt}").mkdir(parents=True)
    (base / "checkpoints").mkdir()
    for step in (30, 40):
        (base / "checkpoints" / f"ckpt-{step}.index").write_bytes(b"")
    (base / "metrics.json").write_text(json.dumps({
        "steps": 40, "resumed_from_step": 20, "train_loss": 0.125, "train_accuracy": 0.94, "replicas": 2,
        "strategy": "CollectiveAllReduceStrategy", "global_batch_size": 16, "examples_per_second": 120.5}))
    gallery = [{"label": c, "predicted": p, "probability": 0.9, "png_base64": _png_b64()}
               for c, p in [("roses", "dandelion"), ("daisy", "daisy"), ("dandelion", "dandelion")]]
    (base / "verification.json").write_text(json.dumps({
        "accuracy": 0.889, "loss": 0.3, "examples": 27, "split": "validation", "classes": CLASSES,
        "confusion_matrix": [[9, 0, 0], [0, 8, 1], [0, 2, 7]], "gallery": gallery, "parameters": 155171,
        "framework_version": "2.21.0", "metadata": {"trained_precision": "mixed_bfloat16"}}))
    return base


def _cfg(base: Path):
    return config_lib.load("local", [f"output.base_dir={base}"])


def test_report_content(run_folder):
    from jobs.steps.reporting import data as report_data
    from jobs.run_records.tensorboard import read_scalars

    scalars = read_scalars(str(run_folder / "logs"))
    assert scalars["train/loss"] == [(10, 1.0), (20, 0.5), (30, 0.25), (40, 0.125)]  # the resumed values win
    content = report_data.gather(_cfg(run_folder), str(run_folder))
    page = content["html"]
    for needle in ("id='curves'", "id='confusion-matrix'", "id='samples'", "ckpt-30, ckpt-40",
                   "launcher attempts: 2", "resumed from step 20", "120.5 examples/s", "accuracy <b>0.889</b>",
                   "chief 1× n1-standard-4; worker 1× n1-standard-4"):
        assert needle in page, needle
    assert "http://" not in page and "https://" not in page  # self-contained
    assert content["confusion_matrix"] == [[9, 0, 0], [0, 8, 1], [0, 2, 7]]
    assert "Validation accuracy **0.889**" in content["markdown"]
    # is it any good: the figure, its yardsticks, the weakest class, the weight of one image
    for needle in ("Validation accuracy 0.889 (24 of 27 held-out images right)",
                   "always answering the most common class (daisy, 9 of 27) scores 0.333; guessing at random 0.333",
                   "Weakest class: roses, recall 0.778 (7 of 9 found)", "one image is 3.7 points of accuracy",
                   "Training accuracy over the last logged steps: 0.940"):
        assert needle in page, needle
    # hyperparameters, from the config and what the trainer reports it used
    for key, value in (("model", "small_cnn"), ("optimizer", "adam"), ("learning rate", "0.002"),
                       ("training length", "30 steps"), ("batch", "8 per replica, 16 global"), ("image size", "32×32"),
                       ("precision", "auto"), ("seed", "42 (op-deterministic)"), ("checkpoints", "every 10 steps, 3 kept")):
        assert f"<th>{key}</th><td>{value}" in page, key
    # the data, per split and class, from the manifest
    assert ("<table id='data'><tr><th>class</th><th>train</th><th>validation</th></tr><tr><td>daisy</td><td>31</td>"
            "<td>9</td></tr>") in page and "<tr><td>total</td><td>93</td><td>27</td></tr>" in page
    # per-class precision and recall from the confusion matrix (rows true, columns predicted)
    assert "<tr><td>dandelion</td><td>9</td><td>10</td><td>0.800</td><td>0.889</td></tr>" in page
    assert "<tr><td>roses</td><td>9</td><td>8</td><td>0.875</td><td>0.778</td></tr>" in page
    assert "| roses | 9 | 0.875 | 0.778 |" in content["markdown"]
    # the model, the steps, when and from which code
    assert "<th>parameters</th><td>155,171 (the variables its serving signature reads)</td>" in page
    assert "<tr><td>train</td><td>14.0</td><td>success</td></tr>" in page and "<td>validate-config</td><td>0.1</td>" in page
    assert "<tr><td>report</td><td>…</td><td>running (this page is written by it)</td></tr>" in page
    assert "<th>run started</th><td>2026-11-24T20:44:47+00:00</td>" in page
    assert re.search(r"<th>code version</th><td>(git [0-9a-f]{12}|vertex-tf-pipelines 0\.1\.0)", page)
    # train and validation of a metric in one chart, and named
    assert "validation series: validation/accuracy, validation/loss" in page and "<td>validation/loss</td>" in page
    # samples of every class, grouped by class
    assert re.findall(r"data-class='(\w+)'", page) == ["daisy", "dandelion", "roses"]
    assert "3 images of 3 of the 3 classes" in page
    # one throughput figure, labelled
    assert "<th>training throughput</th><td>120.5 examples/s (this run&#x27;s training loop" in page


def test_a_fresh_start_says_so(tmp_path):
    """The built-in trainer reports ``resumed_from_step: null`` when it restored nothing: step 0, not a gap."""
    from jobs.steps.reporting import data as report_data

    (tmp_path / "metrics.json").write_text(json.dumps({"steps": 30, "resumed_from_step": None}))
    page = report_data.gather(_cfg(tmp_path), str(tmp_path))["html"]
    assert "this run started from step 0 (there was no checkpoint to resume from)" in page
    assert "—" not in page
    (tmp_path / "metrics.json").unlink()  # a trainer that says nothing: not guessed
    assert "where this run started is not reported by the trainer" in report_data.gather(_cfg(tmp_path), str(tmp_path))["html"]


def test_code_version_names_the_commit_or_the_package(tmp_path):

    here = provenance.code_version()
    if (Path(provenance.ROOT) / ".git").exists() and shutil.which("git"):
        assert here["git_commit"] and re.fullmatch(r"[0-9a-f]{40}", here["git_commit"])  # this checkout
        assert here["text"].startswith(f"git {here['git_commit'][:12]}")
    else:  # the source without .git, as Cloud Build's unit-tests step has it: the package's version, as in an image
        assert here["git_commit"] is None and here["text"] == f"vertex-tf-pipelines {here['package_version']}"
    elsewhere = provenance.code_version(str(tmp_path))  # no checkout there: the installed package's version
    assert elsewhere["git_commit"] is None and elsewhere["text"] == f"vertex-tf-pipelines {elsewhere['package_version']}"


def test_report_without_verification_or_events_still_renders(tmp_path):
    from jobs.steps.reporting import data as report_data

    content = report_data.gather(_cfg(tmp_path), str(tmp_path))
    assert "no TensorBoard scalars: the trainer wrote none to AIP_TENSORBOARD_LOG_DIR" in content["html"]
    assert "keras.callbacks.TensorBoard(log_dir=os.environ" in content["html"] and "not verified" in content["html"]
    assert report_data.gather(None)["html"].startswith("<!doctype html>")  # nothing at all: still a page


def test_a_keras_trainers_scalars_are_all_plotted_and_named_and_no_classifier_sections(tmp_path):
    """What Keras' TensorBoard callback writes: train/ and validation/ sub-folders with epoch_loss and
    epoch_mae, plus a non-scalar ``keras`` tag (the model config) that must be skipped, not an error."""
    import tensorflow as tf

    from jobs.steps.reporting import data as report_data

    for run, scale in (("train", 1.0), ("validation", 0.5)):
        writer = tf.summary.create_file_writer(str(tmp_path / "logs" / run))
        with writer.as_default():
            tf.summary.text("keras", '{"class_name": "Functional"}', step=0)
            for epoch in range(3):
                tf.summary.scalar("epoch_loss", scale / (epoch + 1), step=epoch)
                tf.summary.scalar("epoch_mae", scale / (epoch + 2), step=epoch)
        writer.flush()
    (tmp_path / "verification.json").write_text(json.dumps({
        "signature": "serving_default", "inputs": {"features": "float32 [None, 8]"},
        "outputs": {"value": "float32 [None, 1]"}, "instances": 2, "input_source": "serving.sample_request",
        "predictions": [{"value": [1.5]}, {"value": [-0.25]}], "latency_ms": {"median": 0.4, "first_call": 20}}))
    cfg = config_lib.load("local", [f"output.base_dir={tmp_path}", "trainer.module=trainer.task", "data.source=none",
                                    f"trainer.source_dir={tmp_path}"])
    content = report_data.gather(cfg, str(tmp_path))
    page = content["html"]
    for series in ("train/epoch_loss", "validation/epoch_loss", "train/epoch_mae", "validation/epoch_mae"):
        assert f"<td>{series}</td>" in page, series  # named in the text, not only inside the picture
    assert "keras" not in page.split("id='scalars'")[1].split("</table>")[0]
    assert "id='curves'" in page and "<td>[-0.25]</td>" in page and "features" in page
    assert "python -m trainer.task" in page
    for classifier_only in ("confusion-matrix", "id='samples'", "id='validation'"):
        assert classifier_only not in page
    assert content["classes"] == [] and content["confusion_matrix"] == []


# -- the hyperparameter study and the gate (jobs.steps.reporting.sections) -------------------------------------------
SPECS = {"learning_rate": {"type": "double", "min": 0.0001, "max": 0.1, "scale": "log", "values": []},
         "optimizer": {"type": "categorical", "values": ["adam", "sgd", "rmsprop"]},
         "units": {"type": "integer", "min": 4, "max": 32}}


def _study(goal: str, base: str = "/r", with_best: bool = True) -> dict:
    """A 4-trial study as jobs.tuning.local records one: trial 3 FAILED (no metric); metrics 0.5, 0.2, -, 0.3."""
    values = {"1": (0.001, "sgd", 8, 0.5), "2": (0.01, "adam", 16, 0.2), "3": (0.05, "sgd", 32, None),
              "4": (0.0003, "adam", 4, 0.3)}
    trials = []
    for i, (lr, opt, units, metric) in values.items():
        trial = {"id": i, "parameters": {"learning_rate": lr, "optimizer": opt, "units": units}, "metric": metric,
                 "state": "SUCCEEDED" if metric is not None else "FAILED", "seconds": 10.0 + int(i),
                 "model_dir": f"{base}/{i}/model", "reported_tags": ["val_rmse"] if metric is not None else []}
        if metric is None:
            trial.update(exit_status=1, error="chief-0 exited with status 1 (ValueError: units too large)")
        trials.append(trial)
    record = {"metric": "val_rmse", "goal": goal, "algorithm": "random", "seconds": 41.2, "trials": trials,
              "study": {"metric": "val_rmse", "goal": goal, "parameters": SPECS}}
    if with_best:  # as the study writes it; without, the section picks the best itself
        best = min((t for t in trials if t["metric"] is not None),
                   key=lambda t: t["metric"] if goal == "minimize" else -t["metric"])
        record["best_trial"] = {k: best[k] for k in ("id", "parameters", "metric", "model_dir")}
    return record


@pytest.mark.parametrize("goal, best, with_best", [("minimize", "2", True), ("maximize", "1", False)])
def test_the_study_section_lists_every_trial_and_marks_the_best(goal, best, with_best):
    import html as html_lib

    from jobs.steps.reporting import sections

    facts = sections.study_facts(_study(goal, with_best=with_best), {"model_dir": f"/r/{best}/model/"})
    assert facts["best"] == best and facts["verified"] == best
    page = sections.study_html(facts, html_lib.escape)
    rows = re.findall(r"<tr class='(best)?' data-trial='(\d)'>", page)
    assert rows == [("best" if i == best else "", i) for i in "1234"], rows
    lr = {"1": "0.001", "2": "0.01"}[best]
    assert (f"<td>{best} ★ best (verified)</td><td>{lr}</td>") in page
    assert ("<td>3</td><td>0.05</td><td>sgd</td><td>32</td><td>n/a</td><td class='failed'>FAILED: chief-0 exited "
            "with status 1 (ValueError: units too large)</td><td>13.0</td>") in page
    assert "<th>trial</th><th>learning_rate</th><th>optimizer</th><th>units</th><th>val_rmse</th><th>state</th>" in page
    assert (f"4 trials (random search) in 41 s: 3 succeeded, 1 failed; goal: {goal} val_rmse. Best: trial {best}, "
            f"val_rmse {dict(zip('124', ('0.5', '0.2', '0.3')))[best]} with learning_rate={lr}") in page
    assert f"The verified model is trial {best}&#x27;s (the study&#x27;s best)." in page
    assert page.count("src='data:image/svg+xml;base64,") == 4  # per trial, and one per parameter
    assert "id='study-trials'" in page and page.count("class='study-parameter'") == 3
    md = "\n".join(sections.study_markdown(facts))
    assert "## Hyperparameter study" in md and f"| **{best} ★ best (verified)** |" in md
    assert "| 3 | 0.05 | sgd | 32 | n/a | FAILED: chief-0 exited with status 1 (ValueError: units too large) | 13.0 |" in md
    assert sections.study_verdict(facts) == [
        f"This model comes from a hyperparameter study: best of 4 trials by val_rmse ({goal}), trial {best} with "
        f"val_rmse {dict(zip('124', ('0.5', '0.2', '0.3')))[best]}. The verified model is trial {best}'s (the "
        "study's best)."]


def test_a_verified_model_that_is_not_the_best_trials_is_said():
    from jobs.steps.reporting import sections

    facts = sections.study_facts(_study("minimize"), {"model_dir": "/r/4/model"})
    assert facts["verified"] == "4" and "The verified model is trial 4's (not the study's best, trial 2)." in \
        sections.study_summary(facts)
    elsewhere = sections.study_facts(_study("minimize"), {"model_dir": "/elsewhere/model"})
    assert elsewhere["verified"] is None and "none of the study's trials' models" in sections.study_summary(elsewhere)
    assert sections.study_facts({"trials": []}) is None and sections.study_facts(None) is None


def test_the_study_charts_trials_by_id_and_each_parameter_on_its_own_axis():
    from jobs.steps.reporting import sections

    facts = sections.study_facts(_study("minimize"), {"model_dir": "/r/2/model"})

    chart = sections.trials_figure(facts)
    assert [label for _, label in chart.xticks] == ["1", "2", "3\nfailed", "4"]
    assert chart.stars() == [(1.0, 0.2)] and chart.title == "val_rmse per trial (minimize)"
    assert ">3</text>" in chart.svg() and ">failed</text>" in chart.svg()  # the state under the failed trial's id
    chart = sections.parameter_figure(facts, "optimizer")  # categorical: the declared order, unused slot kept
    assert [label for _, label in chart.xticks] == ["adam", "sgd", "rmsprop"] and chart.stars() == [(0.0, 0.2)]
    chart = sections.parameter_figure(facts, "learning_rate")
    assert chart.xscale == "log" and chart.stars() == [(0.01, 0.2)]
    assert sorted(chart.points()) == [(0.0003, 0.3), (0.001, 0.5), (0.01, 0.2)]
    chart = sections.parameter_figure(facts, "units")
    assert chart.xscale == "linear" and chart.stars() == [(16.0, 0.2)]
    nothing = sections.study_facts({"metric": "m", "trials": [{"id": "1", "state": "FAILED", "parameters": {"x": 1}}]})
    assert sections.trials_figure(nothing) is None and sections.parameter_figure(nothing, "x") is None
    assert "no trial reported m: nothing to chart" in sections.study_html(nothing, str)


def _gate_record(tmp_path, accuracy: float, **gate_kwargs) -> dict:
    """What the gate step writes (jobs.steps.gate.run on a local run) for a model of ``accuracy``."""
    from jobs.steps import gate as gate_lib

    gate = config_lib.Gate(thresholds=["accuracy >= 0.8", "loss < 0.5"], **gate_kwargs)
    gate_lib.run(gate, {"accuracy": accuracy, "loss": 0.3}, dry_run=True, parent_model="projects/p/locations/l/models/7",
                 record_dir=str(tmp_path))
    return json.loads((tmp_path / "gate.json").read_text())


def test_the_gate_section_passed_with_each_bar_and_the_parent_comparison(tmp_path):
    import html as html_lib

    from jobs.steps import gate as gate_lib
    from jobs.steps.reporting import sections

    record = _gate_record(tmp_path, 0.85)
    page = sections.gate_html(record, html_lib.escape)
    assert "<p id='gate-verdict' class='passed'>passed: the model goes on to the Model Registry</p>" in page
    assert ("<tr><td>serving.gate.thresholds[0]</td><td>accuracy 0.85 &gt;= 0.8: passed</td><td class='passed'>passed"
            "</td></tr><tr><td>serving.gate.thresholds[1]</td><td>loss 0.3 &lt; 0.5: passed</td>") in page
    assert "parent: not compared with a parent model (serving.gate.better_than_parent is off)" in page
    assert sections.gate_verdict(record) == ["The gate passed: accuracy 0.85 >= 0.8; loss 0.3 < 0.5. The model goes "
                                             "on to the Model Registry."]
    # compared with the parent's default version (as a Vertex run records it)
    gate = config_lib.Gate(thresholds=["accuracy >= 0.8"], better_than_parent=True)
    result = gate_lib.evaluate(gate, {"accuracy": 0.85}, {"accuracy": 0.82}, "projects/p/locations/l/models/7@3")
    result.parent = {"model": "projects/p/locations/l/models/7", "version": "projects/p/locations/l/models/7@3",
                     "evaluation": "projects/p/locations/l/models/7@3/evaluations/9", "metrics": {"accuracy": 0.82}}
    page = sections.gate_html(result.to_dict(), html_lib.escape)
    assert ("<td>serving.gate.better_than_parent</td><td>accuracy 0.85 &gt;= 0.82 (parent projects/p/locations/l/"
            "models/7@3): passed</td>") in page
    assert ("parent: compared with projects/p/locations/l/models/7&#x27;s default version projects/p/locations/l/"
            "models/7@3 (its evaluation projects/p/locations/l/models/7@3/evaluations/9)") in page


def test_the_gate_section_missed_names_the_bar_and_the_local_parent_note(tmp_path):
    import html as html_lib

    from jobs.steps.reporting import sections

    record = _gate_record(tmp_path, 0.75, better_than_parent=True)
    page = sections.gate_html(record, html_lib.escape)
    assert ("<p id='gate-verdict' class='missed'>missed: serving.gate.thresholds[0]: accuracy 0.75 &gt;= 0.8 missed; "
            "the model is not registered</p>") in page
    assert "<td>accuracy 0.75 &gt;= 0.8: missed</td><td class='missed'>missed</td>" in page
    assert "<td>loss 0.3 &lt; 0.5: passed</td><td class='passed'>passed</td>" in page
    assert "parent: better_than_parent: not compared on a local run (no Model Registry call)" in page
    assert sections.gate_verdict(record) == ["The gate refused this model (serving.gate.thresholds[0]: accuracy 0.75 "
                                             ">= 0.8 missed): it is not registered."]
    md = "\n".join(sections.gate_markdown(record))
    assert "Gate missed: serving.gate.thresholds[0]: accuracy 0.75 >= 0.8 missed" in md
    assert "- accuracy 0.75 >= 0.8: missed" in md and "- loss 0.3 < 0.5: passed" in md
    assert sections.gate_html({}, html_lib.escape) == "" and sections.gate_verdict({}) == []


@pytest.fixture(scope="module")
def tuned_folder(tmp_path_factory) -> Path:
    """A tuned run's folder as the local pipeline leaves it: tuning.json (the `tuning` preset's space, trial 3
    failed), each trial in <base>/<id>/ (trial 2's metrics.json, event files and checkpoints), verification.json
    of trial 2's model, and the gate's record of a model that missed its bar."""
    import tensorflow as tf

    from jobs.steps import gate as gate_lib

    base = tmp_path_factory.mktemp("tuned")
    study = _study("maximize", str(base))
    specs = {"training.learning_rate": SPECS["learning_rate"], "training.optimizer": SPECS["optimizer"],
             "training.per_replica_batch_size": {"type": "discrete", "values": [8, 16, 32, 4]}}
    rename = {"learning_rate": "training.learning_rate", "optimizer": "training.optimizer",
              "units": "training.per_replica_batch_size"}
    for trial in [*study["trials"], study["best_trial"]]:
        trial["parameters"] = {rename[k]: v for k, v in trial["parameters"].items()}
    study.update(metric="val_accuracy", study={"metric": "val_accuracy", "goal": "maximize", "parameters": specs})
    for trial in study["trials"]:
        trial["reported_tags"] = ["val_accuracy"] if trial["metric"] is not None else []
    (base / "tuning.json").write_text(json.dumps(study))
    best = base / "1"
    writer = tf.summary.create_file_writer(str(best / "logs"))
    with writer.as_default():
        for step, loss in [(3, 0.9), (6, 0.7)]:
            tf.summary.scalar("train/loss", loss, step=step)
    writer.flush()
    (best / "checkpoints").mkdir()
    (best / "checkpoints" / "ckpt-6.index").write_bytes(b"")
    (best / "metrics.json").write_text(json.dumps({"steps": 6, "resumed_from_step": None, "train_accuracy": 0.6,
                                                   "examples_per_second": 77.7, "precision": "float32"}))
    (base / "metrics.json").write_text(json.dumps({"examples_per_second": 1.0}))  # not this run's: ignored
    (base / "verification.json").write_text(json.dumps({
        "model_dir": str(best / "model"), "signature": "serving_default", "accuracy": 0.5, "loss": 0.9, "examples": 27,
        "split": "validation", "instances": 2, "latency_ms": {"median": 1.0, "first_call": 9.0}}))
    gate_lib.run(config_lib.Gate(thresholds=["accuracy >= 0.8"]), {"accuracy": 0.5}, dry_run=True,
                 record_dir=str(base))
    return base


def _tuned_cfg(base: Path):
    return config_lib.load("tuning", [f"output.base_dir={base}", 'serving.gate.thresholds=["accuracy >= 0.8"]'])


def test_a_tuned_runs_report_is_the_verified_trials(tuned_folder):
    from jobs.steps.reporting import data as report_data

    content = report_data.gather(_tuned_cfg(tuned_folder), str(tuned_folder))
    page, md = content["html"], content["markdown"]
    assert "<h2>Hyperparameter study</h2>" in page and "<h2>Gate</h2>" in page
    assert page.index("<h2>Hyperparameters</h2>") < page.index("<h2>Hyperparameter study</h2>") < page.index("<h2>Data")
    # the hyperparameters, the figures and the folders are trial 1's (the best by val_accuracy, and verified)
    assert ("<th>tuned</th><td>trial 1&#x27;s values (the rows here are that trial&#x27;s): "
            "--training.learning_rate=0.001 --training.optimizer=sgd --training.per_replica_batch_size=8</td>") in page
    for key, value in (("optimizer", "sgd"), ("learning rate", "0.001"), ("batch", "8 per replica")):
        assert f"<th>{key}</th><td>{value}" in page, key
    assert "77.7 examples/s" in page and "<td>train/loss</td>" in page
    assert f"ckpt-6 ({tuned_folder / '1' / 'checkpoints'})" in page
    assert "this run started from step 0" in page
    assert "This model comes from a hyperparameter study: best of 4 trials by val_accuracy (maximize), trial 1" in page
    assert "The gate refused this model (serving.gate.thresholds[0]: accuracy 0.5 &gt;= 0.8 missed" in page
    assert "## Hyperparameter study" in md and "## Gate" in md and "Gate missed: " in md
    # the study artifact (the pipeline's) wins over the folder's record
    given = report_data.gather(_tuned_cfg(tuned_folder), str(tuned_folder), study={
        "metric": "val_rmse", "goal": "minimize", "trials": [{"id": "9", "state": "STOPPED", "parameters": {}}]})
    assert "1 trials: 0 succeeded, 1 stopped or running; goal: minimize val_rmse. No trial succeeded." in given["html"]


def test_a_vertex_study_record_is_shown_too():
    """What the hyperparameter_tuning_job step records: no wall times, no search space, ids as Vertex numbers
    them, only the best trial's model folder (gs://), the tuning job's name."""
    import html as html_lib

    from jobs.steps.reporting import sections

    trials = [{"id": str(i), "parameters": {"optimizer": o, "units": u}, "metric": m, "state": st}
              for i, o, u, m, st in ((1, "sgd", 8, 0.4, "SUCCEEDED"), (2, "adam", 16, 0.3, "SUCCEEDED"),
                                     (10, "adam", 4, None, "INFEASIBLE"))]
    record = {"metric": "val_rmse", "goal": "minimize", "trials": trials, "tuning_job": "projects/p/locations/l/"
              "hyperparameterTuningJobs/5", "best_trial": {"id": "2", "parameters": trials[1]["parameters"],
                                                          "metric": 0.3, "model_dir": "gs://b/run/2/model"}}
    facts = sections.study_facts(record, {"model_dir": "gs://b/run/2/model/"})
    assert [t["id"] for t in facts["trials"]] == ["1", "2", "10"] and facts["verified"] == "2"
    page = sections.study_html(facts, html_lib.escape)
    assert "3 trials: 2 succeeded, 1 failed; goal: minimize val_rmse. Best: trial 2" in page
    assert "<td>10</td><td>adam</td><td>4</td><td>n/a</td><td class='failed'>INFEASIBLE</td><td>n/a</td>" in page
    assert "Vertex AI HyperparameterTuningJob projects/p/locations/l/hyperparameterTuningJobs/5" in page
    chart = sections.parameter_figure(facts, "optimizer")  # strings: a categorical axis, as they came
    assert [label for _, label in chart.xticks] == ["sgd", "adam"]


def _beside(best: float, baseline: float, base: str = "/r") -> dict:
    """A study's record with the baseline beside it, as jobs.tuning.local writes it (trial 3 the best)."""

    trials = [{"id": str(i), "parameters": {"units": u}, "metric": m, "state": "SUCCEEDED", "seconds": 20.0 + i,
               "model_dir": f"{base}/{i}/model"} for i, u, m in ((1, 8, best + 0.2), (2, 16, best + 0.5), (3, 21, best))]
    run = {"id": "baseline", "state": "SUCCEEDED", "metric": baseline, "seconds": 21.2,
           "model_dir": f"{base}/baseline/model"}
    study = {"metric": "val_rmse", "goal": "minimize", "trials": trials, "baseline": run,
             "best_trial": {k: trials[2][k] for k in ("id", "parameters", "metric", "model_dir")}}
    study["handed_on"] = tuning_rules.handed_on_run(study["best_trial"], run, "minimize", "val_rmse")
    return study


def test_the_report_sets_the_baseline_beside_the_study_and_says_when_the_study_found_nothing_better():
    import html as html_lib

    from jobs.steps.reporting import sections

    study = _beside(0.98, 0.166)
    facts = sections.study_facts(study, {"model_dir": "/r/baseline/model/"})
    assert facts["verified"] == "baseline" and facts["baseline"]["metric"] == 0.166
    said = ("The study found nothing better than the job as it stands: trial 3's val_rmse 0.98 against the "
            "baseline's 0.166; the baseline's model goes on.")
    (verdict,) = sections.study_verdict(facts)
    assert verdict == ("A hyperparameter study ran 3 trials beside the job as it stands (the baseline); its best, "
                       "trial 3, has val_rmse 0.98 (minimize). Baseline (the job as it stands, no tuning flags): "
                       f"val_rmse 0.166. {said} The verified model is the baseline's (the job as it stands).")
    page = sections.study_html(facts, html_lib.escape)
    assert html_lib.escape(said) in page
    assert ("<td>baseline (the job as it stands) (verified)</td><td>—</td><td>0.166</td><td class=''>SUCCEEDED</td>"
            "<td>21.2</td>") in page
    assert "| baseline (the job as it stands) (verified) | — | 0.166 | SUCCEEDED | 21.2 |" in sections.study_markdown(facts)
    chart = sections.trials_figure(facts)  # the baseline is a line across the trials' chart
    assert [(level, label) for level, _, label in chart.levels] == [(0.166, "baseline (the job as it stands): 0.166")]
    assert "baseline (the job as it stands): 0.166</text>" in chart.svg()
    cfg, flags, rows = sections.with_trial(config_lib.load("local"), {"id": "baseline", "parameters": {}})
    assert flags == [] and rows[0][1].startswith("no: the baseline's model, the job as it stands")
    # a study that beat it: the trial goes on, and the sentence says so
    facts = sections.study_facts(_beside(0.12, 0.166), {"model_dir": "/r/3/model"})
    (verdict,) = sections.study_verdict(facts)
    assert verdict.startswith("This model comes from a hyperparameter study: best of 3 trials by val_rmse (minimize), "
                              "trial 3 with val_rmse 0.12. Baseline (the job as it stands, no tuning flags): val_rmse "
                              "0.166. The study beat the job as it stands: trial 3's val_rmse 0.12 against the "
                              "baseline's 0.166; trial 3's model goes on.")


def test_a_run_whose_baseline_went_on_shows_its_figures_in_the_summary_and_history(tmp_path):
    """run.json of a tuned run whose study found nothing better: the summary says so, and `runs list` shows the
    metric of the model that went on (the baseline's), not the best trial's."""
    from jobs.local.history import views as history_views
    from jobs.local.history.results import study_metric, study_outcome
    from jobs.local.run.summary import _trained_line, study_line

    study = _beside(0.98, 0.166, str(tmp_path))
    summary = {"name": "t", "tuning": study, "verified_trial": "baseline", "training": {}, "trainer": {}}
    line = study_line(study, "baseline")
    assert line.endswith("; the study found nothing better than the job as it stands: trial 3's val_rmse 0.98 against "
                         "the baseline's 0.166; the baseline's model goes on")
    assert _trained_line(summary, {}).startswith("the baseline (the job as it stands, run beside the study) (the "
                                                      "verified model's")
    assert study_metric(summary) == {"val_rmse": 0.166}
    assert tuning_rules.verified_trial(study, str(tmp_path / "baseline" / "model"))["id"] == "baseline"
    outcome = study_outcome(str(tmp_path), {"tuning": study})
    assert (outcome["baseline"], outcome["handed_on"]) == (0.166, "baseline")
    assert history_views._best_text(outcome).endswith("(baseline 0.166; the baseline's model went on)")


def test_records_left_by_another_job_in_the_folder_are_not_shown(tuned_folder, tmp_path):
    from jobs.steps.reporting import data as report_data

    shutil.copytree(tuned_folder, tmp_path / "run")
    plain = report_data.gather(_cfg(tmp_path / "run"), str(tmp_path / "run"))["html"]  # no tuning:, no gate: section
    assert "Hyperparameter study" not in plain and "<h2>Gate</h2>" not in plain
    (tmp_path / "run" / "gate.json").write_text('{"passed": true, "lines": ["an earlier run\'s"]}')
    # the job sets a bar: the report (it runs before the gate step) checks the bars itself, never shows a record
    # an earlier run left
    waiting = report_data.gather(_tuned_cfg(tmp_path / "run"), str(tmp_path / "run"))["html"]
    assert "<h2>Gate</h2>" in waiting and "checked here on the figures above" in waiting
    assert "an earlier run" not in waiting


def _chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1600"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    return driver


def _loaded(driver) -> dict:
    """Every image's natural width once loaded (0: not loaded), by id, else data-parameter, else alt."""
    from selenium.webdriver.common.by import By

    return {img.get_attribute("id") or img.get_attribute("data-parameter") or img.get_attribute("alt"):
            driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)
            for img in driver.find_elements(By.CSS_SELECTOR, "img")}


CHROMIUM = pytest.mark.skipif(not shutil.which("chromedriver") and not os.environ.get("CI"),
                              reason="chromium-driver is not installed (.ci/run installs it; on CI this test always runs)")


@CHROMIUM
@pytest.mark.browser
def test_report_renders_in_headless_chromium(run_folder):
    from selenium.webdriver.common.by import By

    from jobs.steps.reporting import page as report, data as report_data

    path = report.write(str(run_folder / "report.html"), report_data.gather(_cfg(run_folder), str(run_folder)))
    driver = _chromium()
    try:
        driver.get(Path(path).as_uri())
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        loaded = _loaded(driver)
        assert loaded["curves"] > 200 and loaded["confusion-matrix"] > 100, loaded
        assert len(driver.find_elements(By.CSS_SELECTOR, "#samples figure")) == 3
        assert len(driver.find_elements(By.CSS_SELECTOR, "#samples figure.wrong")) == 1
        assert "n1-standard-4" in driver.find_element(By.ID, "job").text
        # the new sections render, with their content visible in the page's text
        assert "Weakest class: roses" in driver.find_element(By.ID, "verdict").text
        assert "learning rate 0.002" in driver.find_element(By.ID, "hyperparameters").text
        assert len(driver.find_elements(By.CSS_SELECTOR, "#per-class tr")) == 4  # a header and one row per class
        assert len(driver.find_elements(By.CSS_SELECTOR, "#data tr")) == 5  # a header, 3 classes, the total
        assert "train 14.0 success" in driver.find_element(By.ID, "steps").text
        assert "155,171" in driver.find_element(By.ID, "model").text
        assert "code version" in driver.find_element(By.ID, "provenance").text
        for element_id in ("verdict", "hyperparameters", "per-class", "data", "steps", "model", "provenance"):
            assert driver.find_element(By.ID, element_id).is_displayed(), element_id
        shot = Path(path).with_suffix(".png")
        driver.save_screenshot(str(shot))  # beside the report, for a person to look at
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()


@CHROMIUM
@pytest.mark.browser
def test_a_tuned_runs_report_renders_in_headless_chromium(tuned_folder):
    """The study and gate sections of a tuned run, as a person sees them: every trial a row, the best marked,
    the charts loaded, the gate's missed bar in its colour."""
    from selenium.webdriver.common.by import By

    from jobs.steps.reporting import page as report, data as report_data

    path = report.write(str(tuned_folder / "report.html"), report_data.gather(_tuned_cfg(tuned_folder), str(tuned_folder)))
    driver = _chromium()
    try:
        driver.get(Path(path).as_uri())
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        rows = driver.find_elements(By.CSS_SELECTOR, "#trials tr")
        assert len(rows) == 5  # a header and one row per trial
        (best,) = driver.find_elements(By.CSS_SELECTOR, "#trials tr.best")
        assert best.get_attribute("data-trial") == "1" and best.text.startswith("1 ★ best (verified) 0.001 sgd 8 0.5")
        cell = best.find_element(By.CSS_SELECTOR, "td")
        assert cell.value_of_css_property("font-weight") in ("700", "bold")
        assert cell.value_of_css_property("background-color") == "rgba(255, 243, 196, 1)"
        failed = driver.find_element(By.CSS_SELECTOR, "#trials td.failed")
        assert failed.text.startswith("FAILED: chief-0 exited with status 1")
        assert failed.value_of_css_property("color") == "rgba(176, 0, 32, 1)"
        loaded = _loaded(driver)
        assert loaded["study-trials"] > 200, loaded
        for name in ("training.learning_rate", "training.optimizer", "training.per_replica_batch_size"):
            assert loaded[name] > 150, (name, loaded)
        assert "The verified model is trial 1's (the study's best)." in driver.find_element(By.ID, "study").text
        verdict = driver.find_element(By.ID, "gate-verdict")
        assert verdict.text.startswith("missed: serving.gate.thresholds[0]: accuracy 0.5 >= 0.8 missed")
        assert verdict.value_of_css_property("color") == "rgba(176, 0, 32, 1)"
        assert driver.find_element(By.CSS_SELECTOR, "#gate td.missed").text == "missed"
        assert "The gate refused this model" in driver.find_element(By.ID, "verdict").text
        for element_id in ("study", "trials", "study-trials", "study-parameters", "gate", "gate-verdict", "gate-parent"):
            assert driver.find_element(By.ID, element_id).is_displayed(), element_id
        driver.find_element(By.ID, "trials").screenshot(str(tuned_folder / "trials.png"))
        assert (tuned_folder / "trials.png").stat().st_size > 5_000
    finally:
        driver.quit()


# -- a user's model: the held-out verdict on serving.eval_data, or what cannot be judged -------------------------
REGRESSION_EVAL = {"data": "/p/eval.jsonl", "task": "regression", "examples": 256, "rmse": 0.1042, "mae": 0.0831,
                   "baseline_rmse": 2.713, "label_mean": 0.021, "r2": 0.9985, "output": "value",
                   "task_rule": "the labels are numbers, not all whole"}
CLASSIFICATION_EVAL = {
    "data": "/p/eval.jsonl", "task": "classification", "examples": 40, "accuracy": 0.75, "correct": 30,
    "baseline_accuracy": 0.5, "baseline_class": "cat", "classes": ["bird", "cat", "dog"], "output": "class_name",
    "confusion_matrix": [[5, 5, 0], [0, 20, 0], [0, 5, 5]], "task_rule": "the labels are classes (strings or true/false)",
    "per_class": [{"class": "bird", "support": 10, "predicted": 5, "correct": 5, "precision": 1.0, "recall": 0.5},
                  {"class": "cat", "support": 20, "predicted": 30, "correct": 20, "precision": 0.6667, "recall": 1.0},
                  {"class": "dog", "support": 10, "predicted": 5, "correct": 5, "precision": 1.0, "recall": 0.5}]}


def _user_folder(tmp_path: Path, evaluation: dict | None) -> tuple[Path, object]:
    record = {"signature": "serving_default", "inputs": {"features": "float32 [None, 8]"},
              "outputs": {"value": "float32 [None, 1]"}, "instances": 3, "input_source": "serving.sample_request",
              "predictions": [{"value": [1.5]}], "latency_ms": {"median": 0.4, "first_call": 20},
              "model_dir": str(tmp_path / "model")}
    if evaluation:
        record["eval"] = evaluation
    (tmp_path / "verification.json").write_text(json.dumps(record))
    (tmp_path / "trainer").mkdir(exist_ok=True)
    (tmp_path / "trainer" / "task.py").write_text("print('train')\n")
    cfg = config_lib.load("local", [f"output.base_dir={tmp_path / 'runs' / 'r'}", "trainer.module=trainer.task",
                                    "data.source=none", f"trainer.source_dir={tmp_path}"])
    return tmp_path, cfg


def _verdict(html_text: str) -> str:
    import html as html_lib

    return html_lib.unescape(html_text.split("id='verdict'>")[1].split("</ul>")[0])


def test_a_user_regressor_with_eval_data_is_judged_against_the_mean(tmp_path):
    from jobs.steps.reporting import page as report

    base, cfg = _user_folder(tmp_path, REGRESSION_EVAL)
    content = report_data.gather(cfg, str(base))
    verdict = _verdict(content["html"])
    assert ("On 256 held-out examples (serving.eval_data, /p/eval.jsonl), run through the exported model in a process "
            "that never trained: RMSE 0.1042, MAE 0.0831 (output value; the labels are numbers, not all whole).") in verdict
    assert ("Yardstick: always predicting the labels' mean (0.021) gives RMSE 2.713; this model's RMSE is 3.8% of that "
            "(R² 0.999).") in verdict
    assert "Not judged on examples it never saw" not in verdict
    table = content["html"].split("<table id='eval'>")[1].split("</table>")[0]
    assert "<th>RMSE of predicting the labels&#x27; mean</th><td>2.713</td>" in table
    assert "On 256 held-out examples" in content["markdown"]


def test_a_user_classifier_with_eval_data_has_per_class_figures_in_the_first_section(tmp_path):
    from jobs.steps.reporting import page as report

    base, cfg = _user_folder(tmp_path, CLASSIFICATION_EVAL)
    page = report_data.gather(cfg, str(base))["html"]
    verdict = _verdict(page)
    assert "Held-out accuracy 0.750 (30 of 40 examples right; serving.eval_data, /p/eval.jsonl)" in verdict
    assert "Yardstick: always answering the most common class (cat, 20 of 40) scores 0.500." in verdict
    assert "Weakest class: bird, recall 0.500 (5 of 10 found)." in verdict
    first = page.split("<h2>Is this model any good?</h2>")[1].split("<h2>")[0]
    assert "<table id='eval-per-class'>" in first and "<td>cat</td><td>20</td><td>30</td><td>0.667</td><td>1.000</td>" in first


def test_without_eval_data_the_first_section_says_what_it_cannot_judge_and_how_to_enable_it(tmp_path):
    from jobs.steps.reporting import page as report

    base, cfg = _user_folder(tmp_path, None)
    verdict = _verdict(report_data.gather(cfg, str(base))["html"])
    assert "Not judged on examples it never saw: this report cannot say how far its predictions are" in verdict
    assert 'set serving.eval_data to a JSON Lines file of held-out examples, one per line: {"instance"' in verdict
    assert "Not a classifier this report knows" not in verdict
    assert "The exported model loads and serves: serving_default answered 3 instance(s)." in verdict


@pytest.mark.unit  # names a launcher, starts nothing: the launch is refused first
def test_a_user_trainers_own_version_is_given_apart_from_the_tools(tmp_path):
    """A trainer copied outside any repository: named by its files' content hash, not by this tool's commit."""
    import html as html_lib

    from jobs.steps.reporting import page as report

    base, cfg = _user_folder(tmp_path, None)
    version = trainer_version(cfg)
    assert version["git_commit"] is None and version["files"] == 2  # trainer/task.py, verification.json
    rows = dict(report_data.provenance_rows(str(base), {}, {}, cfg))
    assert rows["trainer code version"] == f"sha256 {version['content_sha256'][:12]} of its 2 file(s) in {tmp_path} " \
                                           "(not in a git repository)"
    assert rows["tool version (this pipeline)"] == provenance.code_version()["text"] and "code version" not in rows
    (tmp_path / "trainer" / "task.py").write_text("print('changed')\n")
    assert trainer_version(cfg)["content_sha256"] != version["content_sha256"]
    page = html_lib.unescape(report_data.gather(cfg, str(base))["html"])
    assert "trainer code version" in page and "tool version (this pipeline)" in page
    # a trainer inside a git repository: its commit
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a", "add", "trainer"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"],
                   check=True)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert trainer_version(cfg)["text"].startswith(f"git {head[:12]} (sha256 ")
    assert trainer_version(config_lib.load("local")) is None  # the built-in trainer: the tool's version


@CHROMIUM
@pytest.mark.browser
def test_a_user_models_held_out_verdict_renders_in_headless_chromium(tmp_path):
    from selenium.webdriver.common.by import By

    from jobs.steps.reporting import page as report

    base, cfg = _user_folder(tmp_path, CLASSIFICATION_EVAL)
    path = report.write(str(base / "report.html"), report_data.gather(cfg, str(base)))
    driver = _chromium()
    try:
        driver.get(Path(path).as_uri())
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        assert "Held-out accuracy 0.750" in driver.find_element(By.ID, "verdict").text
        table = driver.find_element(By.ID, "eval-per-class")
        assert table.is_displayed() and len(table.find_elements(By.CSS_SELECTOR, "tr")) == 4
        assert "trainer code version" in driver.find_element(By.ID, "provenance").text
    finally:
        driver.quit()


def test_the_hyperparameters_say_what_precision_auto_measured():
    from jobs.steps.reporting import data as report_data

    cfg = config_lib.load("local")
    reason = "auto: float32 247 ex/s vs bf16 191 ex/s on this CPU (measured on the job's model and batch)"
    rows = dict(report_data.hyperparameter_rows(cfg, {"precision": "float32", "precision_reason": reason}))
    assert rows["precision"] == ("auto → float32 (float32 247 ex/s vs bf16 191 ex/s on this CPU (measured on the "
                                 "job's model and batch))")
    explicit = dict(report_data.hyperparameter_rows(cfg.with_overrides(["training.precision=float32"]),
                                                    {"precision": "float32", "precision_reason": "asked for explicitly"}))
    assert explicit["precision"] == "float32 → float32"


@pytest.mark.parametrize("dtype, field", [("float32", "float_val"), ("float64", "double_val"), ("int32", "int_val"),
                                          ("int64", "int64_val"), ("float16", "half_val"), ("uint8", "int_val"),
                                          ("int16", "int_val"), ("uint32", "uint32_val"), ("uint64", "uint64_val")])
def test_a_tensor_of_one_number_reads_as_tensorboard_reads_it(dtype, field):
    """jobs.run_records.tensorboard.tensor_number (no TensorBoard TensorFlow stub, no boto3) against TensorBoard's own
    make_ndarray, for each encoding: the value's bytes in tensor_content, or the dtype's *_val field (make_ndarray
    refuses uint32_val and uint64_val, which this reads)."""
    import numpy as np
    from tensorboard.compat.proto import tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.util import tensor_util

    from jobs.run_records.tensorboard import tensor_number

    enum = {"float32": types_pb2.DT_FLOAT, "float64": types_pb2.DT_DOUBLE, "int32": types_pb2.DT_INT32,
            "int64": types_pb2.DT_INT64, "float16": types_pb2.DT_HALF, "uint8": types_pb2.DT_UINT8,
            "int16": types_pb2.DT_INT16, "uint32": types_pb2.DT_UINT32, "uint64": types_pb2.DT_UINT64}[dtype]
    value = np.array(0.3 if dtype.startswith("float") else 7, dtype=dtype)
    for shape in ([], [1], [1, 1]):
        dims = tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=s) for s in shape])
        content = tensor_pb2.TensorProto(dtype=enum, tensor_shape=dims, tensor_content=value.tobytes())
        listed = tensor_pb2.TensorProto(dtype=enum, tensor_shape=dims)
        getattr(listed, field).append(int(value.view(np.uint16)) if dtype == "float16" else value.item())
        for proto in (content, listed):
            assert tensor_number(proto) == float(value)
            if not (proto is listed and dtype.startswith("uint") and dtype != "uint8"):  # make_ndarray: "Unsupported"
                assert tensor_number(proto) == float(tensor_util.make_ndarray(proto).reshape(()))
    several = tensor_pb2.TensorProto(dtype=enum, tensor_shape=tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]), tensor_content=value.tobytes() * 2)
    assert tensor_number(several) is None  # not a scalar


def test_a_bfloat16_or_a_string_tensor():
    import struct

    from tensorboard.compat.proto import tensor_pb2, types_pb2

    from jobs.run_records.tensorboard import tensor_number

    bits = struct.unpack("<I", struct.pack("<f", 1.5))[0] >> 16  # 1.5 is exact in bfloat16
    assert tensor_number(tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, half_val=[bits])) == 1.5
    assert tensor_number(tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16,
                                                tensor_content=struct.pack("<H", bits))) == 1.5
    assert tensor_number(tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"1"])) is None
    assert tensor_number(tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)) is None  # no value


REPORT_IN_A_FRESH_PROCESS = """
import json, sys
from jobs import steps
steps.report("", sys.argv[1] + "/verification.json", sys.argv[1] + "/logs", sys.argv[1] + "/checkpoints", sys.argv[1])
print(json.dumps(sorted(m for m in ("tensorflow", "keras", "matplotlib", "tensorboard.util.tensor_util",
                                    "tensorboard.compat.tensorflow_stub", "boto3") if m in sys.modules)))
"""


def test_the_report_step_imports_no_matplotlib_no_tensorflow_and_no_tensorboard_stub(run_folder, tmp_path):
    """The report's process: its charts written as SVG (no matplotlib), TensorBoard's Event protobuf only (its
    tensor_util pulls its TensorFlow stub and boto3), no TensorFlow; and the page has its charts."""
    import subprocess
    import sys

    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    proc = subprocess.run([sys.executable, "-c", REPORT_IN_A_FRESH_PROCESS, str(folder)], capture_output=True,
                          text=True, timeout=300, cwd=str(Path(__file__).resolve().parent.parent))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    page = (folder / records.REPORT_PAGE).read_text()
    assert "id='curves'" in page and "id='confusion-matrix'" in page
