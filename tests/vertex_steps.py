"""A compiled Vertex job step (``custom_training_job``, ``hyperparameter_tuning_job``) run as the Vertex
backend runs it: its container command filled in by kfp's own placeholder resolver from an executor input,
started as a process of this checkout. Shared by the CustomJob, tuning job and tuning pipeline tests."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def as_json_numbers(value: Any) -> Any:
    """What a parameter looks like after Vertex's parameter passing: every number a JSON float."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [as_json_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json_numbers(v) for k, v in value.items()}
    return value


def start_step(container: dict, task: str, inputs: dict, out: Path, *, parameters: tuple[str, ...] = (),
               artifacts: dict[str, tuple[str, str]] | None = None, env: dict | None = None) -> subprocess.Popen:
    """The step's process. ``parameters``: its output parameters (files under ``out``); ``artifacts``: its
    output artifacts, ``{name: (schema title, uri)}`` (kfp's resolver turns a missing one into the string
    ``"null"``)."""
    from kfp.local import placeholder_utils

    executor_input = {
        "inputs": {"parameterValues": inputs},
        "outputs": {"parameters": {name: {"outputFile": str(out / name)} for name in parameters},
                    "artifacts": {name: {"artifacts": [{"name": name, "type": {"schemaTitle": schema}, "uri": uri,
                                                        "metadata": {}}]}
                                  for name, (schema, uri) in (artifacts or {}).items()},
                    "outputFile": str(out / "executor_output.json")}}
    argv = placeholder_utils.replace_placeholders(container["command"] + container["args"], executor_input,
                                                  "pipeline", task, str(out), "job-1")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def finish(proc: subprocess.Popen, timeout: float = 120) -> subprocess.CompletedProcess:
    """Wait for the step; never leaves it running."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def task_inputs(compiled: dict, task: str, validated, endpoint: str, project: str = "team-project") -> dict:
    """A compiled task's input parameters as Vertex resolves them when the pipeline starts with its defaults:
    validate-config's outputs (``validated``), the root parameters' defaults, constants (the project placeholder:
    ``project``), numbers as JSON floats."""
    defaults = {k: v.get("defaultValue") for k, v in compiled["root"]["inputDefinitions"]["parameters"].items()}
    out = {}
    for name, source in compiled["root"]["dag"]["tasks"][task]["inputs"]["parameters"].items():
        if "taskOutputParameter" in source:
            assert source["taskOutputParameter"]["producerTask"] == "validate-config", (task, name, source)
            out[name] = getattr(validated, source["taskOutputParameter"]["outputParameterKey"])
        elif "componentInputParameter" in source:
            out[name] = defaults[source["componentInputParameter"]]
        else:
            constant = source["runtimeValue"]["constant"]
            out[name] = project if constant == "{{$.pipeline_google_cloud_project_id}}" else constant
    return as_json_numbers({**out, "api_endpoint": endpoint})
