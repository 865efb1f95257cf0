"""Today's Vertex (issue 33): every AcceleratorType of the installed client is known, every field of the job the
client knows is reachable or has a reason, each family validates, unknown is a warning (strict: an error), near
misses stay errors, multi-host TPU slices, the new job fields validated and placed where the API names them."""
from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1
from google.protobuf import json_format

from jobs.rules import job_spec, validate
from jobs.rules.hardware import api_fields
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.hardware.rules import check_job, num_replicas
from jobfile import config as config_lib

CAT = load_catalog()
IMAGE = "us-central1-docker.pkg.dev/proj-1/training/tf-trainer:ctx-1@sha256:" + "a" * 64


def one(machine, accelerator="", count=0, region="us-central1", **extra):
    pool = {"replica_count": 1, "machine_type": machine, "accelerator_type": accelerator, "accelerator_count": count,
            **extra}
    return {"topology": {"strategy": "tpu" if machine.startswith(("ct", "cloud-tpu")) else
                         ("mirrored" if count > 1 else "one_device"), "region": region, "chief": pool}}


def fields(problems):
    return [p.field for p in problems]


# ---- the enum walk -------------------------------------------------------------------------------
def test_every_accelerator_type_of_the_installed_client_is_in_the_catalog():
    unknown = [a.name for a in aiplatform_v1.AcceleratorType if a.name != "ACCELERATOR_TYPE_UNSPECIFIED"
               and a.name not in CAT.accelerator_types]
    assert unknown == [], f"new AcceleratorType values: add them to jobs/rules/hardware/catalog.yaml: {unknown}"


def test_legacy_and_retired_gpus_advise_only_what_their_line_lists_as_valid_choices():
    """The P100 warning once advised NVIDIA_TESLA_V100 and then listed 'valid choices: NVIDIA_TESLA_T4, NVIDIA_L4'
    (issue 55): what a note names and what the line lists are one list now (``use_instead``), and P100's end of
    support (2026-09-15, Vertex's pages) is said, reached or not."""
    import re

    for gpu in (g for g in CAT.gpus.values() if g.status in ("legacy", "retired")):
        named = set(re.findall(r"NVIDIA_\w+", gpu.advice()[len(gpu.name):]))
        assert named <= set(gpu.use_instead), (gpu.name, gpu.advice())
        assert set(gpu.use_instead) <= set(CAT.gpus) and not any(CAT.gpus[u].status != "current" for u in gpu.use_instead)
    p100 = CAT.gpus["NVIDIA_TESLA_P100"]
    assert p100.end_of_support == "2026-09-15"
    assert "reaches end of support on Vertex AI on 2026-09-15" in p100.advice("2026-09-14")
    assert "reached end of support on Vertex AI on 2026-09-15, so Vertex may refuse the job" in p100.advice("2026-09-15")
    cfg = config_lib.load("gpu-1x4", ["topology.chief.accelerator_type=NVIDIA_TESLA_P100"])
    report = validate.validate(cfg, check_data=False)
    [line] = [str(w) for w in report.warnings if "P100" in str(w)]
    assert line.startswith("topology.chief.accelerator_type: NVIDIA_TESLA_P100 is legacy: P100 is an older generation; "
                           "it reache")
    assert line.endswith("; use NVIDIA_TESLA_T4 or NVIDIA_L4; valid choices: NVIDIA_TESLA_T4, NVIDIA_L4"), line
    assert "V100" not in line and not [e for e in report.errors if "P100" in str(e)]


def test_retired_k80_is_refused_with_the_reason_by_the_job_validation():
    cfg = config_lib.load("gpu-1x4", ["topology.chief.accelerator_type=NVIDIA_TESLA_K80"])
    errors = [str(e) for e in validate.validate(cfg, check_data=False).errors]
    [line] = [e for e in errors if "retired" in e]
    assert line.startswith("topology.chief.accelerator_type: NVIDIA_TESLA_K80 is retired: K80 reached end of support")
    assert "NVIDIA_TESLA_T4" in line


# ---- the field walk -----------------------------------------------------------------------------
def test_every_field_of_the_job_the_client_knows_is_reachable_or_has_a_reason():
    walked = {f"{name}.{f.name}" for name in api_fields.MESSAGES
              for f in getattr(aiplatform_v1, name).pb().DESCRIPTOR.fields}
    missing = sorted(walked - set(api_fields.FIELDS))
    assert missing == [], f"fields of the installed client with no decision (jobs/rules/hardware/api_fields.py): {missing}"
    assert sorted(set(api_fields.FIELDS) - walked) == []  # nothing decided for a field the client does not have
    assert all(why for why in api_fields.unreachable().values())


def _every_reachable_field_set() -> config_lib.JobConfig:
    return config_lib.load("multiworker", [
        f"container.image_uri={IMAGE}", "output.base_dir=gs://team-bucket/runs/x",
        "output.tensorboard=projects/proj-1/locations/us-central1/tensorboards/123",
        "topology.chief.disk_spec={boot_disk_type: pd-ssd, boot_disk_size_gb: 200}",
        "topology.worker.disk_spec={boot_disk_type: pd-standard, boot_disk_size_gb: 500}",
        "topology.worker.nfs_mounts=[{server: 10.0.0.2, path: /share, mount_point: data}]",
        "vertex.service_account=trainer@proj-1.iam.gserviceaccount.com",
        "vertex.network=projects/123456/global/networks/vpc-1", "vertex.enable_web_access=true",
        "vertex.enable_dashboard_access=true", "vertex.reserved_ip_ranges=[vertex-range]",
        "vertex.psc_interface_config.network_attachment=projects/proj-1/regions/us-central1/networkAttachments/att-1",
        "scheduling.disable_retries=true", "scheduling.restart_job_on_worker_restart=false",
        "scheduling.strategy=STANDARD", "scheduling.persistent_resource_id=pool-1", "topology.chief.tpu_topology=",
        "scheduling.reservation_affinity={reservation_affinity_type: ANY_RESERVATION}"])


def test_every_reachable_field_is_placed_where_the_api_names_it():
    cfg = _every_reachable_field_set()
    report = validate.validate(cfg, check_data=False)
    assert report.errors == [], report.errors
    spec = json_format.ParseDict(job_spec.custom_job_spec(cfg), aiplatform_v1.CustomJobSpec.pb()())  # strict
    chief, worker = spec.worker_pool_specs
    set_here = {"CustomJobSpec." + f.name for f, _ in spec.ListFields()}
    set_here |= {"WorkerPoolSpec." + f.name for pool in (chief, worker) for f, _ in pool.ListFields()}
    set_here |= {"MachineSpec." + f.name for pool in (chief, worker) for f, _ in pool.machine_spec.ListFields()}
    set_here |= {"Scheduling." + f.name for f, _ in spec.scheduling.ListFields()}
    set_here |= {"DiskSpec." + f.name for f, _ in worker.disk_spec.ListFields()}
    set_here |= {"NfsMount." + f.name for f, _ in worker.nfs_mounts[0].ListFields()}
    set_here |= {"PscInterfaceConfig." + f.name for f, _ in spec.psc_interface_config.ListFields()}
    # not set by this job: a GPU job's TPU topology, a boolean left false, FLEX_START's wait (STANDARD here)
    not_set = sorted(set(api_fields.reachable()) - set_here)
    assert not_set == ["MachineSpec.tpu_topology", "Scheduling.max_wait_duration",
                       "Scheduling.restart_job_on_worker_restart"], not_set
    assert (worker.disk_spec.boot_disk_type, worker.disk_spec.boot_disk_size_gb) == ("pd-standard", 500)
    assert (chief.disk_spec.boot_disk_type, chief.disk_spec.boot_disk_size_gb) == ("pd-ssd", 200)
    assert [(m.server, m.path, m.mount_point) for m in worker.nfs_mounts] == [("10.0.0.2", "/share", "data")]
    assert not chief.nfs_mounts
    assert spec.enable_web_access and spec.enable_dashboard_access and spec.scheduling.disable_retries
    assert spec.service_account == "trainer@proj-1.iam.gserviceaccount.com"
    assert list(spec.reserved_ip_ranges) == ["vertex-range"]
    # the submission's flags win over the file
    flagged = job_spec.custom_job_spec(cfg, service_account="ci@proj-2.iam.gserviceaccount.com",
                                       network="projects/9/global/networks/other")
    assert (flagged["service_account"], flagged["network"]) == ("ci@proj-2.iam.gserviceaccount.com",
                                                                "projects/9/global/networks/other")
    parts = job_spec.parts(job_spec.custom_job_spec(cfg))
    assert job_spec.job_spec(**parts) == job_spec.custom_job_spec(cfg)  # the component's inputs rebuild it


@pytest.mark.parametrize("sets,expected", [
    (["topology.chief.disk_spec.boot_disk_type=pd-balanced"],
     "topology.chief.disk_spec.boot_disk_type: 'pd-balanced' is not a boot disk type Vertex takes"),
    (["topology.chief.disk_spec.boot_disk_size_gb=50"], "topology.chief.disk_spec.boot_disk_size_gb: 50 is outside "
                                                        "100-64000 GB"),
    (["topology.chief.disk_spec.boot_disk_size_gb=70000"], "is outside 100-64000 GB"),
    (["topology.worker.nfs_mounts=[{server: 10.0.0.2, path: share, mount_point: data}]"],
     "topology.worker.nfs_mounts[0].path: 'share': the exported path starts with '/'"),
    (["topology.worker.nfs_mounts=[{server: 'bad server', path: /s, mount_point: data}]"],
     "topology.worker.nfs_mounts[0].server: 'bad server' is not the NFS server's IP address"),
    (["vertex.service_account=trainer"], "vertex.service_account: 'trainer' is not a service account's email; valid "
                                         "choices: <name>@<project id>.iam.gserviceaccount.com"),
    (["vertex.network=vpc-1"], "vertex.network: 'vpc-1' is not a VPC network's full name"),
    # the submission's --network and the file's vertex.network are one rule: the project number, not its id
    (["vertex.network=projects/my-proj/global/networks/vpc"], "vertex.network: 'projects/my-proj/global/networks/vpc' "
                                                              "is not a VPC network's full name (Vertex wants the "
                                                              "project number, not its id)"),
    (["vertex.reserved_ip_ranges=[Range_1]"], "vertex.reserved_ip_ranges[0]: 'Range_1' is not the name"),
    (["vertex.psc_interface_config.network_attachment=projects/p/regions/europe-west4/networkAttachments/a"],
     "is in europe-west4, the job runs in us-central1: a network attachment serves its own region"),
])
def test_each_new_field_rule_is_one_line(sets, expected):
    cfg = config_lib.load("multiworker", [f"container.image_uri={IMAGE}", *sets])
    errors = [str(e) for e in validate.validate(cfg, check_data=False).errors]
    assert any(expected in e for e in errors), errors


def test_new_field_warnings():
    cfg = config_lib.load("multiworker", [f"container.image_uri={IMAGE}", "scheduling.disable_retries=true",
                                          "vertex.reserved_ip_ranges=[r1]",
                                          "topology.worker.nfs_mounts=[{server: 10.0.0.2, path: /s, mount_point: d}]"])
    report = validate.validate(cfg, check_data=False)
    assert report.errors == []
    got = fields(report.warnings)
    assert {"scheduling.restart_job_on_worker_restart", "vertex.reserved_ip_ranges", "vertex.network"} <= set(got)


def test_disable_retries_means_no_local_restart():
    assert job_spec.local_max_restarts(config_lib.load("local")) == 2
    assert job_spec.local_max_restarts(config_lib.load("local", ["scheduling.disable_retries=true"])) == 0


# ---- unknown, near miss, strict -------------------------------------------------------------------
@pytest.mark.parametrize("machine", ["e2-standard-8", "n2-standard-8", "c2-standard-16", "m1-ultramem-40",
                                     "n2-highmem-32", "e2-highcpu-16"])
def test_cpu_families_of_today_are_known_and_valid(machine):
    report = check_job(one(machine))
    assert report.ok and report.warnings == [], (report.errors, report.warnings)
    assert CAT.machines[machine].vcpus and CAT.machines[machine].memory_gb


@pytest.mark.parametrize("machine,gpu,count", [
    ("a3-highgpu-1g", "NVIDIA_H100_80GB", 1), ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
    ("a3-megagpu-8g", "NVIDIA_H100_MEGA_80GB", 8), ("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8),
    ("a4-highgpu-8g", "NVIDIA_B200", 8), ("a4x-highgpu-4g", "NVIDIA_GB200", 4), ("a2-ultragpu-2g", "NVIDIA_A100_80GB", 2),
    ("g2-standard-24", "NVIDIA_L4", 2), ("g4-standard-96", "NVIDIA_RTX_PRO_6000", 2),
])
def test_gpu_families_of_today_take_their_built_in_gpus(machine, gpu, count):
    report = check_job(one(machine, gpu, count))
    assert report.ok, report.errors
    assert not check_job(one(machine)).ok  # built in: the GPUs must be named
    wrong = check_job(one(machine, gpu, count * 2 if count < 8 else 4))
    assert fields(wrong.errors) == ["topology.chief.accelerator_count"]
    # another GPU on it: the reason is the GPUs built in, not what the other GPU would serve
    other = check_job(one(machine, "NVIDIA_TESLA_T4", 4))
    assert [str(e) for e in other.errors] == [
        f"topology.chief.accelerator_type: {machine} cannot take NVIDIA_TESLA_T4 ({machine} has {count} {gpu} built "
        f"in); valid choices: {gpu}"]


def test_h200_and_b200_can_pass_flex_start_now():
    cfg = config_lib.load("local", [f"container.image_uri={IMAGE}", "topology.strategy=mirrored",
                                    "topology.worker.replica_count=0", "topology.chief.machine_type=a3-ultragpu-8g",
                                    "topology.chief.accelerator_type=NVIDIA_H200_141GB",
                                    "topology.chief.accelerator_count=8", "scheduling.strategy=FLEX_START",
                                    "training.global_batch_size=0"])
    assert validate.validate(cfg, check_data=False).errors == []


def test_a_well_formed_unknown_machine_type_is_one_warning_and_the_job_goes_on():
    report = check_job(one("a5-highgpu-8g"))
    assert report.ok
    [w] = report.warnings
    assert w.field == "topology.chief.machine_type"
    assert "'a5-highgpu-8g' is not in the hardware catalog of 2026-11-25" in w.message and "Vertex decides" in w.message
    strict = check_job(one("a5-highgpu-8g"), strict=True)
    assert fields(strict.errors) == ["topology.chief.machine_type"] and strict.warnings == []
    in_file = check_job({**one("a5-highgpu-8g"), "validation": {"strict": True}})
    assert not in_file.ok


def test_a_family_vertex_does_not_list_says_so():
    [w] = check_job(one("n2d-standard-8")).warnings
    assert "n2d is a Compute Engine machine series that Vertex's list of training machine types does not name" in w.message


@pytest.mark.parametrize("machine,suggested", [("n1-standrd-8", "n1-standard-8"), ("e2-stadnard-8", "e2-standard-8"),
                                               ("N1-STANDARD-8", "n1-standard-8"), ("n1-standard8", "n1-standard-8")])
def test_a_near_miss_stays_an_error_with_did_you_mean(machine, suggested):
    report = check_job(one(machine))
    [e] = report.errors
    assert e.field == "topology.chief.machine_type" and f"did you mean {suggested}?" in e.message
    assert e.valid[0] == suggested


def test_accelerators_new_generation_warns_typo_errs_garbage_errs():
    new = check_job(one("n1-standard-8", "NVIDIA_B300", 1))
    assert new.ok and fields(new.warnings) == ["topology.chief.accelerator_type"]
    assert "nor does the installed google-cloud-aiplatform" in new.warnings[0].message
    [typo] = check_job(one("n1-standard-8", "NVIDA_L4", 1)).errors
    assert "did you mean NVIDIA_L4?" in typo.message
    [garbage] = check_job(one("n1-standard-8", "gpu please", 1)).errors
    assert "is not an accelerator type name" in garbage.message
    [malformed] = check_job(one("big machine")).errors
    assert "is not a machine type name (SERIES-CLASS-SIZE" in malformed.message


def test_a_gpu_without_region_data_is_a_warning():
    report = check_job(one("a3-ultragpu-8g", "NVIDIA_H200_141GB", 8, region="us-east5"))
    assert report.ok
    assert any(w.field == "topology.region" and "NVIDIA_H200_141GB" in w.message for w in report.warnings)


# ---- TPU VM slices --------------------------------------------------------------------------------
def test_multi_host_v5e_slice_is_one_pool_of_one_replica_with_the_whole_topology():
    job = one("ct5lp-hightpu-4t", tpu_topology="4x4")
    report = check_job(job)
    assert report.ok, report.errors
    m = CAT.machines["ct5lp-hightpu-4t"]
    assert (m.hosts("4x4"), m.hosts("2x2"), m.hosts("16x16")) == (4, 1, 64)
    assert num_replicas(job) == 16
    [pool, *rest] = job_spec.worker_pool_specs(job, "img")
    assert rest == [{}, {}, {}] and pool["replica_count"] == 1
    assert pool["machine_spec"] == {"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "4x4"}
    from jobs.rules.hardware.today import describe_slice

    assert describe_slice("ct5lp-hightpu-4t", "4x4") == "ct5lp-hightpu-4t 4x4: 16 chips on 4 hosts of 4"


def test_v5p_slices_and_their_region_warning():
    job = one("ct5p-hightpu-4t", tpu_topology="2x2x2")
    report = check_job(job)
    assert report.ok, report.errors
    assert CAT.machines["ct5p-hightpu-4t"].hosts("2x2x2") == 2 and num_replicas(job) == 8
    assert any("TPU v5p" in w.message for w in report.warnings)  # no region data
    [e] = check_job(one("ct5p-hightpu-4t", tpu_topology="2x3x2")).errors
    assert e.field == "topology.chief.tpu_topology" and "2x2x1 on one host" in e.message


def test_a_tpu_vm_needs_its_topology():
    [e] = check_job(one("ct5lp-hightpu-4t")).errors
    assert e.field == "topology.chief.tpu_topology" and "2x2 for one host" in e.message


def test_v6e_does_not_run_tensorflow_one_line():
    [e] = check_job(one("ct6e-standard-4t", tpu_topology="2x2")).errors
    assert e.field == "topology.chief.machine_type" and "does not run TensorFlow" in e.message
    assert "JAX and PyTorch" in e.message
    user = {**one("ct6e-standard-4t", tpu_topology="4x4"), "trainer": {"module": "trainer.task"}}
    report = check_job(user)
    assert report.ok and any("fine if your trainer is JAX or PyTorch" in w.message for w in report.warnings)


def test_tpu_v4_is_known_but_unconfirmed_for_vertex_training():
    report = check_job(one("ct4p-hightpu-4t", tpu_topology="2x2x1"))
    assert report.ok
    assert any("does not confirm Vertex offers it" in w.message for w in report.warnings)


# ---- vtp hardware, --strict ---------------------------------------------------------------------------
def test_vtp_hardware_lists_what_the_catalog_knows_with_date_and_sources(capsys):
    from pipelines.run import main

    assert main(["hardware", "--accelerator", "NVIDIA_B200", "--sources"]) == 0
    out = capsys.readouterr().out
    assert "hardware catalog of 2026-11-25" in out and "a4-highgpu-8g" in out and "8 x NVIDIA_B200" in out
    assert "n1-standard-8" not in out  # filtered to what carries B200
    assert "https://cloud.google.com/vertex-ai/docs/training/configure-compute" in out and "read 2026-11-25" in out
    assert main(["hardware", "--region", "europe-north1"]) == 0
    assert "europe-north1: the catalog has no region data for it" in capsys.readouterr().out
    assert main(["hardware", "--region", "us-west2", "--family", "n1"]) == 0
    out = capsys.readouterr().out
    assert "us-west2 offers (as the catalog knows): NVIDIA_TESLA_P4, NVIDIA_TESLA_T4" in out
    assert "NVIDIA_TESLA_V100 (current)" not in out  # not offered there
    assert main(["hardware", "--family", "v6e"]) == 0
    assert "TensorFlow: no." in capsys.readouterr().out
    assert main(["hardware", "--accelerator", "NVIDIA_H200"]) == 2
    assert "NVIDIA_H200_141GB" in capsys.readouterr().err
    assert main(["validate", "--list", "--family", "e2"]) == 0
    assert "e2-highcpu-32" in capsys.readouterr().out


def test_validate_strict_flag_refuses_unknowns(capsys):
    from jobs.commands.validate_cli import validate_main

    sets = ["--set", "topology.chief.machine_type=x7-standard-8", "--set", "topology.worker.replica_count=0",
            "--set", "topology.strategy=one_device"]
    assert validate_main(["local", *sets]) == 0
    assert "warning: topology.chief.machine_type: machine type 'x7-standard-8'" in capsys.readouterr().out
    assert validate_main(["local", "--strict", *sets]) == 2
    [line] = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert line.endswith("refused under validation.strict (--strict)")
