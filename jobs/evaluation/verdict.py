"""The held-out verdict (``serving.eval_data``): the serving signature's outputs on every example turned into
which output, which task and the figures (:func:`judge`), and the figures' names as the gate and run history see
them (:func:`figures`). The rules (which task, which output, the figures' meaning) are ``jobs.evaluation.examples_file``'s
docstring; reading and checking the file are there too. Numpy only: running the model is ``jobs.steps.verify``'s.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from jobs.evaluation.examples_file import EXAMPLE_LINE, FIELD, PREFERRED_OUTPUTS, EvalError, is_whole, kind_of_label, task_problems
from jobfile.errors import problem


def regression_metrics(labels, predictions) -> dict[str, Any]:
    """RMSE, MAE, the RMSE of always predicting the labels' mean (per column), R² and the count. ``labels`` and
    ``predictions``: [N] or [N, K] numbers."""
    import numpy as np

    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(predictions, dtype=np.float64).reshape(y.shape)
    err = p - y
    mse = float(np.mean(err ** 2))
    variance = float(np.mean((y - y.mean(axis=0)) ** 2))
    return {"task": "regression", "examples": int(y.shape[0]), "rmse": math.sqrt(mse),
            "mae": float(np.mean(np.abs(err))), "baseline_rmse": math.sqrt(variance),
            "label_mean": float(y.mean()), "r2": (1 - mse / variance) if variance > 0 else None}


def classification_metrics(labels: list[Any], predictions: list[Any]) -> dict[str, Any]:
    """Accuracy, the most-common-class baseline, per-class precision and recall and the confusion matrix (rows:
    true class, columns: predicted; classes: the labels' and the predictions' values, sorted)."""
    classes = sorted(set(labels) | set(predictions), key=lambda c: (isinstance(c, str), c))
    index = {c: i for i, c in enumerate(classes)}
    matrix = [[0] * len(classes) for _ in classes]
    for truth, guess in zip(labels, predictions):
        matrix[index[truth]][index[guess]] += 1
    n = len(labels)
    correct = sum(matrix[i][i] for i in range(len(classes)))
    counts = Counter(labels)
    top = max(counts.values())
    baseline_class = next(c for c in classes if counts.get(c) == top)  # the first in order among ties
    per_class = []
    for i, c in enumerate(classes):
        support, predicted = sum(matrix[i]), sum(row[i] for row in matrix)
        per_class.append({"class": c, "support": support, "predicted": predicted, "correct": matrix[i][i],
                          "precision": matrix[i][i] / predicted if predicted else None,
                          "recall": matrix[i][i] / support if support else None})
    return {"task": "classification", "examples": n, "accuracy": correct / n, "correct": correct,
            "baseline_accuracy": top / n, "baseline_class": baseline_class, "label_classes": len(counts),
            "classes": classes, "confusion_matrix": matrix, "per_class": per_class}


#: an evaluation's figures (regression's, then classification's, then the count), and the names the gate and run
#: history know them by (:func:`figures`; per-class ``eval_precision/<class>``, ``eval_recall/<class>`` besides)
FIGURES = ("rmse", "mae", "baseline_rmse", "r2", "accuracy", "baseline_accuracy", "examples")
METRIC_NAMES = tuple(f"eval_{key}" for key in FIGURES)


def figures(evaluation: dict[str, Any] | None) -> dict[str, float]:
    """The evaluation as the gate and run history name its figures: ``eval_rmse``, ``eval_mae``,
    ``eval_baseline_rmse``, ``eval_r2``, ``eval_accuracy``, ``eval_baseline_accuracy``, ``eval_examples``, and
    ``eval_precision/<class>`` and ``eval_recall/<class>`` for classes whose name is a plain word."""
    if not isinstance(evaluation, dict):
        return {}
    out = {}
    for key in FIGURES:
        value = evaluation.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"eval_{key}"] = float(value)
    for row in evaluation.get("per_class") or []:
        name = str(row.get("class"))
        if re.fullmatch(r"[\w.-]+", name):
            for key in ("precision", "recall"):
                if isinstance(row.get(key), (int, float)):
                    out[f"eval_{key}/{name}"] = float(row[key])
    return out


def _choose_output(arrays: dict[str, Any], n: int, string_labels: bool, output: str) -> str:
    names = sorted(arrays)
    if output:
        if output not in arrays:
            raise EvalError(str(problem("serving.eval_output", f"{output!r} is not an output of serving_default",
                                        names)))
        return output
    if len(names) == 1:
        return names[0]
    if string_labels:
        text = [k for k in names if arrays[k].dtype.kind in "OSU" and arrays[k].shape == (n,)]
        if len(text) == 1:
            return text[0]
    numeric = [k for k in names if arrays[k].dtype.kind in "fiu" and arrays[k].ndim >= 1 and arrays[k].shape[0] == n]
    for name in PREFERRED_OUTPUTS:
        if name in numeric:
            return name
    raise EvalError(str(problem("serving.eval_output", "serving_default has several outputs and none is named like "
                                                       "the prediction; name the one to evaluate", names)))


def decide_task(labels: list[Any], width: int, task: str = "auto") -> tuple[str, str]:
    """(``regression`` | ``classification``, the rule that decided) from the labels and the output's values per
    instance (see the module docstring)."""
    kinds = {kind_of_label(v) for v in labels}
    if task in ("regression", "classification"):
        wrong = task_problems([{"label": v} for v in labels], task)
        if wrong:
            raise EvalError(str(wrong[0]))
        return task, "serving.eval_task"
    if kinds & {"string", "bool"}:
        return "classification", "the labels are classes (strings or true/false)"
    if "vector" in kinds:
        return "regression", "the labels are lists of numbers"
    if not all(is_whole(v) for v in labels):
        return "regression", "the labels are numbers, not all whole"
    if width >= 2:
        return "classification", f"whole-number labels and {width} scores per instance (the arg-max is the class)"
    if set(float(v) for v in labels) <= {0.0, 1.0}:
        return "classification", "0/1 labels and one score per instance (a binary classifier)"
    return "regression", "whole-number labels beyond 0/1 and one value per instance"


def _predicted(arrays: dict[str, Any], name: str, labels: list[Any], n: int, task: str, classes: list[str]):
    """The predictions (numbers for regression; labels' values for classification) from output ``name``."""
    import numpy as np

    a = np.asarray(arrays[name])
    if a.dtype.kind in "OSU":
        values = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in a.reshape(n, -1)[:, 0]]
        if task == "regression":
            raise EvalError(str(problem("serving.eval_output", f"{name} holds text, not numbers: it cannot be "
                                                               "judged as a regression", ["a numeric output"])))
        if not all(isinstance(v, str) for v in labels):
            raise EvalError(str(problem(FIELD, f"the model's output {name} is a class name; give the labels as those "
                                               "names (strings)", [f'"label": "{values[0]}"'])))
        if classes and not set(labels) <= set(classes):  # the model's own list (metadata.json) says what it can answer
            unknown = sorted(set(labels) - set(classes))
            raise EvalError(str(problem(FIELD, f"label(s) {', '.join(map(repr, unknown[:5]))} name no class of the "
                                               f"model (its metadata.json names {len(classes)}): each would count "
                                               "as wrong", classes[:10])))
        return values, None
    scores = a.reshape(n, -1).astype("float64")
    width = scores.shape[1]
    if task == "regression":
        label_width = len(labels[0]) if isinstance(labels[0], list) else 1
        if width != label_width:
            raise EvalError(str(problem(FIELD, f"each label has {label_width} value(s), the model's output {name} "
                                               f"{width} per instance", [f"labels of {width} value(s)",
                                                                          "serving.eval_output: another output"])))
        return scores if width > 1 else scores[:, 0], None
    if width == 1:
        threshold = 0.5 if ((scores >= 0) & (scores <= 1)).all() else 0.0
        picked = (scores[:, 0] >= threshold).astype(int).tolist()
        rule = f"score >= {threshold:g} is class 1"
        if all(isinstance(v, bool) for v in labels):
            return [bool(v) for v in picked], rule
        if all(isinstance(v, str) for v in labels):
            raise EvalError(str(problem(FIELD, f"the model's output {name} is one score per instance; string labels "
                                               "need a class-name output", ["labels 0 and 1"])))
        beyond = sorted({v for v in labels if float(v) not in (0.0, 1.0)})
        if beyond:
            raise EvalError(str(problem(FIELD, f"label(s) {', '.join(map(str, beyond[:5]))} are no class of a binary "
                                               f"classifier: the model's output {name} is one score per instance "
                                               "(classes 0 and 1)", ["labels 0 and 1", "serving.eval_task: regression"])))
        return picked, rule
    index = scores.argmax(axis=1).tolist()
    if all(isinstance(v, str) for v in labels):
        if len(classes) == width and not set(labels) <= set(classes):
            unknown = sorted(set(labels) - set(classes))
            raise EvalError(str(problem(FIELD, f"label(s) {', '.join(map(repr, unknown[:5]))} name no class of the "
                                               f"model (its metadata.json names {len(classes)}): each would count "
                                               "as wrong", classes[:10])))
        if len(classes) != width:
            raise EvalError(str(problem(FIELD, f"the labels are names, the model's output {name} is {width} scores "
                                               "per instance with no class names: give each label as its column's "
                                               f"index (0..{width - 1})", ['"label": 0',
                                                                           "serving.eval_output: a class-name output"])))
        return [classes[i] for i in index], "the arg-max column's class (metadata.json)"
    if all(isinstance(v, bool) for v in labels):
        raise EvalError(str(problem(FIELD, f"true/false labels need one score per instance; {name} has {width}",
                                    ["labels 0 .. " + str(width - 1)])))
    beyond = sorted({int(v) for v in labels if not 0 <= int(v) < width})
    if beyond:
        raise EvalError(str(problem(FIELD, f"label(s) {', '.join(map(str, beyond[:5]))} are no class of the model's "
                                           f"output {name}: its {width} scores per instance are classes 0..{width - 1}",
                                    [f"labels 0 .. {width - 1}", "serving.eval_output: another output"])))
    return index, "the arg-max column's index"


def judge(arrays: dict[str, Any], labels: list[Any], *, task: str = "auto", output: str = "",
          classes: list[str] | None = None) -> dict[str, Any]:
    """The figures from the serving signature's outputs on every example (``arrays``: {output name: [N, ...]},
    one row per example, in the examples' order) and the examples' ``labels``: which output, which task, the
    predictions, the metrics (see the module docstring). ``classes``: the built-in classifier's class names
    (its ``metadata.json``), [] or None for any other model. Raises :class:`EvalError`."""
    import numpy as np

    n = len(labels)
    if not n:
        raise EvalError(str(problem(FIELD, "holds no example", [EXAMPLE_LINE])))
    name = _choose_output(arrays, n, all(isinstance(v, str) for v in labels), output)
    a = np.asarray(arrays[name])
    text = a.dtype.kind in "OSU"
    width = 1 if text else int(np.prod(a.shape[1:], dtype=np.int64))
    chosen, why = decide_task(labels, 2 if text else width, task)
    predicted, rule = _predicted(arrays, name, labels, n, chosen, list(classes or []))
    if chosen == "regression":
        result = regression_metrics(labels, predicted)
    else:
        result = classification_metrics(labels, predicted)
        if rule:
            result["prediction_rule"] = rule
    result.update({"output": name, "task_rule": why})
    return result
