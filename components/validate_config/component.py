"""validate_config: the job config in, checked against every rule; the validated config and the Vertex job
spec out (the whole CustomJobSpec, its parts for custom_training_job, output folders, the Model Registry
fields)."""
from typing import NamedTuple

from components.base import component


@component
def validate_config(config_json: str, image_uri: str = "", location: str = "", check_files: bool = False,
                    service_account: str = "", network: str = "", folder_per_run: bool = False,
                    pipeline_job_name: str = "", placement_plan: dict = {}, run_id: str = "") -> NamedTuple(
        "ValidatedJob", [("config_json", str), ("display_name", str), ("worker_pool_specs", list),
                         ("base_output_directory", str), ("scheduling_strategy", str),
                         ("restart_job_on_worker_restart", bool), ("timeout", str), ("tensorboard", str),
                         ("base_dir", str), ("model_dir", str), ("tensorboard_dir", str),
                         ("model_display_name", str), ("model_labels", dict), ("serving_image", str),
                         ("parent_model", str), ("warnings", str), ("custom_job_spec", dict),
                         ("max_wait_duration", str), ("persistent_resource_id", str), ("tuning", dict),
                         ("service_account", str), ("network", str), ("disable_retries", bool),
                         ("enable_web_access", bool), ("enable_dashboard_access", bool), ("reserved_ip_ranges", list),
                         ("psc_network_attachment", str), ("baseline_worker_pool_specs", list),
                         ("baseline_output_directory", str), ("baseline_display_name", str), ("placement", list),
                         ("budget", dict), ("labels", dict), ("baseline_labels", dict), ("tuning_labels", dict),
                         ("hardware", list), ("baseline_hardware", list)]):
    """Check every rule of the job config (``config_json``: the job file as JSON, as ``vtp`` writes it
    into a pipeline) before anything is spent; fail with one ``error:`` line per problem.

    ``image_uri`` (e.g. build_image's output) becomes every pool's image. ``location``: the region whose
    prediction container serves the model (default: the config's ``topology.region``). ``check_files``:
    also check local files (data folder, a user trainer's ``source_dir``/module/requirements); off by
    default, since on Vertex the config's local paths are the submitter's, not this container's.
    ``service_account``/``network``: the submission's (``run.py --service-account``/``--network``); empty: the
    config's ``vertex`` section's; set in ``custom_job_spec`` and output as the training step takes them.
    ``folder_per_run``: the run writes into ``<output.base_dir>/<pipeline_job_name>`` (each run of a schedule
    trains from step 0 in its own folder); every output below is that folder's.

    Outputs: the normalised config; ``custom_job_spec``, THE Vertex ``CustomJobSpec`` of the job
    (THE spec builder's: pools by position, chief 0, worker 1, parameter server 2, evaluator 3, each pool's
    ``container_spec`` with ``trainer.env``; a HyperparameterTuningJob's trial job too) and its parts one by
    one (``worker_pool_specs`` padded to four, each pool's ``disk_spec``/``nfs_mounts`` in it, scheduling with
    ``disable_retries``, output directory, TensorBoard, service account, network, web/dashboard access, reserved
    IP ranges, the PSC network attachment) for ``custom_training_job``; ``base_dir``/``model_dir``/``tensorboard_dir`` (where the job writes, as Vertex
    lays it out); the Model Registry fields; warnings, one per line; ``tuning``: the config's ``tuning``
    section (empty parameters: no study); ``baseline_worker_pool_specs``, ``baseline_output_directory`` and
    ``baseline_display_name``: with a ``tuning`` section whose ``baseline`` is on, the baseline CustomJob's pools,
    folder and name for a second ``custom_training_job`` beside the tuning job (the job as it stands in
    ``<base>/baseline``, its chief reporting its metric to a file there), else ``[]``,
    ``""`` and ``""``; ``placement`` and ``budget``: the plan's judgement of the job's placement options
    (``placement_plan``, as ``vtp plan`` made it with the project: each option with its price and the plan's verdict,
    the fitting ones ranked first; empty: the same judgement made here without the project, by THE placement
    procedure) and the budget's bars, which the training step ranks again when Vertex has no
    capacity; ``labels``, ``baseline_labels``, ``tuning_labels``: the labels of the run's CustomJob, the baseline's and
    the tuning job (the run ``run_id``, the trial, the config's hash); ``hardware`` and
    ``baseline_hardware``: with a hardware ladder (``placement.hardware``), the worker pools of the job (and of the
    baseline) on every rung, THE spec of the job on that rung, which the training
    step creates the job with when it runs an option of that rung; ``[]`` without a ladder."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("validate_config", arguments)
