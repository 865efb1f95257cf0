"""Which image a job runs: variant from the accelerators, repository per variant, explicit image wins."""
from __future__ import annotations

import pytest

from jobs import images
from jobs.images.context import BuildError
from jobfile import config as config_lib

AR = "us-central1-docker.pkg.dev/my-project/training/tf-trainer"


@pytest.mark.parametrize("preset, variant", [("local", "cpu"), ("gpu-1x4", "gpu"), ("multiworker", "gpu"),
                                             ("tpu", "tpu")])
def test_presets_pick_their_variant(preset, variant):
    cfg = config_lib.load(preset)
    assert images.variant_for(cfg) == variant
    suffix = images.VARIANT_SUFFIX[variant]
    with pytest.raises(BuildError, match="placeholder project 'my-project'"):
        images.build_repository(cfg)  # the presets' example repository is never pushed to
    real = config_lib.load(preset, [f"container.image_repository={AR.replace('my-project', 'acme')}"])
    assert images.build_repository(real) == AR.replace("my-project", "acme") + suffix
    assert images.job_image(cfg) == f"{AR}{suffix}:latest"
    assert images.component_image(cfg) == f"{AR}:latest"  # components never train: always cpu


def test_variant_follows_any_pool_with_replicas():
    gpu_evaluator = config_lib.load("local", ["topology.evaluator.replica_count=1",
                                              "topology.evaluator.machine_type=n1-standard-4",
                                              "topology.evaluator.accelerator_type=NVIDIA_TESLA_T4",
                                              "topology.evaluator.accelerator_count=1"])
    assert images.variant_for(gpu_evaluator) == "gpu"
    unused_pool = config_lib.load("local", ["topology.evaluator.replica_count=0",
                                            "topology.evaluator.accelerator_type=NVIDIA_TESLA_T4",
                                            "topology.evaluator.accelerator_count=1"])
    assert images.variant_for(unused_pool) == "cpu"
    tpu_vm = config_lib.load("local", ["topology.strategy=one_device", "topology.worker.replica_count=0",
                                       "topology.chief.machine_type=ct5lp-hightpu-4t",
                                       "topology.chief.tpu_topology=2x2"])
    assert images.variant_for(tpu_vm) == "tpu"
    assert images.variant_for(config_lib.load("gpu-1x4").to_dict()) == "gpu"  # a plain dict works too


def test_explicit_image_wins_everywhere():
    cfg = config_lib.load("gpu-1x4", ["container.image_uri=europe-docker.pkg.dev/p/r/mine:v3"])
    assert images.job_image(cfg) == images.component_image(cfg) == "europe-docker.pkg.dev/p/r/mine:v3"
    assert images.job_image(config_lib.load("gpu-1x4"), built=f"{AR}-gpu:ctx-1@sha256:{'a' * 64}").startswith(AR)
    # no image_repository: a build goes to the explicit image's repository
    only_uri = config_lib.load("local", ["container.image_repository=", "container.image_uri=reg.io/p/x:1"])
    assert images.build_repository(only_uri) == "reg.io/p/x"
    with pytest.raises(BuildError, match="container.image_repository"):
        images.build_repository(config_lib.load("local", ["container.image_repository="]))


def test_vertex_job_runs_the_variant_image():
    from jobs.rules import job_spec
    specs = job_spec.parts(job_spec.custom_job_spec(config_lib.load("gpu-1x4")))["worker_pool_specs"]
    assert specs[0]["container_spec"]["image_uri"] == f"{AR}-gpu:latest"


D = "sha256:" + "b" * 64


@pytest.mark.parametrize("ref, parsed", [
    (AR, ("us-central1-docker.pkg.dev", "my-project/training/tf-trainer", None, None)),
    (f"{AR}:ctx-0123", ("us-central1-docker.pkg.dev", "my-project/training/tf-trainer", "ctx-0123", None)),
    (f"{AR}:ctx-0123@{D}", ("us-central1-docker.pkg.dev", "my-project/training/tf-trainer", "ctx-0123", D)),
    (f"{AR}@{D}", ("us-central1-docker.pkg.dev", "my-project/training/tf-trainer", None, D)),
    ("127.0.0.1:5000/tests/x", ("127.0.0.1:5000", "tests/x", None, None)),
    ("localhost:5000/a_b/c-d.e:1.0", ("localhost:5000", "a_b/c-d.e", "1.0", None)),
    # Docker Hub, however it is written: registry docker.io, official images under library/
    ("busybox", ("docker.io", "library/busybox", None, None)),
    ("user/name:v1", ("docker.io", "user/name", "v1", None)),
    ("docker.io/user/name", ("docker.io", "user/name", None, None)),
    ("index.docker.io/user/name", ("docker.io", "user/name", None, None)),
    ("docker.io/busybox", ("docker.io", "library/busybox", None, None)),
])
def test_parse_reference(ref, parsed):
    got = images.parse_reference(ref)
    assert (got.registry, got.path, got.tag, got.digest) == parsed
    assert got.pinned == (parsed[3] is not None)
    assert images.parse_reference(str(got)) == got  # the normalised form parses to the same reference


def test_docker_hub_is_asked_at_its_api_host_without_the_docker_io_prefix():
    from jobs.cloud.apis.registry import registry_url

    assert registry_url(images.parse_reference("docker.io/user/name:v1")) == \
        "https://registry-1.docker.io/v2/user/name/manifests/v1"
    assert registry_url(images.parse_reference("127.0.0.1:5000/t/x:v1")) == "http://127.0.0.1:5000/v2/t/x/manifests/v1"
    assert registry_url(images.parse_reference(f"{AR}:v1")) == \
        "https://us-central1-docker.pkg.dev/v2/my-project/training/tf-trainer/manifests/v1"


@pytest.mark.parametrize("ref, why", [
    ("", "empty"), (" reg.io/p/x", "empty or surrounded by spaces"), ("UPPER/case", "expected HOST"),
    ("reg.io/p/x:", "is not a valid tag"), ("reg.io/p/x@sha256:12", "digest must be sha256:<64"),
    ("reg.io/p/x@sha256:" + "A" * 64, "digest must be sha256:<64 lowercase"),
    ("reg.io/p/x@md5:" + "a" * 32, "digest must be"), ("reg.io//x", "expected HOST"), ("a b", "expected HOST"),
    ("TF Trainer:v1", "expected HOST"), ("reg.io/p/x:-bad", "is not a valid tag"), ("reg.io/p/x_", "expected HOST"),
])
def test_bad_references_are_one_line(ref, why):
    with pytest.raises(BuildError) as err:
        images.parse_reference(ref)
    assert "\n" not in str(err.value) and "bad image reference" in str(err.value) and why in str(err.value)


def test_variant_repository():
    assert images.repository_for(AR, "tpu") == AR + "-tpu"
    with pytest.raises(BuildError, match="valid choices: cpu, gpu, tpu"):
        images.repository_for(AR, "fpga")
