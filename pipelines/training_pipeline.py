"""The training pipeline, for one target: on Vertex AI, [build image] -> validate -> [prepare data] -> Vertex
CustomJob (or, with a ``tuning:`` section, a HyperparameterTuningJob of that CustomJob beside a baseline CustomJob
of the job as it stands, then the better of the two models: pick_model) -> verify -> report -> [gate] -> Model
Registry; on this machine (kfp.local), validate -> [prepare data] -> train (the job's pools as processes or
containers here; with ``tuning:``, a study of such trials with the baseline beside them) -> verify -> report ->
[gate] -> the Model Registry request, written. The gate (``serving.gate``) is there when the job sets bars; the report
comes before it, so a refused model's run has its report too.

Wiring only, from the published components (``components.published``: the committed ``component.yaml``
files a KFP user loads), every decision in the library. Each target compiles to its own pipeline: a YAML
compiled or uploaded for Vertex holds the Vertex path only, so started with its defaults (from the console,
the template gallery, a schedule) it creates the CustomJob with the config's pools; nothing in it can run the
local path on Vertex. A job whose trainer reads its own data (``data.source: none``) has no prepare step.

On Vertex, ``check_plan`` makes the plan's checks (quota, budget, the project) when the run starts, before anything
is created (a run a schedule starts is checked then, not when it was planned). With ``notify:``, the run is the body
of an exit handler (``dsl.ExitHandler``): ``notify`` sends its end to the webhook whatever step failed (here and on
Vertex), and ``notify.email`` is Vertex's ``VertexNotificationEmailOp``; one exit handler per pipeline scope is all
KFP allows, so with both the body is a sub-pipeline whose own exit handler is the e-mail.
"""

import contextlib

from google_cloud_pipeline_components import _placeholders
from google_cloud_pipeline_components.v1.vertex_notification_email import VertexNotificationEmailOp
from kfp import compiler, dsl
from kfp.dsl import Artifact, Model

import components
from components.base import DEFAULT_IMAGE
from jobs.steps.pipeline_plan import PipelinePlan, plan as plan_pipeline
from jobfile import config as config_lib

PROJECT = _placeholders.PROJECT_ID_PLACEHOLDER


def build_pipeline(cfg: config_lib.JobConfig, target: str = "vertex", base_image: str = None,
                   placement: dict = None):
    """The pipeline function of ``cfg`` for ``target`` (``vertex`` | ``local``); its config is the default of
    the ``config_json`` parameter, for Vertex as Vertex runs it (``JobConfig.for_vertex``: a user trainer's
    code is the image's WORKDIR, the sample request travels as a parameter; ``jobs.rules.preflight`` refuses
    any other local path before anything is compiled), and the placement judgement (``placement``: ``vtp plan``'s)
    the default of ``placement_plan``. What it holds is decided in ``jobs.steps.pipeline_plan``."""
    plan = plan_pipeline(cfg, target, placement)
    c = components.published(base_image or plan.image or DEFAULT_IMAGE)
    return _local_pipeline(c, plan) if target == "local" else _vertex_pipeline(c, plan)


def _prepared(c, plan: PipelinePlan, config):
    data = c.prepare_data(config_json=config) if plan.with_data else None
    return data, ({"dataset": data.outputs["dataset"]} if data is not None else {})


def _registry_fields(job, location) -> dict:
    return dict(location=location, display_name=job.outputs["model_display_name"],
                serving_image=job.outputs["serving_image"], labels=job.outputs["model_labels"],
                parent_model=job.outputs["parent_model"])


def _held_out(plan: PipelinePlan, eval_data) -> dict:
    """The verify step's held-out examples (``serving.eval_data``: a root parameter, so a run started from
    the console may point at another file) and how they are judged."""
    return dict(eval_data=eval_data, eval_task=plan.cfg.serving.eval_task, eval_output=plan.cfg.serving.eval_output)


def _gate_then_upload(c, plan: PipelinePlan, job, config, verified, record_dir, location, dry_run, measured, report,
                      **vertex_only):
    """The Model Registry upload, after the gate when the job has one (a model that misses a bar fails the
    gate step: the upload never runs). Both after the report: a refused model's run still has its report."""
    model, record = verified.outputs["verified_model"], {}
    if plan.gated:
        passed = c.gate(model=model, verification=verified.outputs["verification"], config_json=config,
                        parent_model=job.outputs["parent_model"], dry_run=dry_run, record_dir=record_dir,
                        **measured).after(report)
        model, record = passed.outputs["gated_model"], {"gate_record": passed.outputs["result"]}
    c.upload_model(model=model, dry_run=dry_run, record_dir=record_dir, **record, **vertex_only,
                   **_registry_fields(job, location)).after(report)


def _local_pipeline(c, plan: PipelinePlan):
    cfg = plan.cfg

    @dsl.pipeline(name=cfg.name, description=plan.description)
    def local_pipeline(config_json: str = cfg.to_json(), location: str = cfg.topology.region,
                       sample_request: str = plan.sample_request, eval_data: str = cfg.serving.eval_data):
        with _ended_by(_notify(c, plan, config_json)):
            _local_body(c, plan, config_json, location, sample_request, eval_data)

    return local_pipeline


def _notify(c, plan: PipelinePlan, config_json, **vertex_only):
    """The exit handler's task (``components/notify``) when the job has a webhook, else None."""
    if not plan.notified:
        return None
    return c.notify(config_json=config_json, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, on_vertex=plan.target == "vertex",
                    **vertex_only).set_caching_options(False).set_display_name("notify")


def _ended_by(exit_task):
    """``dsl.ExitHandler(exit_task)``, or nothing to enter when there is no exit task."""
    return dsl.ExitHandler(exit_task) if exit_task is not None else contextlib.nullcontext()


def _local_body(c, plan: PipelinePlan, config_json, location, sample_request, eval_data):
    """The body, as the local pipeline runs it (inside the exit handler when there is one)."""
    tuned = plan.tuned
    job = c.validate_config(config_json=config_json, location=location)
    config = job.outputs["config_json"]
    _, dataset = _prepared(c, plan, config)
    # the job's pools here: once, or one study of trials (``tuning:``) with the job as it stands beside them
    # (``tuning.baseline``), the better of the best trial's and the baseline's model going on
    trained = (c.tune(config_json=config, **dataset) if tuned else
               c.train(config_json=config, run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, **dataset))
    verified = c.verify_model(model=trained.outputs["model"], sample_request=sample_request,
                              record_dir=job.outputs["base_dir"], **_held_out(plan, eval_data), **dataset)
    report = c.report(verification=verified.outputs["verification"], tensorboard=trained.outputs["tensorboard"],
                      checkpoints=trained.outputs["checkpoints"], config_json=config,
                      record_dir=job.outputs["base_dir"], **({"study": trained.outputs["study"]} if tuned else {}))
    _gate_then_upload(c, plan, job, config, verified, job.outputs["base_dir"], location, dry_run=True,
                      measured=dict(training_metrics=trained.outputs["metrics"],
                                    tensorboard=trained.outputs["tensorboard"],
                                    **({"study": trained.outputs["study"]} if tuned else {})), report=report)


def _vertex_pipeline(c, plan: PipelinePlan):
    cfg = plan.cfg

    emailed = _emailed_run(c, plan) if plan.notified and plan.emailed else None

    @dsl.pipeline(name=cfg.name, description=plan.description)
    def vertex_pipeline(config_json: str = cfg.to_json(), location: str = cfg.topology.region,
                        build_context_uri: str = "", service_account: str = "", network: str = "",
                        sample_request: str = plan.sample_request, eval_data: str = cfg.serving.eval_data,
                        folder_per_run: bool = False, require_checks: bool = False,
                        placement_plan: dict = plan.placement):
        # service_account / network (run.py --service-account / --network): the training replicas run as
        # the pipeline's account, in its network; empty: Vertex's defaults.
        # build_context_uri empty: the config's image, no cloud call; gs://...tgz: Cloud Build, by digest.
        # folder_per_run (a schedule's runs): each run writes into <output.base_dir>/<its pipeline job name>;
        # require_checks: a plan check that could not be made fails the run (check_plan)
        # placement_plan: vtp plan's judgement of the options, with prices and the budget's bars (jobs.rules.ranking);
        # the run's own id names every job it creates (labels: jobs.rules.labels).
        given = dict(config_json=config_json, location=location, build_context_uri=build_context_uri,
                     service_account=service_account, network=network, sample_request=sample_request,
                     eval_data=eval_data, folder_per_run=folder_per_run, require_checks=require_checks,
                     placement_plan=placement_plan)
        notify = _notify(c, plan, config_json, run_created=dsl.PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER,
                         folder_per_run=folder_per_run, pipeline_job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER)
        if emailed is not None:  # one exit handler per scope: the e-mail's is the sub-pipeline's
            with dsl.ExitHandler(notify):
                emailed(**given).set_display_name("run")
        else:
            with _ended_by(notify or _email(plan)):
                _vertex_body(c, plan, **given)

    return vertex_pipeline


def _emailed_run(c, plan: PipelinePlan):
    """The run as a sub-pipeline whose exit handler is Vertex's e-mail (``notify.email``), for a job that has a webhook
    too: its parameters are the Vertex pipeline's own."""

    @dsl.pipeline(name=f"{plan.cfg.name}-run", description="The run, with Vertex's e-mail as its exit handler.")
    def emailed(config_json: str, location: str, build_context_uri: str, service_account: str, network: str,
                sample_request: str, eval_data: str, folder_per_run: bool, require_checks: bool,
                placement_plan: dict):
        with dsl.ExitHandler(_email(plan)):
            _vertex_body(c, plan, config_json=config_json, location=location, build_context_uri=build_context_uri,
                         service_account=service_account, network=network, sample_request=sample_request,
                         eval_data=eval_data, folder_per_run=folder_per_run, require_checks=require_checks,
                         placement_plan=placement_plan)

    return emailed


def _email(plan: PipelinePlan):
    """Vertex's e-mail of the run's end (``notify.email``; the recipients a constant: Vertex does not resolve a
    pipeline parameter there, kubeflow/pipelines#12204), or None."""
    return VertexNotificationEmailOp(recipients=list(plan.emailed)) if plan.emailed else None


def _vertex_body(c, plan: PipelinePlan, *, config_json, location, build_context_uri, service_account, network,
                 sample_request, eval_data, folder_per_run, require_checks, placement_plan):
    """Everything a Vertex run does, as the pipeline (or its e-mailed sub-pipeline) runs it."""
    image = c.build_image(config_json=config_json, build_context_uri=build_context_uri)
    job = c.validate_config(config_json=config_json, image_uri=image.output, location=location,
                            service_account=service_account, network=network, folder_per_run=folder_per_run,
                            pipeline_job_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER, placement_plan=placement_plan,
                            run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER)
    config = job.outputs["config_json"]
    # the plan's checks when the run starts, before anything is created: quota, budget, the project
    checked = c.check_plan(config_json=config, location=location, project=PROJECT,
                           run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, require_checks=require_checks)
    checked.set_caching_options(False)
    data, dataset = _prepared(c, plan, config)
    if data is not None:
        data.after(checked)
    if plan.tuned:
        training, model, measured, reported = _vertex_study(c, plan, job, config, data, location, checked)
    else:
        training, model, measured, reported = _vertex_training(c, job, location)
    training.after(checked)
    if data is not None:
        training.after(data)
    verified = c.verify_model(model=model, sample_request=sample_request,
                              record_dir=job.outputs["base_output_directory"], **_held_out(plan, eval_data),
                              **dataset)
    report = c.report(verification=verified.outputs["verification"], config_json=config,
                      record_dir=job.outputs["base_output_directory"], **reported)
    _gate_then_upload(c, plan, job, config, verified, job.outputs["base_output_directory"], location,
                      dry_run=False, measured=measured, report=report, project=PROJECT,
                      pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER)


def _custom_job(c, job, location, display_name, worker_pool_specs, base_output_directory, labels, hardware):
    """The project's own CustomJob step, not GCPC's CustomTrainingJobOp: its launcher drops the empty pool
    that keeps an evaluator at index 3 (jobs/cloud/vertex_jobs/custom_job.py); every other part is the job's."""
    return c.custom_training_job(
        display_name=display_name,
        worker_pool_specs=worker_pool_specs,
        base_output_directory=base_output_directory,
        restart_job_on_worker_restart=job.outputs["restart_job_on_worker_restart"],
        scheduling_strategy=job.outputs["scheduling_strategy"],
        timeout=job.outputs["timeout"],
        max_wait_duration=job.outputs["max_wait_duration"],
        persistent_resource_id=job.outputs["persistent_resource_id"],
        service_account=job.outputs["service_account"],  # the flag's, else the job file's vertex section
        network=job.outputs["network"],
        disable_retries=job.outputs["disable_retries"],
        enable_web_access=job.outputs["enable_web_access"],
        enable_dashboard_access=job.outputs["enable_dashboard_access"],
        reserved_ip_ranges=job.outputs["reserved_ip_ranges"],
        psc_network_attachment=job.outputs["psc_network_attachment"],
        tensorboard=job.outputs["tensorboard"],
        placement=job.outputs["placement"],  # the plan's judgement: ranked again when Vertex has no capacity
        budget=job.outputs["budget"],
        hardware=hardware,  # the worker pools of every rung of the hardware ladder (placement.hardware)
        labels=labels,
        location=location,
        project=PROJECT,
    )


def _vertex_training(c, job, location):
    """One CustomJob; its model and TensorBoard logs as artifacts. Returns (the training task, the model, what
    the gate measures, what the report reads)."""
    training = _custom_job(c, job, location, job.outputs["display_name"], job.outputs["worker_pool_specs"],
                           job.outputs["base_output_directory"], job.outputs["labels"], job.outputs["hardware"])
    # What the job's chief wrote to AIP_MODEL_DIR and AIP_TENSORBOARD_LOG_DIR, as artifacts.
    model = dsl.importer(artifact_uri=job.outputs["model_dir"], artifact_class=Model).after(training).output
    logs = dsl.importer(artifact_uri=job.outputs["tensorboard_dir"], artifact_class=Artifact).after(training)
    return training, model, dict(tensorboard=logs.output), {"tensorboard": logs.output}


def _vertex_study(c, plan: PipelinePlan, job, config, data, location, checked):
    """One HyperparameterTuningJob whose every trial is the CustomJob spec the training step would send, with
    the job as it stands beside it when ``tuning.baseline``; the better model goes on (pick_model). Returns
    what :func:`_vertex_training` returns."""
    training = c.hyperparameter_tuning_job(
        display_name=job.outputs["display_name"], tuning=job.outputs["tuning"],
        trial_job_spec=job.outputs["custom_job_spec"], location=location, project=PROJECT,
        labels=job.outputs["tuning_labels"], placement=job.outputs["placement"], budget=job.outputs["budget"],
        hardware=job.outputs["hardware"])
    picking = dict(config_json=config, tuning_study=training.outputs["study"],
                   record_dir=job.outputs["base_output_directory"])
    if plan.baseline:
        # beside it, the job as it stands (tuning.baseline): a CustomJob in <base>/baseline whose chief
        # reports the study's metric to a file there (jobs.rules.job_spec.baseline_job_spec)
        baseline = _custom_job(c, job, location, job.outputs["baseline_display_name"],
                               job.outputs["baseline_worker_pool_specs"],
                               job.outputs["baseline_output_directory"],
                               job.outputs["baseline_labels"],
                               job.outputs["baseline_hardware"]).set_display_name("baseline")
        baseline.after(checked)  # created only once the plan's checks pass, as the study is
        if data is not None:
            baseline.after(data)
        # the better of the two goes on; a failed baseline leaves the best trial to go on (its record says so)
        picked = c.pick_model(baseline_job=baseline.outputs["gcp_resources"], **picking)
        picked.ignore_upstream_failure()
    else:
        picked = c.pick_model(**picking)
    measured = dict(tuning_metric=picked.outputs["handed_on"], study=picked.outputs["study"])
    return training, picked.outputs["model"], measured, {"study": picked.outputs["study"]}


def compile_pipeline(cfg: config_lib.JobConfig, package_path: str, target: str = "vertex",
                     base_image: str = None, placement: dict = None) -> str:
    """Compile the ``target`` pipeline of ``cfg`` to ``package_path`` (``placement``: ``vtp plan``'s judgement of
    the options, the default of ``placement_plan``)."""
    compiler.Compiler().compile(build_pipeline(cfg, target, base_image, placement), package_path=package_path)
    return package_path
