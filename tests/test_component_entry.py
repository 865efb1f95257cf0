"""Every published component calls THE entry point (``components/entry.py``) and names nothing else of this package,
so the modules behind it move without breaking a YAML a user published; the entry point dispatches by name, refuses
a call it cannot honour in one line, and runs a container component's command."""
from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import types

import pytest
import yaml

import components
from components import entry
from tests.conftest import ROOT

#: a first-party module path, dotted (``jobs.rules.ranking``) or as a file path (``jobs/cloud/vertex_jobs/custom_job.py``)
FIRST_PARTY = re.compile(r"\b(?:jobs|jobfile|trainers|pipelines|components)(?:[./][A-Za-z_]\w*)+")
LIGHT = [n for n in components.NAMES if n not in entry.COMMANDS]
#: the whole body of a lightweight component's function (after its docstring): the contract of components.entry
STUB = ["arguments = dict(locals())", "from components.entry import v1", "return v1({name!r}, arguments)"]


def _executor(name: str) -> dict:
    doc = yaml.safe_load(components.yaml_path(name).read_text())
    (executor,) = doc["deploymentSpec"]["executors"].values()
    return executor["container"]


@pytest.mark.parametrize("name", components.NAMES)
def test_a_component_yaml_names_only_the_entry_point(name):
    """Nothing of this package but ``components.entry`` anywhere in the file: not in the command, not in the embedded
    function, not in the description."""
    text = components.yaml_path(name).read_text()
    named = sorted(set(FIRST_PARTY.findall(text)) - {"components.entry"})
    assert named == [], f"{name}/component.yaml names {named}: only components.entry may appear in a published YAML"
    container = _executor(name)
    if name in entry.COMMANDS:
        assert container["command"] == ["python3", "-u", "-m", "components.entry", name]
    else:
        (source,) = [part for part in container["command"] if "def " + name in part]
        function = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
        body = [ast.unparse(statement) for statement in function.body[1:]]
        assert body == [line.format(name=name) for line in STUB]


@pytest.mark.parametrize("name", LIGHT)
def test_the_work_behind_the_entry_point_takes_the_definitions_inputs(name):
    """The same parameters, in the same order, with the same defaults: what an older v1 YAML omits gets the value its
    definition promised."""
    defined = inspect.signature(components.definition(name).python_func).parameters
    work = inspect.signature(getattr(entry._body(name), name)).parameters
    assert [(p.name, p.default) for p in work.values()] == [(p.name, p.default) for p in defined.values()]


@pytest.mark.parametrize("name", ["validate_config", "pick_model"])
def test_a_named_tuples_fields_are_the_outputs_the_definition_declares(name, monkeypatch):
    defined = inspect.signature(components.definition(name).python_func).return_annotation._fields
    if name == "validate_config":
        from jobfile import config as config_lib

        out = entry.v1(name, {"config_json": config_lib.load("local").to_json()})
    else:
        out = _picked(monkeypatch)
    assert sorted(out._fields) == sorted(defined)


def _picked(monkeypatch):
    import json
    import tempfile

    from kfp.dsl import Artifact, Model

    body = entry._body("pick_model")
    record = {"metric": "val_rmse", "goal": "MINIMIZE", "trials": [], "best_trial": None}
    handed = {"id": "3", "parameters": {}, "metric": 0.2, "model_dir": "/m", "reason": "best trial"}
    monkeypatch.setattr(body.pick, "pick", lambda found, baseline: {**record, body.tuning_rules.HANDED_ON: handed})
    from jobfile import config as config_lib

    with tempfile.TemporaryDirectory() as tmp:
        study = f"{tmp}/study.json"
        with open(study, "w") as f:
            json.dump(record, f)
        return entry.v1("pick_model", {"model": Model(uri=""), "study": Artifact(uri=f"{tmp}/out"),
                                       "config_json": config_lib.load("tuning").to_json(),
                                       "tuning_study": Artifact(uri=study), "baseline_job": "", "record_dir": ""})


def test_v1_fills_what_an_older_yaml_omits_and_passes_artifacts_through(monkeypatch):
    seen = {}

    def work(config_json: str, model=None, newer: str = "default"):
        seen.update(config_json=config_json, model=model, newer=newer)
        return "out"

    monkeypatch.setattr(entry, "_body", lambda name: types.SimpleNamespace(check_plan=work))
    marker = object()
    assert entry.v1("check_plan", {"config_json": "{}", "model": marker}) == "out"
    assert seen == {"config_json": "{}", "model": marker, "newer": "default"}


def test_v1_refuses_an_input_this_version_does_not_know_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(entry, "_body", lambda name: types.SimpleNamespace(check_plan=lambda config_json: None))
    with pytest.raises(SystemExit) as exc:
        entry.v1("check_plan", {"config_json": "{}", "from_the_future": 1})
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and line.startswith("error: check_plan: this image's version takes no input "
                                                   "from_the_future; valid inputs: config_json")


@pytest.mark.parametrize("name,why", [("trian", "'trian' is not a component of this image's version; valid choices: "
                                               "validate_config"),
                                      ("custom_training_job", "custom_training_job runs as a command")])
def test_v1_refuses_a_component_it_cannot_run_in_one_line(name, why, capsys):
    with pytest.raises(SystemExit) as exc:
        entry.v1(name, {})
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and line.startswith("error: component: ") and why in line


@pytest.mark.parametrize("argv,why", [([], "name one first; valid choices: custom_training_job, "
                                            "hyperparameter_tuning_job"),
                                      (["--display_name", "x"], "name one first"),
                                      (["verify_model"], "verify_model runs through kfp's executor"),
                                      (["trian"], "'trian' is not a component")])
def test_the_command_refuses_a_call_it_cannot_run_in_one_line(argv, why):
    proc = subprocess.run([sys.executable, "-m", "components.entry", *argv], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and line.startswith("error: component: ") and why in line and proc.stdout == ""


@pytest.mark.parametrize("name", entry.COMMANDS)
def test_the_command_runs_a_container_components_step(name):
    """``python3 -u -m components.entry NAME`` is that step's runtime: its flags, its one-line refusal, its status."""
    proc = subprocess.run([sys.executable, "-m", "components.entry", name, "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0 and "--display_name" in proc.stdout and "--gcp_resources" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "components.entry", name], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "required" in proc.stderr and "Traceback" not in proc.stderr
