"""The model a Vertex study hands on: the better of the HyperparameterTuningJob's best trial and the baseline
CustomJob run beside it (the pipeline's ``pick_model`` step).

On Vertex the baseline (``tuning.baseline``) is a plain CustomJob of the job as it stands, in
``<base>/baseline`` (``jobs.rules.job_spec.baseline_job_spec``). Vertex collects no cloudml-hypertune metric from a
plain CustomJob, so its chief's ``CLOUD_ML_HP_METRIC_FILE`` points into that folder through the Cloud Storage FUSE
mount: after the job, :func:`baseline_run` reads the chief's file (``<base>/baseline/hypertune/chief-0.metrics``,
the layout a local baseline and every local trial write) through this task's own ``/gcs`` mount, the LAST report
of the study's metric counting as it does for a trial (LAST_MEASUREMENT). Why the file rather than a second
verdict of both models: it is the very figure the study ranks its trials by (each trial's final measurement is its
last report of the same tag, by the same trainer code), so the two are compared on one scale; the held-out
verdict (``serving.eval_data``) of the model that goes on follows in the verify step, as for any model.

:func:`pick` adds the baseline's run and the model handed on (``jobs.rules.tuning_rules.handed_on_run``: THE rule, the
local study's too) to the study's record. A baseline step that failed gives the pick step no ``gcp_resources``
(the pipeline runs it with ``ignore_upstream_failure``): the baseline is recorded FAILED and the best trial goes
on, as a local study does with a failed baseline.
"""
from __future__ import annotations

import math
from typing import Any

from jobs.rules import saved_model, tuning_rules
from jobs.run_records import trial_files
from jobs.rules.errors import CloudError
from jobs.cloud.vertex_jobs.job_runner import named_job
from jobfile.paths import FUSE_ROOT, join, readable


def _job_name(gcp_resources: str) -> str:
    """The CustomJob's resource name in a ``gcp_resources`` text (``jobs.cloud.vertex_jobs.job_runner.named_job``, the runner's
    own reader); "" when it names none: the name is only shown beside the baseline's figure."""
    try:
        return named_job(gcp_resources)
    except CloudError:
        return ""


def baseline_run(base: str, metric: str, gcp_resources: str = "") -> dict[str, Any]:
    """The baseline CustomJob as a study records its baseline: ``{"id": "baseline", "state", "metric",
    "reported_tags", "model_dir", "custom_job"?, "error"?}``. ``gcp_resources``: the baseline step's output (empty:
    the step did not succeed). SUCCEEDED needs the chief's finite last report of ``metric`` and a SavedModel in
    ``<base>/baseline/model`` or one folder below it (``jobs.rules.saved_model``; ``model_dir`` is then that folder)."""
    model_dir = join(trial_files.baseline_base(base), "model")
    run: dict[str, Any] = {"id": tuning_rules.BASELINE, "model_dir": model_dir}
    name = _job_name(gcp_resources) if gcp_resources else ""
    if name:
        run["custom_job"] = name
    if not gcp_resources.strip():
        return {**run, "state": tuning_rules.FAILED, "metric": None,
                "error": "the baseline CustomJob step did not succeed (its step in the pipeline run says why)"}
    path = readable(trial_files.metric_file(base, tuning_rules.BASELINE))
    reports = trial_files.read_reports(path)
    value = trial_files.last_value(reports, metric)
    run.update(metric=value, reported_tags=trial_files.reported_tags(reports))
    if not reports:
        return {**run, "state": tuning_rules.INFEASIBLE,
                "error": f"its chief wrote no cloudml-hypertune report to "
                         f"{trial_files.metric_file(base, tuning_rules.BASELINE)}"}
    if value is None or not math.isfinite(value):
        return {**run, "state": tuning_rules.INFEASIBLE, "metric": None if value is None else str(value),
                "error": f"no finite {metric} among its reports ({', '.join(run['reported_tags']) or 'none'})"}
    try:  # THE rule of where a model is (in AIP_MODEL_DIR or one folder below), read through this task's /gcs mount
        found = saved_model.find_saved_model(model_dir, remote=False)
    except saved_model.NoSavedModel as exc:
        return {**run, "state": tuning_rules.FAILED, "error": f"no model: {exc}"}
    if not found.checked:
        return {**run, "state": tuning_rules.FAILED,
                "error": f"no SavedModel seen in {model_dir}: this task has no {FUSE_ROOT} mount to read it through"}
    return {**run, "model_dir": found.path, "state": tuning_rules.SUCCEEDED}


def pick(study: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any]:
    """The study's record with its ``baseline`` (None: ``tuning.baseline`` is off) and the model handed on
    (``jobs.rules.tuning_rules.handed_on_run``). Raises ValueError (one line) for a record without a succeeded trial."""
    best = tuning_rules.best_trial(study)
    out = {k: v for k, v in study.items() if k not in (tuning_rules.BASELINE, tuning_rules.HANDED_ON)}
    if baseline is not None:
        out[tuning_rules.BASELINE] = baseline
    handed = tuning_rules.handed_on_run(best, baseline, str(study.get("goal") or ""),
                                        str(study.get("metric") or "metric"))
    if handed is None:
        raise ValueError("the study's record names no succeeded trial: nothing to hand on")
    out[tuning_rules.HANDED_ON] = handed
    return out


def baseline_line(baseline: dict[str, Any], metric: str) -> str:
    """The baseline's console line (a Vertex run's; the local study says it as the baseline ends)."""
    job = f" (CustomJob {baseline['custom_job'].rsplit('/', 1)[-1]})" if baseline.get("custom_job") else ""
    if baseline.get("state") == tuning_rules.SUCCEEDED:
        figure = tuning_rules.format_value(baseline.get("metric"))
        return f"baseline SUCCEEDED{job}: {metric} {figure} (the job as it stands)"
    return f"baseline {baseline.get('state')}{job}: {baseline.get('error') or 'no figure'}"
