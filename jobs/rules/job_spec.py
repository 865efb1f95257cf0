"""THE Vertex job, built in one place from a job config: the ``CustomJobSpec`` every path runs.

One builder, :func:`custom_job_spec`, returns the spec as a dict in the API's proto field names (what
``json_format.ParseDict`` takes into ``aiplatform_v1.CustomJobSpec``): the worker command, the four pools by
position (machine, accelerators, reservation, replica counts, ``container_spec`` with command, args and
``env``, ``disk_spec``, ``nfs_mounts``), scheduling (``disable_retries`` too), output directory, TensorBoard, and
the ``vertex`` section (service account and network, the submission's flags winning; web and dashboard access,
reserved IP ranges, Private Service Connect). Which field of the client's ``CustomJobSpec`` comes from where, and
why the rest are not reachable: ``jobs.rules.hardware.api_fields``. Everything that runs the
job reads it from here:

* the pipeline's ``validate_config`` step outputs it (and its parts, for ``custom_training_job``);
* ``custom_training_job`` (``jobs.cloud.vertex_jobs.custom_job``) creates and follows it on Vertex, re-assembled from
  its component inputs by the same :func:`job_spec`;
* a HyperparameterTuningJob's ``trial_job_spec`` is this very spec (``jobs.cloud.vertex_jobs.tuning_job``);
* every rung of the hardware ladder (``placement.hardware``) is this spec of the job on that rung (:func:`rung_pools`),
  which the training step creates the job with when it runs on that rung;
* the local launch (``jobs.local.launch.custom_job``) runs its worker command with its declared variables
  (:func:`worker_command`, :func:`declared_env`), and the docker runner starts each replica from its pool's
  ``container_spec``.

Worker pools by position (Vertex reads a pool's role from its index): 0 chief (exactly one replica),
1 workers, 2 parameter servers (or a reduction server), 3 evaluator; an unused pool is ``{}``.
:func:`pools_by_position` keeps ``{}`` between used pools and drops trailing ones, as Vertex's REST
reference allows ("All worker pools except the first one are optional and can be skipped by providing an
empty value"). Counts are cast to int (kfp compiles ints in nested parameters to floats such as 2.0, and
``accelerator_count`` is an int32 in the proto). A TPU v2/v3 is ``{"machine_type": "cloud-tpu",
"accelerator_type": "TPU_V3", "accelerator_count": 8}`` in pool 0; a TPU VM e.g. ``{"machine_type":
"ct5lp-hightpu-4t", "tpu_topology": "2x2"}``.

Pure: no cloud client, no TensorFlow, no kfp.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from jobs.rules import placement, tuning_rules
from jobs.run_records import trial_files
from jobs.rules.job_image import job_image
from jobfile import config as config_lib
from jobfile.paths import fuse_path

#: Vertex's pool positions, by the config's pool names.
POOLS = ("chief", "worker", "parameter_server", "evaluator")


def worker_command(cfg: config_lib.JobConfig) -> list[str]:
    """The command every replica runs: ``python -m <trainer.module> <trainer.args>`` for a user's trainer;
    ``container.command`` + ``container.args`` for a trainer that is not a module; the built-in trainer with
    the whole config as ``--config-json`` (Vertex replicas then need no file)."""
    if cfg.trainer.module:
        return ["python", "-m", cfg.trainer.module, *cfg.trainer.args]
    args = list(cfg.container.args)
    if not args and list(cfg.container.command) == config_lib.BUILTIN_COMMAND:
        args = ["--config-json", cfg.to_json()]
    return list(cfg.container.command) + args


def shown_command(cfg: config_lib.JobConfig) -> list[str]:
    """The replicas' command as a record shows it: the built-in trainer's config JSON elided (it is in run.json)."""
    command = worker_command(cfg)
    return command[:4] + ["<the job config>"] if command[3:4] == ["--config-json"] else command


def declared_env(cfg: config_lib.JobConfig) -> dict[str, str]:
    """The variables the job declares for every replica (``trainer.env``, in the file's order): what the local
    launch hands the launcher as it is, and what :func:`container_env` writes for Vertex."""
    return {str(k): str(v) for k, v in cfg.trainer.env.items()}


def container_env(cfg: config_lib.JobConfig) -> list[dict[str, str]]:
    """``trainer.env`` as Vertex's ``container_spec.env`` (``[{name, value}]``, in the file's order)."""
    return [{"name": k, "value": v} for k, v in declared_env(cfg).items()]


def as_int(value: Any) -> int | None:
    """An integer count, accepting integral floats (kfp compiles ints to 2.0); None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _int(value: Any) -> int:
    number = as_int(value)
    if number is None:
        try:
            number = int(float(value))
        except (TypeError, ValueError):
            number = 0
    return number


def machine_spec(pool: Mapping[str, Any], reservation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A pool's ``MachineSpec``: machine type; accelerator type and count only when an accelerator is set;
    ``tpu_topology`` only when set; the job's reservation affinity when it names a type."""
    spec: dict[str, Any] = {"machine_type": str(pool.get("machine_type") or "")}
    accelerator_type = str(pool.get("accelerator_type") or "")
    accelerator_count = _int(pool.get("accelerator_count", 0))
    if accelerator_type and accelerator_count > 0:
        spec["accelerator_type"] = accelerator_type
        spec["accelerator_count"] = accelerator_count
    if pool.get("tpu_topology"):
        spec["tpu_topology"] = str(pool["tpu_topology"])
    if reservation and reservation.get("reservation_affinity_type"):
        spec["reservation_affinity"] = {k: v for k, v in (
            ("reservation_affinity_type", str(reservation["reservation_affinity_type"])),
            ("key", str(reservation.get("key") or "")),
            ("values", [str(v) for v in reservation.get("values") or []])) if v}
    return spec


def worker_pool_specs(job: Mapping[str, Any], image_uri: str, command: Sequence[str] = (),
                      args: Sequence[str] = (), env: Sequence[Mapping[str, str]] = ()) -> list[dict[str, Any]]:
    """The four pools of ``job['topology']`` (a config dict, possibly ill-typed: a legacy import's too)
    running ``image_uri`` with ``command``/``args``/``env``; an unused pool is ``{}``."""
    topology = job.get("topology", {})
    topology = topology if isinstance(topology, Mapping) else {}
    scheduling = job.get("scheduling") if isinstance(job.get("scheduling"), Mapping) else {}
    reservation = scheduling.get("reservation_affinity") if isinstance(scheduling.get("reservation_affinity"),
                                                                        Mapping) else None
    specs: list[dict[str, Any]] = []
    for name in POOLS:
        pool = topology.get(name) or {}
        if not isinstance(pool, Mapping):
            pool = {}
        if name == "chief" and name not in topology:  # the schema's chief (jobfile.config.Topology), as the parser fills it
            pool = dataclasses.asdict(config_lib.Topology().chief)
        replicas = _int(pool.get("replica_count", 1 if name == "chief" else 0))
        if replicas <= 0:
            specs.append({})
            continue
        container: dict[str, Any] = {"image_uri": image_uri}
        if command:
            container["command"] = [str(c) for c in command]
        if args:
            container["args"] = [str(a) for a in args]
        if env:
            container["env"] = [{"name": str(e["name"]), "value": str(e.get("value", ""))} for e in env]
        spec = {"replica_count": replicas, "machine_spec": machine_spec(pool, reservation), "container_spec": container}
        spec.update(pool_extras(pool))
        specs.append(spec)
    return specs


def pool_extras(pool: Mapping[str, Any]) -> dict[str, Any]:
    """A pool's ``disk_spec`` (only what is set: Vertex's defaults otherwise) and ``nfs_mounts``, as the API names
    them in ``WorkerPoolSpec``."""
    out: dict[str, Any] = {}
    disk = pool.get("disk_spec") if isinstance(pool.get("disk_spec"), Mapping) else {}
    disk_spec = {k: v for k, v in (("boot_disk_type", str(disk.get("boot_disk_type") or "")),
                                   ("boot_disk_size_gb", _int(disk.get("boot_disk_size_gb") or 0))) if v}
    if disk_spec:
        out["disk_spec"] = disk_spec
    mounts = [m for m in pool.get("nfs_mounts") or [] if isinstance(m, Mapping)]
    if mounts:
        out["nfs_mounts"] = [{k: str(m.get(k) or "") for k in ("server", "path", "mount_point")} for m in mounts]
    return out


def pools_by_position(specs: Sequence[Any]) -> list[dict[str, Any]]:
    """Pool 0 first and required; an unused pool between used ones stays ``{}`` so the next keeps its
    index; trailing unused pools are dropped. ValueError when pool 0 is empty."""
    pools = [dict(p) if isinstance(p, Mapping) and p else {} for p in specs]
    while pools and not pools[-1]:
        pools.pop()
    if not pools or not pools[0]:
        raise ValueError("worker_pool_specs: pool 0 (the chief) is empty; every CustomJob needs it")
    return pools


def job_spec(*, worker_pool_specs: Sequence[Any], base_output_directory: str = "", tensorboard: str = "",
             restart_job_on_worker_restart: bool = False, scheduling_strategy: str = "", timeout: str = "",
             max_wait_duration: str = "", persistent_resource_id: str = "", service_account: str = "",
             network: str = "", disable_retries: bool = False, enable_web_access: bool = False,
             enable_dashboard_access: bool = False, reserved_ip_ranges: Sequence[str] = (),
             psc_network_attachment: str = "") -> dict[str, Any]:
    """A ``CustomJobSpec`` dict from its parts (the config's, or the ``custom_training_job`` component's
    inputs): empty parts are left out, pools by position."""
    spec: dict[str, Any] = {"worker_pool_specs": pools_by_position(worker_pool_specs)}
    scheduling: dict[str, Any] = {k: v for k, v in (("timeout", timeout), ("strategy", scheduling_strategy),
                                                    ("max_wait_duration", max_wait_duration)) if v}
    for key, value in (("restart_job_on_worker_restart", restart_job_on_worker_restart),
                       ("disable_retries", disable_retries)):
        if value:
            scheduling[key] = True
    if scheduling:
        spec["scheduling"] = scheduling
    if base_output_directory:
        spec["base_output_directory"] = {"output_uri_prefix": base_output_directory}
    for key, value in (("tensorboard", tensorboard), ("service_account", service_account), ("network", network),
                       ("persistent_resource_id", persistent_resource_id), ("enable_web_access", enable_web_access),
                       ("enable_dashboard_access", enable_dashboard_access)):
        if value:
            spec[key] = value
    if reserved_ip_ranges:
        spec["reserved_ip_ranges"] = [str(r) for r in reserved_ip_ranges]
    if psc_network_attachment:
        spec["psc_interface_config"] = {"network_attachment": psc_network_attachment}
    return spec


def custom_job_spec(cfg: config_lib.JobConfig, *, service_account: str = "", network: str = "") -> dict[str, Any]:
    """THE ``CustomJobSpec`` of ``cfg`` (see the module doc). ``service_account``/``network``: the submission's
    (``run.py --service-account``/``--network``), which override the config's ``vertex`` section."""
    command = worker_command(cfg)
    s, v = cfg.scheduling, cfg.vertex
    return job_spec(
        worker_pool_specs=worker_pool_specs(cfg.to_dict(), job_image(cfg), command[:1], command[1:],
                                            container_env(cfg)),
        base_output_directory=config_lib.resolved_base_dir(cfg), tensorboard=cfg.output.tensorboard,
        restart_job_on_worker_restart=s.restart_job_on_worker_restart, scheduling_strategy=s.strategy,
        timeout=s.timeout, max_wait_duration=s.max_wait_duration if s.strategy == "FLEX_START" else "",
        persistent_resource_id=s.persistent_resource_id,
        service_account=service_account or v.service_account, network=network or v.network,
        disable_retries=s.disable_retries, enable_web_access=v.enable_web_access,
        enable_dashboard_access=v.enable_dashboard_access, reserved_ip_ranges=v.reserved_ip_ranges,
        psc_network_attachment=v.psc_interface_config.network_attachment)


#: the cloudml-hypertune library's file variable (``hypertune.HyperTune``: ``CLOUD_ML_HP_METRIC_FILE``)
METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"


def baseline_job_spec(cfg: config_lib.JobConfig, *, service_account: str = "", network: str = "") -> dict[str, Any]:
    """The ``CustomJobSpec`` of the baseline beside a study (``tuning.baseline``): THE job's spec
    (:func:`custom_job_spec`, so exactly the job as it stands, no tuning flag), its base output directory
    ``<base>/baseline`` (``jobs.run_records.trial_files.baseline_base``: a trial's layout, so its model is
    ``<base>/baseline/model``) and, in pool 0's ``container_spec.env``, ``CLOUD_ML_HP_METRIC_FILE`` = that
    folder's ``hypertune/chief-0.metrics`` as the replica sees it through Vertex's Cloud Storage FUSE mount
    (``/gcs/<bucket>/...``: "Custom training jobs can access your Cloud Storage buckets as subdirectories of the
    root /gcs directory", read and write, https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system,
    read 2026-11-25). Why: Vertex collects a trainer's cloudml-hypertune reports only from a tuning job's
    trials (it sets the variable for them); in a plain CustomJob the library writes to its default
    ``/tmp/hypertune/output.metrics`` on the replica, lost with it. Pointed at the output folder, the chief's
    reports land beside its model, where the pipeline's ``pick_model`` step reads them after the job: the same
    file, in the same layout, a local baseline writes (``jobs.tuning.trial.baseline_launch``)."""
    spec = custom_job_spec(cfg, service_account=service_account, network=network)
    base = config_lib.resolved_base_dir(cfg)
    spec["base_output_directory"] = {"output_uri_prefix": trial_files.baseline_base(base)}
    chief = dict(spec["worker_pool_specs"][0])
    container = dict(chief["container_spec"])
    env = [e for e in container.get("env") or [] if e.get("name") != METRIC_FILE_ENV]
    container["env"] = env + [{"name": METRIC_FILE_ENV,
                               "value": fuse_path(trial_files.metric_file(base, tuning_rules.BASELINE))}]
    chief["container_spec"] = container
    spec["worker_pool_specs"] = [chief, *spec["worker_pool_specs"][1:]]
    return spec


def rung_pools(cfg: config_lib.JobConfig, build: Callable[..., dict[str, Any]] = custom_job_spec, **given: str
               ) -> list[list[dict[str, Any]]]:
    """The worker pools of the job on every rung of its hardware ladder, in order (rung 0: ``topology``), each THE spec
    of the job on that rung (``build``: :func:`custom_job_spec`, or :func:`baseline_job_spec`, with ``given``'s
    service account and network; the rung applied by ``jobs.rules.placement.on_rung``), padded to four: what the
    training step creates the job with when THE placement procedure picks an option of that rung. A rung's pools are
    the same in every region and strategy (the create call names those). ``[]`` without a ladder."""
    if not cfg.placement.hardware:
        return []
    return [parts(build(placement.on_rung(cfg, k), **given))["worker_pool_specs"]
            for k in range(len(cfg.placement.hardware) + 1)]


def parts(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`job_spec`: the spec's parts by :func:`job_spec`'s argument names (what
    ``validate_config`` outputs one by one for ``custom_training_job``); the pools padded back to four."""
    scheduling = spec.get("scheduling") or {}
    pools = list(spec["worker_pool_specs"]) + [{}] * (len(POOLS) - len(spec["worker_pool_specs"]))
    return {"worker_pool_specs": pools,
            "base_output_directory": (spec.get("base_output_directory") or {}).get("output_uri_prefix", ""),
            "tensorboard": spec.get("tensorboard", ""),
            "restart_job_on_worker_restart": bool(scheduling.get("restart_job_on_worker_restart", False)),
            "scheduling_strategy": scheduling.get("strategy", ""), "timeout": scheduling.get("timeout", ""),
            "max_wait_duration": scheduling.get("max_wait_duration", ""),
            "persistent_resource_id": spec.get("persistent_resource_id", ""),
            "service_account": spec.get("service_account", ""), "network": spec.get("network", ""),
            "disable_retries": bool(scheduling.get("disable_retries", False)),
            "enable_web_access": bool(spec.get("enable_web_access", False)),
            "enable_dashboard_access": bool(spec.get("enable_dashboard_access", False)),
            "reserved_ip_ranges": list(spec.get("reserved_ip_ranges") or []),
            "psc_network_attachment": (spec.get("psc_interface_config") or {}).get("network_attachment", "")}


def local_max_restarts(cfg: config_lib.JobConfig) -> int:
    """How often the local launcher restarts the whole job after a replica dies: ``scheduling.max_restarts``,
    or none when ``scheduling.disable_retries`` (Vertex then retries nothing either)."""
    return 0 if cfg.scheduling.disable_retries else cfg.scheduling.max_restarts


def launch_rules(cfg: config_lib.JobConfig) -> dict[str, str]:
    """The launcher's done and worker-failure rules for the config's strategy. Parameter-server training:
    workers and parameter servers are servers, so the job is done when the chief (and the evaluator) exit 0,
    and a dead worker is tolerated (the chief reschedules its steps), as Vertex keeps the job running when
    ``restart_job_on_worker_restart`` is false. All-reduce strategies: every worker must finish, and any
    replica's death restarts the whole job (its peers cannot go on without it)."""
    if cfg.topology.strategy == "parameter_server":  # a user's own trainer too: TF's PS architecture
        return {"done_when": "chief", "on_worker_failure": "tolerate"}
    return {"done_when": "all", "on_worker_failure": "restart"}
