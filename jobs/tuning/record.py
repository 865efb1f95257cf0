"""A local study's own record, ``<base>/tuning.json`` (its name and reading: ``jobs.run_records.records``; its rules, THE
best-trial rule and the model handed on: ``jobs.rules.tuning_rules``): what makes two runs one study (:func:`study_key`),
the record a run starts from (:func:`resumed`: a rerun continues the study), and the record as written
(:func:`public_record`: trials in id order, the best trial, the model handed on once nothing runs), atomically
(:func:`write`). Its fields are listed in :mod:`jobs.tuning.local`'s module doc.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from jobs.rules import tuning_rules
from jobs.run_records import records
from jobs.tuning.failures import OWN
from jobs.rules.tuning_rules import ACTIVE
from jobs.rules.tuning_section import Study
from jobfile import config as config_lib
from jobfile.errors import ConfigError, problem
from jobfile.paths import join


def study_key(cfg: config_lib.JobConfig, t: Study) -> dict[str, Any]:
    """What makes two runs one study: the metric, goal, search space, algorithm and seed. A rerun with another
    key cannot replay the trials (their values may lie outside the new space)."""
    return {"metric": t.metric, "goal": t.goal, "algorithm": t.algorithm, "seed": cfg.training.seed,
            "parameters": {n: dataclasses.asdict(p) for n, p in t.parameters.items()}}


def new_record(cfg: config_lib.JobConfig, t: Study) -> dict[str, Any]:
    """A study's first record: its section's figures and key, no trial yet."""
    return {"metric": t.metric, "goal": t.goal, "algorithm": t.algorithm, "max_trials": t.max_trials,
            "parallel_trials": t.parallel_trials, "max_failed_trials": t.max_failed_trials, "study": study_key(cfg, t),
            "trials": [], "best_trial": None}


def public_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record as written and returned: trials in id order without the search's handles, the best marked,
    and once no run is active, the model the study hands on (``jobs.rules.tuning_rules.handed_on_run``)."""
    trials = sorted(({k: v for k, v in tr.items() if k not in ("handle", OWN)} for tr in record["trials"]),
                    key=lambda tr: int(tr["id"]))
    public = {**record, "trials": trials}
    if isinstance(public.get(tuning_rules.BASELINE), dict):
        public[tuning_rules.BASELINE] = {k: v for k, v in public[tuning_rules.BASELINE].items() if k != OWN}
    public.pop(tuning_rules.HANDED_ON, None)
    public["best_trial"] = tuning_rules.best_of(public["trials"], public["goal"])
    baseline = tuning_rules.baseline_of(public)
    if all(r.get("state") != ACTIVE for r in tuning_rules.study_runs(public)):
        handed = tuning_rules.handed_on_run(public["best_trial"], baseline, public["goal"], public["metric"])
        if handed is not None:
            public[tuning_rules.HANDED_ON] = handed
    return public


def write(base: str, record: dict[str, Any]) -> dict[str, Any]:
    """Write the record (:func:`public_record`) to ``<base>/tuning.json`` atomically; returns what was written."""
    public = public_record(record)
    records.write_at(base, records.TUNING_RECORD, public)
    return public


def resumed(cfg: config_lib.JobConfig, t: Study, base: str) -> dict[str, Any]:
    """The record a run of the study starts from: the one in ``base`` when it is this study's (its trials, its
    time, a baseline kept), else a new one. ConfigError when ``base`` holds another study's."""
    old = records.read_study(base)
    if not old:
        return new_record(cfg, t)
    if old.get("study") != study_key(cfg, t):
        raise ConfigError([problem("output.base_dir", f"{join(base, records.TUNING_RECORD)} holds another study (its "
                                   "metric, goal, parameters, algorithm or training.seed differ): its trials cannot be "
                                   "resumed; start afresh or use another output.base_dir",
                                   ["--fresh", "another output.base_dir"])])
    prior = old.get("seconds") if isinstance(old.get("seconds"), (int, float)) else 0.0
    record = {**new_record(cfg, t), "trials": old.get("trials", []), "seconds": prior}
    if t.baseline and tuning_rules.baseline_of(old):  # kept when it succeeded, else run again
        record[tuning_rules.BASELINE] = tuning_rules.baseline_of(old)
    return record
