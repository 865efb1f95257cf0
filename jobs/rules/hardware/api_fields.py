"""Every field of the Vertex job the installed client knows, and where the job file reaches it (or why not).

``tests/test_api_fields.py`` walks ``CustomJobSpec``, ``WorkerPoolSpec``, ``MachineSpec``, ``Scheduling``,
``DiskSpec``, ``NfsMount`` and ``PscInterfaceConfig`` of the installed ``google-cloud-aiplatform`` and fails on a
field with no entry here, so a client release that adds a field surfaces in CI as a decision to take, not as a
field nobody can set. A ``reachable`` entry names the job-file path (``jobs.rules.job_spec`` places it in the spec as
the API names it); an ``unreachable`` entry says why.
"""
from __future__ import annotations

REACHABLE = "reachable"
UNREACHABLE = "unreachable"

#: "Message.field" -> (decision, the job-file path or the reason)
FIELDS: dict[str, tuple[str, str]] = {
    # CustomJobSpec
    "CustomJobSpec.worker_pool_specs": (REACHABLE, "topology.chief / worker / parameter_server / evaluator (by position)"),
    "CustomJobSpec.scheduling": (REACHABLE, "scheduling"),
    "CustomJobSpec.service_account": (REACHABLE, "vertex.service_account (run.py --service-account overrides it)"),
    "CustomJobSpec.network": (REACHABLE, "vertex.network (run.py --network overrides it)"),
    "CustomJobSpec.reserved_ip_ranges": (REACHABLE, "vertex.reserved_ip_ranges"),
    "CustomJobSpec.psc_interface_config": (REACHABLE, "vertex.psc_interface_config"),
    "CustomJobSpec.base_output_directory": (REACHABLE, "output.base_dir"),
    "CustomJobSpec.tensorboard": (REACHABLE, "output.tensorboard"),
    "CustomJobSpec.enable_web_access": (REACHABLE, "vertex.enable_web_access"),
    "CustomJobSpec.enable_dashboard_access": (REACHABLE, "vertex.enable_dashboard_access"),
    "CustomJobSpec.persistent_resource_id": (REACHABLE, "scheduling.persistent_resource_id"),
    "CustomJobSpec.protected_artifact_location_id": (UNREACHABLE, "protected artifacts (a location other than the "
                                                     "job's for them) are not produced by this project's trainers; "
                                                     "outputs go to output.base_dir"),
    "CustomJobSpec.experiment": (UNREACHABLE, "Vertex Experiments tracking is not part of this project: runs are "
                                 "recorded in the run record and report (jobs.run_records.records); TensorBoard is reachable"),
    "CustomJobSpec.experiment_run": (UNREACHABLE, "only with experiment (above)"),
    "CustomJobSpec.models": (UNREACHABLE, "'applicable only to some of the Google-provided custom jobs' (the "
                             "client's doc); a user's TensorFlow job reads its data, not Model Registry artifacts"),
    # WorkerPoolSpec
    "WorkerPoolSpec.container_spec": (REACHABLE, "container.image_uri / command / args, trainer.module / args, "
                                      "trainer.env (every pool runs the job's image)"),
    "WorkerPoolSpec.python_package_spec": (UNREACHABLE, "the project always runs a container image (built by run.py "
                                           "build or given as container.image_uri): one image runs here, in "
                                           "--runner docker and on Vertex alike"),
    "WorkerPoolSpec.machine_spec": (REACHABLE, "topology.<pool>.machine_type / accelerator_type / accelerator_count "
                                    "/ tpu_topology"),
    "WorkerPoolSpec.replica_count": (REACHABLE, "topology.<pool>.replica_count"),
    "WorkerPoolSpec.nfs_mounts": (REACHABLE, "topology.<pool>.nfs_mounts"),
    "WorkerPoolSpec.lustre_mounts": (UNREACHABLE, "Managed Lustre mounts are not documented for custom training in "
                                     "the pages the hardware catalog read (catalog.date); NFS mounts are reachable"),
    "WorkerPoolSpec.disk_spec": (REACHABLE, "topology.<pool>.disk_spec"),
    # MachineSpec
    "MachineSpec.machine_type": (REACHABLE, "topology.<pool>.machine_type"),
    "MachineSpec.accelerator_type": (REACHABLE, "topology.<pool>.accelerator_type"),
    "MachineSpec.accelerator_count": (REACHABLE, "topology.<pool>.accelerator_count"),
    "MachineSpec.tpu_topology": (REACHABLE, "topology.<pool>.tpu_topology"),
    "MachineSpec.reservation_affinity": (REACHABLE, "scheduling.reservation_affinity (every pool)"),
    "MachineSpec.gpu_partition_size": (UNREACHABLE, "GPU partitions (MIG) serve co-scheduled prediction replicas; "
                                       "the client documents it for model deployment, not custom training"),
    # Scheduling
    "Scheduling.timeout": (REACHABLE, "scheduling.timeout"),
    "Scheduling.restart_job_on_worker_restart": (REACHABLE, "scheduling.restart_job_on_worker_restart"),
    "Scheduling.strategy": (REACHABLE, "scheduling.strategy"),
    "Scheduling.disable_retries": (REACHABLE, "scheduling.disable_retries"),
    "Scheduling.max_wait_duration": (REACHABLE, "scheduling.max_wait_duration"),
    # DiskSpec, NfsMount, PscInterfaceConfig
    "DiskSpec.boot_disk_type": (REACHABLE, "topology.<pool>.disk_spec.boot_disk_type"),
    "DiskSpec.boot_disk_size_gb": (REACHABLE, "topology.<pool>.disk_spec.boot_disk_size_gb"),
    "NfsMount.server": (REACHABLE, "topology.<pool>.nfs_mounts[].server"),
    "NfsMount.path": (REACHABLE, "topology.<pool>.nfs_mounts[].path"),
    "NfsMount.mount_point": (REACHABLE, "topology.<pool>.nfs_mounts[].mount_point"),
    "PscInterfaceConfig.network_attachment": (REACHABLE, "vertex.psc_interface_config.network_attachment"),
    "PscInterfaceConfig.dns_peering_configs": (UNREACHABLE, "DNS peering for a PSC interface needs the dns.peer role "
                                               "granted across projects; not asked for yet: set it on the network "
                                               "attachment's side or extend vertex.psc_interface_config"),
}

#: The API messages whose fields are decided above (the field walk covers exactly these).
MESSAGES = ("CustomJobSpec", "WorkerPoolSpec", "MachineSpec", "Scheduling", "DiskSpec", "NfsMount", "PscInterfaceConfig")


def reachable() -> dict[str, str]:
    return {k: where for k, (decision, where) in FIELDS.items() if decision == REACHABLE}


def unreachable() -> dict[str, str]:
    return {k: why for k, (decision, why) in FIELDS.items() if decision == UNREACHABLE}
