"""A compiled pipeline evaluated as Vertex AI Pipelines would start it with its root parameters' defaults:
which tasks run (trigger conditions evaluated), so a test can say what "Run" in the console does."""
from __future__ import annotations

import re
from typing import Any

_CONDITION = re.compile(r"^(!?)\(?inputs\.parameter_values\['([^']+)'\] (==|!=) '([^']*)'\)?$")


def _holds(condition: str, values: dict[str, Any]) -> bool:
    """The conditions kfp compiles for ``dsl.If``/``dsl.Else`` on a string parameter (``==``/``!=``, negated
    by ``!(...)``); anything else is refused so a test never passes on an expression it did not read."""
    m = _CONDITION.match(condition.strip())
    if not m:
        raise AssertionError(f"a trigger condition this evaluator does not read: {condition!r}")
    negate, name, op, literal = m.groups()
    value = str(values.get(name))
    result = (value == literal) if op == "==" else (value != literal)
    return not result if negate else result


def tasks_started_with_defaults(compiled: dict) -> list[str]:
    """The component names of every task Vertex would run when the pipeline is started with the root
    parameters' defaults (``componentRef`` names, e.g. ``comp-custom-training-job``), in DAG order."""
    defaults = {name: spec.get("defaultValue") for name, spec in
                compiled["root"].get("inputDefinitions", {}).get("parameters", {}).items()}
    ran: list[str] = []

    def walk(dag: dict, values: dict[str, Any]) -> None:
        for task in dag.get("tasks", {}).values():
            condition = task.get("triggerPolicy", {}).get("condition")
            inner = {}
            for key, source in task.get("inputs", {}).get("parameters", {}).items():
                if "componentInputParameter" in source:
                    inner[key] = values.get(source["componentInputParameter"])
                elif "runtimeValue" in source:
                    inner[key] = source["runtimeValue"].get("constant")
            if condition and not _holds(condition, inner):
                continue
            name = task["componentRef"]["name"]
            ran.append(name)
            component = compiled["components"][name]
            if "dag" in component:  # a branch or sub-pipeline: its own tasks, with the values passed in
                walk(component["dag"], inner)

    walk(compiled["root"]["dag"], defaults)
    return ran
