"""Verifying any SavedModel (jobs.steps.verify): the serving signature run on a Vertex-style sample request or on
an input generated from its specs, timed; every way it can fail is one line naming the signature's inputs."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from jobs.steps.verify import VerifyError, inputs_from_instances, parse_request, verify


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Three SavedModels: two named inputs (float + string), one that has no serving_default, one Keras."""
    import tensorflow as tf

    root = tmp_path_factory.mktemp("models")

    class TwoInputs(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                      tf.TensorSpec([None], tf.string, name="tag")])
        def serve(self, x, tag):
            return {"total": tf.reduce_sum(x, axis=1), "tag_length": tf.strings.length(tag)}

    two = TwoInputs()
    tf.saved_model.save(two, str(root / "two"), signatures={"serving_default": two.serve})

    class Unnamed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def predict(self, x):
            return {"y": x * 2}

    unnamed = Unnamed()
    tf.saved_model.save(unnamed, str(root / "no-default"), signatures={"predict": unnamed.predict})
    return root


def test_a_sample_request_with_named_inputs_and_b64_bytes(models):
    request = {"instances": [{"x": [1, 2, 3], "tag": {"b64": base64.b64encode(b"abcd").decode()}},
                             {"x": [0.5, 0.5, 0], "tag": "xy"}]}
    record = verify(str(models / "two"), json.dumps(request))
    assert record["inputs"] == {"tag": "string [None]", "x": "float32 [None, 3]"}
    assert record["outputs"] == {"tag_length": "int32 [None]", "total": "float32 [None]"}
    assert record["predictions"] == [{"tag_length": 4, "total": 6.0}, {"tag_length": 2, "total": 1.0}]
    assert record["input_source"] == "serving.sample_request" and record["instances"] == 2
    assert record["latency_ms"]["runs"] == 5 and record["latency_ms"]["median"] > 0
    assert "metadata" not in record and "accuracy" not in record  # not the built-in classifier


def test_without_a_sample_the_input_is_generated_from_the_specs(models):
    record = verify(str(models / "two"))
    assert record["input_source"] == "generated from the signature" and len(record["predictions"]) == 2
    assert all(p["tag_length"] > 0 for p in record["predictions"])  # a PNG's bytes for a string input


@pytest.mark.parametrize("request_doc, expected", [
    ({"instances": [{"x": [1, 2]}]}, "instance 0 names ['x'], the signature serving_default takes tag: string [None], "
                                     "x: float32 [None, 3]"),
    ({"instances": [[1, 2, 3]]}, "instance 0 is not an object, but the signature serving_default takes several inputs"),
    ({"instances": [{"x": [1, 2], "tag": "a"}]}, "input 'x' has shape [1, 2], the signature serving_default takes"),
    ({"instances": [{"x": ["a", "b", "c"], "tag": "a"}]}, "input 'x' does not fit the signature serving_default"),
])
def test_a_sample_that_does_not_fit_is_one_line_naming_the_inputs(models, request_doc, expected):
    with pytest.raises(VerifyError) as e:
        verify(str(models / "two"), json.dumps(request_doc))
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_no_savedmodel_and_no_serving_signature_are_one_line_each(models, tmp_path):
    with pytest.raises(VerifyError, match=r"^model: .* holds no SavedModel \(no saved_model.pb in it or in a folder one "
                                          r"level below\); the folder is empty: the trainer must write a SavedModel to "
                                          r"AIP_MODEL_DIR: Keras 3: model.export\("):
        verify(str(tmp_path))
    with pytest.raises(VerifyError, match=r"has no serving_default signature \(it has: predict\)"):
        verify(str(models / "no-default"))


@pytest.mark.parametrize("text, expected", [("{", "not valid JSON"), ('{"instances": []}', 'non-empty "instances"'),
                                            ("[1]", 'non-empty "instances"')])
def test_a_malformed_request_is_one_line(text, expected):
    with pytest.raises(VerifyError, match=expected):
        parse_request(text)


def test_one_input_signatures_take_plain_values():
    import tensorflow as tf

    specs = {"features": tf.TensorSpec([None, 2], tf.float32)}
    inputs = inputs_from_instances([[1, 2], [3, 4]], specs)
    assert inputs["features"].numpy().tolist() == [[1, 2], [3, 4]]


def test_the_components_take_a_model_made_by_something_else(models, tmp_path):
    """verify_model and report on a SavedModel this project did not train (as an importer of an existing
    SavedModel, or a user's own training step, hands it over): a Model artifact with a URI and no metadata."""
    from kfp.dsl import HTML, Artifact, ClassificationMetrics, Markdown, Metrics, Model

    from components.report.component import report
    from components.verify_model.component import verify_model

    model = Model(name="model", uri=str(models / "two"), metadata={})
    verified, metrics = Model(name="verified_model", uri="", metadata={}), Metrics(name="metrics", uri="", metadata={})
    verification = Artifact(name="verification", uri=str(tmp_path / "verification.json"), metadata={})
    verify_model.python_func(model=model, verified_model=verified, metrics=metrics, verification=verification,
                             sample_request=json.dumps({"instances": [{"x": [1, 1, 1], "tag": "ab"}]}))
    assert verified.uri == str(models / "two") and verified.metadata["verified"] is True
    assert verified.metadata["inputs"] == {"tag": "string [None]", "x": "float32 [None, 3]"}
    assert json.loads((tmp_path / "verification.json").read_text())["predictions"] == [{"tag_length": 2, "total": 3.0}]
    page = HTML(name="report", uri=str(tmp_path / "report.html"), metadata={})
    summary = Markdown(name="summary", uri=str(tmp_path / "summary.md"), metadata={})
    confusion = ClassificationMetrics(name="confusion", uri=str(tmp_path / "c"), metadata={})
    report.python_func(report=page, summary=summary, confusion=confusion, verification=verification)
    html = (tmp_path / "report.html").read_text()
    assert "serving_default" in html and "tag_length" in html
    assert "no TensorBoard scalars: the trainer wrote none to AIP_TENSORBOARD_LOG_DIR" in html
    assert confusion.metadata == {}  # not a classifier


VERIFY_IN_A_FRESH_PROCESS = """
import json, sys
from jobs.steps.verify import verify
record = verify(sys.argv[1])
record.pop("latency_ms")
print(json.dumps({"record": record, "imported": sorted(n for n in ("keras", "tf_keras", "IPython", "matplotlib")
                                                        if n in sys.modules)}))
"""


@pytest.mark.integration
def test_the_verify_process_loads_a_keras_export_without_importing_keras_and_verifies_it_alike(tmp_path):
    """The verify step imports TensorFlow without the Keras its ``__init__`` imports eagerly
    (jobs.steps.verify.import_tensorflow): a Keras 3 export verified in a fresh process gives the very record it gives in
    this process, where Keras is imported; Keras, IPython and matplotlib stay out of that process."""
    import subprocess
    import sys

    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,), name="features"), keras.layers.Dense(3, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(np.random.rand(8, 4), np.random.randint(0, 3, 8), verbose=0)
    model.export(str(tmp_path / "model"), verbose=False)
    here = verify(str(tmp_path / "model"))
    here.pop("latency_ms")
    proc = subprocess.run([sys.executable, "-c", VERIFY_IN_A_FRESH_PROCESS, str(tmp_path / "model")],
                          capture_output=True, text=True, timeout=300, cwd=str(Path(__file__).resolve().parent.parent))
    assert proc.returncode == 0, proc.stderr[-2000:]
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    assert there["imported"] == []
    assert there["record"] == json.loads(json.dumps(here))


IMPORT_AND_USE_KERAS_AFTER = """
import json, sys
from jobs.steps.verify import import_tensorflow
tf = import_tensorflow()
without = "keras" not in sys.modules
import keras  # importable once TensorFlow is in
print(json.dumps({"without": without, "finders_restored": not any(type(f).__name__ == "_KerasRefused" for f in sys.meta_path), "path": tf.__path__,
                  "keras": keras.__version__, "dense": type(tf.keras.layers.Dense(2)).__module__,
                  "again": import_tensorflow() is tf}))
"""


@pytest.mark.integration
def test_import_tensorflow_refuses_keras_only_while_tensorflow_is_imported():
    """TensorFlow comes in with ``tf.keras``'s path set as usual (the refusing finder names Keras' real location),
    the finder is gone afterwards, and Keras imports normally later in the same process."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", IMPORT_AND_USE_KERAS_AFTER], capture_output=True, text=True,
                          timeout=300, cwd=str(Path(__file__).resolve().parent.parent))
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["without"] and seen["finders_restored"] and seen["again"]
    assert any(p.replace("\\", "/").endswith("keras/api/_v2") for p in seen["path"])
    assert seen["dense"].startswith("keras.")


@pytest.mark.parametrize("layout, found", [("1", "1"), ("1700000000", "1700000000"), ("savedmodel", "savedmodel"),
                                           ("1,2", "2")])
def test_a_model_one_folder_below_aip_model_dir_is_verified_there(models, tmp_path, layout, found):
    """Google's samples save as TF Serving lays a model out (AIP_MODEL_DIR/1), as an exporter names its exports
    (a timestamp) or in a named folder; Vertex takes each (issue 55). The verify step finds the one SavedModel one
    folder below (of numbered ones, the newest), verifies it there and hands that folder on."""
    import shutil

    from kfp.dsl import Artifact, Metrics, Model

    from components.verify_model.component import verify_model

    model_dir = tmp_path / "model"
    for name in layout.split(","):
        shutil.copytree(models / "two", model_dir / name)
    (model_dir / "workertemp_1").mkdir()  # a folder without a SavedModel is no candidate
    record = verify(str(model_dir) + "/")
    assert record["model_dir"] == str(model_dir / found) and record["aip_model_dir"] == str(model_dir)
    assert record["model_found"].startswith(f"note: the model is the SavedModel in {model_dir / found}, one folder below")
    verified = Model(name="verified_model", uri="", metadata={})
    verify_model.python_func(model=Model(name="model", uri=str(model_dir), metadata={}), verified_model=verified,
                             metrics=Metrics(name="metrics", uri="", metadata={}),
                             verification=Artifact(name="v", uri=str(tmp_path / "v.json"), metadata={}))
    assert verified.uri == str(model_dir / found)  # what the report, the gate and the Model Registry get


def test_two_named_savedmodels_or_one_two_folders_down_are_one_line_listing_them(models, tmp_path):
    import shutil

    for name in ("a", "b"):
        shutil.copytree(models / "two", tmp_path / "several" / name)
    with pytest.raises(VerifyError, match=r"^model: .*several holds SavedModels in 2 folders \(a/, b/\), and only "
                                          r"folders named by numbers"):
        verify(str(tmp_path / "several"))
    shutil.copytree(models / "two", tmp_path / "deep" / "savedmodel" / "1700000000")
    (tmp_path / "deep" / "model.keras").write_bytes(b"k")
    with pytest.raises(VerifyError) as e:
        verify(str(tmp_path / "deep"))
    assert ("holds no SavedModel (no saved_model.pb in it or in a folder one level below); it holds: model.keras, "
            "savedmodel/; a SavedModel two folders down, in savedmodel/1700000000/, is deeper than a model is looked "
            "for") in str(e.value)
