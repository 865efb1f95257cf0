"""The job config's sections that only Vertex acts on (nothing here changes what a replica computes): a pool's
boot disk and NFS mounts, ``scheduling`` (the CustomJob's ``Scheduling`` and reservation affinity),
``vertex`` (service account, network, web access, reserved IP ranges, Private Service Connect), ``placement``
(the regions, scheduling strategies and hardware alternatives Vertex may run the job in) and ``budget``. One dataclass per section, as
in ``jobfile.config`` (the whole schema, :class:`jobfile.config.JobConfig`); their rules are the job side's
(``jobs.rules.scheduling_section``, ``jobs.rules.hardware.vertex_rules``, ``jobs.rules.placement``, ``jobs.rules.ladder``).
It never imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass
class DiskSpec:
    """A pool's boot disk (``WorkerPoolSpec.disk_spec``); empty type and 0 size: not sent (Vertex's default:
    pd-ssd, hyperdisk-balanced on A3 Ultra; 100 GB)."""
    #: ``pd-ssd``, ``pd-standard`` or ``hyperdisk-balanced``
    boot_disk_type: str = ""
    #: 100 to 64000 (GB); 0 = Vertex's default (100)
    boot_disk_size_gb: int = 0


@dataclasses.dataclass
class NfsMount:
    """An NFS share every replica of the pool mounts at ``/mnt/nfs/<mount_point>`` (``WorkerPoolSpec.nfs_mounts``);
    the job must be peered with the share's VPC (``vertex.network``)."""
    server: str = ""
    #: the exported path, starting with ``/``
    path: str = ""
    mount_point: str = ""



@dataclasses.dataclass
class Scheduling:
    strategy: Literal["STANDARD", "SPOT", "FLEX_START"] = "STANDARD"
    restart_job_on_worker_restart: bool = False
    timeout: str = "86400s"
    #: local launcher: how many times the whole job is restarted after a replica dies.
    max_restarts: int = 0
    #: a replica gives up (exit 75) when the cluster (MWMS peers, TPU) is not up within this time.
    startup_timeout_s: float = 300.0
    #: ``FLEX_START`` only: how long Vertex may wait for the machines (``"0s"``: indefinitely; empty: Vertex's
    #: default). The CustomJob's ``scheduling.max_wait_duration``.
    max_wait_duration: str = ""
    #: run on this Vertex persistent resource (``CustomJobSpec.persistent_resource_id``), not on new machines.
    persistent_resource_id: str = ""
    #: which Compute Engine reservation every pool's machines come from (``MachineSpec.reservation_affinity``).
    reservation_affinity: "ReservationAffinity" = dataclasses.field(default_factory=lambda: ReservationAffinity())
    #: Vertex does not retry the job after an internal error once it runs (``Scheduling.disable_retries``; it
    #: overrides ``restart_job_on_worker_restart``); the local launcher then restarts no failed replica.
    disable_retries: bool = False


@dataclasses.dataclass
class ReservationAffinity:
    """``MachineSpec.reservation_affinity`` as the API names it; empty type: not sent (Vertex's default)."""
    reservation_affinity_type: Literal["", "ANY_RESERVATION", "SPECIFIC_RESERVATION", "NO_RESERVATION"] = ""
    #: ``compute.googleapis.com/reservation-name`` to name a SPECIFIC_RESERVATION
    key: str = ""
    #: the reservations' full resource names, ``projects/P/zones/Z/reservations/NAME``
    values: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class PscInterfaceConfig:
    """``CustomJobSpec.psc_interface_config``: Private Service Connect interface into the user's VPC."""
    #: a network attachment of the job's region: its name, or ``projects/P/regions/R/networkAttachments/NAME``
    network_attachment: str = ""


@dataclasses.dataclass
class Vertex:
    """What only Vertex does with the job (``CustomJobSpec`` fields; nothing here changes a local run). The
    submission's ``--service-account``/``--network`` override ``service_account``/``network``."""
    #: the replicas' run-as account, ``NAME@PROJECT.iam.gserviceaccount.com``; empty: Vertex's service agent
    service_account: str = ""
    #: the VPC to peer with, ``projects/PROJECT_NUMBER/global/networks/NAME``; empty: not peered
    network: str = ""
    #: an interactive shell into each running replica (``CustomJob.web_access_uris``)
    enable_web_access: bool = False
    #: the chief container's dashboard through ``web_access_uris``
    enable_dashboard_access: bool = False
    #: names of reserved IP ranges of ``network`` the job's VMs take addresses from
    reserved_ip_ranges: list[str] = dataclasses.field(default_factory=list)
    psc_interface_config: PscInterfaceConfig = dataclasses.field(default_factory=PscInterfaceConfig)


@dataclasses.dataclass
class PoolChange:
    """What one rung of ``placement.hardware`` changes in one worker pool of ``topology``: only the fields given
    (unset: the topology's own). ``nfs_mounts`` and a pool's other settings stay the topology's."""
    replica_count: int | None = None
    machine_type: str | None = None
    accelerator_type: str | None = None
    accelerator_count: int | None = None
    tpu_topology: str | None = None
    disk_spec: DiskSpec | None = None


@dataclasses.dataclass
class Hardware:
    """One rung of the hardware ladder (``placement.hardware``): a change of ``topology`` the job may run on instead,
    tried after the rungs before it (``jobs.rules.ladder``: same model and checkpoint, a strategy of the same family,
    the global batch kept)."""
    #: how the plan and the fall-over name it; empty: its hardware (``8x NVIDIA_H200_141GB on a3-ultragpu-8g``)
    name: str = ""
    #: ``topology.strategy`` on this rung (empty: the topology's), of the topology's family: ``one_device``,
    #: ``mirrored`` and ``multi_worker`` (synchronous all-reduce) | ``parameter_server`` | ``tpu``
    strategy: str = ""
    #: the scheduling strategies of this rung, in order (empty: ``placement.strategies``, else
    #: ``scheduling.strategy``)
    strategies: list[Literal["STANDARD", "SPOT", "FLEX_START"]] = dataclasses.field(default_factory=list)
    chief: PoolChange | None = None
    worker: PoolChange | None = None
    parameter_server: PoolChange | None = None
    evaluator: PoolChange | None = None


@dataclasses.dataclass
class Placement:
    """Where and how Vertex may run the job, in the user's order of preference. ``vtp plan`` checks every option
    (the hardware catalog offers the machines there, the project's quota covers them, the bucket's distance) and
    takes the cheapest that fits; after a capacity failure (a stockout, an expired FLEX_START wait, Spot capacity
    gone) the training step creates the job again with the next option, same ``output.base_dir``, so the trainer
    resumes from its last checkpoint (``jobs.rules.placement``). Empty lists: the submission's region
    (``topology.region`` / ``--region``) and ``scheduling.strategy`` only. ``hardware``: the ladder, more ways to run
    the job after ``topology`` (its first rung), in order of preference (``jobs.rules.ladder``)."""
    regions: list[str] = dataclasses.field(default_factory=list)
    strategies: list[Literal["STANDARD", "SPOT", "FLEX_START"]] = dataclasses.field(default_factory=list)
    hardware: list[Hardware] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Budget:
    """The most the job may cost on Vertex, in US dollars at the price table's list prices (``vtp plan``); 0: no
    bar. A plan above either bar is refused (``--max-cost`` sets ``max_total``), and so is a plan whose price cannot
    be computed under a bar (a budget never fails open: ``jobs.rules.hardware.prices``)."""
    max_per_hour: float = 0.0
    #: the job at its ``scheduling.timeout`` (a study: every trial and the baseline)
    max_total: float = 0.0
    #: your own price file (negotiated or committed-use figures, or those the table lacks), in the form of
    #: ``jobs/rules/hardware/prices.yaml``: its figures win over the table's and the plan names them as yours
    #: (``--prices`` wins over this); relative to the job file
    prices: str = ""
