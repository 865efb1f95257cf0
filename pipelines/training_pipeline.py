"""The training pipeline: [build image] -> validate -> prepare data -> train (local | Vertex CustomJob) -> verify
-> Model Registry (locally: the upload request written beside the model).

Wiring only: every step is a component from ``components``; every decision lives in the library.
One definition serves both targets; ``target`` picks the branch at run time, and the untaken branch is
never executed (so kfp.local runs the local branch without touching Google Cloud).
"""

from kfp import compiler, dsl

from components import make_components
from trainers import config as config_lib


def build_pipeline(cfg: config_lib.JobConfig, base_image: "str | None" = None):
    """The pipeline function for ``cfg`` (its config is the default of the ``config_json`` parameter)."""
    from google_cloud_pipeline_components import _placeholders

    from jobs.images import component_image  # components run the cpu image (or container.image_uri)

    c = make_components(base_image or component_image(cfg) or "python:3.11")

    @dsl.pipeline(name=cfg.name, description=f"Train {cfg.model.name} with {cfg.topology.strategy} "
                                             "from source data to a verified SavedModel.")
    def training_pipeline(config_json: str = cfg.to_json(), target: str = "local",
                          location: str = cfg.topology.region, build_context_uri: str = "",
                          service_account: str = "", network: str = ""):
        # service_account / network (run.py --service-account / --network): the training replicas run as
        # the pipeline's account, in its network; empty: Vertex's defaults.
        # build_context_uri empty: the config's image, no cloud call; gs://...tgz: Cloud Build, by digest.
        image = c.build_image(config_json=config_json,
                              build_context_uri=build_context_uri).set_display_name("build-image")
        job = c.validate_config(config_json=config_json,
                                image_uri=image.output).set_display_name("validate-config")
        data = c.prepare_data(config_json=job.outputs["config_json"]).set_display_name("prepare-data")
        with dsl.If(target == "local", name="train-locally"):
            trained = c.train_local(config_json=job.outputs["config_json"],
                                    data_dir=data.outputs["Output"]).set_display_name("train-local")
            verified = c.verify_model(model_dir=trained.outputs["model_dir"],
                                      data_dir=data.outputs["Output"]).set_display_name("verify-model")
            c.model_upload_request(config_json=job.outputs["config_json"], model_dir=trained.outputs["model_dir"],
                                   location=location).after(verified).set_display_name("model-upload-request")
            c.run_report(config_json=job.outputs["config_json"]).after(verified).set_display_name("report")
        with dsl.Else(name="train-on-vertex"):
            # our own CustomJob step, not GCPC's CustomTrainingJobOp: its launcher drops the empty pool that
            # keeps an evaluator at index 3 (jobs/cloud/custom_job.py)
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
            ).after(data).set_display_name("train-vertex")
            verified = c.verify_model(model_dir=job.outputs["model_dir"], data_dir=data.outputs["Output"]
                                      ).after(custom_job).set_display_name("verify-vertex-model")
            _register_model(c, cfg, config_json=job.outputs["config_json"], model_dir=job.outputs["model_dir"],
                            location=location, after=verified)
            c.run_report(config_json=job.outputs["config_json"]).after(verified).set_display_name("report-vertex")

    return training_pipeline


def _register_model(c, cfg: config_lib.JobConfig, config_json, model_dir, location, after) -> None:
    """Vertex branch: the verified SavedModel folder -> Vertex Model Registry (GCPC ``ModelUploadOp``), with
    the fields of ``jobs.cloud.vertex.model_upload_request``, in the pipeline's ``location`` (GCPC's default,
    us-central1, is never used). ``serving.parent_model`` (fixed when compiling) adds a new version."""
    from google_cloud_pipeline_components import _placeholders
    from google_cloud_pipeline_components.types.artifact_types import UnmanagedContainerModel, VertexModel
    from google_cloud_pipeline_components.v1.model import ModelUploadOp

    upload = c.model_upload_request(config_json=config_json, model_dir=model_dir, location=location,
                                    project=_placeholders.PROJECT_ID_PLACEHOLDER
                                    ).after(after).set_display_name("model-upload-request-vertex")
    model = dsl.importer(artifact_uri=upload.outputs["artifact_uri"], artifact_class=UnmanagedContainerModel,
                         metadata={"containerSpec": {"imageUri": upload.outputs["serving_image"]}}
                         ).set_display_name("import-saved-model")
    extra = {}
    if cfg.serving.parent_model:
        extra["parent_model"] = dsl.importer(
            artifact_uri=f"https://{cfg.serving.parent_model.split('/')[3]}-aiplatform.googleapis.com/v1/"
                         f"{cfg.serving.parent_model}",
            artifact_class=VertexModel, metadata={"resourceName": cfg.serving.parent_model},
        ).set_display_name("import-parent-model").output
    ModelUploadOp(display_name=upload.outputs["display_name"], unmanaged_container_model=model.output,
                  labels=upload.outputs["labels"], location=location, **extra).set_display_name("upload-model")


def compile_pipeline(cfg: config_lib.JobConfig, package_path: str, base_image: "str | None" = None) -> str:
    compiler.Compiler().compile(build_pipeline(cfg, base_image), package_path=package_path)
    return package_path
