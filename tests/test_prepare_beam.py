"""Data preparation on Apache Beam (``trainers.prepare_beam``): DirectRunner output equals the single-process
output byte for byte, corrupt images are reported the same way, the job's prepare step picks the runner
from the config, and Dataflow options are built and validated without any cloud call."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("apache_beam")

from jobfile import config as config_lib
from trainers import prepare, prepare_beam  # noqa: E402
from jobfile.errors import ConfigError  # noqa: E402


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("beam") / "images"
    prepare.synthesize_image_folder(str(root), num_classes=3, images_per_class=9, image_size=40, seed=1)
    return root


@pytest.mark.parametrize("encoding", ["raw", "jpeg"])
def test_direct_runner_output_equals_the_single_process_output_byte_for_byte(images, tmp_path, encoding):
    local = prepare.prepare_tfrecords(str(images), str(tmp_path / "local"), 24, num_shards=3,
                                      validation_fraction=0.25, seed=7, encoding=encoding)
    beam = prepare.prepare_tfrecords(str(images), str(tmp_path / "beam"), 24, num_shards=3,
                                     validation_fraction=0.25, seed=7, encoding=encoding, runner="beam")
    assert beam == local
    a, b = _files(tmp_path / "local"), _files(tmp_path / "beam")
    assert sorted(a) == sorted(b) and len([n for n in a if n.endswith(".tfrecord")]) == 6
    assert all(a[name] == b[name] for name in a), [n for n in a if a[n] != b[n]]
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]  # nothing left behind


def test_corrupt_images_are_reported_per_image_and_nothing_is_written(images, tmp_path):
    import shutil

    copy = tmp_path / "images"
    shutil.copytree(images, copy)
    (copy / "roses" / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(ConfigError) as err:
        prepare.prepare_tfrecords(str(copy), str(tmp_path / "out"), 24, num_shards=2, runner="beam")
    text = str(err.value)
    assert "broken.jpg" in text and "cannot be read as an image" in text
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_the_prepare_step_runs_the_runner_named_in_the_config(images, tmp_path):
    from jobs.steps import calls as steps
    cfg = config_lib.load("local", [f"output.base_dir={tmp_path}", "data.source=images", f"data.path={images}",
                                    "data.image_size=24", "data.prepare_runner=beam", "data.encoding=jpeg"])
    data_dir, manifest = steps.prepare(cfg)
    assert manifest["encoding"] == "jpeg" and Path(data_dir, "manifest.json").exists()


DATAFLOW = config_lib.Dataflow(project="my-project", region="europe-west4", temp_location="gs://my-bucket/tmp",
                               service_account="prep-runner@my-project.iam.gserviceaccount.com", max_num_workers=8,
                               machine_type="n1-highcpu-8",
                               sdk_container_image="europe-docker.pkg.dev/my-project/t/beam-prep:1")


def test_dataflow_options_are_built_without_a_cloud_call():
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions, WorkerOptions

    opts = prepare_beam.pipeline_options("dataflow", DATAFLOW, job_name="Flowers_Prep")
    gcp, worker = opts.view_as(GoogleCloudOptions), opts.view_as(WorkerOptions)
    assert opts.view_as(StandardOptions).runner == "DataflowRunner"
    assert (gcp.project, gcp.region, gcp.temp_location, gcp.staging_location) == (
        "my-project", "europe-west4", "gs://my-bucket/tmp", "gs://my-bucket/tmp")
    assert gcp.service_account_email == "prep-runner@my-project.iam.gserviceaccount.com"
    assert gcp.job_name.startswith("flowers-prep-")
    assert (worker.max_num_workers, worker.machine_type) == (8, "n1-highcpu-8")
    assert worker.sdk_container_image == DATAFLOW.sdk_container_image
    direct = prepare_beam.pipeline_options("beam")
    assert direct.view_as(StandardOptions).runner == "DirectRunner"


@pytest.mark.parametrize("change,field", [
    ({"project": ""}, "data.dataflow.project: is empty"),
    ({"temp_location": ""}, "data.dataflow.temp_location: is empty"),
    ({"temp_location": "/tmp/x"}, "data.dataflow.temp_location: '/tmp/x' is not a gs://bucket/folder path"),
    ({"project": "My Project"}, "data.dataflow.project: 'My Project' is not a project id"),
    ({"service_account": "me@example.com"}, "data.dataflow.service_account:"),
    ({"sdk_container_image": ""}, "data.dataflow.sdk_container_image: is empty"),
])
def test_a_missing_or_bad_dataflow_option_is_one_line_naming_the_field(change, field):
    with pytest.raises(ConfigError) as err:
        prepare_beam.pipeline_options("dataflow", dataclasses.replace(DATAFLOW, **change))
    assert len(err.value.problems) == 1 and str(err.value.problems[0]).startswith(field), str(err.value)


def test_validate_checks_the_dataflow_block_only_for_the_dataflow_runner():
    from jobs.rules.validate import validate

    cfg = config_lib.load("local", ["data.prepare_runner=dataflow", "data.dataflow.project=my-project"])
    errors = [str(e) for e in validate(cfg, check_data=False).errors]
    assert any(e.startswith("data.dataflow.temp_location: is empty") for e in errors), errors
    assert not validate(config_lib.load("local", ["data.prepare_runner=beam"]), check_data=False).errors
