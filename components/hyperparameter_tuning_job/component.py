"""hyperparameter_tuning_job: the job file's ``tuning`` section and the CustomJob spec of its trials in; one Vertex
AI HyperparameterTuningJob created, followed and cancelled with the pipeline; gcp_resources, the best trial and
its model out."""
from kfp import dsl

from components.base import DEFAULT_IMAGE


@dsl.container_component
def hyperparameter_tuning_job(display_name: str, tuning: dict, trial_job_spec: dict, location: str, project: str,
                              gcp_resources: dsl.OutputPath(str), best_trial: dsl.OutputPath(str),
                              best_model_dir: dsl.OutputPath(str), model: dsl.Output[dsl.Model],
                              study: dsl.Output[dsl.Artifact], api_endpoint: str = "", labels: dict = {},
                              placement: list = [], budget: dict = {}, hardware: list = []):
    """Run the study of a ``tuning`` section (``{metric, goal, parameters: {NAME: {type, min, max, scale,
    values}}, algorithm, max_trials, parallel_trials, max_failed_trials}``, as in the job file) as one Vertex AI
    HyperparameterTuningJob whose every trial is the CustomJob ``trial_job_spec`` (a ``CustomJobSpec`` in proto
    field names: worker pools by position, ``base_output_directory``), each trial's values passed to every
    replica as ``--NAME=VALUE`` by Vertex; the final measurement is the trial's last cloudml-hypertune report
    (LAST_MEASUREMENT). Follows the job to its end under the project's client policy, cancels it when the
    pipeline is cancelled (SIGTERM), and a retried task follows the job it already created.

    ``placement`` and ``budget`` (validate_config's: the plan's judgement of the job's options and the budget's
    bars): the tuning job is created in the option THE placement procedure (the one ``vtp plan`` ranks with) ranks first, never
    in one the plan refused; none fits: one error line, nothing created. ``labels``: the run's labels (run, trial
    ``study``, config hash); the trials' CustomJobs, created by Vertex from ``trial_job_spec`` (a ``CustomJobSpec``,
    which has no labels), carry none. ``hardware`` (validate_config's): the worker pools of every rung of the job's
    hardware ladder; when the option ranked first is on a later rung, every trial runs on its pools.

    Outputs: ``gcp_resources`` (GCPC's format: the console links the job); ``best_trial``: JSON ``{"id",
    "parameters", "metric", "model_dir"}`` of the best SUCCEEDED trial; ``best_model_dir`` and ``model`` (URI):
    that trial's ``AIP_MODEL_DIR``, ``<base_output_directory>/<trial id>/model``, as Vertex lays trials out;
    ``study``: every trial (id, parameters, metric, state) and the best one, as JSON in the local study's record
    format (the report shows it).

    Why not GCPC's ``HyperparameterTuningJobRunOp``: its launcher removes empty entries recursively, so a pool
    kept empty for the next one's position would be dropped (as ``custom_training_job`` says). A container
    component: Python must be the container's own process to receive the SIGTERM of a cancelled pipeline."""
    return dsl.ContainerSpec(image=DEFAULT_IMAGE, command=["python3", "-u", "-m", "components.entry", "hyperparameter_tuning_job"], args=[
        "--display_name", display_name, "--tuning", tuning, "--trial_job_spec", trial_job_spec,
        "--location", location, "--project", project, "--gcp_resources", gcp_resources,
        "--best_trial", best_trial, "--best_model_dir", best_model_dir, "--study", study.path,
        "--executor_input", "{{$}}", "--api_endpoint", api_endpoint, "--labels", labels, "--placement", placement,
        "--budget", budget, "--hardware", hardware])
