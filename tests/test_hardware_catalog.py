"""The hardware catalog against the seeds.

The expected GPU table below is transcribed from the seed text independently of catalog.yaml:
n1 rows x K80/P4/P100/T4/V100 from the Japanese guide (seed 001), a2 rows x A100 from the Spanish guide
(seed 000).  Rows printed with three values in the seeds (n1-*-64/96) are P4, T4, V100.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from jobs.rules.hardware.catalog import load_catalog, pytorch_image_version
from jobs.rules.hardware.rules import (check_gpu_count, check_gpu_resources, check_job, check_zones,
                                     gpu_resource_shortfall, valid_gpu_counts)

COLUMNS = ("NVIDIA_TESLA_K80", "NVIDIA_TESLA_P4", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100")
SEED_TABLE_JA = """
n1-standard-4  | 1,2,4,8 | 1,2,4 | 1,2,4 | 1,2,4 | 1,2,4,8
n1-standard-8  | 1,2,4,8 | 1,2,4 | 1,2,4 | 1,2,4 | 1,2,4,8
n1-standard-16 | 2,4,8   | 1,2,4 | 1,2,4 | 1,2,4 | 2,4,8
n1-standard-32 | 4,8     | 2,4   | 2,4   | 2,4   | 4,8
n1-standard-64 |         | 4     |       | 4     | 8
n1-standard-96 |         | 4     |       | 4     | 8
n1-highmem-2   | 1,2,4,8 | 1,2,4 | 1,2,4 | 1,2,4 | 1,2,4,8
n1-highmem-4   | 1,2,4,8 | 1,2,4 | 1,2,4 | 1,2,4 | 1,2,4,8
n1-highmem-8   | 1,2,4,8 | 1,2,4 | 1,2,4 | 1,2,4 | 1,2,4,8
n1-highmem-16  | 2,4,8   | 1,2,4 | 1,2,4 | 1,2,4 | 2,4,8
n1-highmem-32  | 4,8     | 2,4   | 2,4   | 2,4   | 4,8
n1-highmem-64  |         | 4     |       | 4     | 8
n1-highmem-96  |         | 4     |       | 4     | 8
n1-highcpu-16  | 2,4,8   | 1,2,4 | 1,2,4 | 1,2,4 | 2,4,8
n1-highcpu-32  | 4,8     | 2,4   | 2,4   | 2,4   | 4,8
n1-highcpu-64  | 8       | 4     | 4     | 4     | 8
n1-highcpu-96  |         | 4     |       | 4     | 8
"""
SEED_A2_ES = {"a2-highgpu-1g": 1, "a2-highgpu-2g": 2, "a2-highgpu-4g": 4, "a2-highgpu-8g": 8, "a2-megagpu-16g": 16}


def _seed_cells() -> dict[tuple[str, str], tuple[int, ...]]:
    cells: dict[tuple[str, str], tuple[int, ...]] = {}
    for line in SEED_TABLE_JA.strip().splitlines():
        machine, *values = (part.strip() for part in line.split("|"))
        assert len(values) == len(COLUMNS)
        for gpu, value in zip(COLUMNS, values):
            cells[machine, gpu] = tuple(int(v) for v in value.split(",")) if value else ()
        cells[machine, "NVIDIA_TESLA_A100"] = ()  # the empty leading A100 cell of the Spanish n1 rows
    for machine, count in SEED_A2_ES.items():
        for gpu in COLUMNS:
            cells[machine, gpu] = ()
        cells[machine, "NVIDIA_TESLA_A100"] = (count,)
    return cells


SEED_CELLS = _seed_cells()


def _pool_job(machine: str, gpu: str, count: int) -> dict:
    return {"topology": {"strategy": "mirrored" if count > 1 else "one_device", "region": "us-central1",
                         "chief": {"replica_count": 1, "machine_type": machine, "accelerator_type": gpu,
                                   "accelerator_count": count}}}


def _counts_text(counts) -> str:
    items = [str(c) for c in counts]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def test_catalog_table_has_every_seed_cell():
    cat = load_catalog()
    for (machine, gpu), counts in SEED_CELLS.items():
        assert cat.table_counts(machine, gpu) == counts, (machine, gpu)


@pytest.mark.parametrize("machine,gpu", sorted(SEED_CELLS))
def test_every_cell_of_the_seed_table(machine, gpu):
    valid = SEED_CELLS[machine, gpu]
    for count in range(1, 17):
        job = _pool_job(machine, gpu, count)
        problems = check_gpu_count(job)
        if count in valid:
            assert problems == [], (count, problems)
            assert check_job(job).ok, (count, check_job(job).errors)
        else:
            assert len(problems) == 1, (count, problems)
            p = problems[0]
            if valid:
                assert p.field == "topology.chief.accelerator_count"
                assert f"{machine} takes {_counts_text(valid)} {gpu}, not {count}" in p.message
                assert p.valid == tuple(str(v) for v in valid)
            else:
                assert p.field == "topology.chief.accelerator_type"
                assert f"{machine} cannot take {gpu}" in p.message
            assert not check_job(job).ok


def test_brief_example_message():
    job = _pool_job("n1-standard-32", "NVIDIA_TESLA_V100", 2)
    [p] = check_gpu_count(job)
    assert p.field == "topology.chief.accelerator_count"
    assert p.message.startswith("n1-standard-32 takes 4 or 8 NVIDIA_TESLA_V100, not 2")
    assert "2 NVIDIA_TESLA_V100 serve at most 24 vCPUs; n1-standard-32 has 32" in p.message
    assert p.valid == ("4", "8")
    assert str(p).endswith("; valid choices: 4, 8")


def test_every_entry_names_its_source():
    cat = load_catalog()
    raw = cat.raw
    for section in ("machine_types", "gpu_types", "legacy_machine_types", "scale_tiers", "tpu_types", "machine_families",
                    "tpu_vm"):
        for name, entry in raw[section].items():
            assert entry.get("source"), (section, name)
    for block in raw["gpu_tables"]:
        assert block["source"]
    for limit in raw["special_limits"]:
        assert limit["source"]
    for key in ("gpu", "tpu", "tpu_vm"):
        assert raw["regions"][key]["source"]
    assert raw["zones"]["source"] == "zones" and "not in seeds" in raw["sources"]["zones"]["what"]
    # every source says what it is and when it was read; today's rows name a source key that has a URL
    for key, src in cat.sources.items():
        assert src["what"] and src["read"], key
    for name, m in cat.machines.items():
        if m.current:
            keys = [k for k in cat.sources if k in m.source]
            assert keys and any(cat.sources[k].get("url") for k in keys), (name, m.source)
    for name, family in raw["machine_families"].items():
        for key in ("source", "vertex"):
            assert family[key] in cat.sources and cat.sources[family[key]]["url"], (name, key)
    assert cat.date == "2026-11-25"


def test_resource_rule_reproduces_the_table_except_the_documented_v100_cell():
    cat = load_catalog()
    differences = []
    for (machine, gpu), counts in SEED_CELLS.items():
        if not machine.startswith("n1-") or gpu == "NVIDIA_TESLA_A100":
            continue
        derived = tuple(c for c in cat.gpus[gpu].counts if not gpu_resource_shortfall(machine, gpu, c))
        if derived != counts:
            differences.append((machine, gpu, counts, derived))
    # 8 x 76 GB = 608 GB < 624 GB of n1-highmem-96: the table wins (catalog.yaml CONFLICT note)
    assert differences == [("n1-highmem-96", "NVIDIA_TESLA_V100", (8,), ())]
    assert check_job(_pool_job("n1-highmem-96", "NVIDIA_TESLA_V100", 8)).ok
    assert "8 NVIDIA_TESLA_V100 serve at most 608 GB" in gpu_resource_shortfall("n1-highmem-96", "NVIDIA_TESLA_V100", 8)


def test_special_limits():
    assert "64 vCPUs" in gpu_resource_shortfall("n1-standard-96", "NVIDIA_TESLA_P100", 4)
    assert "208 GB" in gpu_resource_shortfall("n1-highmem-64", "NVIDIA_TESLA_P100", 4)
    assert "208 GB" in gpu_resource_shortfall("n1-standard-64", "NVIDIA_TESLA_K80", 8)
    assert gpu_resource_shortfall("n1-highcpu-64", "NVIDIA_TESLA_K80", 8) is None
    assert gpu_resource_shortfall("n1-highmem-32", "NVIDIA_TESLA_K80", 8) is None  # exactly 208 GB


def test_machine_types_absent_from_the_table_use_the_resource_rule():
    assert valid_gpu_counts("n1-standard-2", "NVIDIA_TESLA_T4") == (1, 2, 4)
    assert valid_gpu_counts("n1-highcpu-8", "NVIDIA_TESLA_K80") == (1, 2, 4, 8)
    assert valid_gpu_counts("n1-standard-2", "NVIDIA_TESLA_A100") == ()
    assert check_job(_pool_job("n1-standard-2", "NVIDIA_TESLA_T4", 1)).ok
    assert check_gpu_resources(_pool_job("n1-standard-2", "NVIDIA_TESLA_T4", 1)) == []


def test_vertex_types_marked_and_sized():
    cat = load_catalog()
    for name in ("a2-ultragpu-1g", "a2-ultragpu-8g", "g2-standard-4", "g2-standard-96", "a3-highgpu-8g",
                 "ct5lp-hightpu-1t", "ct5lp-hightpu-4t", "ct5lp-hightpu-8t"):
        assert cat.machines[name].current, name
    assert cat.table_counts("g2-standard-24", "NVIDIA_L4") == (2,)
    assert cat.table_counts("a3-highgpu-8g", "NVIDIA_H100_80GB") == (8,)
    assert cat.machines["ct5lp-hightpu-4t"].single_host_topologies == ("2x2",)
    assert "4x4" in cat.machines["ct5lp-hightpu-4t"].topologies  # multi-host slices (issue 33)
    assert cat.machines["n1-standard-32"].vcpus == 32 and cat.machines["n1-standard-32"].memory_gb == 120
    assert "cloud-tpu" in cat.machines and cat.machines["cloud-tpu"].tpu == "legacy"


def test_regions_from_the_seeds():
    cat = load_catalog()
    assert len(cat.gpu_regions) == 16 and "australia-southeast1" in cat.gpu_regions
    assert cat.tpu_regions == ("us-central1", "europe-west4")
    for region in cat.gpu_regions:
        assert cat.zones[region], region


def _zone_job(chief_gpu, worker_gpu, ps_gpu, region="us-central1"):
    def pool(gpu, replicas):
        return {"replica_count": replicas, "machine_type": "n1-standard-8", "accelerator_type": gpu,
                "accelerator_count": 1}
    return {"topology": {"strategy": "multi_worker", "region": region, "chief": pool(chief_gpu, 1),
                         "worker": pool(worker_gpu, 2), "parameter_server": pool(ps_gpu, 1)}}


def test_zone_rule_seed_example_fails_and_single_types_pass():
    [p] = check_zones(_zone_job("NVIDIA_TESLA_T4", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_K80"))
    assert p.field == "topology.region"
    assert "no zone of us-central1 offers" in p.message and "together" in p.message
    assert any(v.startswith("europe-west1 ") for v in p.valid)
    for gpu in ("NVIDIA_TESLA_T4", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_K80"):
        job = _zone_job(gpu, gpu, gpu)
        assert check_zones(job) == []
        assert check_job(job).ok, check_job(job).errors
    assert check_zones(_zone_job("NVIDIA_TESLA_T4", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_K80", "europe-west1")) == []


def test_legacy_machine_types_and_scale_tiers():
    cat = load_catalog()
    expected = {"standard_gpu": ("n1-standard-8", "NVIDIA_TESLA_K80", 1),
                "complex_model_m_gpu": ("n1-standard-16", "NVIDIA_TESLA_K80", 4),
                "complex_model_l_gpu": ("n1-standard-32", "NVIDIA_TESLA_K80", 8),
                "standard_p100": ("n1-standard-8", "NVIDIA_TESLA_P100", 1),
                "complex_model_m_p100": ("n1-standard-16", "NVIDIA_TESLA_P100", 4),
                "standard_v100": ("n1-standard-8", "NVIDIA_TESLA_V100", 1),
                "large_model_v100": ("n1-highmem-8", "NVIDIA_TESLA_V100", 1),
                "complex_model_m_v100": ("n1-standard-16", "NVIDIA_TESLA_V100", 4),
                "complex_model_l_v100": ("n1-standard-32", "NVIDIA_TESLA_V100", 8),
                "standard": ("n1-standard-4", "", 0), "large_model": ("n1-highmem-8", "", 0),
                "complex_model_s": ("n1-highcpu-8", "", 0), "complex_model_m": ("n1-highcpu-16", "", 0),
                "complex_model_l": ("n1-highcpu-32", "", 0)}
    for name, (machine, gpu, count) in expected.items():
        lm = cat.legacy_machines[name]
        assert (lm.machine_type, lm.accelerator_type, lm.accelerator_count) == (machine, gpu, count), name
        if gpu:  # every legacy GPU machine maps to a valid cell of the table
            assert count in cat.table_counts(machine, gpu), name
    assert set(cat.scale_tiers) == {"BASIC", "STANDARD_1", "PREMIUM_1", "BASIC_GPU", "BASIC_TPU", "CUSTOM"}
    assert all(t["meaning"] for t in cat.scale_tiers.values())


def test_tpu_facts():
    cat = load_catalog()
    assert cat.tpu_cores["TPU_V2"] == (8,) and cat.tpu_cores["TPU_V3"] == (8,)
    assert cat.tpu_cores["TPU_V2_POD"] == (32, 128, 256, 512)
    assert cat.tpu_cores["TPU_V3_POD"] == (32, 128, 256)
    assert cat.runtime_versions == ("1.15", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.11")
    assert pytorch_image_version("gcr.io/cloud-ml-public/training/pytorch-xla.1-11") == "pytorch-1.11"
    assert pytorch_image_version("gcr.io/cloud-ml-public/training/pytorch-xla.1-6:latest") == "pytorch-1.6"
    assert pytorch_image_version("gcr.io/my/image:2.11") is None


def test_loaded_once_and_never_parsed_again(monkeypatch):
    """The catalog is read and parsed once per process: 50 checks parse no YAML (what made checks slow, said by
    what happens rather than by a clock; its speed is a benchmark's to print)."""
    import yaml

    assert load_catalog() is load_catalog()
    check_job(_pool_job("n1-standard-16", "NVIDIA_TESLA_T4", 2))  # whatever else a check reads once, read now
    parsed = []
    for name in ("load", "safe_load"):
        monkeypatch.setattr(yaml, name, lambda *args, name=name, **kwargs: parsed.append(name))
    for _ in range(50):
        check_job(_pool_job("n1-standard-16", "NVIDIA_TESLA_T4", 2))
    assert parsed == []


def test_validation_imports_neither_tensorflow_nor_kfp():
    """What keeps validation light: it loads neither TensorFlow nor kfp. Its time is printed, never asserted (it
    depends on the machine; figures live in benchmarks)."""
    code = ("import sys, time; t = time.perf_counter(); "
            "import jobs.commands.validate_cli, jobs.rules.aiplatform.legacy, jobs.rules.hardware.rules; "
            "from jobs.rules.hardware.rules import check_job; check_job({}); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'kfp', 'keras')]; "
            "assert not bad, bad; print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    print("validation's imports took", out.stdout.strip(), "s")
