"""Each hardware rule on its own, check_job (all problems at once), num_replicas, warnings, pools."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from jobfile.errors import ConfigError
from jobs.rules.hardware import rules
from jobs.rules.hardware.advice import check_warnings
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.job_spec import worker_pool_specs
from jobs.rules.hardware.rules import (Report, check_accelerator_types, check_batch, check_fields, check_gpu_count,
                                 check_gpu_resources, check_job, check_machine_types, check_regions, check_same_gpus,
                                 check_strategy, check_tpu_accelerators, check_tpu_pools, check_tpu_version,
                                 check_zones, num_replicas)
from jobs.rules.hardware.shared import infer_strategy

DEFAULT_JOB = {
    "name": "flowers-local",
    "data": {"source": "synthetic", "path": "", "image_size": 64},
    "model": {"name": "small_cnn"},
    "training": {"epochs": 2, "steps": 0, "per_replica_batch_size": 8, "global_batch_size": 0,
                 "optimizer": "adam", "learning_rate": 0.001, "seed": 42, "deterministic": True,
                 "mixed_precision": False},
    "checkpoint": {"every_steps": 20, "every_seconds": 0, "keep": 3},
    "topology": {
        "strategy": "multi_worker", "region": "us-central1", "tpu_tf_version": "",
        "chief": {"replica_count": 1, "machine_type": "n1-standard-4", "accelerator_type": "",
                  "accelerator_count": 0, "tpu_topology": ""},
        "worker": {"replica_count": 1, "machine_type": "n1-standard-4", "accelerator_type": "",
                   "accelerator_count": 0, "tpu_topology": ""},
        "parameter_server": {"replica_count": 0, "machine_type": "", "accelerator_type": "",
                             "accelerator_count": 0, "tpu_topology": ""},
        "evaluator": {"replica_count": 0, "machine_type": "", "accelerator_type": "",
                      "accelerator_count": 0, "tpu_topology": ""},
    },
    "container": {"image_uri": "", "command": ["python", "-m", "trainers.task"], "args": []},
    "output": {"base_dir": "./runs/local"},
    "scheduling": {"strategy": "STANDARD", "restart_job_on_worker_restart": False, "timeout": "86400s",
                   "max_restarts": 0},
}


def job(strategy="multi_worker", region="us-central1", **pools):
    """DEFAULT_JOB with topology overrides: job(chief={...}, worker={...})."""
    out = copy.deepcopy(DEFAULT_JOB)
    out["topology"]["strategy"], out["topology"]["region"] = strategy, region
    for name, values in pools.items():
        if name in ("tpu_tf_version",):
            out["topology"][name] = values
        else:
            out["topology"][name].update(values)
    return out


def gpu(machine, accelerator, count, replicas=1):
    return {"replica_count": replicas, "machine_type": machine, "accelerator_type": accelerator,
            "accelerator_count": count}


NO_WORKERS = {"replica_count": 0}
TPU_V3_8 = gpu("cloud-tpu", "TPU_V3", 8)


def fields(problems):
    return [p.field for p in problems]


def test_default_config_is_valid():
    report = check_job(DEFAULT_JOB)
    assert isinstance(report, Report) and report.ok and report.errors == [] and report.warnings == []
    # no topology at all: the schema's (jobfile.config.Topology), as the one parser fills it and `vtp validate` judges
    # a job file without one: multi_worker with only the chief, one error naming the remedy (no topology of its own)
    [alone] = check_job({}).errors
    assert alone.field == "topology.strategy" and "topology.worker.replica_count" in alone.message


# ---- check_fields -------------------------------------------------------------------------------
def test_fields_wrong_types_and_values():
    bad = job(chief={"accelerator_count": "two"}, worker={"replica_count": -1})
    problems = check_fields(bad)
    assert fields(problems) == ["topology.chief.accelerator_count", "topology.worker.replica_count"]
    assert "'two'" in problems[0].message


def test_fields_accepts_integral_floats_from_kfp():
    assert check_job(job(worker={"replica_count": 2.0})).ok


def test_fields_chief_is_one_replica():
    [p] = check_fields(job(chief={"replica_count": 3}))
    assert p.field == "topology.chief.replica_count" and p.valid == ("1",)


def test_fields_unknown_strategy_region_and_keys():
    problems = check_fields(job(strategy="multiworker", region="US Central"))
    # the one parser's verdict (jobfile.config.read): the strategy is one of the schema's, with a did-you-mean
    assert problems[0].field == "topology.strategy" and "did you mean 'multi_worker'" in problems[0].message
    assert "multi_worker" in problems[0].valid
    assert problems[1].field == "topology.region"
    [typo] = check_fields(job(chief={"acelerator_type": "NVIDIA_TESLA_T4"}))
    assert typo.field == "topology.chief.acelerator_type" and "did you mean 'accelerator_type'" in typo.message


def test_fields_accelerator_pairing():
    [p] = check_fields(job(strategy="one_device", worker=NO_WORKERS, chief=gpu("n1-standard-8", "", 2)))
    assert p.field == "topology.chief.accelerator_type" and "NVIDIA_TESLA_T4" in p.valid
    [p] = check_fields(job(strategy="one_device", worker=NO_WORKERS, chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 0)))
    assert p.field == "topology.chief.accelerator_count"


# ---- machine and accelerator names --------------------------------------------------------------
def test_machine_type_suggestions():
    [p] = check_machine_types(job(chief={"machine_type": "n1-standrd-8"}))
    assert p.field == "topology.chief.machine_type" and p.valid[0] == "n1-standard-8"
    [p] = check_machine_types(job(worker={"machine_type": "complex_model_m_gpu"}))
    assert "n1-standard-16 with 4 NVIDIA_TESLA_K80" in p.message and p.valid == ("n1-standard-16",)
    [p] = check_machine_types(job(worker={"machine_type": ""}))
    assert p.field == "topology.worker.machine_type"


def test_accelerator_type_suggestions():
    [p] = check_accelerator_types(job(chief=gpu("n1-standard-8", "nvidia-tesla-t4", 1)))
    assert p.field == "topology.chief.accelerator_type" and p.valid == ("NVIDIA_TESLA_T4",)


# ---- GPU count / resources ----------------------------------------------------------------------
def test_gpu_count_brief_example_on_worker():
    bad = job(chief=gpu("n1-standard-32", "NVIDIA_TESLA_V100", 4), worker=gpu("n1-standard-32", "NVIDIA_TESLA_V100", 2))
    [p] = check_gpu_count(bad)
    assert p.field == "topology.worker.accelerator_count"
    assert p.message.startswith("n1-standard-32 takes 4 or 8 NVIDIA_TESLA_V100, not 2")
    assert p.valid == ("4", "8")


def test_gpu_count_built_in_and_foreign_gpus():
    [p] = check_gpu_count(job(strategy="one_device", worker=NO_WORKERS, chief=gpu("a2-highgpu-1g", "", 0)))
    assert p.field == "topology.chief.accelerator_type" and p.valid == ("NVIDIA_TESLA_A100",)
    [p] = check_gpu_count(job(strategy="mirrored", worker=NO_WORKERS, chief=gpu("a2-highgpu-2g", "NVIDIA_TESLA_T4", 2)))
    assert "2 NVIDIA_TESLA_A100 built in" in p.message
    [p] = check_gpu_count(job(strategy="one_device", worker=NO_WORKERS, chief=gpu("n1-standard-8", "NVIDIA_TESLA_A100", 1)))
    assert "a2-highgpu-1g" in p.message and "NVIDIA_TESLA_T4" in p.valid
    [p] = check_gpu_count(job(strategy="mirrored", worker=NO_WORKERS, chief=gpu("n1-standard-64", "NVIDIA_TESLA_K80", 8)))
    assert "208 GB" in p.message and "NVIDIA_TESLA_K80" not in p.valid
    ok = job(strategy="mirrored", worker=NO_WORKERS, chief=gpu("g2-standard-48", "NVIDIA_L4", 4))
    assert check_job(ok).ok, check_job(ok).errors


def test_gpu_resources_for_machine_types_absent_from_the_table(monkeypatch):
    cat = load_catalog()
    t4 = dataclasses.replace(cat.gpus["NVIDIA_TESLA_T4"], per_gpu_vcpus=1.0)
    small = dataclasses.replace(cat, gpus={**cat.gpus, "NVIDIA_TESLA_T4": t4})
    monkeypatch.setattr(rules, "load_catalog", lambda: small)
    bad = job(strategy="one_device", worker=NO_WORKERS, chief=gpu("n1-standard-2", "NVIDIA_TESLA_T4", 1))
    [p] = check_gpu_resources(bad)
    assert p.field == "topology.chief.accelerator_count"
    assert "1 NVIDIA_TESLA_T4 serve at most 1 vCPUs; n1-standard-2 has 2" in p.message
    assert p.valid == ("2", "4")
    # table machine types are never judged by the resource rule
    assert check_gpu_resources(job(strategy="one_device", worker=NO_WORKERS,
                                   chief=gpu("n1-standard-16", "NVIDIA_TESLA_T4", 1))) == []


# ---- regions and zones --------------------------------------------------------------------------
def test_region_without_gpus_and_without_that_gpu():
    # a region the catalog has no GPU data for: a warning naming the catalog's date, not a refusal (issue 33)
    no_data = job(strategy="one_device", region="europe-north1", worker=NO_WORKERS,
                  chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1))
    assert check_regions(no_data) == []
    report = check_job(no_data)
    assert report.ok
    [w] = [w for w in report.warnings if w.field == "topology.region"]
    assert "europe-north1" in w.message and load_catalog().date in w.message and "Vertex decides" in w.message
    assert not check_job(no_data, strict=True).ok
    [p] = check_regions(job(strategy="one_device", region="us-west2", worker=NO_WORKERS,
                            chief=gpu("n1-standard-8", "NVIDIA_TESLA_V100", 1)))
    assert "does not offer NVIDIA_TESLA_V100" in p.message and "us-central1" in p.valid
    assert check_regions(job(region="europe-north1")) == []  # CPU-only: any region


def test_tpu_regions():
    [p] = check_regions(job(strategy="tpu", region="us-east1", worker=NO_WORKERS, chief=TPU_V3_8))
    assert p.field == "topology.region" and p.valid == ("us-central1", "europe-west4")
    assert check_regions(job(strategy="tpu", region="europe-west4", worker=NO_WORKERS, chief=TPU_V3_8)) == []
    [p] = check_regions(job(strategy="tpu", region="asia-south1", worker=NO_WORKERS,
                            chief={"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}))
    assert "ct5lp-hightpu-4t is not offered" in p.message


def test_zone_rule_needs_two_gpu_types():
    mixed = job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1),
                worker=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1, replicas=2),
                parameter_server=gpu("n1-standard-8", "NVIDIA_TESLA_K80", 1, replicas=1))
    assert check_zones(mixed) == []  # us-central1-a offers T4 and K80
    mixed["topology"]["evaluator"].update(gpu("n1-standard-8", "NVIDIA_TESLA_P100", 1))
    [p] = check_zones(mixed)
    assert "NVIDIA_TESLA_K80, NVIDIA_TESLA_P100 and NVIDIA_TESLA_T4" in p.message


# ---- multi-worker, strategies, batch ------------------------------------------------------------
def test_same_gpus_on_every_machine():
    [p] = check_same_gpus(job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 4),
                              worker=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 2, replicas=3)))
    assert p.field == "topology.worker.accelerator_count" and p.valid == ("4",)
    [p] = check_same_gpus(job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1),
                              worker=gpu("n1-standard-8", "NVIDIA_TESLA_V100", 1)))
    assert p.field == "topology.worker.accelerator_type" and p.valid == ("NVIDIA_TESLA_T4",)
    [p] = check_same_gpus(job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1)))
    assert "no GPU" in p.message
    assert check_same_gpus(job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1), worker=NO_WORKERS)) == []


@pytest.mark.parametrize("strategy,topology,field", [
    ("one_device", {}, "topology.worker.replica_count"),
    ("mirrored", {"worker": {"replica_count": 2}}, "topology.worker.replica_count"),
    ("multi_worker", {"worker": NO_WORKERS}, "topology.strategy"),
    ("tpu", {"worker": NO_WORKERS}, "topology.strategy"),
    ("mirrored", {"worker": NO_WORKERS, "chief": TPU_V3_8}, "topology.strategy"),
])
def test_strategy_vs_topology(strategy, topology, field):
    [p] = check_strategy(job(strategy=strategy, **topology))
    assert p.field == field


def test_strategy_consistent_cases():
    assert check_strategy(job(strategy="one_device", worker=NO_WORKERS)) == []
    assert check_strategy(job(strategy="mirrored", worker=NO_WORKERS, chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 2))) == []
    assert check_strategy(job(strategy="tpu", worker=NO_WORKERS, chief=TPU_V3_8)) == []
    assert infer_strategy(job(worker=NO_WORKERS, chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 2))) == "mirrored"


def test_num_replicas():
    assert num_replicas(job(strategy="one_device", worker=NO_WORKERS)) == 1
    assert num_replicas(job(strategy="mirrored", worker=NO_WORKERS, chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 4))) == 4
    assert num_replicas(job(strategy="mirrored", worker=NO_WORKERS)) == 1
    assert num_replicas(job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 4),
                            worker=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 4, replicas=2))) == 12
    assert num_replicas(job(worker={"replica_count": 3})) == 4
    assert num_replicas(job(strategy="tpu", worker=NO_WORKERS, chief=TPU_V3_8)) == 8
    assert num_replicas(job(strategy="tpu", worker=NO_WORKERS, chief=gpu("cloud-tpu", "TPU_V2_POD", 128))) == 128
    for machine, cores in (("ct5lp-hightpu-1t", 1), ("ct5lp-hightpu-4t", 4), ("ct5lp-hightpu-8t", 8)):
        assert num_replicas(job(strategy="tpu", worker=NO_WORKERS, chief={"machine_type": machine})) == cores


def test_batch_divisible_by_replicas():
    bad = job(worker={"replica_count": 2})
    bad["training"]["global_batch_size"] = 100
    [p] = check_batch(bad)
    assert p.field == "training.global_batch_size" and p.valid == ("99", "102")
    bad["training"]["global_batch_size"] = 99
    assert check_batch(bad) == []
    bad["training"]["global_batch_size"] = 0
    assert check_batch(bad) == []


# ---- TPU ----------------------------------------------------------------------------------------
def tpu_job(chief, **extra):
    return job(strategy="tpu", worker=NO_WORKERS, chief=chief, **extra)


@pytest.mark.parametrize("accelerator,count,valid", [
    ("TPU_V2", 16, ("8",)), ("TPU_V3", 4, ("8",)), ("TPU_V3_POD", 512, ("32", "128", "256")),
    ("TPU_V2_POD", 64, ("32", "128", "256", "512")), ("TPU_V2", 0, ("8",)),
])
def test_tpu_core_counts(accelerator, count, valid):
    [p] = check_tpu_accelerators(tpu_job(gpu("cloud-tpu", accelerator, count)))
    assert p.field == "topology.chief.accelerator_count" and p.valid == valid


def test_tpu_valid_configs():
    for accelerator, count in (("TPU_V2", 8), ("TPU_V3", 8), ("TPU_V2_POD", 512), ("TPU_V3_POD", 256)):
        report = check_job(tpu_job(gpu("cloud-tpu", accelerator, count)))
        assert report.ok, report.errors
    report = check_job(tpu_job({"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}))
    assert report.ok, report.errors


def test_tpu_machine_mismatches():
    [p] = check_tpu_accelerators(tpu_job(gpu("n1-standard-8", "TPU_V2", 8)))
    assert p.field == "topology.chief.machine_type" and p.valid == ("cloud-tpu",)
    [p] = check_tpu_accelerators(tpu_job(gpu("cloud-tpu", "NVIDIA_TESLA_T4", 1)))
    assert p.field == "topology.chief.accelerator_type" and "TPU_V2" in p.valid
    [p] = check_tpu_accelerators(tpu_job({"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "3x3"}))
    assert p.field == "topology.chief.tpu_topology" and p.valid[:3] == ("2x2", "2x4", "4x4")  # multi-host too
    [p] = check_tpu_accelerators(job(strategy="one_device", worker=NO_WORKERS, chief={"tpu_topology": "2x2"}))
    assert p.field == "topology.chief.tpu_topology"
    [p] = check_tpu_accelerators(tpu_job(gpu("n1-standard-8", "TPU_V5_LITEPOD", 4)))
    assert "ct5lp-hightpu-4t" in p.valid


def test_tpu_pools():
    problems = check_tpu_pools(job(strategy="tpu", chief=TPU_V3_8, worker={"replica_count": 1},
                                   parameter_server={"replica_count": 1, "machine_type": "n1-standard-4"}))
    assert fields(problems) == ["topology.worker.replica_count", "topology.parameter_server.replica_count"]
    [p] = check_tpu_pools(job(strategy="tpu", worker={**TPU_V3_8}))
    assert p.field == "topology.worker.machine_type"


def test_tpu_versions():
    [p] = check_tpu_version(tpu_job(TPU_V3_8, tpu_tf_version="2.10"))
    assert p.field == "topology.tpu_tf_version" and "2.11" in p.valid
    assert check_tpu_version(tpu_job(TPU_V3_8, tpu_tf_version="2.11")) == []
    pytorch = tpu_job(TPU_V3_8, tpu_tf_version="pytorch-1.10")
    pytorch["container"]["image_uri"] = "gcr.io/cloud-ml-public/training/pytorch-xla.1-11"
    [p] = check_tpu_version(pytorch)
    assert p.valid == ("pytorch-1.11",)
    custom = tpu_job(TPU_V3_8)
    custom["container"]["image_uri"] = "gcr.io/p/trainer:1"
    assert check_tpu_version(custom) == []
    [p] = check_tpu_version(custom, require_for_custom_container=True)
    assert "custom container" in p.message


# ---- check_job ----------------------------------------------------------------------------------
def test_check_job_returns_all_problems_at_once():
    bad = job(region="us-west2", chief=gpu("n1-standard-32", "NVIDIA_TESLA_V100", 4),
              worker=gpu("n1-standrd-32", "NVIDIA_TESLA_V100", 4))
    bad["training"]["global_batch_size"] = 10
    report = check_job(bad)
    assert len(report.errors) == 3, report.errors
    assert fields(report.errors) == ["topology.worker.machine_type", "topology.region", "training.global_batch_size"]
    with pytest.raises(ConfigError) as exc:
        report.raise_for_errors()
    assert len(str(exc.value).splitlines()) == 3


def test_check_job_garbage_never_raises():
    for garbage in (None, [], "x", {"topology": []}, {"topology": {"chief": 3}}, {"topology": {"strategy": 5}}):
        assert not check_job(garbage).ok


# ---- warnings -----------------------------------------------------------------------------------
def test_warnings_spot():
    spot = job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1), worker=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1))
    spot["scheduling"]["strategy"] = "SPOT"
    spot["checkpoint"]["every_steps"] = 0
    report = check_job(spot)
    assert report.ok
    assert fields(report.warnings) == ["checkpoint.every_steps", "scheduling.restart_job_on_worker_restart"]


def test_warnings_waste_and_legacy_gpus():
    one = job(strategy="one_device", worker=NO_WORKERS, chief=gpu("n1-standard-8", "NVIDIA_TESLA_K80", 4))
    one["training"]["precision"] = "float16"
    report = check_job(one)
    assert report.ok
    assert fields(report.warnings) == ["topology.chief.accelerator_count", "topology.chief.accelerator_type",
                                       "training.precision"]
    assert "no tensor cores" in report.warnings[2].message and report.warnings[2].valid == ("auto", "float32")
    assert "retired" in report.warnings[1].message
    ps = job(parameter_server={"replica_count": 2, "machine_type": "n1-highmem-8"})
    [w] = check_warnings(ps)
    assert "MultiWorkerMirroredStrategy does not use them" in w.message
    evaluator = job(strategy="one_device", worker=NO_WORKERS, evaluator={"replica_count": 1, "machine_type": "n1-standard-4"})
    [w] = check_warnings(evaluator)
    assert w.field == "topology.evaluator.replica_count" and "workerpool1" in w.message


# ---- pools --------------------------------------------------------------------------------------
def test_worker_pool_specs():
    j = job(chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 2.0), worker=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 2, replicas=3.0))
    specs = worker_pool_specs(j, "img:1", ["python", "-m", "trainers.task"], ["--epochs", 3])
    assert len(specs) == 4 and specs[2] == {} and specs[3] == {}
    assert specs[0] == {"replica_count": 1,
                        "machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                                         "accelerator_count": 2},
                        "container_spec": {"image_uri": "img:1", "command": ["python", "-m", "trainers.task"],
                                           "args": ["--epochs", "3"]}}
    assert specs[1]["replica_count"] == 3 and type(specs[1]["machine_spec"]["accelerator_count"]) is int
    tpu = worker_pool_specs(tpu_job(TPU_V3_8), "img")
    assert tpu[0]["machine_spec"] == {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3", "accelerator_count": 8}
    assert tpu[1:] == [{}, {}, {}]
    vm = worker_pool_specs(tpu_job({"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}), "img")
    assert vm[0]["machine_spec"] == {"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "2x2"}


# ---- parameter servers and the evaluator ------------------------------------------------------------
PS = {"replica_count": 2, "machine_type": "n1-highmem-8"}
EVALUATOR = {"replica_count": 1, "machine_type": "n1-standard-4"}


def ps_job(**pools):
    return job(strategy="parameter_server", **{"worker": {"replica_count": 2}, "parameter_server": PS, **pools})


def test_parameter_server_job_is_valid_and_quiet():
    report = check_job(ps_job(evaluator=EVALUATOR))
    assert report.ok and report.warnings == []
    assert infer_strategy(ps_job()) == "parameter_server"
    assert num_replicas(ps_job()) == 1
    assert num_replicas(ps_job(worker=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 2, replicas=3))) == 2


@pytest.mark.parametrize("pools,field,valid", [
    ({"parameter_server": {"replica_count": 0}}, "topology.parameter_server.replica_count", ("1", "2")),
    ({"worker": NO_WORKERS}, "topology.worker.replica_count", ("2", "4")),
])
def test_parameter_server_needs_servers_and_workers(pools, field, valid):
    report = check_job(ps_job(**pools))
    [p] = report.errors
    assert (p.field, p.valid) == (field, valid) and "strategy parameter_server needs" in p.message
    assert report.warnings == []  # the error says it all: no second line about the same pool


def test_parameter_server_with_a_tpu_is_refused_naming_the_pool():
    errors = check_job(ps_job(chief=TPU_V3_8, worker=NO_WORKERS)).errors
    assert [p.field for p in errors] == ["topology.parameter_server.replica_count", "topology.strategy"]
    assert "no parameter servers with a TPU" in errors[0].message and errors[0].valid == ("0",)


def test_parameter_server_warnings():
    gpus = ps_job(parameter_server=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1, replicas=2),
                  chief=gpu("n1-standard-8", "NVIDIA_TESLA_T4", 1))
    report = check_job(gpus)
    assert report.ok, report.errors  # allowed (no "same GPUs as the chief" rule under parameter_server)
    assert fields(report.warnings) == ["topology.parameter_server.accelerator_count", "topology.chief.accelerator_count"]
    assert "parameter servers only store and update the variables" in report.warnings[0].message
    assert "the chief only coordinates" in report.warnings[1].message and report.warnings[1].valid == ("0",)

    restart = ps_job()
    restart["scheduling"]["restart_job_on_worker_restart"] = True
    [w] = check_job(restart).warnings
    assert w.field == "scheduling.restart_job_on_worker_restart" and w.valid == ("false",)
    assert "restarts the whole job" in w.message
    restart["scheduling"].update(strategy="SPOT", restart_job_on_worker_restart=False)
    assert check_job(restart).warnings == []  # SPOT workers rejoin: no "set restart to true" advice here


@pytest.mark.parametrize("strategy,extra", [("multi_worker", {}), ("one_device", {"worker": NO_WORKERS})])
def test_parameter_servers_idle_under_other_strategies(strategy, extra):
    [w] = [w for w in check_job(job(strategy=strategy, parameter_server=PS, **extra)).warnings
           if w.field == "topology.parameter_server.replica_count" and "idle" in w.message]
    assert "would sit idle" in w.message and "use strategy parameter_server" in w.message and w.valid == ("0",)


def test_evaluator_rules():
    [p] = check_job(ps_job(evaluator={**EVALUATOR, "replica_count": 2})).errors
    assert p.field == "topology.evaluator.replica_count" and p.valid == ("0", "1") and "same checkpoints" in p.message
    [p] = check_job(job(strategy="tpu", worker=NO_WORKERS, chief=TPU_V3_8, evaluator=EVALUATOR)).errors
    assert p.field == "topology.evaluator.replica_count" and "strategy tpu has no side-car evaluator" in p.message
    for strategy, extra in (("multi_worker", {}), ("one_device", {"worker": NO_WORKERS})):
        assert check_job(job(strategy=strategy, evaluator=EVALUATOR, **extra)).ok


def test_the_parameter_server_preset_validates_cleanly():
    from jobfile import config as config_lib
    from jobs.rules.validate import validate

    cfg = config_lib.load("parameter-server")
    report = validate(cfg, check_data=False)
    assert report.errors == [] and report.warnings == []
    assert cfg.scheduling.restart_job_on_worker_restart is False
    assert [p.replica_count for p in cfg.topology.pools()] == [1, 4, 1, 1]
    assert not any(p.accelerator_type for p in cfg.topology.pools())  # CPU pools, as the guides' example


@pytest.mark.parametrize("accelerator, precision, warned", [
    ("NVIDIA_TESLA_P4", "float16", True),       # 6.1: no tensor cores, 1/64-rate float16
    ("NVIDIA_TESLA_P100", "float16", False),    # 6.0: GP100's double-rate float16 pays (trainers.gpus.fast_float16)
    ("NVIDIA_TESLA_T4", "float16", False),      # 7.5: tensor cores
    ("NVIDIA_TESLA_T4", "bfloat16", True),      # no bf16 tensor cores before Ampere
    ("NVIDIA_TESLA_A100", "bfloat16", False),
    ("NVIDIA_RTX_PRO_6000", "float16", False),  # 12.0 (Blackwell): the catalog's capability, from trainers.gpus
    ("NVIDIA_TESLA_P4", "auto", False),         # auto decides per device: nothing to warn about
    ("NVIDIA_TESLA_P4", "float32", False),
])
def test_the_precision_advice_reads_training_precision(accelerator, precision, warned):
    """The advice reads ``training.precision`` through the one parser (the old view read only the deprecated
    ``mixed_precision``, so ``precision: float16`` on a GPU without tensor cores was never warned about)."""
    machine = {"NVIDIA_TESLA_A100": "a2-highgpu-1g", "NVIDIA_RTX_PRO_6000": "g4-standard-48"}.get(accelerator, "n1-standard-8")
    one = job(strategy="one_device", worker=NO_WORKERS, chief=gpu(machine, accelerator, 1))
    one["training"]["precision"] = precision
    report = check_job(one)
    assert report.ok, report.errors
    assert ("training.precision" in fields(report.warnings)) is warned, report.warnings


def test_every_catalog_gpu_has_its_compute_capability_from_the_one_table():
    from trainers.gpus import COMPUTE_CAPABILITY
    cat = load_catalog()
    assert sorted(cat.gpus) == sorted(COMPUTE_CAPABILITY)  # one table, the same GPUs as the catalog lists
    assert cat.gpus["NVIDIA_RTX_PRO_6000"].compute_capability == (12, 0) and cat.gpus["NVIDIA_RTX_PRO_6000"].tensor_cores
    assert not cat.gpus["NVIDIA_TESLA_P100"].tensor_cores and cat.gpus["NVIDIA_TESLA_V100"].tensor_cores
