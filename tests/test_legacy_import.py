"""AI Platform configs from the seeds -> this project's job config and Vertex worker pools; the CLI."""
from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from jobfile.errors import ConfigError
from jobs.rules.aiplatform.config_file import load_yaml
from jobs.commands.validate_cli import validate_main
from jobs.rules.aiplatform.legacy import import_legacy, is_legacy, to_worker_pool_specs, translate, translate_report
from jobs.rules.aiplatform.gcloud_flags import parse_gcloud_flags
from jobs.rules.hardware.rules import check_job

# ---- the seeds' own configs, verbatim ------------------------------------------------------------
T4_CONFIG = """
trainingInput:
  scaleTier: CUSTOM
  # Configure a master worker with 4 T4 GPUs
  masterType: n1-highcpu-16
  masterConfig:
    acceleratorConfig:
      count: 4
      type: NVIDIA_TESLA_T4
  # Configure 9 workers, each with 4 T4 GPUs
  workerCount: 9
  workerType: n1-highcpu-16
  workerConfig:
    acceleratorConfig:
      count: 4
      type: NVIDIA_TESLA_T4
  # Configure 3 parameter servers with no GPUs
  parameterServerCount: 3
  parameterServerType: n1-highmem-8
"""
LEGACY_TWIN = """
trainingInput:
  scaleTier: CUSTOM
  # Configure a master worker with 4 GPUs
  masterType: complex_model_m_gpu
  # Configure 9 workers, each with 4 GPUs
  workerCount: 9
  workerType: complex_model_m_gpu
  # Configure 3 parameter servers with no GPUs
  parameterServerCount: 3
  parameterServerType: large_model
"""
K80_CONFIG = T4_CONFIG.replace("NVIDIA_TESLA_T4", "NVIDIA_TESLA_K80")
GCLOUD_T4 = """gcloud ai-platform jobs submit training $JOB_NAME
  --package-path $APP_PACKAGE_PATH --module-name $MAIN_APP_MODULE --job-dir $JOB_DIR
  --region us-central1 --scale-tier custom
  --master-machine-type n1-highcpu-16 --master-accelerator count=4,type=nvidia-tesla-t4
  --worker-count 9 --worker-machine-type n1-highcpu-16 --worker-accelerator count=4,type=nvidia-tesla-t4
  --parameter-server-count 3 --parameter-server-machine-type n1-highmem-8
  -- --user_arg_1 value_1 --user_arg_n value_n""".split()
TPU_LEGACY_MASTER = """
trainingInput:
  scaleTier: CUSTOM
  masterType: complex_model_m
  workerType: cloud_tpu
  workerCount: 1
"""
TPU_TEMPLATE = """
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-highcpu-16
  workerType: cloud_tpu
  workerCount: 1
  workerConfig:
    acceleratorConfig:
      type: {type}
      count: {count}
"""
PYTORCH_XLA = """
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-highcpu-16
  masterConfig:
    imageUri: gcr.io/cloud-ml-public/training/pytorch-xla.1-11
  workerType: cloud_tpu
  workerCount: 1
  workerConfig:
    imageUri: gcr.io/cloud-ml-public/training/pytorch-xla.1-11
    tpuTfVersion: pytorch-1.11
    acceleratorConfig:
      type: TPU_V2
      count: 8
"""
CUSTOM_CONTAINER_TPU = """
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-highcpu-16
  masterConfig:
    imageUri: gcr.io/YOUR_PROJECT_ID/your-master-image-name:your-master-tag-name
  workerType: cloud_tpu
  workerCount: 1
  workerConfig:
    imageUri: gcr.io/YOUR_PROJECT_ID/your-worker-image-name:your-worker-tag-name
    tpuTfVersion: 2.11
    acceleratorConfig:
      type: {type}
      count: 8
"""
BASIC_TPU_FLAGS = """gcloud ai-platform jobs submit training tpu_mnist_1 --staging-bucket=gs://BUCKET_NAME
  --package-path=official --module-name=official.vision.image_classification.mnist_main
  --runtime-version=2.11 --python-version=3.7 --scale-tier=BASIC_TPU --region=us-central1
  -- --distribution_strategy=tpu --data_dir=gs://tfds-data/datasets
  --model_dir=gs://BUCKET_NAME/tpu_mnist_1_output""".split()


def load(text: str) -> dict:
    return yaml.safe_load(textwrap.dedent(text))


def spec(machine, accelerator=None, count=None, replicas=1):
    machine_spec = {"machine_type": machine}
    if accelerator:
        machine_spec.update(accelerator_type=accelerator, accelerator_count=count)
    return replicas, machine_spec


def shape(pools):
    return [(p["replica_count"], p["machine_spec"]) if p else {} for p in pools]


def imported(doc, argv=()):
    result = import_legacy(doc, argv)
    assert result.report.ok, result.report.errors
    assert check_job(result.job).ok
    return result


# ---- GPU configs --------------------------------------------------------------------------------
def test_t4_config():
    result = imported(load(T4_CONFIG))
    assert shape(result.pools) == [spec("n1-highcpu-16", "NVIDIA_TESLA_T4", 4),
                                   spec("n1-highcpu-16", "NVIDIA_TESLA_T4", 4, replicas=9),
                                   spec("n1-highmem-8", replicas=3), {}]
    # parameterServerCount maps to parameter-server training; the guides' master computed, TF2's chief only
    # coordinates, so its GPUs are a warning (on the legacy field that set them)
    assert result.job["topology"]["strategy"] == "parameter_server"
    assert {w.field for w in result.report.warnings} == {"trainingInput.region",
                                                         "trainingInput.masterConfig.acceleratorConfig.count"}


def test_legacy_machine_type_twin():
    result = imported(load(LEGACY_TWIN))
    assert shape(result.pools) == [spec("n1-standard-16", "NVIDIA_TESLA_K80", 4),
                                   spec("n1-standard-16", "NVIDIA_TESLA_K80", 4, replicas=9),
                                   spec("n1-highmem-8", replicas=3), {}]
    assert any("K80" in w.message and "retired" in w.message for w in result.report.warnings)


def test_k80_variant():
    result = imported(load(K80_CONFIG))
    assert shape(result.pools)[:2] == [spec("n1-highcpu-16", "NVIDIA_TESLA_K80", 4),
                                       spec("n1-highcpu-16", "NVIDIA_TESLA_K80", 4, replicas=9)]


def test_gcloud_flags_form_equals_the_file():
    overrides, user_args = parse_gcloud_flags(GCLOUD_T4)
    assert user_args == ["--user_arg_1", "value_1", "--user_arg_n", "value_n"]
    assert overrides["masterConfig"] == {"acceleratorConfig": {"count": 4, "type": "NVIDIA_TESLA_T4"}}
    assert overrides["scaleTier"] == "CUSTOM" and overrides["workerCount"] == 9
    from_flags = imported(None, GCLOUD_T4)
    from_file = imported(load(T4_CONFIG), ["--region", "us-central1"])
    assert shape(from_flags.pools) == shape(from_file.pools)
    assert from_flags.job["container"]["command"] == ["python", "-m", "$MAIN_APP_MODULE"]
    assert from_flags.job["container"]["args"] == ["--user_arg_1", "value_1", "--user_arg_n", "value_n"]
    assert from_flags.job["output"]["base_dir"] == "$JOB_DIR"
    assert from_flags.report.warnings[0].field == "--master-accelerator"
    assert from_flags.job["topology"]["strategy"] == "parameter_server"


def test_flag_overrides_the_file():
    argv = ["--config", "config.yaml", "--worker-count", "2", "--worker-accelerator", "type=nvidia-tesla-t4,count=2",
            "--master-accelerator", "count=2,type=nvidia-tesla-t4", "--region", "europe-west4"]
    result = imported(load(T4_CONFIG), argv)
    assert shape(result.pools)[:2] == [spec("n1-highcpu-16", "NVIDIA_TESLA_T4", 2),
                                       spec("n1-highcpu-16", "NVIDIA_TESLA_T4", 2, replicas=2)]
    assert result.job["topology"]["region"] == "europe-west4"


def test_errors_name_the_flag():
    result = import_legacy(load(T4_CONFIG), ["--worker-accelerator", "count=3,type=nvidia-tesla-t4",
                                             "--region", "us-central1"])
    [a] = result.report.errors  # no "same GPUs as the chief" rule: under parameter_server the chief computes nothing
    assert a.field == "--worker-accelerator" and "n1-highcpu-16 takes 1, 2 or 4 NVIDIA_TESLA_T4, not 3" in a.message
    with pytest.raises(ConfigError) as exc:
        parse_gcloud_flags(["--master-accelerator", "count=4;type=t4"])
    assert exc.value.problems[0].field == "--master-accelerator"
    with pytest.raises(ConfigError):
        parse_gcloud_flags(["--worker-count"])
    bad = import_legacy(None, ["--scale-tier", "custom", "--master-machine-type", "n1-standard-4",
                               "--worker-count", "x", "--worker-machine-type", "n1-standard-4"])
    assert bad.report.errors[0].field == "--worker-count"


def test_basic_gpu():
    result = imported(None, ["--scale-tier", "basic-gpu", "--region", "us-central1"])
    assert shape(result.pools) == [spec("n1-standard-8", "NVIDIA_TESLA_K80", 1), {}, {}, {}]
    assert result.job["topology"]["strategy"] == "one_device"
    assert imported({"trainingInput": {"scaleTier": "BASIC_GPU", "region": "us-central1"}}).pools == result.pools


def test_basic_and_scale_tier_misuse():
    assert shape(imported({"trainingInput": {"region": "us-central1"}}).pools) == [spec("n1-standard-4"), {}, {}, {}]
    _, problems = translate({"scaleTier": "BASIC", "masterType": "n1-standard-8", "region": "us-central1"})
    assert problems[0].field == "trainingInput.masterType" and problems[0].valid == ("CUSTOM",)


# ---- TPU configs --------------------------------------------------------------------------------
TPU_V2_8 = [spec("cloud-tpu", "TPU_V2", 8), {}, {}, {}]


def test_cloud_tpu_with_legacy_master():
    result = imported(load(TPU_LEGACY_MASTER))
    assert shape(result.pools) == TPU_V2_8
    assert result.job["topology"]["strategy"] == "tpu"
    assert any("dropped" in w.message and w.field == "trainingInput.masterType" for w in result.report.warnings)


@pytest.mark.parametrize("type_,count", [("TPU_V2", 8), ("TPU_V3", 8), ("TPU_V2_POD", 128), ("TPU_V3_POD", 32)])
def test_tpu_and_pod_configs(type_, count):
    result = imported(load(TPU_TEMPLATE.format(type=type_, count=count)))
    assert shape(result.pools) == [spec("cloud-tpu", type_, count), {}, {}, {}]


def test_pytorch_xla_config():
    result = imported(load(PYTORCH_XLA))
    assert result.job["topology"]["tpu_tf_version"] == "pytorch-1.11"
    assert result.pools[0]["container_spec"]["image_uri"] == "gcr.io/cloud-ml-public/training/pytorch-xla.1-11"
    wrong = load(PYTORCH_XLA)
    wrong["trainingInput"]["workerConfig"]["tpuTfVersion"] = "pytorch-1.9"
    _, [p] = translate(wrong["trainingInput"])
    assert p.field == "trainingInput.workerConfig.tpuTfVersion" and p.valid == ("pytorch-1.11",)


@pytest.mark.parametrize("type_", ["TPU_V2", "TPU_V3"])
def test_custom_container_tpu_config(type_):
    result = imported(load(CUSTOM_CONTAINER_TPU.format(type=type_)))
    assert result.job["topology"]["tpu_tf_version"] == "2.11"
    assert result.pools[0]["container_spec"]["image_uri"].startswith("gcr.io/YOUR_PROJECT_ID/your-worker-image-name")
    assert "command" not in result.pools[0]["container_spec"]  # the image's entrypoint runs
    missing = load(CUSTOM_CONTAINER_TPU.format(type=type_))
    del missing["trainingInput"]["workerConfig"]["tpuTfVersion"]
    _, [p] = translate(missing["trainingInput"])
    assert p.field == "trainingInput.workerConfig.tpuTfVersion" and "2.11" in p.valid


def test_basic_tpu_flags():
    result = imported(None, BASIC_TPU_FLAGS)
    assert shape(result.pools) == TPU_V2_8
    assert result.job["topology"]["tpu_tf_version"] == "2.11"
    assert result.job["container"]["command"] == ["python", "-m", "official.vision.image_classification.mnist_main"]
    assert result.user_args[0] == "--distribution_strategy=tpu"
    _, [p] = translate({"scaleTier": "BASIC_TPU", "runtimeVersion": "2.10", "region": "us-central1"})
    assert p.field == "trainingInput.runtimeVersion" and "2.11" in p.valid


# ---- failing configs ----------------------------------------------------------------------------
def fails(doc_or_ti, argv=()):
    doc = doc_or_ti if doc_or_ti is None or "trainingInput" in doc_or_ti else {"trainingInput": doc_or_ti}
    report = import_legacy(doc, argv).report
    assert not report.ok
    return report.errors


def test_worker_count_2_with_cloud_tpu():
    doc = load(TPU_LEGACY_MASTER)
    doc["trainingInput"]["workerCount"] = 2
    [p] = fails(doc)
    assert p.field == "trainingInput.workerCount" and p.valid == ("1",)


def test_parameter_server_with_tpu():
    doc = load(TPU_TEMPLATE.format(type="TPU_V2", count=8))
    doc["trainingInput"].update(parameterServerCount=1, parameterServerType="n1-highmem-8")
    [p] = fails(doc)
    assert p.field == "trainingInput.parameterServerCount" and p.valid == ("0",)


@pytest.mark.parametrize("type_,count,valid", [("TPU_V2", 16, ("8",)), ("TPU_V3_POD", 512, ("32", "128", "256"))])
def test_wrong_tpu_core_counts(type_, count, valid):
    [p] = fails(load(TPU_TEMPLATE.format(type=type_, count=count)))
    assert p.field == "trainingInput.workerConfig.acceleratorConfig.count" and p.valid == valid


def test_seed_zone_example_fails():
    doc = {"trainingInput": {
        "scaleTier": "CUSTOM", "region": "us-central1",
        "masterType": "n1-standard-8", "masterConfig": {"acceleratorConfig": {"count": 1, "type": "NVIDIA_TESLA_T4"}},
        "parameterServerCount": 2, "parameterServerType": "standard_gpu",  # K80
        "workerCount": 2, "workerType": "n1-standard-8",
        "workerConfig": {"acceleratorConfig": {"count": 1, "type": "NVIDIA_TESLA_P100"}}}}
    errors = fails(doc)
    zone = [p for p in errors if "no zone of us-central1" in p.message]
    assert len(zone) == 1 and zone[0].field == "trainingInput.region"


def test_tpu_in_us_east1_and_region_without_gpus():
    [p] = fails(load(TPU_LEGACY_MASTER), ["--region", "us-east1"])
    assert p.field == "--region" and p.valid == ("us-central1", "europe-west4")
    [p] = fails({"scaleTier": "BASIC_GPU", "region": "us-west2"})  # a region the catalog knows, without K80
    assert p.field == "trainingInput.region" and "does not offer NVIDIA_TESLA_K80" in p.message


def test_legacy_specific_violations():
    errors = fails({"scaleTier": "CUSTOM", "masterType": "complex_model_m", "workerType": "cloud_tpu",
                    "workerCount": 1, "workerConfig": {"acceleratorConfig": {"type": "TPU_V3", "count": 8}},
                    "tpuTfVersion": "2.11", "region": "us-central1"})
    by_field = {p.field: p for p in errors}
    assert by_field["trainingInput.tpuTfVersion"].valid[0] == "workerConfig.tpuTfVersion"
    assert "TPU_V2" in by_field["trainingInput.masterType"].message  # legacy master: TPU v2 only
    errors = fails({"scaleTier": "CUSTOM", "masterType": "complex_model_m_gpu", "region": "us-central1",
                    "masterConfig": {"acceleratorConfig": {"type": "NVIDIA_TESLA_T4", "count": 1}}})
    assert errors[0].field == "trainingInput.masterConfig.acceleratorConfig" and "built in" in errors[0].message
    [p] = fails({"scaleTier": "CUSTOM", "masterType": "complex_model_mm", "region": "us-central1"})
    assert p.field == "trainingInput.masterType" and "complex_model_m" in p.valid
    [p] = fails({"scaleTier": "CUSTOM", "region": "us-central1"})
    assert p.field == "trainingInput.masterType"


def test_is_legacy_and_to_worker_pool_specs():
    assert is_legacy(load(T4_CONFIG)) and is_legacy({"job": {"jobId": "x", "trainingInput": {}}})
    assert not is_legacy({"topology": {}}) and not is_legacy(None)
    job, problems = translate(load(T4_CONFIG)["trainingInput"])
    assert problems == []
    pools = to_worker_pool_specs(job, "gcr.io/p/img:1")
    assert [p["container_spec"]["image_uri"] for p in pools[:3]] == ["gcr.io/p/img:1"] * 3
    _, report = translate_report(load(T4_CONFIG)["trainingInput"])
    assert report.ok and report.warnings


# ---- CLI ----------------------------------------------------------------------------------------
PROJECT_YAML = """
name: flowers-local
data: {source: synthetic, path: "", image_size: 64}
model: {name: small_cnn}
training: {epochs: 2, per_replica_batch_size: 8, global_batch_size: 0}
checkpoint: {every_steps: 20, every_seconds: 0, keep: 3}
topology:
  strategy: multi_worker
  region: us-central1
  chief: {replica_count: 1, machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 2}
  worker: {replica_count: 2, machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 2}
container: {image_uri: "gcr.io/p/trainer:1", command: ["python", "-m", "trainers.task"], args: []}
output: {base_dir: ./runs/local}
scheduling: {strategy: STANDARD}
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_cli_valid_project_config(tmp_path, capsys):
    assert validate_main([write(tmp_path, "job.yaml", PROJECT_YAML)]) == 0
    out = capsys.readouterr().out
    assert "strategy multi_worker, 6 replica(s) in sync" in out
    assert "2 x NVIDIA_TESLA_T4" in out
    pools, end = json.JSONDecoder().raw_decode(out[out.index("worker_pool_specs:") + len("worker_pool_specs:"):].lstrip())
    assert pools[1]["replica_count"] == 2 and pools[2] == {} and len(pools) == 4
    assert "see the exact Vertex request, its price and where it can run" in out.strip().splitlines()[-1]


def test_cli_invalid_project_config(tmp_path, capsys):
    bad = PROJECT_YAML.replace("accelerator_count: 2}\n  worker", "accelerator_count: 3}\n  worker")
    bad = bad.replace("region: us-central1", "region: europe-north1").replace("strategy: multi_worker", "strategy: mirored")
    bad += "validation: {strict: true}\n"  # a region the catalog has no data for is an error only when strict
    assert validate_main(["validate", write(tmp_path, "bad.yaml", bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4, err
    assert all(line.startswith("error: ") for line in err)
    assert any("topology.chief.accelerator_count" in line for line in err)


def test_cli_legacy_yaml_and_flags(tmp_path, capsys):
    path = write(tmp_path, "config.yaml", T4_CONFIG)
    assert validate_main([path, "--region", "us-central1", "--", "--epochs", "3"]) == 0
    out = capsys.readouterr().out
    assert "valid AI Platform trainingInput" in out and "9         n1-highcpu-16" in out
    assert validate_main([path, "--worker-count", "2", "--worker-accelerator", "count=3,type=nvidia-tesla-t4"]) == 2
    err = capsys.readouterr().err
    assert "error: --worker-accelerator: n1-highcpu-16 takes 1, 2 or 4 NVIDIA_TESLA_T4, not 3" in err
    assert validate_main(["--config", write(tmp_path, "tpu.yaml", CUSTOM_CONTAINER_TPU.format(type="TPU_V3"))]) == 0
    assert '"accelerator_type": "TPU_V3"' in capsys.readouterr().out
    assert validate_main(BASIC_TPU_FLAGS) == 0  # flags only, no file


def test_cli_yaml_float_versions_keep_their_text(tmp_path):
    path = write(tmp_path, "c.yaml", "trainingInput:\n  runtimeVersion: 2.10\n")
    assert load_yaml(path)["trainingInput"]["runtimeVersion"].text == "2.10"
    _, [p] = translate({"scaleTier": "BASIC_TPU", "region": "us-central1",
                        "runtimeVersion": load_yaml(path)["trainingInput"]["runtimeVersion"]})
    assert "2.10 is not a runtime version" in p.message


@pytest.mark.parametrize("content,expected", [
    (None, "no such file"), ("topology: a: b\n", "YAML syntax error at line 1, column 12"), ("- a\n- b\n", "expected a mapping"),
])
def test_cli_bad_input_is_one_clear_line(tmp_path, capsys, content, expected):
    path = str(tmp_path / "missing.yaml") if content is None else write(tmp_path, "x.yaml", content)
    assert validate_main([path]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in captured.err


def test_cli_flags_rejected_for_project_format(tmp_path, capsys):
    assert validate_main([write(tmp_path, "job.yaml", PROJECT_YAML), "--worker-count", "3"]) == 2
    assert "error: --worker-count: gcloud-style flags apply only" in capsys.readouterr().err
    assert validate_main([]) == 2
    assert validate_main(["--help"]) == 0
