"""The training pipeline: validate -> prepare data -> train (local launcher | Vertex CustomJob) -> verify.

Wiring only: every step is a component from ``components``; every decision lives in the library.
One definition serves both targets; ``target`` picks the branch at run time, and the untaken branch is
never executed (so kfp.local runs the local branch without touching Google Cloud).
"""

from kfp import compiler, dsl

from components import make_components
from trainers import config as config_lib


def build_pipeline(cfg: config_lib.JobConfig, base_image: "str | None" = None):
    """The pipeline function for ``cfg`` (its config is the default of the ``config_json`` parameter)."""
    from google_cloud_pipeline_components.v1.custom_job import CustomTrainingJobOp

    c = make_components(base_image or cfg.container.image_uri or "python:3.11")

    @dsl.pipeline(name=cfg.name, description=f"Train {cfg.model.name} with {cfg.topology.strategy} "
                                             "from source data to a verified SavedModel.")
    def training_pipeline(config_json: str = cfg.to_json(), target: str = "local",
                          location: str = cfg.topology.region):
        job = c.validate_config(config_json=config_json).set_display_name("validate-config")
        data = c.prepare_data(config_json=job.outputs["config_json"]).set_display_name("prepare-data")
        with dsl.If(target == "local", name="train-locally"):
            trained = c.train_local(config_json=job.outputs["config_json"],
                                    data_dir=data.outputs["Output"]).set_display_name("train-local")
            c.verify_model(model_dir=trained.outputs["model_dir"],
                           data_dir=data.outputs["Output"]).set_display_name("verify-model")
        with dsl.Else(name="train-on-vertex"):
            custom_job = CustomTrainingJobOp(
                display_name=job.outputs["display_name"],
                worker_pool_specs=job.outputs["worker_pool_specs"],
                base_output_directory=job.outputs["base_output_directory"],
                restart_job_on_worker_restart=job.outputs["restart_job_on_worker_restart"],
                strategy=job.outputs["scheduling_strategy"],
                timeout=job.outputs["timeout"],
                location=location,
            ).after(data).set_display_name("train-vertex")
            c.verify_model(model_dir=job.outputs["model_dir"],
                           data_dir=data.outputs["Output"]).after(custom_job).set_display_name("verify-vertex-model")

    return training_pipeline


def compile_pipeline(cfg: config_lib.JobConfig, package_path: str, base_image: "str | None" = None) -> str:
    compiler.Compiler().compile(build_pipeline(cfg, base_image), package_path=package_path)
    return package_path
