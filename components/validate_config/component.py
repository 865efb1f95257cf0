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
    """Check every rule of the job config (``config_json``, a ``jobfile.config.JobConfig`` as JSON) before
    anything is spent; fail with one ``error:`` line per problem.

    ``image_uri`` (e.g. build_image's output) becomes every pool's image. ``location``: the region whose
    prediction container serves the model (default: the config's ``topology.region``). ``check_files``:
    also check local files (data folder, a user trainer's ``source_dir``/module/requirements); off by
    default, since on Vertex the config's local paths are the submitter's, not this container's.
    ``service_account``/``network``: the submission's (``run.py --service-account``/``--network``); empty: the
    config's ``vertex`` section's; set in ``custom_job_spec`` and output as the training step takes them.
    ``folder_per_run``: the run writes into ``<output.base_dir>/<pipeline_job_name>`` (``jobs.spec.records.in_run_folder``:
    each run of a schedule trains from step 0 in its own folder); every output below is that folder's.

    Outputs: the normalised config; ``custom_job_spec``, THE Vertex ``CustomJobSpec`` of the job
    (``jobs.spec.job_spec``: pools by position, chief 0, worker 1, parameter server 2, evaluator 3, each pool's
    ``container_spec`` with ``trainer.env``; a HyperparameterTuningJob's trial job too) and its parts one by
    one (``worker_pool_specs`` padded to four, each pool's ``disk_spec``/``nfs_mounts`` in it, scheduling with
    ``disable_retries``, output directory, TensorBoard, service account, network, web/dashboard access, reserved
    IP ranges, the PSC network attachment) for ``custom_training_job``; ``base_dir``/``model_dir``/``tensorboard_dir`` (where the job writes, as Vertex
    lays it out); the Model Registry fields; warnings, one per line; ``tuning``: the config's ``tuning``
    section (empty parameters: no study); ``baseline_worker_pool_specs``, ``baseline_output_directory`` and
    ``baseline_display_name``: with a ``tuning`` section whose ``baseline`` is on, the baseline CustomJob's pools,
    folder and name for a second ``custom_training_job`` beside the tuning job (``jobs.spec.job_spec.baseline_job_spec``:
    the job as it stands in ``<base>/baseline``, its chief reporting its metric to a file there), else ``[]``,
    ``""`` and ``""``; ``placement`` and ``budget``: the plan's judgement of the job's placement options
    (``placement_plan``, as ``vtp plan`` made it with the project: each option with its price and the plan's verdict,
    the fitting ones ranked first; empty: the same judgement made here without the project, by THE placement
    procedure ``jobs.spec.ranking``) and the budget's bars, which the training step ranks again when Vertex has no
    capacity; ``labels``, ``baseline_labels``, ``tuning_labels``: the labels of the run's CustomJob, the baseline's and
    the tuning job (``jobs.spec.labels``: the run ``run_id``, the trial, the config's hash); ``hardware`` and
    ``baseline_hardware``: with a hardware ladder (``placement.hardware``), the worker pools of the job (and of the
    baseline) on every rung, THE spec of the job on that rung (``jobs.spec.job_spec.rung_pools``), which the training
    step creates the job with when it runs an option of that rung; ``[]`` without a ladder."""
    import dataclasses
    import inspect

    # lazy: KFP component body
    from jobs.spec import job_spec, labels, ranking, validate
    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobfile import config as config_lib
    # lazy: KFP component body
    from trainers.cluster import output_dirs
    # lazy: KFP component body
    from jobfile.errors import ConfigError

    try:
        cfg = config_lib.load_json(config_json).with_image(image_uri)  # a built image wins
        if folder_per_run:
            # lazy: KFP component body
            from jobs.spec.records import in_run_folder

            cfg = in_run_folder(cfg, pipeline_job_name)
        report = validate.validate_or_raise(cfg, check_data=check_files)
        spec = job_spec.custom_job_spec(cfg, service_account=service_account, network=network)
        serving = steps.serving_fields(cfg, location or cfg.topology.region)
        wrong = ranking.doc_problems(placement_plan) if placement_plan else ""
        if wrong:
            print(f"error: placement_plan: {wrong} (vtp plan --out writes one)")
            raise SystemExit(2)
        judged = placement_plan or ranking.offline_doc(cfg, location)
        ladder = {"service_account": service_account, "network": network}
        hardware = job_spec.rung_pools(cfg, **ladder)
        rungs = max([int(o.get("rung") or 0) for o in judged["options"]] + [0])
        if rungs >= max(len(hardware), 1):
            print(f"error: placement_plan: it has options on rung {rungs} of a hardware ladder the job does not have "
                  f"(placement.hardware has {len(cfg.placement.hardware)} alternative(s)): a plan of another job "
                  "file; make it again (vtp plan --out)")
            raise SystemExit(2)
        baseline_hardware = (job_spec.rung_pools(cfg, job_spec.baseline_job_spec, **ladder)
                             if cfg.tuning.enabled and cfg.tuning.baseline else [])
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}")
        raise SystemExit(2) from None
    for w in report.warnings:
        print(f"warning: {w}")
    baseline = (job_spec.parts(job_spec.baseline_job_spec(cfg, service_account=service_account, network=network))
                if cfg.tuning.enabled and cfg.tuning.baseline else {"worker_pool_specs": [], "base_output_directory": ""})
    dirs = output_dirs(None, config_lib.resolved_base_dir(cfg))
    # The outputs are declared once, in the signature above, and filled here by name (a name missing or unknown
    # is a TypeError). Under kfp's executor ``validate_config`` is this function; imported, its component.
    outputs = inspect.signature(getattr(validate_config, "python_func", validate_config)).return_annotation
    return outputs(
        config_json=cfg.to_json(), display_name=cfg.name,
        # the spec's parts, by name; FLEX_START's wait whatever the strategy: an option under FLEX_START takes it
        **{**job_spec.parts(spec), "max_wait_duration": cfg.scheduling.max_wait_duration},
        base_dir=config_lib.resolved_base_dir(cfg), model_dir=dirs["model"], tensorboard_dir=dirs["logs"],
        model_display_name=serving["display_name"], model_labels=serving["labels"],
        serving_image=serving["serving_image"], parent_model=serving["parent_model"],
        warnings="\n".join(str(w) for w in report.warnings), custom_job_spec=spec, tuning=dataclasses.asdict(cfg.tuning),
        baseline_worker_pool_specs=baseline["worker_pool_specs"],
        baseline_output_directory=baseline["base_output_directory"],
        baseline_display_name=f"{cfg.name}-baseline" if baseline["worker_pool_specs"] else "",
        placement=list(judged["options"]), budget=dict(judged.get("bars") or {}),
        labels=labels.for_job(cfg, run_id, "none"), baseline_labels=labels.for_job(cfg, run_id, "baseline"),
        tuning_labels=labels.for_job(cfg, run_id, "study"), hardware=hardware, baseline_hardware=baseline_hardware)
