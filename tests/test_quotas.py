"""The Vertex AI training quota names (jobs/rules/hardware/quotas.yaml) against the hardware catalog and the installed
google-cloud-quotas types, a job's need per quota, and reading a limit out of a QuotaInfo (jobs.cloud.apis.quotas)."""
from __future__ import annotations

import re

import pytest

from jobs.cloud.apis import quotas as cloud_quotas
from jobs.rules.hardware import quotas
from jobs.rules.hardware.catalog import load_catalog
from jobfile import config as config_lib


def test_every_gpu_and_tpu_of_the_catalog_maps_to_a_quota_name_or_an_explicit_unknown():
    table, catalog = quotas.load_quotas(), load_catalog()
    missing = [a for a in catalog.accelerator_types if a not in table.accelerators]
    assert not missing, f"quotas.yaml has no entry for {missing}"
    unnamed = [g for g, gen in catalog.tpu_generations.items() if not gen.accelerator_type and g not in table.tpu_generations]
    assert not unnamed, f"quotas.yaml has no entry for TPU generations {unnamed}"
    extra = [a for a in table.accelerators if a not in catalog.accelerator_types]
    assert not extra, f"quotas.yaml names accelerators the catalog does not know: {extra}"


def test_names_are_well_formed_dated_and_sourced():
    table = quotas.load_quotas()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table.date) and table.service == "aiplatform.googleapis.com"
    assert set(table.preemptible_strategies) == {"SPOT", "FLEX_START"}
    for name in table.names():
        assert name.metric or name.quota_id
        assert not name.metric or re.fullmatch(r"custom_model_training_[a-z0-9_]+", name.metric), name
        assert not name.quota_id or re.fullmatch(r"CustomModelTraining[A-Za-z0-9]+PerProjectPerRegion", name.quota_id)
        assert name.status in ("cited", "inferred")
        assert any(key in name.source for key in table.sources), f"{name}: source {name.source!r} names no source key"
    for key, source in table.sources.items():
        assert source.get("what") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(source.get("read"))), key
    # what FACTS.md (2026-11-27) recorded is in the table as cited
    h100 = table.accelerators["NVIDIA_H100_80GB"]
    assert (h100.on_demand.metric, h100.on_demand.quota_id, h100.on_demand.status) == (
        "custom_model_training_nvidia_h100_gpus", "CustomModelTrainingH100GPUsPerProjectPerRegion", "cited")
    assert h100.preemptible.quota_id == "CustomModelTrainingPreemptibleH100GPUsPerProjectPerRegion"


def test_what_the_reader_uses_is_in_the_installed_client_types():
    from google.cloud import cloudquotas_v1

    fields = lambda cls: {f.name for f in cls.pb().DESCRIPTOR.fields}  # noqa: E731
    assert {"metric", "quota_id", "dimensions_infos"} <= fields(cloudquotas_v1.QuotaInfo)
    assert {"dimensions", "details", "applicable_locations"} <= fields(cloudquotas_v1.DimensionsInfo)
    assert "value" in fields(cloudquotas_v1.QuotaDetails)
    # each name of the table fits the API's message (the metric as the API spells it: service/metric)
    table = quotas.load_quotas()
    for name in table.names():
        info = cloudquotas_v1.QuotaInfo(metric=name.full_metric(table.service), quota_id=name.quota_id)
        assert cloud_quotas.find([info], name, table.service) is info


def info(*dims):
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1.QuotaInfo(metric="aiplatform.googleapis.com/x", dimensions_infos=[
        cloudquotas_v1.DimensionsInfo(dimensions=d, details={"value": v}, applicable_locations=locs)
        for d, v, locs in dims])


def test_the_limit_of_a_region_is_its_own_dimension_then_its_applicable_locations_then_the_default():
    q = info(({"region": "us-central1"}, 4, ["us-central1"]), ({}, 0, ["us-east4", "europe-west4"]))
    assert cloud_quotas.limit_in(q, "us-central1") == 4
    assert cloud_quotas.limit_in(q, "us-east4") == 0
    assert cloud_quotas.limit_in(q, "asia-east1") == 0  # the default (no dimensions) applies
    assert cloud_quotas.limit_in(info(({"region": "us-central1"}, 4, [])), "us-east4") is None
    assert cloud_quotas.covers(-1, 1000) and cloud_quotas.covers(4, 4) and not cloud_quotas.covers(3, 4)
    assert not cloud_quotas.covers(None, 0)
    assert cloud_quotas.named_regions([q]) == ["europe-west4", "us-central1", "us-east4"]


def needs(doc, strategy=None):
    cfg = config_lib.from_dict(doc)
    return {(n.what, n.amount, str(n.name) if n.name else None) for n in quotas.job_needs(cfg, strategy)}


def test_gpus_and_vcpus_are_replicas_times_per_replica():
    doc = {"topology": {"chief": {"machine_type": "a2-highgpu-2g", "accelerator_type": "NVIDIA_TESLA_A100",
                                  "accelerator_count": 2},
                        "worker": {"replica_count": 3, "machine_type": "a2-highgpu-2g",
                                   "accelerator_type": "NVIDIA_TESLA_A100", "accelerator_count": 2}}}
    assert needs(doc) == {("NVIDIA_TESLA_A100 GPUs", 8, "custom_model_training_nvidia_a100_gpus"),
                          ("vCPUs", 96, "custom_model_training_cpus")}
    assert ("NVIDIA_TESLA_A100 GPUs", 8, "custom_model_training_preemptible_nvidia_a100_gpus") in needs(doc, "SPOT")


def test_tpus_count_cores_on_cloud_tpu_and_chips_of_the_slice_on_tpu_vms():
    legacy = {"topology": {"strategy": "tpu", "chief": {"machine_type": "cloud-tpu", "accelerator_type": "TPU_V3",
                                                        "accelerator_count": 8}}}
    assert needs(legacy) == {("TPU_V3 cores", 8, "custom_model_training_tpu_v3")}
    # no preemptible TPU quota is known: the need is there, unnamed, and says why
    (spot,) = quotas.job_needs(config_lib.from_dict(legacy), "SPOT")
    assert spot.name is None and "no SPOT (preemptible) Vertex training quota name is known for TPU_V3 cores" in spot.why
    v5e = {"topology": {"strategy": "tpu", "chief": {"machine_type": "ct5lp-hightpu-4t", "tpu_topology": "4x4"}}}
    assert needs(v5e) == {("TPU v5e chips", 16, "custom_model_training_tpu_v5e")}


def test_a_gpu_without_a_known_name_is_an_unnamed_need():
    doc = {"topology": {"chief": {"machine_type": "g4-standard-48", "accelerator_type": "NVIDIA_RTX_PRO_6000",
                                  "accelerator_count": 1}}}
    found = quotas.job_needs(config_lib.from_dict(doc))
    rtx = next(n for n in found if "RTX" in n.what)
    assert rtx.name is None and rtx.amount == 1 and "quotas.yaml" in rtx.why


@pytest.mark.parametrize("parallel, baseline, copies", [(1, False, 1), (1, True, 2), (4, True, 5), (4, False, 4)])
def test_a_study_runs_its_parallel_trials_and_its_baseline_at_once(parallel, baseline, copies):
    doc = {"tuning": {"metric": "accuracy", "goal": "maximize", "max_trials": 8, "parallel_trials": parallel,
                      "baseline": baseline, "parameters": {"lr": {"type": "double", "min": 0.001, "max": 0.1}}}}
    cfg = config_lib.from_dict(doc)
    assert quotas.concurrent_jobs(cfg) == copies
    single = {n.what: n.amount for n in quotas.job_needs(config_lib.from_dict({}))}
    assert {n.what: n.amount for n in quotas.job_needs(cfg)} == {k: v * copies for k, v in single.items()}
