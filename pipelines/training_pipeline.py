"""The training pipeline: [build image] -> validate -> [prepare data] -> train (local | Vertex CustomJob) ->
verify -> Model Registry (locally: the request, written) -> report.

Wiring only, from the published components (``components.published``: the committed ``component.yaml``
files a KFP user loads), every decision in the library. One definition serves both targets; ``target``
picks the branch at run time and the untaken branch is never executed (so kfp.local runs the local branch
without touching Google Cloud). A job whose trainer reads its own data (``data.source: none``) has no
prepare step.
"""

from kfp import compiler, dsl
from kfp.dsl import Artifact, Model

import components
from components.base import DEFAULT_IMAGE
from trainers import config as config_lib


def sample_request_json(cfg: config_lib.JobConfig) -> str:
    """``serving.sample_request``'s content, as one line of JSON: it travels in the pipeline (a Vertex task
    cannot read the submitter's files; kfp writes parameter defaults into a one-line YAML comment)."""
    import json

    if not cfg.serving.sample_request:
        return ""
    with open(cfg.serving.sample_request, encoding="utf-8") as f:
        return json.dumps(json.load(f), separators=(",", ":"))


def build_pipeline(cfg: config_lib.JobConfig, base_image: "str | None" = None):
    """The pipeline function for ``cfg`` (its config is the default of the ``config_json`` parameter)."""
    from google_cloud_pipeline_components import _placeholders

    from jobs.images import component_image  # components run the cpu image (or container.image_uri)

    c = components.published(base_image or component_image(cfg) or DEFAULT_IMAGE)
    with_data = cfg.data.source != "none"

    @dsl.pipeline(name=cfg.name, description=f"Train {cfg.trainer.module or cfg.model.name} with "
                                             f"{cfg.topology.strategy} from source to a verified, registered "
                                             "SavedModel.")
    def training_pipeline(config_json: str = cfg.to_json(), target: str = "local",
                          location: str = cfg.topology.region, build_context_uri: str = "",
                          service_account: str = "", network: str = "",
                          sample_request: str = sample_request_json(cfg)):
        # service_account / network (run.py --service-account / --network): the training replicas run as
        # the pipeline's account, in its network; empty: Vertex's defaults.
        # build_context_uri empty: the config's image, no cloud call; gs://...tgz: Cloud Build, by digest.
        image = c.build_image(config_json=config_json, build_context_uri=build_context_uri)
        job = c.validate_config(config_json=config_json, image_uri=image.output, location=location)
        config = job.outputs["config_json"]
        data = c.prepare_data(config_json=config) if with_data else None
        dataset = {"dataset": data.outputs["dataset"]} if data is not None else {}
        registry = dict(location=location, display_name=job.outputs["model_display_name"],
                        serving_image=job.outputs["serving_image"], labels=job.outputs["model_labels"],
                        parent_model=job.outputs["parent_model"])
        with dsl.If(target == "local", name="train-locally"):
            trained = c.train(config_json=config, **dataset)
            verified = c.verify_model(model=trained.outputs["model"], sample_request=sample_request,
                                      record_dir=job.outputs["base_dir"], **dataset)
            c.upload_model(model=verified.outputs["verified_model"], dry_run=True,
                           record_dir=job.outputs["base_dir"], **registry)
            c.report(verification=verified.outputs["verification"], tensorboard=trained.outputs["tensorboard"],
                     checkpoints=trained.outputs["checkpoints"], config_json=config,
                     record_dir=job.outputs["base_dir"])
        with dsl.Else(name="train-on-vertex"):
            # the project's own CustomJob step, not GCPC's CustomTrainingJobOp: its launcher drops the empty pool
            # that keeps an evaluator at index 3 (jobs/cloud/custom_job.py)
            custom_job = c.custom_training_job(
                display_name=job.outputs["display_name"],
                worker_pool_specs=job.outputs["worker_pool_specs"],
                base_output_directory=job.outputs["base_output_directory"],
                restart_job_on_worker_restart=job.outputs["restart_job_on_worker_restart"],
                scheduling_strategy=job.outputs["scheduling_strategy"],
                timeout=job.outputs["timeout"],
                service_account=service_account,
                network=network,
                tensorboard=job.outputs["tensorboard"],
                location=location,
                project=_placeholders.PROJECT_ID_PLACEHOLDER,
            )
            if data is not None:
                custom_job.after(data)
            # What the job's chief wrote to AIP_MODEL_DIR and AIP_TENSORBOARD_LOG_DIR, as artifacts.
            model = dsl.importer(artifact_uri=job.outputs["model_dir"], artifact_class=Model).after(custom_job)
            logs = dsl.importer(artifact_uri=job.outputs["tensorboard_dir"], artifact_class=Artifact).after(custom_job)
            verified = c.verify_model(model=model.output, sample_request=sample_request,
                                      record_dir=job.outputs["base_output_directory"], **dataset)
            c.upload_model(model=verified.outputs["verified_model"], project=_placeholders.PROJECT_ID_PLACEHOLDER,
                           pipeline_job=dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER, dry_run=False,
                           record_dir=job.outputs["base_output_directory"], **registry)
            c.report(verification=verified.outputs["verification"], tensorboard=logs.output, config_json=config,
                     record_dir=job.outputs["base_output_directory"])

    return training_pipeline


def compile_pipeline(cfg: config_lib.JobConfig, package_path: str, base_image: "str | None" = None) -> str:
    compiler.Compiler().compile(build_pipeline(cfg, base_image), package_path=package_path)
    return package_path
