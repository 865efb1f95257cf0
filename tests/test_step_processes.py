"""What a step's process imports and how it ends: TensorFlow imported lazily for the verify step
(``jobs.steps.tensorflow_import``: only for the version it was tested with; a failure midway starts the process
again with the plain import) and the end without teardown once the outputs are there (``jobs.steps.step_exit``)."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from jobs.steps import step_exit, verify

ROOT = Path(__file__).resolve().parent.parent


def _fresh(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


LAZY_THEN_COMPLETE = """
import json, sys
from jobs.steps.tensorflow_import import LAZY, complete, import_tensorflow, installed_version as ti_version
tf = import_tensorflow()
lazy = len(tf.__dict__[LAZY])
modules = len(sys.modules)
seen = {"lazy": lazy, "modules": modules, "keras": "keras" in sys.modules, "version": tf.__version__,
        "sum": int((tf.constant([1, 2]) + 1).numpy().sum()), "item": int(tf.constant([4, 5])[1]),
        "equal": bool((tf.constant(1) == 1).numpy()), "exists": tf.io.gfile.exists(sys.argv[1]),
        "in_dir": "saved_model" in dir(tf), "missing": None, "installed": ti_version()}
try:
    tf.no_such_thing
except AttributeError as exc:
    seen["missing"] = str(exc)
seen["completed"] = complete(tf)
seen["left"] = len(tf.__dict__[LAZY])
seen["again"] = complete(tf)
seen["public"] = sorted(n for n in dir(tf) if not n.startswith("_") and n != "keras")
print(json.dumps(seen))
"""

EAGER = """
import json, tensorflow as tf
print(json.dumps({"public": sorted(n for n in dir(tf) if not n.startswith("_") and n != "keras"),
                  "version": tf.__version__}))
"""


@pytest.mark.integration
def test_tensorflow_comes_in_lazily_and_completes_to_the_eager_import():
    """The verify step's TensorFlow: its public names deferred (fewer modules, no Keras), each one there on first use
    (an unknown one an AttributeError as usual); :func:`complete` imports the rest, after which the public names are
    exactly the eager import's."""
    lazy = _fresh(LAZY_THEN_COMPLETE, str(ROOT / "README.md"))
    eager = _fresh(EAGER)
    assert lazy["lazy"] > 200 and not lazy["keras"]
    assert lazy["sum"] == 5 and lazy["item"] == 5 and lazy["equal"]  # operators on Tensor, as eagerly
    assert lazy["version"] == eager["version"] == lazy["installed"] and lazy["exists"] and lazy["in_dir"]
    assert "no_such_thing" in lazy["missing"]
    assert lazy["completed"] and lazy["left"] == 0 and lazy["again"] is False
    assert lazy["public"] == eager["public"]


FALLBACK = """
import json, sys
from jobs.steps import tensorflow_import as ti
def unreadable(origin):
    raise ImportError("an __init__ this cannot read")
ti._deferred = unreadable
tf = ti.import_tensorflow()
print(json.dumps({"lazy": ti.LAZY in tf.__dict__, "keras": "keras" in sys.modules, "io": hasattr(tf, "io"),
                  "finders": [type(f).__name__ for f in sys.meta_path]}))
"""


@pytest.mark.integration
def test_a_tensorflow_it_cannot_read_lazily_is_imported_as_written_still_without_keras():
    seen = _fresh(FALLBACK)
    assert seen == {"lazy": False, "keras": False, "io": True, "finders": seen["finders"]}
    assert "_KerasRefused" not in seen["finders"]


PLAIN = """
import json, os, sys
print("start", flush=True)
from jobs.steps import tensorflow_import as ti
SETUP
tf = ti.import_tensorflow()
print(json.dumps({"lazy": ti.LAZY in tf.__dict__, "keras": "keras" in sys.modules,
                  "sum": int((tf.constant([1, 2]) + 1).numpy().sum()), "fresh_env": ti.FRESH in os.environ,
                  "finders": [type(f).__name__ for f in sys.meta_path]}))
"""


def _plain_run(setup: str, env: dict | None = None) -> tuple[list[str], dict, str]:
    import os

    proc = subprocess.run([sys.executable, "-c", PLAIN.replace("SETUP", setup)], capture_output=True, text=True,
                          timeout=300, cwd=str(ROOT), env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    return lines, json.loads(lines[-1]), proc.stderr


@pytest.mark.integration
def test_another_tensorflow_version_takes_the_plain_import_still_without_keras():
    """The rewrite is switched on only for the versions it was tested with: any other version imports TensorFlow as
    written, Keras refused all the same."""
    lines, seen, _ = _plain_run("ti.TESTED_VERSIONS = ('0.0.0',)")
    assert lines[:-1] == ["start"]
    assert seen == {"lazy": False, "keras": False, "sum": 5, "fresh_env": False, "finders": seen["finders"]}
    assert "_KerasRefused" not in seen["finders"]


@pytest.mark.integration
def test_a_failure_midway_starts_the_process_again_with_the_plain_import():
    """TensorFlow's statements run, then fail (the C++ runtime loaded, half its modules imported): the process does not
    go on with that TensorFlow; it starts again from its beginning (``start`` twice), takes the plain import there, says
    so in one line, and ends with the right result."""
    midway = ("import builtins\n"
              "def failing(code, namespace):\n"
              "    builtins.exec(code, namespace)\n"
              "    raise RuntimeError('midway')\n"
              "ti.exec = failing")
    lines, seen, stderr = _plain_run(midway)
    assert lines[:-1] == ["start", "start"]
    assert seen == {"lazy": False, "keras": False, "sum": 5, "fresh_env": False, "finders": seen["finders"]}
    (note,) = [line for line in stderr.splitlines() if "midway" in line]
    assert note == ("note: TensorFlow's lazy import stopped midway (RuntimeError: midway); this process starts again, "
                    "with the plain import")


@pytest.mark.integration
def test_the_fresh_marker_takes_the_plain_import_and_leaves_the_environment():
    lines, seen, _ = _plain_run("", env={"VTP_TENSORFLOW_IMPORT": "plain"})
    assert lines[:-1] == ["start"] and seen["lazy"] is False and seen["keras"] is False and seen["fresh_env"] is False


def test_a_session_that_cannot_start_again_gets_one_import_error_line(monkeypatch):
    from jobs.steps import tensorflow_import

    monkeypatch.setattr(sys, "orig_argv", ["python3"])
    with pytest.raises(ImportError) as caught:
        tensorflow_import._start_again_plainly(RuntimeError("midway\nthere"))
    assert str(caught.value) == ("TensorFlow's lazy import stopped midway (RuntimeError: midway there); this session "
                                 "cannot start again: start it with VTP_TENSORFLOW_IMPORT=plain for the plain import")


def test_a_file_without_re_exports_is_not_read_lazily(tmp_path):
    from jobs.steps import tensorflow_import

    plain = tmp_path / "__init__.py"
    plain.write_text("import os as _os\nfrom tensorflow.python import tf2 as _tf2\nVALUE = 1\n")
    with pytest.raises(ImportError, match="no re-exports"):
        tensorflow_import._deferred(str(plain))


class _FakeTF(types.SimpleNamespace):
    """What ``jobs.steps.verify.load`` uses of TensorFlow: a SavedModel that loads only once TensorFlow is complete."""

    def __init__(self, loads_when_complete: bool):
        self.complete = False
        self.calls = 0

        def load(path):
            self.calls += 1
            if not (self.complete and loads_when_complete):
                raise ValueError("Unknown type spec: RaggedTensorSpec")
            return "loaded"

        super().__init__(io=types.SimpleNamespace(gfile=types.SimpleNamespace(exists=lambda p: True)),
                         saved_model=types.SimpleNamespace(load=load))


def _found_there(monkeypatch):
    """The folder is taken as the SavedModel's (``jobs.rules.saved_model``'s rule reads the disk; these have none)."""
    from jobs.rules.saved_model import FoundModel

    monkeypatch.setattr(verify, "find", lambda model_dir: FoundModel(model_dir, model_dir))


def test_a_model_that_fails_to_load_lazily_is_loaded_again_with_all_of_tensorflow(monkeypatch):
    _found_there(monkeypatch)
    tf = _FakeTF(loads_when_complete=True)
    monkeypatch.setattr(verify, "import_tensorflow", lambda: tf)
    monkeypatch.setattr(verify, "complete", lambda module: (setattr(module, "complete", True) or True))
    assert verify.load("/models/m") == "loaded" and tf.calls == 2


@pytest.mark.parametrize("left_to_import", [True, False])
def test_a_model_that_fails_either_way_is_one_line(monkeypatch, left_to_import):
    _found_there(monkeypatch)
    tf = _FakeTF(loads_when_complete=False)
    monkeypatch.setattr(verify, "import_tensorflow", lambda: tf)
    monkeypatch.setattr(verify, "complete", lambda module: (setattr(module, "complete", True) or left_to_import))
    with pytest.raises(verify.VerifyError) as caught:
        verify.load("/models/m")
    assert str(caught.value).startswith("model: /models/m is not a loadable SavedModel: ValueError: Unknown type spec")
    assert "\n" not in str(caught.value) and tf.calls == (2 if left_to_import else 1)


def test_outside_kfps_executor_nothing_is_arranged():
    """Called from a test or a notebook, the step's function changes nothing about how that process ends."""
    hook = sys.excepthook
    assert step_exit.under_kfp_executor() is False
    assert step_exit.end_without_teardown() is False
    assert sys.excepthook is hook and step_exit._state["registered"] is False


def _executor_argv(output_file) -> list[str]:
    executor_input = {"inputs": {}, "outputs": {"outputFile": str(output_file), "artifacts": {}}}
    return ["--component_module_path", "m.py", "--executor_input", json.dumps(executor_input),
            "--function_to_execute", "step"]


def test_the_outputs_checked_before_the_end_are_the_executors_file_and_the_files_the_body_names(tmp_path):
    out = tmp_path / "executor_output.json"
    argv = _executor_argv(out)
    assert step_exit.executor_output_file(argv) == str(out)
    assert "kfp's executor output file " + str(out) + " is not there" in step_exit.missing_output(argv)
    out.write_text("{}")
    assert step_exit.missing_output(argv) is None
    assert str(tmp_path / "v.json") in step_exit.missing_output(argv, [str(tmp_path / "v.json")])
    (tmp_path / "v.json").write_text("{}")
    assert step_exit.missing_output(argv, [str(tmp_path / "v.json")]) is None
    for bad in (["--executor_input", "not json"], ["--executor_input", '{"outputs": {}}'], []):
        assert "names no outputs.outputFile" in step_exit.missing_output(bad)


def test_the_end_fails_with_one_line_when_an_output_is_missing(tmp_path, monkeypatch, capsys):
    """What the exit handler does, its ``os._exit`` caught: status 1 and one ``error:`` line when the executor's
    file is missing, 0 and nothing when it is there."""
    ended = []
    monkeypatch.setattr(step_exit.os, "_exit", ended.append)
    monkeypatch.setattr(step_exit.logging, "shutdown", lambda: None)
    monkeypatch.setattr(step_exit, "_state", {"registered": True, "failed": False, "paths": ()})
    out = tmp_path / "executor_output.json"
    monkeypatch.setattr(step_exit.sys, "argv", ["executor_main.py", *_executor_argv(out)])
    step_exit._end()
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert ended == [1] and line.startswith("error: the step ends without its outputs: kfp's executor output file")
    out.write_text("{}")
    step_exit._end()
    assert ended == [1, 0] and capsys.readouterr().err == ""


ENDS = """
from kfp import dsl, local


@dsl.component(base_image="python:3.11", install_kfp_package=False)
def ends(marker: str, fail_after: bool, promised: str = "") -> str:
    import atexit
    import sys

    sys.path.insert(0, MARKER_ROOT)
    from jobs.steps.step_exit import end_without_teardown

    atexit.register(lambda: open(marker, "w").write("teardown ran"))  # registered first: would run last
    print("arranged", end_without_teardown(*([promised] if promised else [])))
    return 7 if fail_after else "done"  # 7 for a str output: kfp's executor fails while writing the outputs


local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=PIPELINE_ROOT, raise_on_error=False)
"""


@pytest.mark.process
def test_a_step_ends_without_teardown_once_its_outputs_are_written_and_a_later_failure_still_fails(tmp_path, capfd):
    """Under kfp.local's SubprocessRunner (``python -m kfp.dsl.executor_main``, as on Vertex): the step's output is
    there, the exit handlers registered before the call never ran (the process ended first), and where kfp's
    executor fails after the body the task still fails (status 1), Python's own exit taking its course. A file the
    body says it wrote that is not there fails the task with one line, before the process ends."""
    import importlib.util

    from kfp import local

    module_file = tmp_path / "ends.py"
    module_file.write_text(ENDS.replace("MARKER_ROOT", repr(str(ROOT))).replace("PIPELINE_ROOT", repr(str(tmp_path / "root"))))
    spec = importlib.util.spec_from_file_location("ends_under_kfp", module_file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        ok = module.ends(marker=str(tmp_path / "ok"), fail_after=False)
        assert ok.output == "done" and not (tmp_path / "ok").exists()
        failed = module.ends(marker=str(tmp_path / "failed"), fail_after=True)
        assert failed.outputs == {}  # FAILURE: kfp.local (raise_on_error=False) hands back no output
        assert (tmp_path / "failed").read_text() == "teardown ran"
        capfd.readouterr()
        written = tmp_path / "written"
        written.write_text("x")
        assert module.ends(marker=str(tmp_path / "ok2"), fail_after=False, promised=str(written)).output == "done"
        lost = module.ends(marker=str(tmp_path / "lost"), fail_after=False, promised=str(tmp_path / "never-written"))
        assert lost.outputs == {} and not (tmp_path / "lost").exists()  # failed, and still without the teardown
        shown = capfd.readouterr()
        (line,) = [x for x in (shown.out + shown.err).splitlines() if "error: the step ends without" in x]
        assert line.endswith(f"error: the step ends without its outputs: an output the step wrote "
                             f"{tmp_path / 'never-written'} is not there; the step fails rather than end as done "
                             "(its log above says what it did)")
    finally:
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
