"""The gate's spec: ``serving.gate``'s bars and the rules validation runs on them, before anything is spent.

A job may set bars the verified model must pass to be registered at all (``jobs.steps.gate`` gives the verdict and
writes the record)::

    serving:
      gate:
        thresholds: ["accuracy >= 0.8", "val_rmse <= 0.3"]   # METRIC OP NUMBER, OP: >= > <= <
        better_than_parent: true    # also beat serving.parent_model's default version on those metrics
        better_than_baseline: true  # a tuned job: only a trial that beat the job as it stands (tuning.baseline)

:func:`gate_problems` checks the section (``jobs.rules.validate`` calls it): one problem per unparsable bar, unknown
comparison, non-finite number, metric no step of the job measures (for the built-in trainer the names are
known: :func:`known_metrics`; a user trainer's TensorBoard scalars are known only once it ran, so any name
passes here and a missing one fails at gate time), better_than_parent without a parent model or without a
threshold to say which metrics and in which direction, better_than_baseline without a tuning section whose
baseline is on. :func:`parse` turns the thresholds into :class:`Bar`
values, what the verdict checks. Pure: no I/O, no cloud client, no TensorFlow.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import operator
import re

from jobs.evaluation.verdict import METRIC_NAMES
from jobfile import config as config_lib
from jobfile.errors import Problem, problem

#: The comparisons a bar may make, and what each means.
OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}
_BAR_RE = re.compile(r"^\s*(?P<metric>[A-Za-z_][\w./-]*)\s*(?P<op>[<>=!]+)\s*(?P<number>\S+)\s*$")
EXAMPLES = ("accuracy >= 0.8", "val_rmse <= 0.3")
FIELD = "serving.gate"
_MODEL_RE = re.compile(r"^projects/[^/]+/locations/[a-z0-9-]+/models/[^/@]+$")

# What each step measures, by the names the gate sees (``jobs.steps.gate.measured``).
#: the verify step, for every model: latency of its serving signature.
VERIFY_METRICS = ("latency_ms_median", "latency_ms_first_call", "instances")
#: the verify step's held-out evaluation of the built-in classifier (``trainers.export.evaluate_export``).
BUILTIN_EVALUATION = ("accuracy", "loss", "examples")
#: the built-in trainer's figures, in both branches: ``metrics.json`` locally, TensorBoard scalars everywhere
#: (``train/loss``...; also spelled ``train_loss``, as the train step's Metrics artifact logs them).
BUILTIN_TRAINING = ("train_loss", "train_accuracy", "train/loss", "train/accuracy", "train/examples_per_second",
                    "train_examples_per_second")
#: the verify step's verdict on ``serving.eval_data`` (``jobs.evaluation.verdict.figures``; per-class figures too:
#: ``eval_precision/<class>``, ``eval_recall/<class>``).
EVAL_METRICS = METRIC_NAMES
#: the side-car evaluator's scalars (``trainers.evaluator``), with an evaluator pool.
EVALUATOR_SCALARS = ("validation/loss", "validation/accuracy", "validation_loss", "validation_accuracy")


def figure_text(x: float) -> str:
    """A figure as the gate's lines show it (6 significant digits)."""
    return f"{x:.6g}"


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bar: ``metric op value``; ``field`` is where it came from (``serving.gate.thresholds[0]``,
    ``serving.gate.better_than_parent`` for a bar set by the parent's figure, ``serving.gate.better_than_baseline``
    for the baseline's)."""
    metric: str
    op: str
    value: float
    field: str
    parent: str = ""  # the parent version whose figure ``value`` is
    baseline: bool = False  # ``value`` is the baseline's figure (the job as it stands, run beside the study)

    def holds(self, measured: float) -> bool:
        return not math.isnan(measured) and bool(OPS[self.op](measured, self.value))

    @property
    def against(self) -> str:
        """Whose figure ``value`` is, as the lines say it ("" for a threshold)."""
        if self.parent:
            return f" (parent {self.parent})"
        return " (the baseline's)" if self.baseline else ""

    @property
    def text(self) -> str:
        return f"{self.metric} {self.op} {figure_text(self.value)}{self.against}"


BASELINE_FIELD = f"{FIELD}.better_than_baseline"


def baseline_bar(metric: str, goal: str, baseline_value: float) -> Bar:
    """The bar ``better_than_baseline`` sets: the study's metric strictly better than the baseline's figure, in
    the study's direction (``<`` to minimize, ``>`` to maximize): a model only as good as the job as it stands
    is the baseline's own, not a gain of the study."""
    return Bar(metric, ">" if goal == "maximize" else "<", float(baseline_value), BASELINE_FIELD, baseline=True)


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
    if cfg.serving.eval_data:  # the built-in classifier judged on serving.eval_data (jobs.evaluation.examples_file)
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
        elif not _MODEL_RE.fullmatch(cfg.serving.parent_model):
            problems.append(problem("serving.parent_model", f"{cfg.serving.parent_model!r} is not a Model Registry "
                                                            "model name (no version: its default version is compared)",
                                    [example]))
        if not gate.thresholds:
            problems.append(problem(f"{FIELD}.better_than_parent",
                                    "compares the metrics of serving.gate.thresholds (each in its threshold's "
                                    "direction); there are none", [f"thresholds: [\"{EXAMPLES[0]}\"]"]))
    if getattr(gate, "better_than_baseline", False):
        tuning = getattr(cfg, "tuning", None)
        if tuning is None or not tuning.enabled:
            problems.append(problem(BASELINE_FIELD, "needs a tuning section: the baseline is the job as it stands, run "
                                                    "beside a study's trials, and a job without a study has none to beat",
                                    ["tuning: {metric: ..., goal: ..., parameters: {...}, max_trials: 4}",
                                     "better_than_baseline: false"]))
        elif not tuning.baseline:
            problems.append(problem(BASELINE_FIELD, "needs tuning.baseline: true (the job as it stands, run beside the "
                                                    "trials, is what the study's model must beat); it is false",
                                    ["tuning.baseline: true", "better_than_baseline: false"]))
    return problems


def gate_missed_bar(gate: dict) -> str:
    """The first bar the gate missed, in one line (``serving.gate.thresholds[0]: accuracy 0.75 >= 0.8 missed``),
    without the consequence and the advice the step printed with it; "" when it passed or nothing says."""
    missed = str(gate.get("missed") or "")
    if missed:
        return missed.split(", so the model is not registered")[0].split("; valid choices:")[0]
    line = next((b.get("bar") for b in gate.get("bars") or [] if isinstance(b, dict) and not b.get("passed")), "")
    return f"{line} missed" if line else ""
