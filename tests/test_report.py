"""The run report (jobs.report): built from a run folder (the built-in classifier's, a Keras trainer's),
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

from trainers import config as config_lib

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
    from jobs import report
    from jobs.tensorboard import read_scalars

    scalars = read_scalars(str(run_folder / "logs"))
    assert scalars["train/loss"] == [(10, 1.0), (20, 0.5), (30, 0.25), (40, 0.125)]  # the resumed values win
    content = report.gather(_cfg(run_folder), str(run_folder))
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
    from jobs import report

    (tmp_path / "metrics.json").write_text(json.dumps({"steps": 30, "resumed_from_step": None}))
    page = report.gather(_cfg(tmp_path), str(tmp_path))["html"]
    assert "this run started from step 0 (there was no checkpoint to resume from)" in page
    assert "—" not in page
    (tmp_path / "metrics.json").unlink()  # a trainer that says nothing: not guessed
    assert "where this run started is not reported by the trainer" in report.gather(_cfg(tmp_path), str(tmp_path))["html"]


def test_code_version_names_the_commit_or_the_package(tmp_path):
    from jobs import report

    here = report.code_version()
    assert here["git_commit"] and re.fullmatch(r"[0-9a-f]{40}", here["git_commit"])  # this checkout
    assert here["text"].startswith(f"git {here['git_commit'][:12]}")
    elsewhere = report.code_version(str(tmp_path))  # no checkout there: the installed package's version
    assert elsewhere["git_commit"] is None and elsewhere["text"] == f"vertex-tf-pipelines {elsewhere['package_version']}"


def test_report_without_verification_or_events_still_renders(tmp_path):
    from jobs import report

    content = report.gather(_cfg(tmp_path), str(tmp_path))
    assert "no TensorBoard scalars were found" in content["html"] and "not verified" in content["html"]
    assert report.gather(None)["html"].startswith("<!doctype html>")  # nothing at all: still a page


def test_a_keras_trainers_scalars_are_all_plotted_and_named_and_no_classifier_sections(tmp_path):
    """What Keras' TensorBoard callback writes: train/ and validation/ sub-folders with epoch_loss and
    epoch_mae, plus a non-scalar ``keras`` tag (the model config) that must be skipped, not an error."""
    import tensorflow as tf

    from jobs import report

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
    content = report.gather(cfg, str(tmp_path))
    page = content["html"]
    for series in ("train/epoch_loss", "validation/epoch_loss", "train/epoch_mae", "validation/epoch_mae"):
        assert f"<td>{series}</td>" in page, series  # named in the text, not only inside the picture
    assert "keras" not in page.split("id='scalars'")[1].split("</table>")[0]
    assert "id='curves'" in page and "<td>[-0.25]</td>" in page and "features" in page
    assert "python -m trainer.task" in page
    for classifier_only in ("confusion-matrix", "id='samples'", "id='validation'"):
        assert classifier_only not in page
    assert content["classes"] == [] and content["confusion_matrix"] == []


@pytest.mark.skipif(not shutil.which("chromedriver") and not os.environ.get("CI"),
                    reason="chromium-driver is not installed (.ci/run installs it; on CI this test always runs)")
def test_report_renders_in_headless_chromium(run_folder):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from jobs import report

    path = report.write(str(run_folder / "report.html"), report.gather(_cfg(run_folder), str(run_folder)))
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1600"):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_page_load_timeout(60)
        driver.get(Path(path).as_uri())
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        images = driver.find_elements(By.CSS_SELECTOR, "img")
        loaded = {img.get_attribute("id") or img.get_attribute("alt"): driver.execute_script(
            "return arguments[0].complete && arguments[0].naturalWidth", img) for img in images}
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
