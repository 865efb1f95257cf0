"""Random configs never crash validation: each is either valid or rejected with messages."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobfile.errors import Problem
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.aiplatform.gcloud_flags import FLAGS
from jobs.rules.aiplatform.legacy import KNOWN_KEYS, import_legacy, translate
from jobs.rules.job_spec import worker_pool_specs
from jobs.rules.hardware.rules import Report, check_job, num_replicas
from jobs.rules.hardware.shared import infer_strategy

CAT = load_catalog()
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GARBAGE = st.one_of(
    st.none(), st.booleans(), st.text(max_size=12), st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
MACHINE = st.one_of(st.sampled_from(sorted(CAT.machines) + sorted(CAT.legacy_machines)), st.text(max_size=15), GARBAGE)
ACCELERATOR = st.one_of(st.sampled_from(list(CAT.accelerator_types) + ["", "nvidia-tesla-t4"]), GARBAGE)
COUNT = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 8, 16, 32, 128, 256, 512]), st.integers(-5, 10**9), GARBAGE)
REGION = st.one_of(st.sampled_from(list(CAT.gpu_regions) + ["us-east5", "europe-north1", "", "US"]), GARBAGE)
STRATEGY = st.one_of(st.sampled_from(list(CAT.strategies)), st.text(max_size=10), GARBAGE)
TOPOLOGY_TEXT = st.one_of(st.sampled_from(["", "1x1", "2x2", "2x4", "4x4", "x"]), GARBAGE)

POOL = st.fixed_dictionaries({}, optional={
    "replica_count": COUNT, "machine_type": MACHINE, "accelerator_type": ACCELERATOR,
    "accelerator_count": COUNT, "tpu_topology": TOPOLOGY_TEXT})
TOPOLOGY = st.fixed_dictionaries({}, optional={
    "strategy": STRATEGY, "region": REGION,
    "tpu_tf_version": st.one_of(st.sampled_from(["", "2.11", "2.10", "pytorch-1.11"]), GARBAGE),
    "chief": st.one_of(POOL, GARBAGE), "worker": st.one_of(POOL, GARBAGE),
    "parameter_server": st.one_of(POOL, GARBAGE), "evaluator": st.one_of(POOL, GARBAGE)})
JOB = st.one_of(GARBAGE, st.fixed_dictionaries({}, optional={
    "topology": st.one_of(TOPOLOGY, GARBAGE),
    "training": st.one_of(st.fixed_dictionaries({}, optional={"global_batch_size": COUNT, "mixed_precision": GARBAGE}),
                          GARBAGE),
    "checkpoint": st.one_of(st.fixed_dictionaries({}, optional={"every_steps": COUNT, "every_seconds": COUNT}), GARBAGE),
    "scheduling": st.one_of(st.fixed_dictionaries({}, optional={
        "strategy": st.one_of(st.sampled_from(["STANDARD", "SPOT"]), GARBAGE),
        "restart_job_on_worker_restart": GARBAGE}), GARBAGE),
    "container": st.one_of(st.fixed_dictionaries({}, optional={"image_uri": st.one_of(st.sampled_from(
        sorted(CAT.pytorch_images)), GARBAGE)}), GARBAGE),
}))


def assert_well_formed(problems) -> None:
    for p in problems:
        assert isinstance(p, Problem) and isinstance(p.field, str) and p.field and isinstance(p.message, str)
        assert all(isinstance(v, str) for v in p.valid)
        assert "\n" not in str(p)


@SETTINGS
@given(JOB)
def test_check_job_never_crashes(job):
    report = check_job(job)
    assert isinstance(report, Report)
    assert_well_formed(report.errors + report.warnings)
    replicas = num_replicas(job)
    assert isinstance(replicas, int) and replicas >= 1
    if report.ok:
        specs = worker_pool_specs(job, "img")
        assert len(specs) == 4 and specs[0]["replica_count"] == 1
        for spec in filter(None, specs):
            assert type(spec["replica_count"]) is int and spec["replica_count"] > 0
            assert type(spec["machine_spec"].get("accelerator_count", 0)) is int
            assert spec["machine_spec"]["machine_type"] in CAT.machines


VALID_CELLS = sorted((m, g, c) for m, row in CAT.gpu_table.items() for g, counts in row.items() for c in counts)


@SETTINGS
@given(st.sampled_from(VALID_CELLS), st.data(), st.integers(0, 3))
def test_valid_table_cells_are_accepted(cell, data, workers):
    machine, gpu, count = cell
    region = data.draw(st.sampled_from(CAT.regions_offering(gpu) or ["us-central1"]))  # no data: a warning
    pool = {"machine_type": machine, "accelerator_type": gpu, "accelerator_count": count}
    job = {"topology": {"region": region, "chief": {"replica_count": 1, **pool},
                        "worker": {"replica_count": workers, **pool}}}
    job["topology"]["strategy"] = infer_strategy(job)
    report = check_job(job)
    assert report.ok, report.errors
    assert num_replicas(job) == (1 + workers) * count if workers else num_replicas(job) in (1, count)


LEGACY_VALUE = st.one_of(st.sampled_from(sorted(CAT.legacy_machines) + sorted(CAT.machines)[:8] + list(CAT.scale_tiers)),
                         COUNT, GARBAGE)
REPLICA_CONFIG = st.fixed_dictionaries({}, optional={
    "acceleratorConfig": st.one_of(st.fixed_dictionaries({}, optional={"count": COUNT, "type": ACCELERATOR}), GARBAGE),
    "imageUri": st.one_of(st.sampled_from(sorted(CAT.pytorch_images) + ["gcr.io/p/i:1"]), GARBAGE),
    "tpuTfVersion": st.one_of(st.sampled_from(["2.11", "pytorch-1.11", "9.9"]), GARBAGE),
    "bogus": GARBAGE})
TRAINING_INPUT = st.one_of(GARBAGE, st.dictionaries(
    st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=8)),
    st.one_of(LEGACY_VALUE, REPLICA_CONFIG, REGION), max_size=10))


@SETTINGS
@given(TRAINING_INPUT)
def test_translate_never_crashes(training_input):
    job, problems = translate(training_input)
    assert isinstance(job, dict) and "topology" in job
    assert_well_formed(problems)
    if not problems:
        assert check_job(job).ok


FLAG_TOKENS = st.lists(st.one_of(st.sampled_from(sorted(FLAGS) + ["--config", "--", "--stream-logs", "-q", "--x=1"]),
                                 st.sampled_from(["custom", "basic_tpu", "9", "-1", "count=4,type=nvidia-tesla-t4",
                                                  "count=x", "type=tpu-v2", "cloud_tpu", "us-central1", "n1-standard-8"]),
                                 st.text(max_size=10)), max_size=12)


@SETTINGS
@given(st.one_of(st.none(), st.fixed_dictionaries({"trainingInput": TRAINING_INPUT})), FLAG_TOKENS)
def test_import_legacy_with_flags_never_crashes(doc, argv):
    result = import_legacy(doc, argv)
    assert_well_formed(result.report.errors + result.report.warnings)
    if result.report.ok:
        assert len(result.pools) == 4 and result.pools[0]["replica_count"] == 1
