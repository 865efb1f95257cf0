"""The ``tuning:`` section's meaning: its rules (checked before anything runs), the section parsed once into a
typed :class:`Study` (:func:`parse`, THE parser: what every reader of the section takes), and how a trial's values
become the flags Vertex passes to every replica.

No Optuna and no cloud client here: :func:`tuning_problems` runs inside ``jobs.rules.validate`` (well under a second).
The names follow aiplatform's ``hyperparameter_tuning`` specs (``DoubleParameterSpec(min, max, scale)``,
``IntegerParameterSpec``, ``CategoricalParameterSpec(values)``, ``DiscreteParameterSpec(values, scale)``) and
Vertex's ``StudySpec`` rules (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/StudySpec): a log scale
needs a strictly positive range, grid search takes only integer, categorical and discrete parameters, and the
categorical values are strings.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Literal, Mapping

from jobs.rules import tuning_rules
from jobfile import config as config_lib
from jobfile.errors import ConfigError, Problem, problem
from trainers.train import HYPERTUNE_METRICS

#: A parameter's name is a command-line flag (``--NAME=VALUE``) and Vertex's ``parameter_id``.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
TYPES = ("double", "integer", "categorical", "discrete")
LOG_SCALES = ("log", "reverse_log")
EXAMPLE = {"double": "{type: double, min: 0.0001, max: 0.1, scale: log}",
           "integer": "{type: integer, min: 4, max: 32}",
           "categorical": "{type: categorical, values: [adam, sgd]}",
           "discrete": "{type: discrete, values: [16, 32, 64]}"}


def trainer_args(cfg: config_lib.JobConfig) -> list[str]:
    """The arguments the job file already gives every replica (before the trial's flags)."""
    return list(cfg.trainer.args if cfg.trainer.module else cfg.container.args)


def flag_value(param: config_lib.Parameter, value: Any) -> str:
    """A value as Vertex writes it in ``--NAME=VALUE``: whole numbers of integer and discrete parameters without
    a decimal point (a trainer parses ``--batch_size`` with ``type=int``, as Vertex's samples do)."""
    if param.type == "categorical":
        return str(value)
    number = float(value)
    if param.type == "integer" or (param.type == "discrete" and number.is_integer()):
        return str(int(number))
    return repr(number)


def typed_value(param: config_lib.Parameter, value: Any) -> Any:
    """A trial's value as the record keeps it: an int for integer parameters and whole discrete values."""
    if param.type == "categorical":
        return str(value)
    if param.type == "integer" or (param.type == "discrete" and float(value).is_integer()):
        return int(round(float(value)))
    return float(value)


@dataclasses.dataclass(frozen=True)
class Study:
    """The ``tuning:`` section, parsed once and rule-checked (:func:`parse`): what the local study
    (``jobs.tuning``), Vertex's study (``jobs.cloud.vertex_jobs.tuning_job``), the plan and the report take, never the
    section's dict again. ``parameters``: by name as the job file lists them, read-only; ``algorithm``: unset is
    ``bayesian`` (Vertex's default, Bayesian optimization)."""
    metric: str
    goal: Literal["minimize", "maximize"]
    parameters: Mapping[str, config_lib.Parameter]
    algorithm: Literal["bayesian", "random", "grid"]
    max_trials: int
    parallel_trials: int
    max_failed_trials: int
    baseline: bool

    def flags(self, values: Mapping[str, Any]) -> list[str]:
        """``--NAME=VALUE`` per parameter, by name (appended after ``trainer.args``; a job file and the config JSON
        the pipeline passes on, whose keys are sorted, give the same command)."""
        return [f"--{name}={flag_value(self.parameters[name], values[name])}" for name in sorted(self.parameters)]

    def typed(self, name: str, value: Any) -> Any:
        """A trial's value of ``name`` as the record keeps it (:func:`typed_value`); a name the section does not
        declare keeps its value."""
        spec = self.parameters.get(name)
        return typed_value(spec, value) if spec is not None and value is not None else value

    @property
    def grid_points(self) -> int:
        """How many points a grid search has (integer ranges, categorical and discrete values)."""
        n = 1
        for p in self.parameters.values():
            n *= int(p.max - p.min + 1) if p.type == "integer" else len(p.values)
        return n

    @property
    def trial_limit(self) -> int:
        """How many trials the study runs: ``max_trials``, fewer when a grid's points run out first."""
        return min(self.max_trials, self.grid_points) if self.algorithm == "grid" else self.max_trials

    def best(self, trials: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The best of ``trials`` by THE rule (``jobs.rules.tuning_rules.best_of``) in this study's direction."""
        return tuning_rules.best_of(trials, self.goal)


def parse(section: config_lib.Tuning | Mapping[str, Any] | None) -> Study:
    """THE parser of the ``tuning`` section: the typed section (a ``jobfile.config.Tuning``) or its plain dict, as
    a pipeline passes it, shape-checked (``jobfile.config``), then checked by the section's own rules
    (:func:`section_problems`); a section with nothing to search is refused too. Raises ConfigError with every
    problem, each naming its field."""
    if isinstance(section, config_lib.Tuning):
        t = section
    else:
        t = config_lib.from_dict({"tuning": dict(section) if section is not None else {}}).tuning
    problems = section_problems(t)
    if not problems and not t.enabled:
        problems = [problem("tuning.parameters", "the job has no tuning section to run: no parameters to search",
                            [f"learning_rate: {EXAMPLE['double']}"])]
    if problems:
        raise ConfigError(problems)
    return Study(metric=t.metric, goal=t.goal, parameters=types.MappingProxyType(dict(t.parameters)),
                 algorithm=t.algorithm or "bayesian", max_trials=t.max_trials, parallel_trials=t.parallel_trials,
                 max_failed_trials=t.max_failed_trials, baseline=t.baseline)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def fixed_value(args: list[str], name: str) -> str | None:
    """The value ``args`` (the job's fixed arguments) give ``--name``, the last one as argparse keeps it
    (``--name V`` or ``--name=V``; ``""`` for a flag without a value); None when they do not give it."""
    flag, found = f"--{name}", None
    for i, a in enumerate(args):
        if a == flag:
            found = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
        elif a.startswith(flag + "="):
            found = a[len(flag) + 1:]
    return found


def _range_problems(field: str, p: config_lib.Parameter) -> list[Problem]:
    out = []
    if p.values:
        out.append(problem(f"{field}.values", f"a {p.type} parameter is a range (min, max); values belong to "
                                              "categorical and discrete parameters", [EXAMPLE[p.type]]))
    if p.min is None or p.max is None:
        missing = " and ".join(k for k in ("min", "max") if getattr(p, k) is None)
        return out + [problem(field, f"a {p.type} parameter needs {missing}", [EXAMPLE[p.type]])]
    infinite = [k for k in ("min", "max") if not math.isfinite(getattr(p, k))]
    if infinite:  # Optuna's sampler raises OverflowError on it; Vertex's DoubleValueSpec cannot carry it
        return out + [problem(f"{field}.{k}", f"{getattr(p, k)} is not a finite number: a search range has finite "
                                              "bounds", [EXAMPLE[p.type]]) for k in infinite]
    if p.type == "integer":
        for key in ("min", "max"):
            if not float(getattr(p, key)).is_integer():
                out.append(problem(f"{field}.{key}", f"an integer parameter's bound must be a whole number, got "
                                                     f"{getattr(p, key)!r}", [int(getattr(p, key))]))
    if not p.min < p.max:
        out.append(problem(f"{field}.max", f"must be greater than min ({p.min:g}), got {p.max:g}; a fixed value "
                                           "belongs in trainer.args", [f"{p.min:g} < max"]))
    if p.scale in LOG_SCALES and p.min <= 0:
        out.append(problem(f"{field}.min", f"a {p.scale} scale needs a range above 0, got min {p.min:g}",
                           ["a positive min", "scale: linear"]))
    return out


def _values_problems(field: str, p: config_lib.Parameter) -> list[Problem]:
    out = []
    for key in ("min", "max"):
        if getattr(p, key) is not None:
            out.append(problem(f"{field}.{key}", f"a {p.type} parameter lists its values; min and max belong to "
                                                 "double and integer parameters", [EXAMPLE[p.type]]))
    if not p.values:
        return out + [problem(f"{field}.values", f"a {p.type} parameter needs at least one value", [EXAMPLE[p.type]])]
    if p.type == "categorical":
        if p.scale is not None:
            out.append(problem(f"{field}.scale", "a categorical parameter has no scale (Vertex: leave it unset)",
                               ["remove scale"]))
        bad = [v for v in p.values if not isinstance(v, str)]
        if bad:
            out.append(problem(f"{field}.values", f"categorical values are strings (Vertex passes them as text), got "
                                                  f"{bad[0]!r}; quote it, or use type: discrete for numbers",
                               [f"'{bad[0]}'", "type: discrete"]))
    else:
        bad = [v for v in p.values if not _is_number(v)]
        if bad:
            out.append(problem(f"{field}.values", f"discrete values are numbers, got {bad[0]!r}; use type: "
                                                  "categorical for names", ["type: categorical"]))
        elif p.scale in LOG_SCALES and min(p.values) <= 0:
            out.append(problem(f"{field}.values", f"a {p.scale} scale needs values above 0, got {min(p.values):g}",
                               ["positive values", "scale: linear"]))
    if not out:  # distinct as Vertex compares them: discrete values as numbers (16 and 16.0 are one value)
        key = (lambda v: v) if p.type == "categorical" else float
        seen: dict[Any, Any] = {}
        for v in p.values:
            if key(v) in seen:
                same = "" if str(seen[key(v)]) == str(v) else f" (as {seen[key(v)]!r}: the same number)"
                distinct = list({key(x): x for x in reversed(p.values)}.values())[::-1]
                out.append(problem(f"{field}.values", f"{v!r} is listed twice{same}; every value must be distinct",
                                   [str(distinct)]))
                break
            seen[key(v)] = v
    return out


def _builtin_problems(cfg: config_lib.JobConfig, name: str, field: str, p: config_lib.Parameter) -> list[Problem]:
    """The built-in trainer takes ``--SECTION.FIELD=VALUE`` as an override of its config (``trainers.task``): the
    name must be such a field, and every value the study can try must be valid for it."""
    section, _, key = name.partition(".")
    sections = {f.name: f for f in config_lib.dataclasses.fields(config_lib.JobConfig)}
    hints = typing.get_type_hints(config_lib.JobConfig)
    fields = ([f.name for f in config_lib.dataclasses.fields(hints[section])]
              if section in sections and config_lib.dataclasses.is_dataclass(hints[section]) else [])
    if section == "tuning" or key not in fields or "." in key:
        valid = ["training.learning_rate", "training.per_replica_batch_size", "training.optimizer"]
        return [problem(field, f"the built-in trainer takes a parameter as an override of its config: the name must "
                               f"be SECTION.FIELD of the job config, got {name!r}", valid)]
    candidates = list(p.values) if p.type in ("categorical", "discrete") else [p.min, p.max]
    for value in candidates:
        if value is None:
            continue
        try:
            cfg.with_overrides([f"{name}={flag_value(p, value)}"])
        except ConfigError as exc:
            first = exc.problems[0]
            return [problem(field, f"{flag_value(p, value)} is not a valid {name}: {first.message}", first.valid)]
    return []


def _parameter_problems(t: config_lib.Tuning, name: str, param: config_lib.Parameter) -> list[Problem]:
    field = f"tuning.parameters.{name}"
    if not NAME_RE.fullmatch(str(name)):
        return [problem(field, f"{name!r} is not a flag name (--NAME=VALUE): letters, digits, '_', '.', '-'",
                        [re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("_") or "learning_rate"])]
    if param.type is None:
        return [problem(f"{field}.type", "missing", TYPES)]
    p = _range_problems(field, param) if param.type in ("double", "integer") else _values_problems(field, param)
    if t.algorithm == "grid" and param.type == "double":
        p.append(problem(field, "grid search takes integer, categorical and discrete parameters only (Vertex's "
                                "GRID_SEARCH); list the values to try", ["type: discrete, values: [...]",
                                                                         "algorithm: random"]))
    return p


def section_problems(t: config_lib.Tuning) -> list[Problem]:
    """The section's own rules, which need nothing else of the job (what ``jobs.cloud.vertex_jobs.tuning_job`` checks when
    a KFP user gives it a section directly)."""
    if not t.parameters:
        # any field set but the parameters (``baseline: false`` too: it skips a baseline of a study that is not there)
        touched = (t.metric or t.goal or t.algorithm or t.max_trials or t.max_failed_trials or t.parallel_trials != 1
                   or not t.baseline)
        return [problem("tuning.parameters", "the tuning section has no parameters to search; add one or remove "
                                             "the section", [f"learning_rate: {EXAMPLE['double']}"])] if touched else []
    p: list[Problem] = []
    if not t.metric:
        p.append(problem("tuning.metric", "missing: the tag your trainer reports with cloudml-hypertune "
                                          "(report_hyperparameter_tuning_metric(hyperparameter_metric_tag=...))",
                         ["val_accuracy", "val_rmse"]))
    elif not re.fullmatch(r"\S+", t.metric):
        p.append(problem("tuning.metric", f"{t.metric!r} is not a metric tag (no spaces)", [re.sub(r"\s+", "_", t.metric)]))
    if t.goal is None:
        p.append(problem("tuning.goal", f"missing: whether a lower or a higher {t.metric or 'metric'} is better",
                         ["minimize", "maximize"]))
    if t.max_trials < 1:
        p.append(problem("tuning.max_trials", f"must be at least 1 (how many trials the study runs), got {t.max_trials}",
                         [8]))
    if t.parallel_trials < 1:
        p.append(problem("tuning.parallel_trials", f"must be at least 1, got {t.parallel_trials}", [1, 2]))
    elif t.max_trials >= 1 and t.parallel_trials > t.max_trials:
        p.append(problem("tuning.parallel_trials", f"{t.parallel_trials} trials at once is more than max_trials "
                                                   f"({t.max_trials})", [t.max_trials]))
    if t.max_failed_trials < 0:
        p.append(problem("tuning.max_failed_trials", f"must be 0 (Vertex decides) or more, got {t.max_failed_trials}",
                         [0, 1]))
    elif t.max_trials >= 1 and t.max_failed_trials > t.max_trials:
        p.append(problem("tuning.max_failed_trials", f"{t.max_failed_trials} is more than max_trials ({t.max_trials})",
                         [0, t.max_trials]))
    for name, param in t.parameters.items():
        p += _parameter_problems(t, name, param)
    return p


def tuning_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """Every rule of the ``tuning`` section, one problem each (empty section: none): the section's own, then
    what it must agree on with the built-in trainer (its fields). A flag the arguments also give is a warning:
    :func:`tuning_warnings`."""
    p = section_problems(cfg.tuning)
    p += builtin_metric_problems(cfg)
    for name, param in cfg.tuning.parameters.items():
        if not cfg.user_trainer and not _parameter_problems(cfg.tuning, name, param):
            p += _builtin_problems(cfg, name, f"tuning.parameters.{name}", param)
    return p


def tuning_warnings(cfg: config_lib.JobConfig) -> list[Problem]:
    """A tuned flag the job's fixed arguments also give (a tuning lab's spec repeats them): Vertex appends each
    trial's ``--NAME=VALUE`` after the fixed arguments and argparse keeps the last, so a trial runs with its own
    value and the baseline (the job as it stands) with the fixed one; the local study does the same. Allowed, as
    Vertex allows it: one ``warning:`` each, naming which value runs where."""
    if not cfg.tuning.enabled:
        return []
    args = trainer_args(cfg)
    args_field = "trainer.args" if cfg.trainer.module else "container.args"
    out = []
    for name in sorted(cfg.tuning.parameters):
        value = fixed_value(args, name)
        if value is None:
            continue
        fixed = f"--{name} {value}".rstrip()
        baseline = (f"the baseline runs the job as it stands, with {fixed}" if cfg.tuning.baseline
                    else f"without the study the job runs with {fixed}")
        out.append(problem(f"tuning.parameters.{name}", f"{args_field} also gives {fixed}; each trial's --{name}=VALUE "
                                                        "comes after it and wins (argparse keeps the last, as on Vertex, "
                                                        f"which appends a trial's flags to the fixed ones), so each "
                                                        f"trial runs with its own {name} and {baseline}"))
    return out


def builtin_metric_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The built-in trainer reports only its own tags (``trainers.train.HYPERTUNE_METRICS``): a study of another
    tag would have every trial end without its metric."""
    t = cfg.tuning
    if cfg.user_trainer or not t.enabled or not t.metric or not re.fullmatch(r"\S+", t.metric):
        return []
    if t.metric in HYPERTUNE_METRICS:
        return []
    near = difflib.get_close_matches(t.metric, HYPERTUNE_METRICS, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    return [problem("tuning.metric", f"the built-in trainer never reports {t.metric!r}{hint}: it reports "
                                     "these with cloudml-hypertune", HYPERTUNE_METRICS)]
