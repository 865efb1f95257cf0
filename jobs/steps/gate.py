"""The gate before the Model Registry (``serving.gate``): its verdict, its record and its step (its rules: ``jobs.rules.gate_section``).

A job may set bars the verified model must pass to be registered at all::

    serving:
      gate:
        thresholds: ["accuracy >= 0.8", "val_rmse <= 0.3"]   # METRIC OP NUMBER, OP: >= > <= <
        better_than_parent: true    # also beat serving.parent_model's default version on those metrics
        better_than_baseline: true  # a tuned job: only a trial that beat the job as it stands

* ``jobs.rules.gate_section`` is the spec: the bars (:class:`Bar`, :func:`parse`) and :func:`gate_problems`, the
  section's rules ``jobs.rules.validate`` runs before anything is spent (re-exported here);
* :func:`measured` gathers what a run measured into one ``{name: number}``: the training figures, the tuning
  study's best metric, the verify step's evaluation (later sources win on a shared name: the held-out
  evaluation of the exported model is the figure that counts).
* :func:`evaluate` is the verdict, pure (no I/O, no TensorFlow): every bar checked, a missing metric or a NaN
  never passes, the first bar missed named in one line.
* :func:`run` is the gate step: the parent's figures read from the Vertex AI Model Registry (the evaluation
  of its default version, ``jobs.cloud.apis.vertex``), the verdict, ``<record_dir>/gate.json``.
* :func:`record_on_version`: after registration, this model's figures become an evaluation of its new version,
  so the next run's ``better_than_parent`` has something to beat.

"Better than the baseline" (a tuned job; ``tuning.baseline`` runs the job as it stands beside the trials) reads
the study's record (``tuning.json``): the model the study handed on must be strictly better than the baseline on
the study's metric, in the study's direction. When the study found nothing better, the baseline's own model goes
on and this bar refuses it; a baseline without a figure (failed) never lets it pass: nothing shows the study beat
the job as it stands.

"Better than the parent" uses each metric's first threshold's comparison with the parent's figure as the bar
(``accuracy >= 0.8`` -> this model's accuracy >= the parent's; ``val_rmse < 0.3`` -> strictly lower than the
parent's): the threshold already says which way is better, so no second setting says it again.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from jobs.cloud.apis import vertex
from jobs.rules import tuning_rules
from jobs.run_records import records
from jobs.rules.errors import CloudError
from jobs.evaluation.verdict import figures
from jobs.rules.gate_section import BASELINE_FIELD, FIELD, Bar, baseline_bar, figure_text, parse
from jobs.run_records.tensorboard import last_values, read_scalars
from jobfile import config as config_lib
from jobfile.errors import ConfigError, problem

#: the display name of the evaluations :func:`record_on_version` writes, preferred when reading a parent's.
EVALUATION_NAME = "serving-gate"
#: Model Registry evaluation schemas (Google's, as GCPC's ``ModelImportEvaluationOp`` names them).
SCHEMA_URIS = {
    "classification": "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml",
    "regression": "gs://google-cloud-aiplatform/schema/modelevaluation/regression_metrics_1.0.0.yaml",
}


class GateError(Exception):
    """The gate cannot give a verdict (a bad spec handed to the step directly, a tuning figure that is not
    JSON); ``str(exc)`` is one line."""


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
                          "value": _safe(c.bar.value), "measured": _safe(c.measured), "passed": c.passed}
                         for c in self.checks],
                "metrics": {k: _safe(v) for k, v in sorted(self.metrics.items())}, "parent": self.parent}


def _safe(x: float | None) -> float | str | None:
    return x if x is None or math.isfinite(x) else str(x)


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
    return Check(bar, value, passed, f"{bar.metric} {figure_text(value)} {bar.op} {figure_text(bar.value)}{bar.against}: "
                                     f"{'passed' if passed else 'missed'}{why}")


def baseline_check(study: dict[str, Any] | None) -> tuple[Check, str]:
    """``better_than_baseline``'s check on the study's record: (the check, the reason the study gave for the model
    it handed on, for the missed line)."""
    study = study if isinstance(study, dict) else {}
    metric, goal = str(study.get("metric") or "metric"), str(study.get("goal") or "")
    handed = tuning_rules.handed_on(study) if study.get("trials") else None
    baseline = tuning_rules.baseline_of(study)
    value = tuning_rules.baseline_metric(baseline)
    reason = str((handed or {}).get("reason") or "")
    if not handed or value is None:
        why = ("no study record reached the gate" if not study.get("trials") else
               "no baseline ran (tuning.baseline is false)" if baseline is None else
               f"the baseline has no {metric} ({baseline.get('state')}"
               + (f": {baseline['error']}" if baseline.get("error") else "") + ")")
        bar = Bar(metric, ">" if goal == "maximize" else "<", math.nan, BASELINE_FIELD, baseline=True)
        return Check(bar, None, False, f"{metric} better than the baseline's: {why}, so nothing shows the study beat "
                                       "the job as it stands: missed"), why
    measured = tuning_rules.finite_number(handed.get("metric"))
    check = _check(baseline_bar(metric, goal, value), {metric: measured} if measured is not None else {})
    return check, reason


def _missed_line(check: Check, metrics: dict[str, float], reason: str = "") -> str:
    bar = check.bar
    if bar.baseline:
        return str(problem(bar.field, f"{reason or 'the study found nothing better than the job as it stands'}, so the "
                                      "model is not registered", ["better_than_baseline: false",
                                                                  "a search space around the job's own values"]))
    if check.measured is None:
        return str(problem(bar.field, f"{bar.metric} was not measured by this run, so the model is not registered; "
                                      "the metrics it measured are", sorted(metrics) or ["none"]))
    nan = " (NaN never passes)" if math.isnan(check.measured) else ""
    if bar.parent:
        choice = "better_than_parent: false"
    elif nan:
        choice = f"a model whose {bar.metric} is a number"
    else:  # the bar this model meets (never a strict one at its own figure)
        choice = f"{bar.metric} {bar.op.rstrip('=') + '='} {figure_text(check.measured)} (what this model measured)"
    return str(problem(bar.field, f"{bar.metric} {figure_text(check.measured)} {bar.op} {figure_text(bar.value)}"
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
             parent: str = "", study: dict[str, Any] | None = None) -> GateResult:
    """Check ``metrics`` against the thresholds, then (``parent_metrics`` given and ``better_than_parent``)
    against the parent's figures, then (``better_than_baseline``) the model the study handed on against the
    baseline's figure (``study``: the study's record, ``tuning.json``), in that order; the first bar missed is
    ``missed``. ``parent``: the parent version's name, for the lines. Raises :class:`GateError` for thresholds
    that do not parse (validation refuses them first; a KFP user may call the step directly)."""
    bars, problems = parse(gate)
    if problems:
        raise GateError(str(problems[0]))
    notes: list[str] = []
    if not bars and not gate.better_than_parent and not gate.better_than_baseline:
        notes.append("no bar: serving.gate sets no thresholds; every verified model is registered")
    all_bars = list(bars)
    if gate.better_than_parent and parent_metrics is not None:
        extra, why = parent_bars(bars, parent_metrics, parent or "model")
        all_bars += extra
        notes += why
    checks = [_check(bar, metrics) for bar in all_bars]
    reason = ""
    if gate.better_than_baseline:
        check, reason = baseline_check(study)
        checks.append(check)
    first = next((c for c in checks if not c.passed), None)
    return GateResult(passed=first is None, checks=checks,
                      missed="" if first is None else _missed_line(first, metrics, reason),
                      notes=notes, metrics=dict(metrics))


# --------------------------------------------------------------------------------------------------
# The step: the parent's figures, the verdict, the record


def evaluation_figures(evaluations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The evaluation to beat among a version's (``jobs.cloud.apis.vertex.model_evaluations``): the newest written
    by this gate (:data:`EVALUATION_NAME`), else the newest; None when there is none."""
    if not evaluations:
        return None
    ours = [e for e in evaluations if e.get("display_name") == EVALUATION_NAME]
    return max(ours or evaluations, key=lambda e: e.get("create_time") or "")


def parent_figures(parent_model: str, api_endpoint: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """(the parent's default version ``models/ID@V``, its evaluation to beat or None) from the Model Registry."""
    version = vertex.default_version(parent_model, api_endpoint)
    return version, evaluation_figures(vertex.model_evaluations(version, api_endpoint))


def run(gate: config_lib.Gate, metrics: dict[str, float], *, parent_model: str = "", dry_run: bool = False,
        api_endpoint: str = "", record_dir: str = "", study: dict[str, Any] | None = None) -> GateResult:
    """The gate step: with ``better_than_parent`` (and not ``dry_run``: a local run calls no cloud API) read the
    parent's default version and its evaluation, then :func:`evaluate`; the record goes to
    ``<record_dir>/gate.json`` whatever the verdict. Raises ``jobs.rules.errors.CloudError`` (one line) when
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
    result = evaluate(gate, metrics, parent_metrics, parent, study=study)
    result.notes = notes + result.notes
    result.parent = parent_record
    if record_dir:
        records.write_at(record_dir, records.GATE_RECORD, result.to_dict())
    return result


# --------------------------------------------------------------------------------------------------
# The gate step (components/gate: its body hands the artifacts' paths and metadata to these)


class StepFailed(Exception):
    """The gate step cannot give a verdict; ``str(exc)`` is its one ``error:`` line (without the prefix)."""


def step(config_json: str, *, verification_path: str | None = None, study_path: str | None = None,
         tensorboard_path: str | None = None, training: dict[str, Any] | None = None, tuning_metric: str = "",
         parent_model: str = "", dry_run: bool = False, api_endpoint: str = "",
         record_dir: str = "") -> GateResult:
    """The gate step on plain values: the job's bars read from ``config_json``, the run's figures gathered from
    the records given (the verify step's, the study's, a TensorBoard logs folder, the training Metrics'
    metadata, the tuning study's best trial as JSON), then :func:`run` (the parent model: ``parent_model``, else
    ``serving.parent_model``). Raises :class:`StepFailed` with the one line to say."""
    try:
        cfg = config_lib.load_json(config_json)
    except ConfigError as exc:
        raise StepFailed(str(exc.problems[0])) from None
    study_metric = getattr(getattr(cfg, "tuning", None), "metric", "") or ""
    verified, studied = {}, None
    try:
        if verification_path is not None:
            verified = records.artifact_json(verification_path, "verification", "the verify step's JSON record",
                                             "verify_model's verification output")
        if study_path is not None:
            studied = records.artifact_json(study_path, "study", "a study's JSON record",
                                            "tune's or pick_model's study output")
    except ValueError as exc:
        raise StepFailed(str(exc)) from None
    try:
        scalars = last_values(read_scalars(tensorboard_path)) if tensorboard_path is not None else {}
        figures = measured(training=training or {}, scalars=scalars,
                           tuning=tuning_figures(tuning_metric, study_metric),
                           verification=verified if isinstance(verified, dict) else {})
        return run(cfg.serving.gate, figures, parent_model=parent_model or cfg.serving.parent_model,
                   dry_run=dry_run, api_endpoint=api_endpoint, record_dir=record_dir, study=studied)
    except (GateError, CloudError) as exc:
        raise StepFailed(str(exc)) from None


def logged_metrics(result: GateResult) -> dict[str, float]:
    """What a passed gate step logs as Metrics: ``gate_passed`` 1.0, then each bar's finite figure (not the
    parent's or the baseline's bars: their figures are comparisons)."""
    out = {"gate_passed": 1.0}
    for check in result.checks:
        if check.measured is not None and math.isfinite(check.measured) and not check.bar.parent \
                and not check.bar.baseline:
            out[check.bar.metric] = float(check.measured)
    return out


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
    figures = {k: float(v) for k, v in (record.get("metrics") or {}).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    metadata = {"source": "serving.gate", "passed": bool(record.get("passed")), "bars": list(record.get("lines") or [])}
    if pipeline_job:
        metadata["pipeline_job_resource_name"] = pipeline_job
    return vertex.import_model_evaluation(version, figures, schema_uri=schema_for(figures),
                                          display_name=EVALUATION_NAME, metadata=metadata,
                                          api_endpoint=api_endpoint or None)
