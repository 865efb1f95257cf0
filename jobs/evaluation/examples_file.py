"""An independent verdict on any model: the exported model evaluated on held-out examples (``serving.eval_data``).

``serving.eval_data`` is a JSON Lines file, one example per line::

    {"instance": [0.35, 0.82, 0.33, -1.3, 0.9, 0.45, -0.54, 0.58], "label": 1.27}

``instance`` is one element of the sample request's ``instances`` (what Vertex online prediction takes: the value
of the serving signature's one input, or an object naming every input; bytes as ``{"b64": ...}``); ``label`` is
the truth: a number (regression), a list of numbers (a regressor with several outputs), or a class (a string, a
whole number, true/false).

* :func:`eval_data_problems` checks the file before anything runs (``jobs.rules.validate``; no TensorFlow): it exists,
  every non-blank line is a JSON object with ``instance`` and ``label``, every instance has the shape of the
  sample request's instances (or of the first line's, without a sample request) and only finite numbers (Python
  reads ``NaN``; no prediction request carries it), the labels are of one kind, and of the kind
  ``serving.eval_task`` needs (:func:`task_problems`). When the model is run, a label that is no class of it (an
  index past its scores, a name its ``metadata.json`` lacks, a whole number beyond 0/1 for one score) stops the
  verdict instead of counting as a wrong answer.
  One problem per line at fault (its number named), at most :data:`MAX_LINE_PROBLEMS` and a count of the rest.
* ``jobs.evaluation.verdict``'s :func:`judge` turns the serving signature's outputs on every example into the
  verdict (which output, which task, the figures); its :func:`regression_metrics` and
  :func:`classification_metrics` are the figures, :func:`figures` the names the gate and history see. Numpy
  only: running the model is ``jobs.steps.verify``'s (``jobs.steps.verify.evaluate_model``: THE verdict of an exported
  model folder on an eval_data file, for the verify step and any step that compares two models on the same
  examples).

**Regression or classification** (``serving.eval_task: auto``), decided from the labels and the chosen output:

1. string or true/false labels: classification;
2. numeric labels of which one is not a whole number, or lists of numbers: regression;
3. whole-number labels: classification when the output has two or more values per instance (class scores:
   the prediction is the arg-max's column index), or one value per instance and every label is 0 or 1 (a
   binary classifier: the prediction is 1 when the score is >= 0.5, or >= 0 when a score lies outside [0, 1],
   i.e. logits); else regression.

``serving.eval_task: regression | classification`` overrides the rule. String labels are compared with a string
output (the built-in classifier's ``class_name``) or, for the built-in classifier (its ``metadata.json`` names
the classes), with the class of the arg-max column.

**Which output** (``serving.eval_output`` names it): the only output; else, for string labels, the only string
output with one value per instance; else the first numeric output named like a prediction
(:data:`PREFERRED_OUTPUTS`, in that order); else one ``error:`` line naming the outputs.

Figures: regression -> ``rmse``, ``mae``, ``baseline_rmse`` (the RMSE of always predicting the labels' mean: the
labels' standard deviation), ``r2`` (1 - MSE / the labels' variance); classification -> ``accuracy``,
``baseline_accuracy`` (always answering the most common label, ``baseline_class``), per-class ``precision`` and
``recall`` (None where undefined), the confusion matrix. The gate and run history see them as ``eval_<name>``
(``jobs.evaluation.verdict.figures``).
"""
from __future__ import annotations

import json
import math
from typing import Any

from jobfile.config_files import RELATIVE_RULE, found_elsewhere
from jobfile.errors import Problem, problem
from jobfile.regular_file import NotARegularFile, open_regular
from jobfile.paths import readable

FIELD = "serving.eval_data"
TASKS = ("auto", "regression", "classification")
#: numeric outputs taken as the prediction when a model has several, in this order.
PREFERRED_OUTPUTS = ("probabilities", "probs", "scores", "logits", "predictions", "prediction", "outputs", "output",
                     "output_0", "value", "y")
MAX_LINE_PROBLEMS = 5
BATCH = 256
EXAMPLE_LINE = '{"instance": [0.1, 0.2], "label": 1.5}'


class EvalError(Exception):
    """The model cannot be evaluated on the examples; ``str(exc)`` is one line naming the field."""


# -- the file ---------------------------------------------------------------------------------------------
def shape_of(value: Any) -> Any:
    """A JSON value's shape, for comparing instances: ``"number"``, ``"string"``, ``"bool"``, ``"bytes"``
    (``{"b64": ...}``), ``"null"``, ``("list", n, element shape or "mixed")``, ``("object", ((key, shape), ...))``."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            return "bytes"
        return ("object", tuple(sorted((str(k), shape_of(v)) for k, v in value.items())))
    if isinstance(value, list):
        shapes = {json.dumps(shape_of(v)) for v in value}
        return ("list", len(value), shape_of(value[0]) if len(shapes) == 1 else ("mixed" if shapes else "empty"))
    return type(value).__name__


def describe(shape: Any) -> str:
    """A shape in words: ``a list of 8 numbers``, ``an object with features (a list of 8 numbers)``."""
    words = {"number": "a number", "string": "a string", "bool": "true or false", "bytes": 'bytes ({"b64": ...})',
             "null": "null"}
    if isinstance(shape, str):
        return words.get(shape, shape)
    if shape[0] == "list":
        _, n, inner = shape
        if inner in ("empty", "mixed"):
            return "an empty list" if inner == "empty" else f"a list of {n} values of different shapes"
        if isinstance(inner, str) and inner in words:
            plural = {"number": "numbers", "string": "strings", "bool": "booleans", "bytes": "byte strings"}
            return f"a list of {n} {plural.get(inner, inner)}"
        return f"a list of {n} × {describe(inner)}"
    if shape[0] == "object":
        return "an object with " + ", ".join(f"{k} ({describe(v)})" for k, v in shape[1])
    return str(shape)


def kind_of_label(label: Any) -> str | None:
    """``number``, ``string``, ``bool``, ``vector`` (a list of numbers), or None (not a label)."""
    if isinstance(label, bool):
        return "bool"
    if isinstance(label, (int, float)):
        return "number" if math.isfinite(label) else None
    if isinstance(label, str):
        return "string"
    if isinstance(label, list) and label and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 and math.isfinite(v) for v in label):
        return "vector"
    return None


def _not_finite(value: Any, where: str = "") -> str | None:
    """Where in a JSON value a number is NaN or infinite (``[3]``, ``.features[0]``; ``"the instance"`` itself), or
    None. Python's ``json`` reads ``NaN``/``Infinity``, which no JSON prediction request can carry."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "the instance"
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _not_finite(v, f"{where}[{i}]")
            if found:
                return found
    if isinstance(value, dict):
        for k, v in value.items():
            found = _not_finite(v, f"{where}.{k}")
            if found:
                return found
    return None


def _open_text(path: str):
    """A text stream of ``path``: local, Vertex's ``/gcs`` mount, or ``gs://`` through TensorFlow's file system
    (only then is TensorFlow imported)."""
    where = readable(path)
    if "://" in where:
        import tensorflow as tf

        return tf.io.gfile.GFile(where, "r")
    return open_regular(where, FIELD)


def parse_lines(lines, sample_instance: Any = None, where: str = "") -> tuple[list[dict[str, Any]], list[Problem]]:
    """(the examples, the problems) of JSON Lines text. ``sample_instance``: one of the sample request's
    instances, whose shape every instance must have (None: the first line's)."""
    examples: list[dict[str, Any]] = []
    problems: list[Problem] = []
    faulty = 0
    expected = shape_of(sample_instance) if sample_instance is not None else None
    against = "the sample request's instances are" if sample_instance is not None else "line {first}'s instance is"
    first_line = 0
    label_kind = None
    label_line = 0
    label_width = None
    prefix = f"{where}: " if where else ""

    def fault(number: int, message: str, valid=(EXAMPLE_LINE,)) -> None:
        nonlocal faulty
        faulty += 1
        if faulty <= MAX_LINE_PROBLEMS:
            problems.append(problem(FIELD, f"{prefix}line {number}: {message}", valid))

    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            fault(number, f"not JSON ({exc.msg} at column {exc.colno}); each line is one JSON object")
            continue
        if not isinstance(doc, dict) or "instance" not in doc or "label" not in doc:
            missing = ([k for k in ("instance", "label") if k not in doc] if isinstance(doc, dict) else [])
            what = f"has no {' and no '.join(repr(k) for k in missing)}" if missing else \
                f"is {type(doc).__name__} {json.dumps(doc)[:40]}, not an object"
            fault(number, f"{what}; each line is {{\"instance\": ..., \"label\": ...}}")
            continue
        instance, label = doc["instance"], doc["label"]
        bad = _not_finite(instance)
        if bad:
            fault(number, f"the instance holds a number that is not finite ({bad}); every number of a prediction "
                          "request is finite JSON (no NaN or Infinity)", ["a finite number in its place",
                                                                           "remove the line"])
            continue
        shape = shape_of(instance)
        if expected is None:
            expected, first_line = shape, number
        if shape != expected:
            fault(number, f"the instance is {describe(shape)}; {against.format(first=first_line)} "
                          f"{describe(expected)}", [json.dumps({"instance": _example_of(expected), "label": 0})])
            continue
        kind = kind_of_label(label)
        if kind is None:
            fault(number, f"label {json.dumps(label)[:40]} is not a label: a number, a list of numbers, a string "
                          "or true/false", ['"label": 1.5', '"label": "cat"'])
            continue
        if label_kind is None:
            label_kind, label_line = kind, number
            label_width = len(label) if kind == "vector" else None
        elif kind != label_kind or (kind == "vector" and len(label) != label_width):
            fault(number, f"label {json.dumps(label)[:40]} is {_kind_words(kind, label)}; line {label_line}'s is "
                          f"{_kind_words(label_kind, None, label_width)}: every label is of one kind",
                  [f"a label like line {label_line}'s"])
            continue
        examples.append({"instance": instance, "label": label, "line": number})
    if faulty > MAX_LINE_PROBLEMS:
        problems.append(problem(FIELD, f"{prefix}{faulty - MAX_LINE_PROBLEMS} more line(s) with problems like these"))
    if not problems and not examples:
        problems.append(problem(FIELD, f"{prefix}holds no example (one JSON object per line)", [EXAMPLE_LINE]))
    return examples, problems


def _kind_words(kind: str, label: Any, width: int | None = None) -> str:
    if kind == "vector":
        return f"a list of {len(label) if label is not None else width} numbers"
    return {"number": "a number", "string": "a string", "bool": "true or false"}[kind]


def _example_of(shape: Any) -> Any:
    """A value of ``shape`` (for the valid alternative of a misshapen instance)."""
    if shape == "number":
        return 0.0
    if shape == "string":
        return "text"
    if shape == "bool":
        return False
    if shape == "bytes":
        return {"b64": "..."}
    if isinstance(shape, tuple) and shape[0] == "list":
        return [_example_of(shape[2])] * min(shape[1], 8) if shape[2] not in ("empty", "mixed") else []
    if isinstance(shape, tuple) and shape[0] == "object":
        return {k: _example_of(v) for k, v in shape[1]}
    return None


def read_examples(path: str, sample_instance: Any = None) -> list[dict[str, Any]]:
    """The examples of ``path`` (local, ``/gcs`` or ``gs://``); raises :class:`EvalError` with the first problem."""
    try:
        with _open_text(path) as f:
            examples, problems = parse_lines(f, sample_instance, path)
    except NotARegularFile as exc:
        raise EvalError(str(exc.problems[0])) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalError(str(problem(FIELD, f"{path} cannot be read ({type(exc).__name__}: "
                                           f"{' '.join(str(exc).split())[:150]})", ["a JSON Lines file"]))) from None
    except Exception as exc:  # TensorFlow's gs:// errors (NotFoundError, PermissionDeniedError)
        if type(exc).__module__.startswith("tensorflow"):
            raise EvalError(str(problem(FIELD, f"{path} cannot be read ({type(exc).__name__}: "
                                               f"{' '.join(str(exc).split())[:150]})", ["gs://<your bucket>/eval.jsonl"]))
                            ) from None
        raise
    if problems:
        raise EvalError(str(problems[0]))
    return examples


def json_lines_near(folders: list[str], most: int = 3) -> list[str]:
    """The ``*.jsonl`` files in ``folders`` (not below them), as paths that work both in a job file and in ``--set``:
    what a missing local ``serving.eval_data`` most likely meant, when no file of its name is there (this runs on a
    local run's path only: a ``gs://`` suggestion would be refused by the run it is for)."""
    import os

    found: list[str] = []
    for folder in dict.fromkeys(os.path.abspath(f) for f in folders if f):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".jsonl"))
        except OSError:
            continue
        found += [os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n))]
    return list(dict.fromkeys(found))[:most]


def eval_data_problems(path: str, sample_request: str = "", task: str = "auto",
                       near: tuple[str, ...] = ()) -> list[Problem]:
    """``serving.eval_data`` checked here before anything runs (a ``gs://`` file is read by the verify step,
    not here): it exists and holds examples (see :func:`parse_lines`). ``sample_request``: the sample request's
    path, whose first instance gives the shape every instance must have. ``near``: folders where a file of the same
    name is looked for when ``path`` is missing (the trainer's), besides the current folder."""
    import os

    if not path or "://" in path:
        return []
    if not os.path.exists(path):
        return [problem(FIELD, f"{path} does not exist ({RELATIVE_RULE})",
                        found_elsewhere(path, [os.getcwd(), *near])
                        or json_lines_near([os.path.dirname(path), os.getcwd(), *near])
                        or [f"a JSON Lines file of held-out examples here, one per line: {EXAMPLE_LINE}",
                            "no serving.eval_data (no held-out verdict)"])]
    if os.path.isdir(path):
        return [problem(FIELD, f"{path} is a folder; give the JSON Lines file", [os.path.join(path, "eval.jsonl")])]
    sample = None
    if sample_request:
        try:
            with open_regular(sample_request, "serving.sample_request") as f:
                instances = json.load(f).get("instances")
            sample = instances[0] if isinstance(instances, list) and instances else None
        except (OSError, ValueError, AttributeError):  # NotARegularFile too: said by the request's own check
            sample = None  # the sample request's own problems are said by its own check
    try:
        with open_regular(path, FIELD) as f:
            examples, problems = parse_lines(f, sample, path)
        return problems or task_problems(examples, task)
    except NotARegularFile as exc:
        return list(exc.problems)
    except UnicodeDecodeError as exc:
        return [problem(FIELD, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start}); a JSON Lines file",
                        [EXAMPLE_LINE])]
    except OSError as exc:
        return [problem(FIELD, f"{path} cannot be read ({exc.strerror})", ["a readable JSON Lines file"])]


def settings_problems(serving) -> list[Problem]:
    """``serving.eval_task`` / ``eval_output`` without ``eval_data``: they judge nothing."""
    out = []
    for name, default in (("eval_task", "auto"), ("eval_output", "")):
        if getattr(serving, name) != default and not serving.eval_data:
            out.append(problem(f"serving.{name}", "says how serving.eval_data is judged, and there is no "
                                                  "serving.eval_data", ["serving.eval_data: eval.jsonl",
                                                                        f"remove serving.{name}"]))
    return out


def is_whole(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer()


def task_problems(examples: list[dict[str, Any]], task: str) -> list[Problem]:
    """Labels of the wrong kind for ``serving.eval_task``: class labels (strings, true/false) for ``regression``,
    lists of numbers or fractions for ``classification``; one problem naming the first line at fault."""
    for e in examples:
        label, line = e["label"], e.get("line")
        at = f"line {line}'s label {json.dumps(label)[:40]}" if line else f"label {json.dumps(label)[:40]}"
        if task == "regression" and isinstance(label, (str, bool)):
            return [problem("serving.eval_task", f"regression needs numeric labels; {at} is a class",
                            ["classification", "auto"])]
        if task == "classification" and not (isinstance(label, (str, bool)) or is_whole(label)):
            return [problem("serving.eval_task", f"classification needs class labels (strings, whole numbers, "
                                                 f"true/false); {at} is not one", ["regression", "auto"])]
    return []
