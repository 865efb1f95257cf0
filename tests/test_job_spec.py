"""THE CustomJobSpec (jobs/rules/job_spec.py): one builder for the local launcher, the docker runner, the CustomJob
step and a HyperparameterTuningJob's trials; every field placed as the API names it, parsed strictly by the real
type; the scheduling extras (FLEX_START's max wait, a persistent resource, a reservation) validated first."""
from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1
from google.protobuf import json_format

from jobs.rules import job_spec, validate
from jobfile import config as config_lib

IMAGE = "us-central1-docker.pkg.dev/proj-1/training/tf-trainer-gpu:ctx-1@sha256:" + "a" * 64
RESERVATION = "projects/proj-1/zones/us-central1-a/reservations/a100-pool"
FLEX = ["topology.strategy=mirrored", "topology.worker.replica_count=0", "topology.chief.machine_type=a2-highgpu-1g",
        "topology.chief.accelerator_type=NVIDIA_TESLA_A100", "topology.chief.accelerator_count=1",
        "scheduling.strategy=FLEX_START"]


def _cfg(*sets: str) -> config_lib.JobConfig:
    return config_lib.load("local", [f"container.image_uri={IMAGE}", "output.base_dir=gs://team-bucket/runs/x", *sets])


def _errors(*sets: str) -> list[str]:
    return [str(e) for e in validate.validate(_cfg(*sets), check_data=False).errors]


def test_the_spec_parses_strictly_as_the_api_type_with_every_field_where_the_api_names_it():
    cfg = _cfg(*FLEX, "scheduling.max_wait_duration=1800s", "scheduling.persistent_resource_id=training-pool",
               "scheduling.timeout=7200s", f"scheduling.reservation_affinity={{reservation_affinity_type: "
               f"SPECIFIC_RESERVATION, key: compute.googleapis.com/reservation-name, values: [{RESERVATION}]}}",
               "trainer.env={LOG_LEVEL: debug, SEED: 7}")
    assert _errors(*FLEX, "scheduling.max_wait_duration=1800s") == []
    spec = job_spec.custom_job_spec(cfg, service_account="runner@proj-1.iam.gserviceaccount.com")
    message = json_format.ParseDict(spec, aiplatform_v1.CustomJobSpec.pb()())  # unknown fields would raise
    assert message.scheduling.max_wait_duration.seconds == 1800 and message.scheduling.timeout.seconds == 7200
    assert aiplatform_v1.Scheduling.Strategy(message.scheduling.strategy).name == "FLEX_START"
    assert message.persistent_resource_id == "training-pool"
    assert message.service_account == "runner@proj-1.iam.gserviceaccount.com"
    assert message.base_output_directory.output_uri_prefix == "gs://team-bucket/runs/x"
    (pool,) = message.worker_pool_specs
    affinity = pool.machine_spec.reservation_affinity
    assert (aiplatform_v1.ReservationAffinity.Type(affinity.reservation_affinity_type).name, affinity.key,
            list(affinity.values)) == ("SPECIFIC_RESERVATION", "compute.googleapis.com/reservation-name", [RESERVATION])
    assert [(e.name, e.value) for e in pool.container_spec.env] == [("LOG_LEVEL", "debug"), ("SEED", "7")]
    assert pool.container_spec.image_uri == IMAGE


def test_one_builder_serves_the_cloud_step_and_the_local_launcher():
    """The parts validate-config outputs for custom_training_job assemble back to the very same spec, and the
    command every local replica runs is pool 0's container command."""
    cfg = _cfg("topology.evaluator.replica_count=1", "topology.evaluator.machine_type=n1-standard-4",
               "trainer.env={A: b}")
    spec = job_spec.custom_job_spec(cfg)
    parts = job_spec.parts(spec)
    assert len(parts["worker_pool_specs"]) == 4 and parts["worker_pool_specs"][2] == {}  # the evaluator stays at 3
    assert job_spec.job_spec(**parts) == spec
    container = spec["worker_pool_specs"][0]["container_spec"]
    assert container["command"] + container["args"] == job_spec.worker_command(cfg)
    assert all(p["container_spec"]["env"] == [{"name": "A", "value": "b"}] for p in spec["worker_pool_specs"] if p)


@pytest.mark.parametrize("sets,expected", [
    (["scheduling.max_wait_duration=30m"], "scheduling.max_wait_duration: '30m' is not a duration in seconds"),
    (["scheduling.max_wait_duration=600s"], "scheduling.max_wait_duration: applies to FLEX_START only, and neither "
                                            "scheduling.strategy (STANDARD) nor any strategy of placement is FLEX_START"),
    (["scheduling.strategy=FLEX_START"], "topology.chief.accelerator_type: FLEX_START (Dynamic Workload Scheduler) "
                                         "runs training on L4, A100, H100, H200 or B200 GPUs, not no GPU"),
    ([*FLEX, "scheduling.timeout=700000s"], "scheduling.timeout: 700000s is over FLEX_START's 7 days"),
    (["scheduling.persistent_resource_id=Pool_1"], "scheduling.persistent_resource_id: 'Pool_1' is not a persistent "
                                                   "resource id"),
    (["scheduling.reservation_affinity={key: compute.googleapis.com/reservation-name}"],
     "scheduling.reservation_affinity.reservation_affinity_type: is empty but key/values are set"),
    (["scheduling.reservation_affinity={reservation_affinity_type: ANY_RESERVATION, values: [x]}"],
     "scheduling.reservation_affinity.key: key and values name a reservation, which only SPECIFIC_RESERVATION takes"),
    (["scheduling.reservation_affinity={reservation_affinity_type: SPECIFIC_RESERVATION, values: ["
      f"{RESERVATION}]}}"], "scheduling.reservation_affinity.key: empty: a specific reservation is named by its name "
                            "label; valid choices: compute.googleapis.com/reservation-name"),
    (["scheduling.reservation_affinity={reservation_affinity_type: SPECIFIC_RESERVATION, key: "
      "compute.googleapis.com/reservation-name, values: [projects/p/zones/europe-west4-a/reservations/r]}"],
     "is in europe-west4, the job runs in us-central1: a reservation serves its own zone only"),
    (["scheduling.reservation_affinity={reservation_affinity_type: SPECIFIC, key: x}"],
     "scheduling.reservation_affinity.reservation_affinity_type: 'SPECIFIC' is not allowed (did you mean "),
    (["trainer.env={TF_CONFIG: x}"], "trainer.env.TF_CONFIG: is set by Vertex AI (or the local launcher)"),
    (["trainer.env={AIP_MODEL_DIR: x}"], "trainer.env.AIP_MODEL_DIR: is set by Vertex AI"),
    (["trainer.env={1X: y}"], "trainer.env.1X: is not an environment variable name"),
    (["trainer.env={X: true}"], "trainer.env.X: expected a string, got bool True"),
])
def test_each_scheduling_and_env_rule_is_one_line(sets, expected):
    from jobfile.errors import ConfigError

    try:
        errors = _errors(*sets)
    except ConfigError as exc:  # the schema's own refusals (a bad enum, a wrong type)
        errors = [str(p) for p in exc.problems]
    assert any(expected in e for e in errors), errors


def test_a_declared_number_is_its_text_and_keeps_the_files_order():
    cfg = config_lib.load("local", ["trainer.env={B: 1, A: 2.5, C: x}"])
    assert cfg.trainer.env == {"B": "1", "A": "2.5", "C": "x"}
    assert job_spec.container_env(cfg) == [{"name": "B", "value": "1"}, {"name": "A", "value": "2.5"},
                                           {"name": "C", "value": "x"}]
