"""The run report's section for the held-out verdict on ``serving.eval_data`` (``jobs.evaluation.examples_file``; the verify step
records it): its sentences in "Is this model any good?", its HTML table and its Markdown, and what the report says
when a model was not judged on held-out examples (:data:`EVAL_MISSING`). Like ``jobs.steps.reporting.sections``: pure
functions of the record (every field may be missing), placed on the page by ``jobs.steps.reporting.page``; no TensorFlow.
"""
from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (not a bool), else None: a record's figure, as shown."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


#: what the first section says when a model was not judged on held-out examples, and how to have it judged
EVAL_MISSING = ("Not judged on examples it never saw: this report cannot say how far its predictions are from the "
                "truth (the curves below are the trainer's own figures on its own data). To have it judged, set "
                "serving.eval_data to a JSON Lines file of held-out examples, one per line: "
                '{"instance": <one of the sample request\'s instances>, "label": <the true value>}; the verify step '
                "then measures RMSE and MAE against always predicting the labels' mean (a regressor), or accuracy "
                "and per-class precision and recall against always answering the most common class (a classifier).")


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def eval_verdict(evaluation: dict[str, Any] | None) -> list[str]:
    """The held-out verdict's sentences in "Is this model any good?" ([] without one)."""
    if not isinstance(evaluation, dict) or not evaluation.get("task"):
        return []
    n = evaluation.get("examples")
    where = f"serving.eval_data, {evaluation['data']}" if evaluation.get("data") else "serving.eval_data"
    output = f" (output {evaluation['output']}; {evaluation.get('task_rule', evaluation['task'])})" \
        if evaluation.get("output") else ""
    if evaluation["task"] == "regression":
        rmse, mae, base = (finite(evaluation.get(k)) for k in ("rmse", "mae", "baseline_rmse"))
        if rmse is None:
            return [f"Held-out examples ({where}) gave no finite error: the model's predictions are not numbers."]
        out = [f"On {n} held-out examples ({where}), run through the exported model in a process that never "
               f"trained: RMSE {rmse:.4g}, MAE {_num(mae)}{output}."]
        if base is not None:
            mean = finite(evaluation.get("label_mean"))
            r2 = finite(evaluation.get("r2"))
            out.append(f"Yardstick: always predicting the labels' mean ({_num(mean)}) gives RMSE {base:.4g}; this "
                       f"model's RMSE is {_share(rmse, base)} of that" + (f" (R² {r2:.3f})." if r2 is not None else ".")
                       + (" It is no better than predicting the mean." if rmse >= base else ""))
        return out
    acc, base = finite(evaluation.get("accuracy")), finite(evaluation.get("baseline_accuracy"))
    if acc is None or not n:
        return []
    out = [f"Held-out accuracy {acc:.3f} ({evaluation.get('correct', round(acc * n))} of {n} examples right; "
           f"{where}), measured on the exported model in a process that never trained{output}."]
    if base is not None:
        out.append(f"Yardstick: always answering the most common class ({evaluation.get('baseline_class')}, "
                   f"{round(base * n)} of {n}) scores {base:.3f}" + ("; this model does no better." if acc <= base
                                                                    else "."))
    rows = [r for r in evaluation.get("per_class") or [] if isinstance(r, dict) and finite(r.get("recall")) is not None]
    weakest = min(rows, key=lambda r: r["recall"], default=None)
    if weakest is not None and weakest["recall"] < max(r["recall"] for r in rows):
        out.append(f"Weakest class: {weakest['class']}, recall {weakest['recall']:.3f} ({weakest.get('correct')} of "
                   f"{weakest.get('support')} found).")
    out.append(f"With {n} held-out examples, one example is {100 / n:.1f} points of accuracy: differences smaller "
               "than that are noise.")
    return out


def _num(value: Any) -> str:
    v = finite(value)
    return "n/a" if v is None else f"{v:.4g}"


def eval_html(evaluation: dict[str, Any] | None, e) -> str:
    """The held-out figures as tables in the first section ("" without an evaluation)."""
    if not isinstance(evaluation, dict) or not evaluation.get("task"):
        return ""
    if evaluation["task"] == "regression":
        rows = [("examples", evaluation.get("examples")), ("RMSE", _num(evaluation.get("rmse"))),
                ("MAE", _num(evaluation.get("mae"))),
                ("RMSE of predicting the labels' mean", _num(evaluation.get("baseline_rmse"))),
                ("R²", _num(evaluation.get("r2")))]
        return ("<table id='eval'>" + "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows)
                + "</table>")
    head = ["class", "examples", "predicted as it", "precision", "recall"]
    body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in (
        r.get("class"), r.get("support"), r.get("predicted"), _fixed(r.get("precision")), _fixed(r.get("recall"))))
        + "</tr>" for r in evaluation.get("per_class") or [] if isinstance(r, dict))
    return ("<table id='eval-per-class'><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + f"</tr>{body}</table>"
            "<p>on serving.eval_data: precision: of the examples predicted as the class, the share that are; recall: "
            "of the class's examples, the share found; n/a: never predicted</p>")


def _fixed(value: Any) -> str:
    v = finite(value)
    return "n/a" if v is None else f"{v:.3f}"


def eval_markdown(evaluation: dict[str, Any] | None) -> list[str]:
    if not isinstance(evaluation, dict) or evaluation.get("task") != "classification":
        return []
    return (["", "| class (eval_data) | examples | precision | recall |", "|---|---|---|---|"]
            + [f"| {r.get('class')} | {r.get('support')} | {_fixed(r.get('precision'))} | {_fixed(r.get('recall'))} |"
               for r in evaluation.get("per_class") or [] if isinstance(r, dict)])
