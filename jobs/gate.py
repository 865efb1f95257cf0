"""The gate before the Model Registry (``serving.gate``): the one home of its rules, its verdict and its record.

A job may set bars the verified model must pass to be registered at all::

    serving:
      gate:
        thresholds: ["accuracy >= 0.8", "val_rmse <= 0.3"]   # METRIC OP NUMBER, OP: >= > <= <
        better_than_parent: true    # also beat serving.parent_model's default version on those metrics

* :func:`gate_problems` checks the section before anything runs (``jobs.validate`` calls it): one problem per
  unparsable bar, unknown comparison, non-finite number, metric no step of the job measures (for the built-in
  trainer the names are known: :func:`known_metrics`; a user trainer's TensorBoard scalars are known only once
  it ran, so any name passes here and a missing one fails at gate time), better_than_parent without a parent
  model or without a threshold to say which metrics and in which direction.
* :func:`measured` gathers what a run measured into one ``{name: number}``: the training figures, the tuning
  study's best metric, the verify step's evaluation (later sources win on a shared name: the held-out
  evaluation of the exported model is the figure that counts).
* :func:`evaluate` is the verdict, pure (no I/O, no TensorFlow): every bar checked, a missing metric or a NaN
  never passes, the first bar missed named in one line.
* :func:`run` is the gate step: the parent's figures read from the Vertex AI Model Registry (the evaluation
  of its default version, ``jobs.cloud.vertex``), the verdict, ``<record_dir>/gate.json``.
* :func:`record_on_version`: after registration, this model's figures become an evaluation of its new version,
  so the next run's ``better_than_parent`` has something to beat.

"Better than the parent" uses each metric's first threshold's comparison with the parent's figure as the bar
(``accuracy >= 0.8`` -> this model's accuracy >= the parent's; ``val_rmse < 0.3`` -> strictly lower than the
parent's): the threshold already says which way is better, so no second setting says it again.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import operator
import re
from typing import Any

from trainers import config as config_lib
from trainers.errors import Problem, problem

#: The comparisons a bar may make, and what each means.
OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_BAR_RE = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w./-]*)\s*(?P<op>[<>=!]+)\s*(?P<number>\S+)\s*$")
EXAMPLES = ("accuracy >= 0.8", "val_rmse <= 0.3")
FIELD = "serving.gate"
RECORD_NAME = "gate.json"
#: the display name of the evaluations :func:`record_on_version` writes, preferred when reading a parent's.
EVALUATION_NAME = "serving-gate"
_MODEL_RE = re.compile(r"^projects/[^/]+/locations/[a-z0-9-]+/models/[^/@]+$")
#: Model Registry evaluation schemas (Google's, as GCPC's ``ModelImportEvaluationOp`` names them).
SCHEMA_URIS = {
    "classification": "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml",
    "regression": "gs://google-cloud-aiplatform/schema/modelevaluation/regression_metrics_1.0.0.yaml",
}

# What each step measures, by the names the gate sees (:func:`measured`).
#: the verify step, for every model: latency of its serving signature.
VERIFY_METRICS = ("latency_ms_median", "latency_ms_first_call", "instances")
#: the verify step's held-out evaluation of the built-in classifier (``trainers.export.evaluate_export``).
BUILTIN_EVALUATION = ("accuracy", "loss", "examples")
#: the built-in trainer's figures, in both branches: ``metrics.json`` locally, TensorBoard scalars everywhere
#: (``train/loss``...; also spelled ``train_loss``, as the train step's Metrics artifact logs them).
BUILTIN_TRAINING = ("train_loss", "train_accuracy", "train/loss", "train/accuracy", "train/examples_per_second",
                    "train_examples_per_second")
#: the verify step's verdict on ``serving.eval_data`` (``jobs.evaluation.figures``; per-class figures too:
#: ``eval_precision/<class>``, ``eval_recall/<class>``).
EVAL_METRICS = ("eval_accuracy", "eval_baseline_accuracy", "eval_rmse", "eval_mae", "eval_baseline_rmse", "eval_r2",
                "eval_examples")
#: the side-car evaluator's scalars (``trainers.evaluator``), with an evaluator pool.
EVALUATOR_SCALARS = ("validation/loss", "validation/accuracy", "validation_loss", "validation_accuracy")


class GateError(Exception):
    """The gate cannot give a verdict (a bad spec handed to the step directly, a tuning figure that is not
    JSON); ``str(exc)`` is one line."""


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bar: ``metric op value``; ``field`` is where it came from (``serving.gate.thresholds[0]``, or
    ``serving.gate.better_than_parent`` for a bar set by the parent's figure)."""
    metric: str
    op: str
    value: float
    field: str
    parent: str = ""  # the parent version whose figure ``value`` is

    def holds(self, measured: float) -> bool:
        return not math.isnan(measured) and bool(OPS[self.op](measured, self.value))

    @property
    def text(self) -> str:
        against = f" (parent {self.parent})" if self.parent else ""
        return f"{self.metric} {self.op} {_num(self.value)}{against}"


@dataclasses.dataclass
class Check:
    bar: Bar
    measured: float | None  # None: not measured by this run
    passed: bool
    line: str


@dataclasses.dataclass
class GateResult:
    """The verdict: ``passed``; ``lines``, one per bar (``accuracy 0.83 >= 0.8: passed``); ``missed``, the one
    ``error:`` line (without the prefix) for the first bar missed, empty when passed; ``notes``: what was not
    compared and why."""
    passed: bool
    checks: list[Check]
    missed: str
    notes: list[str]
    metrics: dict[str, float]
    parent: dict[str, Any] | None = None

    @property
    def lines(self) -> list[str]:
        return [c.line for c in self.checks]

    def to_dict(self) -> dict[str, Any]:
        """The record (``gate.json``): JSON-safe (a non-finite figure is written as its text, ``"nan"``)."""
        return {"passed": self.passed, "lines": self.lines, "missed": self.missed, "notes": list(self.notes),
                "bars": [{"field": c.bar.field, "bar": c.bar.text, "metric": c.bar.metric, "op": c.bar.op,
                          "value": c.bar.value, "measured": _safe(c.measured), "passed": c.passed}
                         for c in self.checks],
                "metrics": {k: _safe(v) for k, v in sorted(self.metrics.items())}, "parent": self.parent}


def _num(x: float) -> str:
    return f"{x:.6g}"


def _safe(x: float | None) -> float | str | None:
    return x if x is None or math.isfinite(x) else str(x)


# --------------------------------------------------------------------------------------------------
# The spec


def parse_bar(text: str, field: str) -> Bar | Problem:
    """``"METRIC OP NUMBER"`` -> a :class:`Bar`, or the one problem with it."""
    m = _BAR_RE.match(text) if isinstance(text, str) else None
    if not m:
        return problem(field, f"{text!r} is not METRIC OP NUMBER", EXAMPLES)
    metric, op, number = m.group("metric"), m.group("op"), m.group("number")
    if op not in OPS:
        return problem(field, f"{op!r} in {text!r} is not a comparison the gate makes", list(OPS))
    try:
        value = float(number)
    except ValueError:
        return problem(field, f"{number!r} in {text!r} is not a number", [f"{metric} {op} 0.8"])
    if not math.isfinite(value):
        return problem(field, f"{number!r} in {text!r} is not a finite number (no figure passes a NaN bar)",
                       [f"{metric} {op} 0.8"])
    return Bar(metric, op, value, field)


def parse(gate: config_lib.Gate) -> tuple[list[Bar], list[Problem]]:
    """Every threshold as a :class:`Bar`, and the problems of those that are not one."""
    field = f"{FIELD}.thresholds"
    if any(isinstance(t, str) and re.fullmatch(r"[<>=!]+", t.strip()) for t in gate.thresholds):
        return [], [problem(field, f"{gate.thresholds!r} looks like one threshold split into words (a --set value "
                                   "without brackets is split on spaces); give a list",
                            [f"--set '{field}=[\"{EXAMPLES[0]}\"]'"])]
    bars, problems = [], []
    for i, text in enumerate(gate.thresholds):
        parsed = parse_bar(text, f"{field}[{i}]")
        (bars if isinstance(parsed, Bar) else problems).append(parsed)
    return bars, problems


def known_metrics(cfg: config_lib.JobConfig) -> list[str] | None:
    """The names the gate will see for this job, or None when they are known only once it ran (a user's
    trainer: its TensorBoard scalars are its own)."""
    tuning = getattr(cfg, "tuning", None)  # the tuning study's section, where this checkout has one
    study_metric = getattr(tuning, "metric", "") or ""
    if cfg.user_trainer:
        return None
    names = list(BUILTIN_EVALUATION) + list(VERIFY_METRICS) + list(BUILTIN_TRAINING)
    if cfg.serving.eval_data:  # the built-in classifier judged on serving.eval_data (jobs.evaluation)
        names += [n for n in EVAL_METRICS if n not in names]
    if cfg.topology.evaluator.replica_count:
        names += EVALUATOR_SCALARS
    if study_metric:
        names.append(study_metric)
    return names


def _index(field: str) -> int:
    m = re.search(r"\[(\d+)\]$", field)
    return int(m.group(1)) if m else -1


def gate_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """``serving.gate``'s rules (see the module docstring), one problem each."""
    gate = cfg.serving.gate
    bars, problems = parse(gate)
    known = known_metrics(cfg)
    if known is not None:
        for bar in bars:
            if bar.metric not in known:
                near = difflib.get_close_matches(bar.metric, known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                problems.append(problem(bar.field, f"no step of this job measures {bar.metric!r}{hint}", known))
    if known is None and not cfg.serving.eval_data:  # a user trainer: eval_* is known to need serving.eval_data
        for bar in bars:
            if bar.metric in EVAL_METRICS or bar.metric.startswith(("eval_precision/", "eval_recall/")):
                problems.append(problem(bar.field, f"{bar.metric} is measured on serving.eval_data (held-out "
                                                   "examples), which this job does not set",
                                        ["serving.eval_data: eval.jsonl"]))
    problems.sort(key=lambda p: _index(p.field))
    if gate.better_than_parent:
        region = cfg.topology.region
        example = f"projects/PROJECT/locations/{region}/models/ID"
        if not cfg.serving.parent_model:
            problems.append(problem(f"{FIELD}.better_than_parent", "needs serving.parent_model, the model whose "
                                                                   "default version this model must beat",
                                    [f"serving.parent_model: {example}", "better_than_parent: false"]))
        elif not _MODEL_RE.match(cfg.serving.parent_model):
            problems.append(problem("serving.parent_model", f"{cfg.serving.parent_model!r} is not a Model Registry "
                                                            "model name (no version: its default version is compared)",
                                    [example]))
        if not gate.thresholds:
            problems.append(problem(f"{FIELD}.better_than_parent",
                                    "compares the metrics of serving.gate.thresholds (each in its threshold's "
                                    "direction); there are none", [f"thresholds: [\"{EXAMPLES[0]}\"]"]))
    return problems


# --------------------------------------------------------------------------------------------------
# What a run measured


def _numbers(pairs) -> dict[str, float]:
    return {str(k): float(v) for k, v in pairs if isinstance(v, (int, float)) and not isinstance(v, bool)}


def tuning_figures(text: str, study_metric: str = "") -> dict[str, float]:
    """The tuning study's best trial as figures. ``text`` (JSON) is ``{"METRIC": value}``, or a best-trial
    record whose ``metric`` is the value of ``study_metric`` (``{"id": "3", "metric": 0.21, ...}``), or
    ``{"metric": "METRIC", "value": value}``; empty: none."""
    import json

    if not text or not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GateError(f"tuning_metric: not JSON ({exc}); valid choices: {{\"val_rmse\": 0.21}}") from None
    if not isinstance(doc, dict):
        raise GateError('tuning_metric: expected a JSON object; valid choices: {"val_rmse": 0.21}')
    metric = doc.get("metric")
    if isinstance(metric, str) and "value" in doc:
        return _numbers([(metric, doc["value"])])
    if "metric" in doc:
        if not study_metric:
            raise GateError('tuning_metric: a best trial\'s "metric" without the study\'s metric name (tuning.metric); '
                            'valid choices: {"val_rmse": 0.21}')
        return _numbers([(study_metric, metric)])
    return _numbers(doc.items())


def verification_figures(record: dict[str, Any]) -> dict[str, float]:
    """The verify step's record (``verification.json``) as figures: its evaluation (``accuracy``, ``loss``,
    ``examples`` for the built-in classifier) and latency (``latency_ms_median``, ...)."""
    from jobs.evaluation import figures

    out = _numbers((k, record.get(k)) for k in ("accuracy", "loss", "examples", "instances"))
    latency = record.get("latency_ms") if isinstance(record.get("latency_ms"), dict) else {}
    out.update(_numbers((f"latency_ms_{k}", latency.get(k)) for k in ("median", "first_call")))
    out.update(figures(record.get("eval")))  # serving.eval_data's verdict: eval_rmse, eval_accuracy, ...
    return out


def scalar_figures(last: dict[str, float]) -> dict[str, float]:
    """TensorBoard scalars' last values under their own names (``validation/epoch_accuracy``) and as the train
    step's Metrics artifact spells them (``validation_epoch_accuracy``)."""
    out = _numbers(last.items())
    out.update({k.replace("/", "_"): v for k, v in list(out.items()) if "/" in k})
    return out


def measured(training: dict[str, Any] | None = None, scalars: dict[str, float] | None = None,
             tuning: dict[str, float] | None = None, verification: dict[str, Any] | None = None) -> dict[str, float]:
    """One ``{name: number}`` from every source (see the module docstring for which wins)."""
    out: dict[str, float] = {}
    out.update(_numbers((training or {}).items()))
    out.update(scalar_figures(scalars or {}))
    out.update(_numbers((tuning or {}).items()))
    out.update(verification_figures(verification or {}))
    return out


# --------------------------------------------------------------------------------------------------
# The verdict


def _check(bar: Bar, metrics: dict[str, float]) -> Check:
    if bar.metric not in metrics:
        shown = ", ".join(sorted(metrics)) or "nothing"
        return Check(bar, None, False, f"{bar.metric} not measured by this run (measured: {shown}): missed")
    value = float(metrics[bar.metric])
    passed = bar.holds(value)
    why = " (NaN never passes)" if math.isnan(value) else ""
    against = f" (parent {bar.parent})" if bar.parent else ""
    return Check(bar, value, passed, f"{bar.metric} {_num(value)} {bar.op} {_num(bar.value)}{against}: "
                                     f"{'passed' if passed else 'missed'}{why}")


def _missed_line(check: Check, metrics: dict[str, float]) -> str:
    bar = check.bar
    if check.measured is None:
        return str(problem(bar.field, f"{bar.metric} was not measured by this run, so the model is not registered; "
                                      "the metrics it measured are", sorted(metrics) or ["none"]))
    nan = " (NaN never passes)" if math.isnan(check.measured) else ""
    if bar.parent:
        choice = "better_than_parent: false"
    elif nan:
        choice = f"a model whose {bar.metric} is a number"
    else:  # the bar this model meets (never a strict one at its own figure)
        choice = f"{bar.metric} {bar.op.rstrip('=') + '='} {_num(check.measured)} (what this model measured)"
    return str(problem(bar.field, f"{bar.metric} {_num(check.measured)} {bar.op} {_num(bar.value)}"
                                  f"{f' (parent {bar.parent})' if bar.parent else ''} missed{nan}, so the model is not "
                                  "registered", [choice]))


def parent_bars(bars: list[Bar], parent_metrics: dict[str, float], parent: str) -> tuple[list[Bar], list[str]]:
    """One bar per metric of the thresholds (first threshold's direction) at the parent's figure; a metric the
    parent's evaluation lacks (or holds as NaN) is a note, not a bar."""
    out, notes, seen = [], [], set()
    for bar in bars:
        if bar.metric in seen:
            continue
        seen.add(bar.metric)
        value = parent_metrics.get(bar.metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            notes.append(f"better_than_parent: the parent {parent} has no {bar.metric} in its evaluation; "
                         f"{bar.metric} not compared with it")
            continue
        out.append(Bar(bar.metric, bar.op, float(value), f"{FIELD}.better_than_parent", parent=parent))
    return out, notes


def evaluate(gate: config_lib.Gate, metrics: dict[str, float], parent_metrics: dict[str, float] | None,
             parent: str = "") -> GateResult:
    """Check ``metrics`` against the thresholds, then (``parent_metrics`` given and ``better_than_parent``)
    against the parent's figures, in that order; the first bar missed is ``missed``. ``parent``: the parent
    version's name, for the lines. Raises :class:`GateError` for thresholds that do not parse (validation
    refuses them first; a KFP user may call the step directly)."""
    bars, problems = parse(gate)
    if problems:
        raise GateError(str(problems[0]))
    notes: list[str] = []
    if not bars and not gate.better_than_parent:
        notes.append("no bar: serving.gate sets no thresholds; every verified model is registered")
    all_bars = list(bars)
    if gate.better_than_parent and parent_metrics is not None:
        extra, why = parent_bars(bars, parent_metrics, parent or "model")
        all_bars += extra
        notes += why
    checks = [_check(bar, metrics) for bar in all_bars]
    first = next((c for c in checks if not c.passed), None)
    return GateResult(passed=first is None, checks=checks, missed="" if first is None else _missed_line(first, metrics),
                      notes=notes, metrics=dict(metrics))


# --------------------------------------------------------------------------------------------------
# The step: the parent's figures, the verdict, the record


def evaluation_figures(evaluations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The evaluation to beat among a version's (``jobs.cloud.vertex.model_evaluations``): the newest written
    by this gate (:data:`EVALUATION_NAME`), else the newest; None when there is none."""
    if not evaluations:
        return None
    ours = [e for e in evaluations if e.get("display_name") == EVALUATION_NAME]
    return max(ours or evaluations, key=lambda e: e.get("create_time") or "")


def parent_figures(parent_model: str, api_endpoint: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """(the parent's default version ``models/ID@V``, its evaluation to beat or None) from the Model Registry."""
    from jobs.cloud import vertex

    version = vertex.default_version(parent_model, api_endpoint)
    return version, evaluation_figures(vertex.model_evaluations(version, api_endpoint))


def run(gate: config_lib.Gate, metrics: dict[str, float], *, parent_model: str = "", dry_run: bool = False,
        api_endpoint: str = "", record_dir: str = "") -> GateResult:
    """The gate step: with ``better_than_parent`` (and not ``dry_run``: a local run calls no cloud API) read the
    parent's default version and its evaluation, then :func:`evaluate`; the record goes to
    ``<record_dir>/gate.json`` whatever the verdict. Raises ``jobs.cloud.clients.CloudError`` (one line) when
    the Model Registry cannot be read, :class:`GateError` for a bad spec."""
    parent_metrics, parent, notes, parent_record = None, "", [], None
    if gate.better_than_parent:
        if dry_run:
            notes.append(f"better_than_parent: not compared on a local run (no Model Registry call); a Vertex run "
                         f"compares with the default version of {parent_model or 'serving.parent_model'}")
        elif not parent_model:
            raise GateError(str(problem(f"{FIELD}.better_than_parent", "needs a parent model (serving.parent_model, "
                                                                       "the gate step's parent_model)",
                                        ["projects/PROJECT/locations/REGION/models/ID"])))
        else:
            parent, evaluation = parent_figures(parent_model, api_endpoint or None)
            parent_record = {"model": parent_model, "version": parent,
                             "evaluation": evaluation.get("name") if evaluation else None,
                             "metrics": evaluation.get("metrics") if evaluation else None}
            if evaluation is None or not isinstance(evaluation.get("metrics"), dict):
                notes.append(f"better_than_parent: the parent's default version {parent} has no evaluation in the "
                             "Model Registry; nothing to beat (the next run compares with this model's, recorded "
                             "at registration)")
            else:
                parent_metrics = evaluation["metrics"]
    result = evaluate(gate, metrics, parent_metrics, parent)
    result.notes = notes + result.notes
    result.parent = parent_record
    if record_dir:
        from trainers import fileio
        from trainers.paths import join, readable

        fileio.write_json_atomic(join(readable(record_dir), RECORD_NAME), result.to_dict())
    return result


# --------------------------------------------------------------------------------------------------
# After registration


def schema_for(metrics: dict[str, float]) -> str:
    """The evaluation schema: classification when the figures include an accuracy (the built-in classifier,
    or a trainer reporting one), else regression. The figures keep this project's names (``accuracy``,
    ``val_rmse``): the gate reads them back by those names, whatever a console makes of the schema."""
    return SCHEMA_URIS["classification" if any("accuracy" in k for k in metrics) else "regression"]


def record_on_version(version: str, record: dict[str, Any], *, pipeline_job: str = "",
                      api_endpoint: str = "") -> str:
    """Write the gate record's finite figures as an evaluation of the registered ``version``
    (``projects/P/locations/L/models/ID@V``); returns the evaluation's name."""
    from jobs.cloud import vertex

    figures = {k: float(v) for k, v in (record.get("metrics") or {}).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    metadata = {"source": "serving.gate", "passed": bool(record.get("passed")), "bars": list(record.get("lines") or [])}
    if pipeline_job:
        metadata["pipeline_job_resource_name"] = pipeline_job
    return vertex.import_model_evaluation(version, figures, schema_uri=schema_for(figures),
                                          display_name=EVALUATION_NAME, metadata=metadata,
                                          api_endpoint=api_endpoint or None)
