"""Data preparation on Apache Beam: the DirectRunner here, Google Cloud Dataflow on GCP.

Why Beam: decoding, resizing and encoding millions of images is embarrassingly parallel but too much for
one machine; Beam runs the same code on this machine's threads (``DirectRunner``) or on an autoscaled
Dataflow worker fleet, and Dataflow is Google Cloud's managed engine for exactly this.

Same output as ``runner="local"``, byte for byte: ``trainers.prepare`` scans the folder, validates, and
computes the plan (split and shard of every image, from ``sha256(seed, <class>/<file>)``) on the driver,
as always. Beam then does the heavy part -- one element per image: decode + resize + encode with the same
``trainers.sources.ShardSpec``; grouped by shard; each shard's records sorted back into the plan's order and
written with ``tf.io.TFRecordWriter`` to the temporary name the driver chose. The driver then commits
(rename, ``manifest.json`` last) exactly as for the local runner. Corrupt images are collected by the
pipeline into a small JSON file the driver reads, so the error is the same one-line-per-image report.

Dataflow workers need this package, TensorFlow and Pillow in a Beam SDK container:
``data.dataflow.sdk_container_image`` = an image ``FROM apache/beam_python3.11_sdk:2.77.0`` with
``pip install .[cpu]`` (Dataflow custom containers must derive from the Beam SDK image, so the trainer
image itself is not one). It is required: staging the package with ``--setup_file`` would bring neither
TensorFlow nor Pillow to the workers. Options are built and validated here
without any cloud call (:func:`dataflow_problems`, :func:`pipeline_options`); a missing project or temp
location is one line naming the field.
"""
from __future__ import annotations

import json
import logging
import os
import re
import uuid
from typing import Any

from trainers import fileio
from jobfile.errors import ConfigError, Problem, problem
from trainers.resource_names import PROJECT_RE, REGION_RE, SERVICE_ACCOUNT_RE, fits
from trainers.sources import ShardSpec, write_shard

log = logging.getLogger(__name__)

F_DATAFLOW = "data.dataflow"
SDK_IMAGE_HINT = "an image FROM apache/beam_python3.11_sdk:2.77.0 with this package installed (pip install .[cpu,beam])"
BEAM_RUNNERS = ("beam", "dataflow")


def beam_missing_problems(runner: str) -> list[Problem]:
    """Apache Beam is the ``beam`` extra, not a base dependency: a Beam runner without it is one problem
    (found without importing it; the trainer image has it only when built with ``EXTRAS=beam``)."""
    import importlib.util

    if runner not in BEAM_RUNNERS or importlib.util.find_spec("apache_beam") is not None:
        return []
    return [problem("data.prepare_runner", f"{runner} needs Apache Beam (apache_beam), which is not installed in "
                                           "this environment: pip install '.[beam]'; for the trainer image: "
                                           "python pipelines/run.py build --build-arg EXTRAS=beam", ["local"])]


def dataflow_problems(df: Any) -> list[Problem]:
    """Every problem of a ``config.Dataflow`` block, offline (no credentials, no API call)."""
    p: list[Problem] = []
    why = "data.prepare_runner=dataflow needs it"
    if not df.project:
        p.append(problem(f"{F_DATAFLOW}.project", f"is empty; the Google Cloud project Dataflow runs in ({why})"))
    elif not fits(PROJECT_RE, df.project):
        p.append(problem(f"{F_DATAFLOW}.project", f"{df.project!r} is not a project id (6-30 lower-case letters, "
                                                 "digits, hyphens, starting with a letter)"))
    if not df.region:
        p.append(problem(f"{F_DATAFLOW}.region", f"is empty ({why})", ["us-central1", "europe-west4"]))
    elif not fits(REGION_RE, df.region):
        p.append(problem(f"{F_DATAFLOW}.region", f"{df.region!r} is not a region name", ["us-central1", "europe-west4"]))
    if not df.temp_location:
        p.append(problem(f"{F_DATAFLOW}.temp_location", f"is empty; a gs:// folder for Dataflow's temporary files ({why})"))
    for field in ("temp_location", "staging_location"):
        value = getattr(df, field)
        if value and not re.match(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$", value):
            p.append(problem(f"{F_DATAFLOW}.{field}", f"{value!r} is not a gs://bucket/folder path"))
    if df.service_account and not fits(SERVICE_ACCOUNT_RE, df.service_account):
        p.append(problem(f"{F_DATAFLOW}.service_account", f"{df.service_account!r} is not a service account email "
                                                         "(NAME@PROJECT.iam.gserviceaccount.com)"))
    if not df.sdk_container_image:
        p.append(problem(f"{F_DATAFLOW}.sdk_container_image", f"is empty; Dataflow workers need TensorFlow, Pillow and "
                                                             f"this package: {SDK_IMAGE_HINT}"))
    if df.max_num_workers < 0:
        p.append(problem(f"{F_DATAFLOW}.max_num_workers", f"must be 0 (Dataflow decides) or more, got {df.max_num_workers}"))
    return p


def pipeline_options(runner: str, df: Any = None, job_name: str = "prepare-tfrecords"):
    """``PipelineOptions`` for ``beam`` (DirectRunner, this machine's cores) or ``dataflow`` (from ``df``).
    Raises ConfigError naming the field when the Dataflow block is incomplete or Beam is not installed.
    Makes no cloud call."""
    if beam_missing_problems(runner):
        raise ConfigError(beam_missing_problems(runner))
    from apache_beam.options.pipeline_options import PipelineOptions

    if runner == "beam":
        return PipelineOptions(runner="DirectRunner", direct_running_mode="multi_threading",
                               direct_num_workers=max(1, os.cpu_count() or 1))
    if runner != "dataflow":
        raise ConfigError(problem("data.prepare_runner", f"{runner!r} is not a Beam runner", ["beam", "dataflow"]))
    problems = dataflow_problems(df)
    if problems:
        raise ConfigError(problems)
    name = re.sub(r"[^a-z0-9-]+", "-", job_name.lower()).strip("-")[:40] or "prepare"
    opts: dict[str, Any] = {
        "runner": "DataflowRunner", "project": df.project, "region": df.region,
        "temp_location": df.temp_location, "staging_location": df.staging_location or df.temp_location,
        "job_name": f"{name}-{uuid.uuid4().hex[:8]}", "save_main_session": False,
    }
    if df.service_account:
        opts["service_account_email"] = df.service_account
    if df.max_num_workers:
        opts["max_num_workers"] = df.max_num_workers
    if df.machine_type:
        opts["machine_type"] = df.machine_type
    opts["sdk_container_image"] = df.sdk_container_image
    return PipelineOptions(**opts)


def _encode(element, spec: ShardSpec):
    shard, position, rel, label = element
    record, err = spec.record(rel, label)
    return shard, (position, rel, record, err)


def _write(keyed, paths: list[str]):
    """Write one shard in the plan's order; emit its corrupt images (then nothing is written)."""
    shard, entries = keyed
    entries = sorted(entries, key=lambda e: e[0])
    bad = [(rel, err) for _, rel, _, err in entries if err]
    if not bad:
        write_shard(paths[shard], (record for _, _, record, _ in entries))
    return bad


def write_shards(spec: ShardSpec, targets: list[tuple[str, list[tuple[str, int]]]], runner: str,
                 options: Any = None) -> list[tuple[str, str]]:
    """Run the Beam pipeline writing every ``(temporary path, [(rel, label)])`` target; returns the
    ``[(rel, error)]`` of images that could not be read (sorted), like the local runner."""
    if beam_missing_problems(runner):
        raise ConfigError(beam_missing_problems(runner))
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    if not isinstance(options, PipelineOptions):
        options = pipeline_options(runner, options)
    paths = [path for path, _ in targets]
    elements = [(s, pos, rel, label) for s, (_, shard) in enumerate(targets) for pos, (rel, label) in enumerate(shard)]
    report = f"{paths[0]}.errors-{uuid.uuid4().hex[:8]}.json.tmp-beam" if paths else ""

    def save_report(bad):
        fileio.write_bytes(report, json.dumps(sorted(bad)).encode("utf-8"))

    with beam.Pipeline(options=options) as pipeline:
        _ = (pipeline
             | "Images" >> beam.Create(elements, reshuffle=True)
             | "DecodeEncode" >> beam.Map(_encode, spec)
             | "ByShard" >> beam.GroupByKey()
             | "WriteShard" >> beam.FlatMap(_write, paths)
             | "Corrupt" >> beam.combiners.ToList()
             | "Report" >> beam.Map(save_report))
    try:
        bad = json.loads(fileio.read_bytes(report).decode("utf-8")) if report else []
    finally:
        fileio.remove_quiet(report)
    return sorted((rel, err) for rel, err in bad)
