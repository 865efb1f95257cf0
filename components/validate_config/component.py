"""validate_config: the job config in, checked against every rule; the validated config and the Vertex job
spec out (worker pool specs by position, output folders, the Model Registry fields)."""
from typing import NamedTuple

from components.base import component


@component
def validate_config(config_json: str, image_uri: str = "", location: str = "", check_files: bool = False) -> NamedTuple(
        "ValidatedJob", [("config_json", str), ("display_name", str), ("worker_pool_specs", list),
                         ("base_output_directory", str), ("scheduling_strategy", str),
                         ("restart_job_on_worker_restart", bool), ("timeout", str), ("tensorboard", str),
                         ("base_dir", str), ("model_dir", str), ("tensorboard_dir", str),
                         ("model_display_name", str), ("model_labels", dict), ("serving_image", str),
                         ("parent_model", str), ("warnings", str)]):
    """Check every rule of the job config (``config_json``, a ``trainers.config.JobConfig`` as JSON) before
    anything is spent; fail with one ``error:`` line per problem.

    ``image_uri`` (e.g. build_image's output) becomes every pool's image. ``location``: the region whose
    prediction container serves the model (default: the config's ``topology.region``). ``check_files``:
    also check local files (data folder, a user trainer's ``source_dir``/module/requirements); off by
    default, since on Vertex the config's local paths are the submitter's, not this container's.

    Outputs: the normalised config; the Vertex CustomJob fields (``worker_pool_specs``: chief 0, worker
    1, parameter server 2, evaluator 3); ``base_dir``/``model_dir``/``tensorboard_dir`` (where the job
    writes, as Vertex lays it out); the Model Registry fields; warnings, one per line."""
    from collections import namedtuple

    from jobs import stages, validate
    from trainers import config as config_lib
    from trainers.errors import ConfigError

    try:
        cfg = stages.with_image(config_lib.load_json(config_json), image_uri)  # a built image wins
        report = validate.validate_or_raise(cfg, check_data=check_files)
        spec = stages.vertex_job(cfg)
        serving = stages.serving_fields(cfg, location or cfg.topology.region)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}")
        raise SystemExit(2) from None
    for w in report.warnings:
        print(f"warning: {w}")
    dirs = stages.output_dirs(cfg)
    fields = ["config_json", "display_name", "worker_pool_specs", "base_output_directory", "scheduling_strategy",
              "restart_job_on_worker_restart", "timeout", "tensorboard", "base_dir", "model_dir", "tensorboard_dir",
              "model_display_name", "model_labels", "serving_image", "parent_model", "warnings"]
    return namedtuple("ValidatedJob", fields)(
        cfg.to_json(), spec["display_name"], spec["worker_pool_specs"], spec["base_output_directory"],
        spec["scheduling_strategy"], spec["restart_job_on_worker_restart"], spec["timeout"], spec["tensorboard"],
        config_lib.resolved_base_dir(cfg), dirs["model"], dirs["logs"], serving["display_name"], serving["labels"],
        serving["serving_image"], serving["parent_model"], "\n".join(str(w) for w in report.warnings))
