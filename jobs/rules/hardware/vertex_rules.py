"""The job fields only Vertex acts on, checked before anything is sent: each pool's boot disk and NFS mounts,
the ``vertex`` section (service account, network, reserved IP ranges, Private Service Connect) and
``scheduling.disable_retries``. Forms and ranges as the installed client documents them (``DiskSpec``: pd-ssd,
pd-standard, hyperdisk-balanced; ``worker_spec_utils``: boot disk "within the range of [100, 64000]";
``CustomJobSpec.network``: ``projects/{project}/global/networks/{network}``; ``NfsMount``: a path starting with
``/``, mounted under ``/mnt/nfs/<mount_point>``; ``Scheduling.disable_retries`` "overrides
restart_job_on_worker_restart to false"). Each refusal describes the valid form instead of suggesting a
placeholder value that would itself be refused.
"""
from __future__ import annotations

import ipaddress
import re

from jobs.rules.hardware.catalog import load_catalog
from jobfile import config as config_lib
from jobfile.errors import Problem, problem
from trainers.resource_names import network_problem, service_account_problem

POOL_NAMES = ("chief", "worker", "parameter_server", "evaluator")
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
ATTACHMENT_RE = re.compile(r"^projects/[^/]+/regions/([a-z]+-[a-z]+[0-9]+)/networkAttachments/([a-z]([-a-z0-9]{0,61}"
                           r"[a-z0-9])?)$")
HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def identity_problems(service_account: str, network: str, project: str = "") -> list[Problem]:
    """``--service-account`` and ``--network`` of a command (submit, ``vtp plan``) by their forms
    (``trainers.resource_names``): one problem each that is given and not of its form."""
    out = []
    if service_account and service_account_problem(service_account):
        out.append(problem("--service-account", service_account_problem(service_account),
                           [f"pipeline-runner@{project or '<project id>'}.iam.gserviceaccount.com"]))
    if network and network_problem(network):
        out.append(problem("--network", network_problem(network), ["projects/<project number>/global/networks/<name>"]))
    return out


def _disk_problems(name: str, pool: config_lib.Pool) -> list[Problem]:
    disk, rules, out = pool.disk_spec, load_catalog().boot_disk, []
    field = f"topology.{name}.disk_spec"
    if disk.boot_disk_type and disk.boot_disk_type not in rules["types"]:
        out.append(problem(f"{field}.boot_disk_type", f"{disk.boot_disk_type!r} is not a boot disk type Vertex takes "
                                                      "(empty: Vertex's default, " f"{rules['default']})",
                           rules["types"]))
    elif disk.boot_disk_type:
        out += _disk_machine_problems(f"{field}.boot_disk_type", disk.boot_disk_type, pool.machine_type)
    size = disk.boot_disk_size_gb
    if size and not rules["min_gb"] <= size <= rules["max_gb"]:
        out.append(problem(f"{field}.boot_disk_size_gb", f"{size} is outside {rules['min_gb']}-{rules['max_gb']} GB "
                                                         "(0: Vertex's default, 100)",
                           [rules["min_gb"], 200, 500, rules["max_gb"]]))
    return out


def _disk_machine_problems(field: str, disk_type: str, machine_type: str) -> list[Problem]:
    """A boot disk type the machine cannot use, by the catalog's ``boot_disk.by_machine`` (Compute Engine's machine
    series support): Persistent Disk on a Hyperdisk-only machine (A3 Ultra, A4, A4X), Hyperdisk on a machine with no
    Hyperdisk (N1, E2, C2, A2). A machine type it does not name is not judged."""
    rules = load_catalog().boot_disk.get("by_machine") or {}
    kinds = [(prefix, kind) for kind in ("hyperdisk_only", "persistent_disk_only") for prefix in rules.get(kind, ())
             if machine_type.startswith(prefix)]
    if not kinds:
        return []
    _, kind = max(kinds, key=lambda k: len(k[0]))
    hyperdisk = disk_type.startswith("hyperdisk-")
    if kind == "hyperdisk_only" and not hyperdisk:
        return [problem(field, f"{machine_type} boots from Hyperdisk only, not {disk_type} (Persistent Disk does not "
                               "attach to it)", ["hyperdisk-balanced", "'' (Vertex's default)"])]
    if kind == "persistent_disk_only" and hyperdisk:
        return [problem(field, f"{machine_type} takes no Hyperdisk, so not {disk_type}", ["pd-ssd", "pd-standard",
                                                                                        "'' (Vertex's default)"])]
    return []


def _nfs_problems(name: str, pool: config_lib.Pool) -> list[Problem]:
    out, seen = [], set()
    for i, m in enumerate(pool.nfs_mounts):
        field = f"topology.{name}.nfs_mounts[{i}]"
        try:
            ipaddress.ip_address(m.server)
            server_ok = True
        except ValueError:
            server_ok = bool(HOST_RE.fullmatch(m.server)) and not m.server.replace(".", "").isdigit()
        if not server_ok:
            out.append(problem(f"{field}.server", f"{m.server!r} is not the NFS server's IP address (or host name)",
                               ["an address such as 10.0.0.2 (the Filestore instance's IP)"]))
        if not m.path.startswith("/"):
            out.append(problem(f"{field}.path", f"{m.path!r}: the exported path starts with '/'",
                               ["/<the share's export path>"]))
        if not NAME_RE.fullmatch(m.mount_point.replace("_", "-")):
            out.append(problem(f"{field}.mount_point", f"{m.mount_point!r} is not a folder name: the share is mounted "
                                                       "at /mnt/nfs/<mount_point>", ["<a lower-case name, e.g. data>"]))
        elif m.mount_point in seen:
            out.append(problem(f"{field}.mount_point", f"{m.mount_point!r} is mounted twice in this pool",
                               ["<another folder name>"]))
        seen.add(m.mount_point)
    return out


def peering_problems(field: str, network: str, cfg: config_lib.JobConfig) -> list[Problem]:
    """VPC Network Peering (``vertex.network`` or ``--network``) with accelerators Vertex documents it does not
    peer (catalog ``vpc_peering``: H100 Mega, H200, B200): one error; a PSC-I network attachment is the way."""
    if not network:
        return []
    barred = set(load_catalog().raw.get("vpc_peering", {}).get("not_with_accelerators", ()))
    used = sorted({p.accelerator_type for p in cfg.topology.pools() if p.replica_count > 0 and p.accelerator_count > 0
                   and p.accelerator_type in barred})
    if not used:
        return []
    return [problem(field, f"Vertex training does not peer a VPC network with {', '.join(used)}: reach your network "
                           "through a Private Service Connect interface instead (and leave the network unset)",
                    [f"vertex.psc_interface_config.network_attachment: projects/<project>/regions/"
                     f"{cfg.topology.region}/networkAttachments/<name>"])]


def spot_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """``SPOT`` (``scheduling.strategy`` or one of ``placement.strategies``) with a TPU Pod: a multi-host TPU VM
    slice or a ``TPU_V2_POD``/``TPU_V3_POD`` (catalog ``spot``: Vertex does not run Spot VMs with TPU Pods)."""
    cat = load_catalog()
    if cat.raw.get("spot", {}).get("tpu_pods", True):
        return []
    chief = cfg.topology.chief
    m = cat.machines.get(chief.machine_type)
    if m and m.tpu == "vm":
        hosts = m.hosts(chief.tpu_topology)
        pod = f"{chief.machine_type} {chief.tpu_topology} is a slice of {hosts} hosts" if hosts > 1 else ""
        single = ", ".join(m.single_host_topologies) or m.topologies[0]
        valid = ["STANDARD", f"topology.chief.tpu_topology: {single} (one host)"]
    else:
        pod = f"{chief.accelerator_type} is a TPU Pod" if chief.accelerator_type.endswith("_POD") else ""
        valid = ["STANDARD", "topology.chief.accelerator_type: TPU_V3 (one TPU device)"]
    if not pod:
        return []
    out = []
    if cfg.scheduling.strategy == "SPOT":
        out.append(problem("scheduling.strategy", f"Vertex runs no Spot VMs with TPU Pods, and {pod}", valid))
    for i, s in enumerate(cfg.placement.strategies):
        if s == "SPOT":
            out.append(problem(f"placement.strategies[{i}]", f"Vertex runs no Spot VMs with TPU Pods, and {pod}",
                               valid))
    return out


def vertex_problems(cfg: config_lib.JobConfig) -> tuple[list[Problem], list[Problem]]:
    """(errors, warnings) of the fields only Vertex acts on (see the module doc)."""
    errors: list[Problem] = []
    warnings: list[Problem] = []
    pools = [(n, p) for n, p in zip(POOL_NAMES, cfg.topology.pools()) if p.replica_count > 0]
    for name, pool in zip(POOL_NAMES, cfg.topology.pools()):
        if pool.replica_count <= 0 and (pool.disk_spec.boot_disk_type or pool.disk_spec.boot_disk_size_gb
                                        or pool.nfs_mounts):
            warnings.append(problem(f"topology.{name}.disk_spec", f"topology.{name} has no replicas: its disk_spec and "
                                                                  "nfs_mounts are not sent", []))
    for name, pool in pools:
        errors += _disk_problems(name, pool) + _nfs_problems(name, pool)
    v = cfg.vertex
    if v.service_account and service_account_problem(v.service_account):
        errors.append(problem("vertex.service_account", service_account_problem(v.service_account),
                              ["<name>@<project id>.iam.gserviceaccount.com"]))
    if v.network and network_problem(v.network):
        errors.append(problem("vertex.network", network_problem(v.network),
                              ["projects/<project number>/global/networks/<network name>"]))
    elif v.network:
        errors += peering_problems("vertex.network", v.network, cfg)
    errors += spot_problems(cfg)
    for i, r in enumerate(v.reserved_ip_ranges):
        if not NAME_RE.fullmatch(r):
            errors.append(problem(f"vertex.reserved_ip_ranges[{i}]", f"{r!r} is not the name of a reserved IP range "
                                                                      "(lower-case letters, digits and '-')",
                                  ["<the range's name, e.g. vertex-ai-range>"]))
    if v.reserved_ip_ranges and not v.network:
        warnings.append(problem("vertex.reserved_ip_ranges", "are ranges of the peered VPC network: Vertex uses them "
                                                             "only with vertex.network (or run.py --network)", []))
    if any(p.nfs_mounts for _, p in pools) and not v.network and not v.psc_interface_config.network_attachment:
        warnings.append(problem("vertex.network", "nfs_mounts reach the NFS server through the job's VPC: peer the "
                                                  "job with the server's network (vertex.network or run.py --network)",
                                []))
    attachment = v.psc_interface_config.network_attachment
    if attachment:
        m = ATTACHMENT_RE.fullmatch(attachment)
        if not m and not NAME_RE.fullmatch(attachment):
            errors.append(problem("vertex.psc_interface_config.network_attachment",
                                  f"{attachment!r} is neither a network attachment's name nor its full name",
                                  [f"projects/<project>/regions/{cfg.topology.region}/networkAttachments/<name>"]))
        elif m and m.group(1) != cfg.topology.region:
            errors.append(problem("vertex.psc_interface_config.network_attachment",
                                  f"{attachment} is in {m.group(1)}, the job runs in {cfg.topology.region}: a network "
                                  "attachment serves its own region", [f"projects/<project>/regions/"
                                                                       f"{cfg.topology.region}/networkAttachments/"
                                                                       f"{m.group(2)}"]))
    s = cfg.scheduling
    if s.disable_retries and s.restart_job_on_worker_restart:
        warnings.append(problem("scheduling.restart_job_on_worker_restart", "is overridden by scheduling.disable_retries "
                                                                            "(Vertex then restarts nothing); keep one",
                                ["false"]))
    if s.disable_retries and s.max_restarts:
        warnings.append(problem("scheduling.max_restarts", f"{s.max_restarts} is overridden by "
                                                           "scheduling.disable_retries (the local launcher then "
                                                           "restarts nothing, as Vertex retries nothing); keep one",
                                ["0"]))
    return errors, warnings
