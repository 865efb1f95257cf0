"""The Vertex branch's tuning step: the job file's ``tuning:`` section as one Vertex AI HyperparameterTuningJob,
whose trial job is exactly the CustomJob spec the training step would send.

Why not GCPC's ``HyperparameterTuningJobRunOp``: its launcher goes through the same
``JobRemoteRunner.create_job`` as its CustomJob op, which removes empty entries recursively, so a ``{}`` pool kept
for an evaluator's position would be dropped (``jobs/cloud/vertex_jobs/custom_job.py`` says why that matters), and it sends
the spec pieces as strings pasted into one JSON payload. This module is the study's spec -> request conversion
and the reading of its outputs; ``jobs.cloud.vertex_jobs.job_runner`` (THE runner of every Vertex job) does the rest:

* :func:`study_spec` maps the section onto ``StudySpec``: the metric (``metric_id`` + MINIMIZE/MAXIMIZE), each
  parameter's spec (``double_value_spec``/``integer_value_spec``/``categorical_value_spec``/
  ``discrete_value_spec``, ``scale_type`` UNIT_LINEAR_SCALE/UNIT_LOG_SCALE/UNIT_REVERSE_LOG_SCALE, unset when
  the section leaves it unset), the algorithm (unset or ``bayesian`` -> ALGORITHM_UNSPECIFIED, Vertex's
  Bayesian optimization; ``random`` -> RANDOM_SEARCH; ``grid`` -> GRID_SEARCH) and LAST_MEASUREMENT (what a
  local study counts, and what Vertex does when unset; GCPC's op defaults to BEST_MEASUREMENT);
* :func:`tuning_job` builds the ``aiplatform_v1.HyperparameterTuningJob`` strictly (``json_format.ParseDict``,
  unknown fields refused) from that, the trial counts and ``trial_job_spec``, a ``CustomJobSpec`` given as a
  dict in proto field names (worker pools by position, ``{}`` kept between used pools), with the run's system
  labels;
* :func:`run` creates it through the runner (created once, ``gcp_resources`` in GCPC's format with resource type
  ``HyperparameterTuningJob``, a retried task following the job it created, polled to a terminal state with
  the trials' counts in its lines, cancelled on SIGTERM, a failed job one line carrying its error), and says each
  trial as the polls show it start and end (:class:`TrialLines`, the runner's ``on_poll``: the local study's lines);
* :func:`write_outputs` picks the best trial of the finished job by the rule every study shares
  (``jobs.rules.tuning_rules.best_of``; Vertex names none: python-aiplatform#1545), and its model is
  ``<base_output_directory>/<trial id>/model``: Vertex sets a trial's ``AIP_MODEL_DIR`` to
  ``<base_output_directory>/<trial_id>/model/`` (``CustomJobSpec.baseOutputDirectory``,
  https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec).

Every function takes the section parsed once (``jobs.rules.tuning_section.Study``, built by ``jobs.rules.tuning_section.parse``):
:func:`main` parses the ``--tuning`` JSON the pipeline passes, ``jobs.cloud.planning`` the job's typed section.

``python3 -m jobs.cloud.vertex_jobs.tuning_job`` (:func:`main`) is what the ``hyperparameter_tuning_job`` component runs.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from jobs.rules import ranking, tuning_rules
from jobs.run_records import trial_files
from jobs.cloud.vertex_jobs import custom_job, job_runner
from jobs.rules.errors import CloudError
from jobs.rules.job_spec import pools_by_position
from jobs.rules.tuning_section import Study, flag_value, parse
from jobfile.errors import ConfigError
from jobfile.paths import join

ALGORITHMS = {None: "ALGORITHM_UNSPECIFIED", "bayesian": "ALGORITHM_UNSPECIFIED", "random": "RANDOM_SEARCH",
              "grid": "GRID_SEARCH"}
SCALES = {"linear": "UNIT_LINEAR_SCALE", "log": "UNIT_LOG_SCALE", "reverse_log": "UNIT_REVERSE_LOG_SCALE"}


def _trial_counts(job) -> str:
    """What a progress line adds: how many trials are in which state."""
    states: dict[str, int] = {}
    for trial in job.trials:
        states[trial.state.name] = states.get(trial.state.name, 0) + 1
    counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()))
    return f" (trials: {counts})" if counts else ""


TUNING_JOB = job_runner.JobType(
    resource="HyperparameterTuningJob", collection="hyperparameterTuningJobs", method="hyperparameter_tuning_job",
    gcloud="hp-tuning-jobs", progress=_trial_counts,
    created=lambda job: (f": {job.max_trial_count} trials, {job.parallel_trial_count} at once, "
                         f"{len(job.trial_job_spec.worker_pool_specs)} worker pools each"))


def study_of(tuning: Any) -> Study:
    """The ``tuning`` section (its plain dict, as the step receives it, or the job's typed section, as the plan
    has it) parsed by THE parser (``jobs.rules.tuning_section.parse``), once; a problem is one CloudError line naming the
    field."""
    try:
        return parse(tuning)
    except ConfigError as exc:
        raise CloudError("; ".join(str(p) for p in exc.problems)) from None


def parameter_spec(name: str, p) -> dict[str, Any]:
    """One ``StudySpec.ParameterSpec`` in proto field names."""
    spec: dict[str, Any] = {"parameter_id": name}
    if p.type == "double":
        spec["double_value_spec"] = {"min_value": float(p.min), "max_value": float(p.max)}
    elif p.type == "integer":
        spec["integer_value_spec"] = {"min_value": int(p.min), "max_value": int(p.max)}
    elif p.type == "categorical":
        spec["categorical_value_spec"] = {"values": [str(v) for v in p.values]}
    else:  # discrete: Vertex wants the values in increasing order
        spec["discrete_value_spec"] = {"values": sorted(float(v) for v in p.values)}
    if p.scale is not None:
        spec["scale_type"] = SCALES[p.scale]
    return spec


def study_spec(t: Study) -> dict[str, Any]:
    """The ``StudySpec`` of the section, in proto field names."""
    return {"metrics": [{"metric_id": t.metric, "goal": t.goal.upper()}],
            "parameters": [parameter_spec(name, p) for name, p in t.parameters.items()],
            "algorithm": ALGORITHMS[t.algorithm], "measurement_selection_type": "LAST_MEASUREMENT"}


def tuning_job(*, display_name: str, tuning: Study, trial_job_spec: dict[str, Any],
               labels: dict[str, str] | None = None):
    """The ``aiplatform_v1.HyperparameterTuningJob`` to create (see the module doc)."""
    t = tuning
    if not isinstance(trial_job_spec, dict):
        raise CloudError(f"trial_job_spec: expected a CustomJobSpec as a mapping, got "
                                 f"{type(trial_job_spec).__name__}")
    try:
        trial = {**trial_job_spec, "worker_pool_specs": pools_by_position(trial_job_spec.get("worker_pool_specs") or [])}
    except ValueError as exc:
        raise CloudError(f"trial_job_spec.{exc}") from None
    return job_runner.request(TUNING_JOB, {
        "display_name": display_name, "study_spec": study_spec(t), "max_trial_count": t.max_trials,
        "parallel_trial_count": t.parallel_trials, "max_failed_trial_count": t.max_failed_trials,
        "trial_job_spec": trial, "labels": labels or {}})


def trials(job, t: Study) -> list[dict[str, Any]]:
    """Every trial of the job as the local record writes one: id, parameters (typed as the section declares
    them), metric (the final measurement's), state."""
    out = []
    for trial in job.trials:
        # a protobuf Value: proto-plus gives the number or the string
        params = {p.parameter_id: t.typed(p.parameter_id, p.value) for p in trial.parameters}
        metric = next((m.value for m in trial.final_measurement.metrics if m.metric_id == t.metric), None)
        row = {"id": trial.id, "parameters": params, "metric": metric, "state": trial.state.name}
        if trial.start_time is not None and trial.end_time is not None:  # a trial's wall time, as a local one's
            row["seconds"] = round((trial.end_time - trial.start_time).total_seconds(), 1)
        out.append(row)
    return out


#: a trial's states that end it (``aiplatform_v1.Trial.State``); REQUESTED, ACTIVE and STOPPING do not
TRIAL_ENDED = ("SUCCEEDED", "INFEASIBLE")


class TrialLines:
    """What a study says as it goes, from the job's ``trials`` as each poll returns them (the runner's
    ``on_poll``): one line when a trial is first seen running (``trial 3 started: --batch_size=16 ...``), one
    when it ends, the local study's own line (``jobs.rules.tuning_rules.trial_line``: n/N done, its values, its metric, its
    wall time, the best so far). Each trial is said once, whatever the polls repeat."""

    def __init__(self, tuning: Study, log: Callable[[str], None] = print):
        self.section, self.log = tuning, log
        self.started: set[str] = set()
        self.ended: set[str] = set()

    def _flags(self, parameters: dict[str, Any]) -> str:
        specs = self.section.parameters
        return " ".join(f"--{n}={flag_value(specs[n], v) if n in specs else v}" for n, v in sorted(parameters.items()))

    def __call__(self, job) -> None:
        t = self.section
        rows = sorted(trials(job, t), key=lambda row: tuning_rules.trial_order(row["id"]))
        for row in rows:
            if row["id"] not in self.started and row["state"] not in TRIAL_ENDED:
                self.started.add(row["id"])
                self.log(f"trial {row['id']} started: {self._flags(row['parameters'])}")
        for row in rows:
            if row["id"] in self.ended or row["state"] not in TRIAL_ENDED:
                continue
            self.ended.add(row["id"])
            self.started.add(row["id"])
            ended = [r for r in rows if r["id"] in self.ended]
            best = t.best(ended)
            self.log(tuning_rules.trial_line(row, t.metric, len(ended), t.max_trials, best))


def run(*, project: str, location: str, gcp_resources: str, display_name: str, tuning: Study,
        trial_job_spec: dict[str, Any], api_endpoint: str = "", labels: dict[str, str] | None = None,
        placement: list | tuple = (), budget: dict | None = None, hardware: list | tuple = (),
        log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep):
    """Create (or resume) the HyperparameterTuningJob in the option THE placement procedure ranks first
    (``jobs.rules.ranking``: the plan's judgement ``placement`` and the bars ``budget``; the trials' scheduling strategy
    set to the option's) and follow it to the end (``jobs.cloud.vertex_jobs.job_runner.run``); returns the finished job. No option
    that fits is one CloudError line and no create (a study does not fall over: Vertex retries a trial itself). On a
    later rung of the hardware ladder, every trial runs on that rung's worker pools (``hardware``: validate_config's,
    THE spec of the job on each rung; ``jobs.cloud.vertex_jobs.custom_job.rung_spec``). A failed, cancelled or expired job, or a
    give-up of the policy, is a CloudError with one line."""
    scheduling = dict(trial_job_spec.get("scheduling") or {})
    ranked = ranking.rank(ranking.carried(placement, location, str(scheduling.get("strategy") or "STANDARD")),
                          ranking.Bars.from_dict(budget))
    if ranked.pick is None:
        raise CloudError("placement: no option fits the study, nothing was created ("
                         + "; ".join(f"{j.option}: {why}" for j, why in ranked.skipped) + ")")
    option, strategy = ranked.pick.option, str(scheduling.get("strategy") or "STANDARD")
    if option.region != location or option.strategy != strategy or option.rung:
        log(f"placement: the study runs in {option} (the plan's ranking)")
    if option.strategy != strategy:
        trial_job_spec = {**trial_job_spec, "scheduling": {**scheduling, "strategy": option.strategy}}
    if option.rung:
        pools = custom_job.rung_spec({}, option, hardware)["worker_pool_specs"]
        trial_job_spec = {**trial_job_spec, "worker_pool_specs": pools_by_position(pools)}
    location = option.region
    job = tuning_job(display_name=display_name, tuning=tuning, trial_job_spec=trial_job_spec, labels=labels)
    return job_runner.run(TUNING_JOB, job, project=project, location=location, gcp_resources=gcp_resources,
                          api_endpoint=api_endpoint, log=log, sleep=sleep, on_poll=TrialLines(tuning, log))


def write_outputs(job, tuning: Study, trial_job_spec: dict[str, Any], *, best_trial_path: str = "",
                  best_model_dir_path: str = "", executor_input: str = "", study_path: str = "") -> dict[str, Any]:
    """The step's outputs from the finished job: the best trial (THE rule, ``Study.best``) as JSON, its model
    folder, the ``model`` artifact (URI = that folder) through the executor output, as GCPC's launchers update an
    output artifact, and the study's record (``study_path``: every trial and the best, the local study's
    ``tuning.json`` format). No SUCCEEDED trial with a finite metric is a CloudError."""
    t = tuning
    base = ((trial_job_spec.get("base_output_directory") or {}).get("output_uri_prefix") or "").rstrip("/")
    rows = trials(job, t)
    best = t.best(rows)
    if best is None:
        raise CloudError(f"HyperparameterTuningJob {job.name} succeeded but no trial has a final "
                                 f"{t.metric}: nothing to continue with")
    if not base:
        raise CloudError("trial_job_spec.base_output_directory is empty: the trials' models have no folder "
                                 "(Vertex sets AIP_MODEL_DIR only with a base output directory)")
    best["model_dir"] = join(trial_files.trial_base(base, best["id"]), "model")
    record = {"metric": t.metric, "goal": t.goal, "trials": rows, "best_trial": best, "tuning_job": job.name}
    for path, text in ((best_trial_path, json.dumps(best, sort_keys=True)), (best_model_dir_path, best["model_dir"]),
                       (study_path, json.dumps(record, indent=1, sort_keys=True))):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
    if executor_input:
        from google_cloud_pipeline_components.container.utils import artifact_utils

        artifact_utils.update_output_artifact(executor_input, "model", best["model_dir"], {
            "framework": "tensorflow", "trial_id": best["id"], "parameters": best["parameters"],
            "metric": {t.metric: best["metric"]}, "tuning_job": job.name})
    return best


def main(argv: list[str] | None = None) -> int:
    """``python3 -m jobs.cloud.vertex_jobs.tuning_job --display_name ... --tuning JSON --trial_job_spec JSON --gcp_resources
    PATH``: what the pipeline's ``hyperparameter_tuning_job`` container runs, its arguments filled in by Vertex
    (mappings as JSON). Every failure is one ``error:`` line and exit 1; a cancelled pipeline (SIGTERM) exits 143
    after cancelling the job; never a traceback."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python3 -m jobs.cloud.vertex_jobs.tuning_job")
    for flag in ("display_name", "tuning", "trial_job_spec", "location", "project", "gcp_resources", "best_trial",
                 "best_model_dir", "study", "executor_input", "api_endpoint", "labels", "placement", "budget",
                 "hardware"):
        p.add_argument(f"--{flag}", default="", required=flag in ("display_name", "tuning", "trial_job_spec",
                                                                 "location", "project", "gcp_resources"))
    args = p.parse_args(argv)
    parsed = {}
    for flag, kind in (("tuning", dict), ("trial_job_spec", dict), ("labels", dict), ("placement", list),
                       ("budget", dict), ("hardware", list)):
        text = getattr(args, flag)
        try:  # kfp resolves an optional input left unset to null (or the tool is run by hand without it)
            parsed[flag] = json.loads(text) if text not in ("", "null") or flag in ("tuning", "trial_job_spec") \
                else kind()
        except ValueError:
            parsed[flag] = None
        if not isinstance(parsed[flag], kind):
            print(f"error: --{flag}: {text[:80]!r} is not a JSON {'mapping' if kind is dict else 'list'}",
                  file=sys.stderr, flush=True)
            return 1
    wrong = ranking.doc_problems({"options": parsed["placement"]})
    if wrong:
        print(f"error: --placement: {args.placement[:80]!r}: {wrong}", file=sys.stderr, flush=True)
        return 1
    def step() -> None:
        study = study_of(parsed["tuning"])  # the section parsed once, before any call
        job = run(display_name=args.display_name, tuning=study, trial_job_spec=parsed["trial_job_spec"],
                  location=args.location, project=args.project, gcp_resources=args.gcp_resources,
                  api_endpoint=args.api_endpoint, labels=parsed["labels"] or None, placement=parsed["placement"],
                  budget=parsed["budget"], hardware=parsed["hardware"])
        best = write_outputs(job, study, parsed["trial_job_spec"], best_trial_path=args.best_trial,
                             best_model_dir_path=args.best_model_dir, executor_input=args.executor_input,
                             study_path=args.study)
        print(f"best trial {best['id']}: {json.dumps(best['parameters'], sort_keys=True)} -> metric "
              f"{best['metric']:g}; model {best['model_dir']}", flush=True)

    return job_runner.step_status(step)


if __name__ == "__main__":
    raise SystemExit(main())
