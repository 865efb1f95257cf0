"""The search of a local study: which values the next trial tries, given the trials so far.

Why Optuna (5.0) and not OSS Vizier, though Vizier's algorithms are Vertex's by name: ``google-vizier`` 0.1.24
imports jax from its service client even for RANDOM_SEARCH, and with the jax pip picks today its policies fail
(``jax.core`` has no ``Primitive``), with jax 0.4.30 too (``jax.sharding`` has no ``AbstractMesh``); its ``[jax]``
extra adds ~700 MB (FACTS.md, measured on these machines). Optuna installs light (pure Python, with SQLAlchemy,
alembic, colorlog, tqdm; ``import optuna`` ~0.4 s here), is well kept, and has the three searches the ``tuning``
section names:

* unset / ``bayesian``: Vertex's default is Bayesian optimization; here Optuna's TPE (``TPESampler``), the
  closest well-kept Bayesian search, with ``constant_liar`` when trials run in parallel (a running trial counts
  as a poor result, so parallel trials do not all try the same region). Its first 10 trials are random (TPE's
  start-up), as Vertex's first suggestions are;
* ``random``: ``RandomSampler``;
* ``grid``: ``GridSampler`` over every integer in a range, every categorical and discrete value (Vertex's
  GRID_SEARCH takes the same types); the study then ends after ``min(max_trials, grid points)`` trials.

The search takes the section parsed once (``jobs.rules.tuning_section.Study``). Every sampler is seeded from
``training.seed``: the same job file proposes the same first trials.

The four parameter types map to Optuna's distributions: double -> ``FloatDistribution`` (``log=True`` for a log
scale), integer -> ``IntDistribution``, categorical and discrete -> ``CategoricalDistribution`` (discrete values
are a set here: TPE does not use their order; Vertex's scale on a discrete parameter has no counterpart).
``reverse_log`` (Vertex's UNIT_REVERSE_LOG_SCALE: more weight near ``max``) has none in Optuna: the value is
sampled log-uniformly and then reflected, ``value = min + max - u``, so its density is the log scale's mirrored
onto the top of the range; the record keeps ``value``, Optuna sees ``u``.

A rerun resumes the study: :meth:`Search.replay` gives Optuna every trial of the record in id order (a kept
trial with ``study.add_trial(optuna.trial.create_trial(...))``, a trial to run again with its own values
through ``enqueue_trial`` + ``ask``), so Optuna's trial number is always the record's id - 1 and a grid search
goes on with the points no trial has taken.
"""
from __future__ import annotations

import math
from typing import Any

from jobs.rules.tuning_section import LOG_SCALES, Study, typed_value
from jobfile import config as config_lib


def _grid_values(p: config_lib.Parameter) -> list[Any]:
    if p.type == "integer":
        return list(range(int(p.min), int(p.max) + 1))
    if p.type == "discrete":
        return sorted(typed_value(p, v) for v in p.values)
    return list(p.values)


class Search:
    """One study's search: :meth:`replay` what the record holds, then :meth:`ask` and :meth:`tell` per trial.
    Called from one thread only (the study's loop)."""

    def __init__(self, study: Study, seed: int):
        import optuna
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # its per-trial INFO lines would double the study's
        t = study
        self.specs = dict(sorted(t.parameters.items()))  # by name: the job file's order and the config JSON's
                                                           # (sorted keys) propose the same trials
        self.grid = t.algorithm == "grid"
        #: parameters sampled log-uniformly then reflected (reverse_log), not under grid search (every point)
        self.reflected = {n for n, p in self.specs.items() if p.scale == "reverse_log" and not self.grid}
        self.distributions = {}
        for name, p in self.specs.items():
            if p.type == "double" and not self.grid:
                self.distributions[name] = FloatDistribution(float(p.min), float(p.max), log=p.scale in LOG_SCALES)
            elif p.type == "integer":
                self.distributions[name] = IntDistribution(int(p.min), int(p.max),
                                                           log=p.scale in LOG_SCALES and not self.grid)
            else:
                self.distributions[name] = CategoricalDistribution(_grid_values(p))
        if self.grid:
            sampler = _grid_sampler({n: _grid_values(p) for n, p in self.specs.items()}, seed)
        elif t.algorithm == "random":
            sampler = optuna.samplers.RandomSampler(seed=seed)
        else:
            import warnings

            with warnings.catch_warnings():  # constant_liar is marked experimental; it is what parallel TPE needs
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=t.parallel_trials > 1)
        self.study = optuna.create_study(direction="minimize" if t.goal == "minimize" else "maximize", sampler=sampler)

    # -- the record's values <-> Optuna's --------------------------------------------------------------
    def _external(self, name: str, value: Any) -> Any:
        p = self.specs[name]
        if name in self.reflected:
            value = p.min + p.max - value
            value = min(max(value, p.min), p.max)
        return typed_value(p, value)

    def _internal(self, name: str, value: Any) -> Any:
        p = self.specs[name]
        if name in self.reflected:
            value = min(max(p.min + p.max - float(value), p.min), p.max)
            return int(round(value)) if p.type == "integer" else value
        if p.type == "double":
            return float(value)
        return typed_value(p, value)

    def parameters(self, trial) -> dict[str, Any]:
        return {name: self._external(name, trial.params[name]) for name in self.specs}

    # -- the study ------------------------------------------------------------------------------------
    def replay(self, trials: list[dict[str, Any]], kept: set[str]) -> dict[str, Any]:
        """Give Optuna the record's trials in id order: those in ``kept`` (finished) with their result, every
        other one asked again with its own values (it runs again). Returns ``{id: handle}`` of the latter."""
        import optuna

        self._continue_sequence(len(trials))
        again = {}
        for trial in sorted(trials, key=lambda t: int(t["id"])):
            params = {n: self._internal(n, trial["parameters"][n]) for n in self.specs}
            if trial["id"] in kept:
                value = trial.get("metric")
                finite = isinstance(value, (int, float)) and math.isfinite(value)
                self.study.add_trial(optuna.trial.create_trial(
                    params=params, distributions=self.distributions, value=float(value) if finite else None,
                    state=optuna.trial.TrialState.COMPLETE if finite else optuna.trial.TrialState.FAIL))
            else:
                self.study.enqueue_trial(params, skip_if_exists=False)
                again[trial["id"]] = self.study.ask(self.distributions)
        return again

    def _continue_sequence(self, drawn: int) -> None:
        """Move the sampler's random state past the ``drawn`` trials the record holds, as if this process had
        proposed them: the study's first run drew each trial's values once, fresh; a replayed trial is added
        (``add_trial``) or asked with its own values (``enqueue_trial``), neither of which draws. Without this a
        resumed study's first new trial is the seeded sequence's first again: trial 1's values (seen here with
        ``RandomSampler``, and TPE's start-up trials are random the same way). The draws are made in a scratch
        study sharing the sampler, so the real study's history holds only the record's trials. A grid keeps no
        sequence (it takes the points no trial has taken)."""
        import optuna

        if self.grid or not drawn:
            return
        scratch = optuna.create_study(direction=self.study.direction, sampler=self.study.sampler)
        for _ in range(drawn):
            scratch.ask(self.distributions)

    def ask(self) -> tuple[Any, dict[str, Any]]:
        """A new trial: (its handle for :meth:`tell`, its values as the record and the flags take them)."""
        trial = self.study.ask(self.distributions)
        return trial, self.parameters(trial)

    def tell(self, handle, value: float | None) -> None:
        """The trial's result; None: it failed (no value)."""
        import optuna

        if value is None or not math.isfinite(value):
            self.study.tell(handle, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(handle, float(value))


def _grid_sampler(search_space: dict[str, list[Any]], seed: int):
    import optuna

    class GridSampler(optuna.samplers.GridSampler):
        """Optuna's grid without its ``after_trial``, which calls ``Study.stop()`` once the grid is used up:
        outside ``study.optimize`` that raises RuntimeError ("supposed to be invoked inside an objective
        function", seen with ask/tell here). The study's loop stops at ``min(max_trials, grid points)`` itself."""

        def after_trial(self, study, trial, state, values) -> None:
            return None

    return GridSampler(search_space, seed=seed)
