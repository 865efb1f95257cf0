"""validate_config's work, behind ``components.entry`` (its inputs and outputs: ``component.py``).

The rules are ``jobs.rules.validate``'s; the spec is THE builder's (``jobs.rules.job_spec``: ``custom_job_spec``,
``baseline_job_spec``, ``rung_pools``); the placement judgement is THE procedure's (``jobs.rules.ranking``); a run's
own folder ``jobs.run_records.records.in_run_folder``; the labels ``jobs.rules.labels``."""
from __future__ import annotations

import dataclasses
from collections import namedtuple

from jobs.rules import job_spec, labels, ranking, validate
from jobs.run_records.records import in_run_folder
from jobs.steps import calls as steps
from jobfile import config as config_lib
from trainers.cluster import output_dirs
from jobfile.errors import ConfigError


def validate_config(config_json: str, image_uri: str = "", location: str = "", check_files: bool = False,
                    service_account: str = "", network: str = "", folder_per_run: bool = False,
                    pipeline_job_name: str = "", placement_plan: dict = {}, run_id: str = ""):
    """The validated job and its Vertex spec, as a NamedTuple whose fields are the outputs the definition declares
    (kfp's executor reads them by name)."""
    try:
        cfg = config_lib.load_json(config_json).with_image(image_uri)  # a built image wins
        if folder_per_run:
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
    outputs = dict(
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
    # The outputs are declared once, in the definition's signature; these are filled by name, and a test holds the
    # two sets equal (tests/test_component_entry.py)
    return namedtuple("ValidatedJob", outputs)(**outputs)
