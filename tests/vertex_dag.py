"""A compiled Vertex pipeline run as Vertex AI Pipelines runs it, as far as a test needs: every DAG (the exit handler's
body, a sub-pipeline) in the order its ``dependentTasks`` give, a task started only when every task it depends on
succeeded, its inputs resolved from the compiled spec (root parameters, upstream outputs by key, constants with
Vertex's placeholders filled in), then the exit task with the body's ``PipelineTaskFinalStatus``.

Lightweight components run in this process through their own Python function (``components.definition``), so a
test's stand-ins and monkeypatches (``jobfile.paths.FUSE_ROOT``: Vertex's ``/gcs`` mount) reach them; the
``custom_training_job`` container step runs as Vertex runs it, a process of its compiled command
(``tests.vertex_steps.start_step``): whatever it creates, it creates on the stand-in. Any other kind of task (an
importer, GCPC's e-mail) is recorded as reached and ends the walk: the test says how far a run got.
"""
from __future__ import annotations

import inspect
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import components
from tests.vertex_steps import as_json_numbers, finish, start_step

#: what Vertex says of a failed DAG in the exit task's final status (its wording, as users report it)
DAG_FAILED = "The DAG failed because some tasks failed. The failed tasks are: [{tasks}]."


class Run:
    def __init__(self, spec: dict, parameter_values: dict[str, Any], *, project: str, job_name: str, uuid: str,
                 created: str, api_endpoint: str):
        self.spec, self.api_endpoint = spec, api_endpoint
        defaults = {k: v.get("defaultValue") for k, v in spec["root"]["inputDefinitions"]["parameters"].items()}
        self.root_inputs = {**defaults, **parameter_values}
        location = self.root_inputs.get("location") or "us-central1"  # the run's region: the pipeline job's
        self.placeholders = {"{{$.pipeline_google_cloud_project_id}}": project, "{{$.pipeline_job_name}}": job_name,
                             "{{$.pipeline_job_uuid}}": uuid, "{{$.pipeline_job_create_time_utc}}": created,
                             "{{$.pipeline_job_resource_name}}":
                                 f"projects/{project}/locations/{location}/pipelineJobs/{job_name}"}
        self.ran: list[str] = []       # tasks that ran, in order
        self.failed: list[str] = []    # tasks that failed
        self.skipped: list[str] = []   # tasks never started: an upstream task failed
        self.reached: list[str] = []   # tasks this walk cannot run (importer, e-mail): the walk ended there
        self.logs: dict[str, str] = {}
        self.status: dict[str, Any] | None = None  # the final status the exit task was given

    # -- values ---------------------------------------------------------------------------------------------------
    def _constant(self, value: Any) -> Any:
        if isinstance(value, str):
            for placeholder, filled in self.placeholders.items():
                value = value.replace(placeholder, filled)
            return value
        if isinstance(value, list):
            return [self._constant(v) for v in value]
        return value

    def _inputs(self, task: dict, scope: dict[str, Any], outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
        out = {}
        for name, source in (task.get("inputs", {}).get("parameters") or {}).items():
            if "componentInputParameter" in source:
                out[name] = scope[source["componentInputParameter"]]
            elif "taskOutputParameter" in source:
                ref = source["taskOutputParameter"]
                out[name] = outputs[ref["producerTask"]][ref["outputParameterKey"]]
            elif "runtimeValue" in source:
                out[name] = self._constant(source["runtimeValue"]["constant"])
            elif "taskFinalStatus" in source:
                out[name] = self.status
            else:
                raise AssertionError(f"an input this walk does not read: {name}: {source}")
        return out

    # -- tasks ----------------------------------------------------------------------------------------------------
    def _run_task(self, name: str, task: dict, inputs: dict[str, Any], outputs: dict) -> bool:
        component = task["componentRef"]["name"]
        body = self.spec["components"][component]
        if "dag" in body:
            return self._run_dag(body["dag"], inputs)
        step = re.sub(r"-\d+$", "", component[len("comp-"):]).replace("-", "_")
        if step == "custom_training_job":
            return self._container(name, body, inputs, outputs)
        if step not in components.NAMES:
            self.reached.append(name)
            raise _Stop()
        function = components.definition(step).python_func
        if "api_endpoint" in inspect.signature(function).parameters:
            inputs = {**inputs, "api_endpoint": self.api_endpoint}
        if "status" in inputs and isinstance(inputs["status"], dict):
            from kfp.dsl import PipelineTaskFinalStatus

            s = inputs["status"]
            inputs["status"] = PipelineTaskFinalStatus(
                state=s["state"], pipeline_job_resource_name=s["pipelineJobResourceName"],
                pipeline_task_name=s["pipelineTaskName"], error_code=s["error"].get("code"),
                error_message=s["error"].get("message"))
        self.ran.append(name)
        try:
            result = function(**inputs)
        except SystemExit as exc:
            if exc.code not in (0, None):
                self.failed.append(name)
                return False
            result = None
        if hasattr(result, "_asdict"):
            outputs[name] = dict(result._asdict())
        elif result is not None:
            outputs[name] = {"Output": result}
        return True

    def _container(self, name: str, body: dict, inputs: dict, outputs: dict) -> bool:
        executor = self.spec["deploymentSpec"]["executors"][body["executorLabel"]]["container"]
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            proc = finish(start_step(executor, name, as_json_numbers({**inputs, "api_endpoint": self.api_endpoint}),
                                     out, parameters=tuple(body.get("outputDefinitions", {}).get("parameters", {}))))
            self.ran.append(name)
            self.logs[name] = proc.stdout + proc.stderr
            if proc.returncode != 0:
                self.failed.append(name)
                return False
            outputs[name] = {p: (out / p).read_text() for p in body.get("outputDefinitions", {}).get("parameters", {})
                             if (out / p).exists()}
        return True

    def _run_dag(self, dag: dict, scope: dict[str, Any]) -> bool:
        tasks = dict(dag["tasks"])
        exits = {n: t for n, t in tasks.items() if any("taskFinalStatus" in s for s in
                                                       (t.get("inputs", {}).get("parameters") or {}).values())}
        body = {n: t for n, t in tasks.items() if n not in exits}
        outputs: dict[str, dict[str, Any]] = {}
        done: dict[str, bool] = {}
        ok = True
        while len(done) < len(body):
            ready = [n for n, t in body.items() if n not in done and all(d in done for d in t.get("dependentTasks", []))]
            assert ready, f"a cycle or a dependency outside this DAG: {sorted(set(body) - set(done))}"
            for n in sorted(ready):
                t = body[n]
                if not all(done[d] for d in t.get("dependentTasks", [])):
                    done[n] = False
                    self.skipped.append(n)
                    continue
                done[n] = self._run_task(n, t, self._inputs(t, scope, outputs), outputs)
                ok = ok and done[n]
        for n, t in exits.items():
            failed = list(self.failed)
            self.status = {"state": "SUCCEEDED" if ok else "FAILED",
                           "pipelineJobResourceName": self.placeholders["{{$.pipeline_job_resource_name}}"],
                           "pipelineTaskName": (t.get("dependentTasks") or ["exit-handler-1"])[0],
                           "error": {} if ok else {"code": 9, "message": DAG_FAILED.format(tasks=", ".join(failed))}}
            self._run_task(n, t, self._inputs(t, scope, outputs), outputs)
        return ok

    def run(self) -> "Run":
        try:
            self._run_dag(self.spec["root"]["dag"], self.root_inputs)
        except _Stop:
            pass
        return self


class _Stop(Exception):
    """The walk reached a task it cannot run."""


def schedules_run(schedule_body: dict, **kwargs) -> Run:
    """The run a schedule (its create request as the stand-in received it) starts: its pipeline job's spec and
    parameter values."""
    job = schedule_body["createPipelineJobRequest"]["pipelineJob"]
    values = json.loads(json.dumps(job["runtimeConfig"].get("parameterValues") or {}))
    return Run(job["pipelineSpec"], values, **kwargs).run()
