"""The pipeline's steps as plain library calls (the KFP components are thin wrappers over these).

``prepare`` -> ``run_local`` (or a Vertex CustomJob built from ``vertex_job``) -> ``verify``.
"""
from __future__ import annotations

import os
import time
from typing import Any

from trainers import config as config_lib
from trainers import fileio
from trainers.paths import join

DEFAULT_COMMAND = ["python", "-m", "trainers.task"]


def worker_command(cfg: config_lib.JobConfig) -> list[str]:
    """The command every replica runs. With the built-in trainer and no explicit args, the whole config
    travels as ``--config-json`` so Vertex replicas need no file; a user's own trainer gets its args."""
    args = list(cfg.container.args)
    if not args and list(cfg.container.command) == DEFAULT_COMMAND:
        args = ["--config-json", cfg.to_json()]
    return list(cfg.container.command) + args


def output_dirs(cfg: config_lib.JobConfig) -> dict[str, str]:
    """Where Vertex (AIP_*) and the local launcher put the model, checkpoints and TensorBoard logs."""
    from trainers.cluster import output_dirs as dirs_for, read_cluster

    return dirs_for(read_cluster({}), config_lib.resolved_base_dir(cfg))


def prepare(cfg: config_lib.JobConfig) -> tuple[str, dict[str, Any]]:
    """Make the TFRecord shards the trainer reads; returns (data_dir, manifest)."""
    from trainers import data as data_lib
    from trainers import prepare as prepare_lib

    d = cfg.data
    data_dir = config_lib.prepared_data_dir(cfg)
    if d.source == "tfrecord":
        return data_dir, data_lib.load_manifest(data_dir)
    images = config_lib.image_dir(cfg)
    if d.source == "synthetic":
        prepare_lib.synthesize_image_folder(images, num_classes=d.synthetic_classes,
                                            images_per_class=d.synthetic_images_per_class,
                                            image_size=max(d.image_size, 32), seed=cfg.training.seed)
    # data.prepare_runner: local threads, or Apache Beam (DirectRunner / Dataflow) writing the same files
    manifest = prepare_lib.prepare_tfrecords(images, data_dir, image_size=d.image_size, num_shards=d.num_shards,
                                             validation_fraction=d.validation_fraction, seed=cfg.training.seed,
                                             encoding=d.encoding, jpeg_quality=d.jpeg_quality,
                                             runner=d.prepare_runner, beam_options=d.dataflow,
                                             progress=_shard_progress(time.monotonic()))
    return data_dir, manifest


def _shard_progress(started: float):
    """One line per shard written (the console shows them as progress; the log keeps them all)."""
    def report(shards_done: int, shards: int, images_done: int, images: int) -> None:
        rate = images_done / max(time.monotonic() - started, 1e-9)
        console_log(f"shard {shards_done}/{shards} written ({images_done}/{images} images, {rate:.0f} images/s)")
    return report


def console_log(line: str) -> None:
    """print() that outlives its reader: after Ctrl-C, kfp.local's parent closes the task's stdout pipe
    while the launcher is still stopping replicas (SIGTERM, checkpoint at the next step). A write error
    there must not cut that short; every replica's full log is on disk anyway."""
    try:
        print(line, flush=True)
    except (BrokenPipeError, OSError, ValueError):
        pass


def launch_rules(cfg: config_lib.JobConfig) -> dict[str, str]:
    """The launcher's done and worker-failure rules for the config's strategy. Parameter-server training:
    workers and parameter servers are servers, so the job is done when the chief (and the evaluator) exit 0,
    and a dead worker is tolerated (the chief reschedules its steps), as Vertex keeps the job running when
    ``restart_job_on_worker_restart`` is false. All-reduce strategies: every worker must finish, and any
    replica's death restarts the whole job (its peers cannot go on without it)."""
    if cfg.topology.strategy == "parameter_server":  # a user's own trainer too: TF's PS architecture
        return {"done_when": "chief", "on_worker_failure": "tolerate"}
    return {"done_when": "all", "on_worker_failure": "restart"}


def run_local(cfg: config_lib.JobConfig, log=console_log, timeout_s: float | None = None):
    """Run the job's worker pools as processes on this machine, exactly as Vertex would run them.

    On KeyboardInterrupt (Ctrl-C reaches the task with the terminal's process group) the launcher stops
    every replica the way Vertex preempts one (SIGTERM: save at the next step boundary, exit 42; SIGKILL
    after the grace period) before the interrupt propagates."""
    import sys

    from jobs.local import launcher

    command = worker_command(cfg)
    if command[0] in ("python", "python3"):  # the container's python is this interpreter here
        command[0] = sys.executable
    timeout = timeout_s if timeout_s is not None else float(cfg.scheduling.timeout.rstrip("s"))
    return launcher.launch(
        command, cfg.topology.replica_counts(), config_lib.resolved_base_dir(cfg),
        job_id=cfg.name, max_restarts=cfg.scheduling.max_restarts, timeout_s=timeout, log=log,
        env={"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}, **launch_rules(cfg),
    )


def _read_json(cfg: config_lib.JobConfig, name: str) -> dict[str, Any]:
    return fileio.read_json(join(config_lib.resolved_base_dir(cfg), name)) or {}


def read_metrics(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the chief wrote at the end of training (``<base>/metrics.json``)."""
    return _read_json(cfg, "metrics.json")


def read_evaluation(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What the side-car evaluator wrote (``<base>/evaluation.json``; empty without an evaluator pool)."""
    return _read_json(cfg, "evaluation.json")


def read_verification(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What :func:`verify` found (``<base>/verification.json``)."""
    return _read_json(cfg, "verification.json")


def trainer_image(cfg: config_lib.JobConfig, build_context_uri: str = "", dockerfile: str = "containers/Dockerfile",
                  project: str = "", endpoint: str | None = None, log=print) -> str:
    """The image the job's replicas run. No build context: the config's image, with no cloud call (so
    kfp.local runs stay offline). A ``gs://`` context tarball: built and pushed by Cloud Build into the
    job's variant repository, returned by digest (``REPO:TAG@sha256:...``)."""
    from jobs import images

    if not build_context_uri:
        return images.job_image(cfg)
    from jobs.cloud import cloudbuild

    variant = images.variant_for(cfg)
    return cloudbuild.build_job_image(build_context_uri, images.build_repository(cfg, variant), variant=variant,
                                      dockerfile=dockerfile, project=project, endpoint=endpoint or None, log=log)


def with_image(cfg: config_lib.JobConfig, image_uri: str) -> config_lib.JobConfig:
    """``cfg`` with ``container.image_uri`` replaced (a built image by digest wins over the config's)."""
    import dataclasses

    if not image_uri:
        return cfg
    return dataclasses.replace(cfg, container=dataclasses.replace(cfg.container, image_uri=image_uri))


def vertex_job(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """What a Vertex CustomJob needs, derived from the same config (pool 0 chief, 1 workers, ...)."""
    from jobs.hardware.pools import worker_pool_specs
    from jobs.images import job_image  # container.image_uri, else the variant the accelerators need

    command = worker_command(cfg)
    return {
        "display_name": cfg.name,
        "worker_pool_specs": worker_pool_specs(cfg.to_dict(), job_image(cfg), command[:1], command[1:]),
        "base_output_directory": cfg.output.base_dir,
        "scheduling_strategy": cfg.scheduling.strategy,
        "restart_job_on_worker_restart": cfg.scheduling.restart_job_on_worker_restart,
        "timeout": cfg.scheduling.timeout,
        "tensorboard": cfg.output.tensorboard,
    }


def verify(model_dir: str, data_dir: str, max_examples: int = 0) -> dict[str, Any]:
    """Load the exported SavedModel in a fresh process and run its signature on held-out examples."""
    from trainers.export import verify_in_fresh_process

    result = verify_in_fresh_process(model_dir, data_dir, max_examples)
    base = model_dir.rstrip("/").rsplit("/", 1)[0]
    fileio.write_json_atomic(join(base, "verification.json"),
                             {k: v for k, v in result.items() if k != "metadata"})
    return result
