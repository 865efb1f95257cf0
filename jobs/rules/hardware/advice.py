"""Warnings: configurations that are valid but wasteful or risky.  Same Problem format as errors.

- GPUs/TPUs on a SPOT job with no checkpointing (checkpoint.every_steps == 0 and every_seconds == 0);
- SPOT without scheduling.restart_job_on_worker_restart;
- strategy one_device on a machine with more than one GPU (the other GPUs sit idle).  The brief lists
  "one_device: <= 1 accelerator" among the strategy rules and "one_device with accelerator_count > 1"
  among the warnings; it runs, it only wastes money, so it is a warning;
- parameter servers with a strategy that does not use them: they would sit idle (only parameter_server
  uses them);
- parameter_server with GPUs on the parameter servers or on the chief (they store variables / coordinate:
  the GPUs sit idle), or with ``restart_job_on_worker_restart: true`` (a restarted worker rejoins on its own;
  true restarts the whole job, chief and parameter servers included, each time one worker restarts);
- an evaluator or parameter server with no workers: GCPC's launcher drops empty ``{}`` pools and the
  evaluator would land in workerpool1 (FACTS.md);
- legacy/retired GPU types (K80 retired, P4/P100 older generation: catalog ``status``/``note``);
- ``training.precision: float16`` on a GPU with no fast float16 (no tensor cores, not GP100), ``bfloat16`` on one
  before Ampere; tpu_tf_version without a TPU.
"""
from __future__ import annotations

from typing import Any

from jobfile import config as config_lib
from jobfile.errors import Problem, problem
from trainers.gpus import AMPERE, fast_float16
from jobs.rules.hardware.catalog import Gpu, load_catalog
from jobs.rules.hardware.shared import JobView, Pool, view, has_tpu


def check_warnings(job: Any) -> list[Problem]:
    cat, v = load_catalog(), view(job)
    out: list[Problem] = []
    pools = [p for p in v.used_pools if p.ok]
    accelerated = [p for p in pools if p.accelerator_type or (cat.machines.get(p.machine_type)
                                                             and cat.machines[p.machine_type].tpu)]
    if v.job.scheduling.strategy == "SPOT" and accelerated and v.job.checkpoint.every_steps == 0 and v.job.checkpoint.every_seconds == 0:
        out.append(problem("checkpoint.every_steps", "SPOT accelerators can be preempted at any time and no "
                                                      "checkpointing is configured: a preemption loses all progress",
                           ["every_steps > 0", "every_seconds > 0"]))
    if v.job.scheduling.strategy == "SPOT" and not v.job.scheduling.restart_job_on_worker_restart and v.strategy != "parameter_server":
        out.append(problem("scheduling.restart_job_on_worker_restart",
                           "a SPOT job whose VM is preempted fails instead of restarting", ["true"]))
    chief = v.pools["chief"]
    if v.strategy == "one_device" and chief.ok and chief.accelerator_count > 1 and cat.is_gpu(chief.accelerator_type):
        out.append(problem("topology.chief.accelerator_count",
                           f"one_device uses 1 of the {chief.accelerator_count} {chief.accelerator_type}: "
                           "the rest are paid for and idle; use strategy mirrored or accelerator_count 1",
                           [1]))
    ps = v.pools.get("parameter_server", Pool("parameter_server"))
    if ps.used and not has_tpu(v) and v.strategy in cat.strategies and v.strategy != "parameter_server":
        what = "MultiWorkerMirroredStrategy does not use them" if v.strategy == "multi_worker" \
            else f"strategy {v.strategy} does not use them"
        out.append(problem("topology.parameter_server.replica_count",
                           f"{ps.replica_count} parameter server(s) would sit idle, paid for: {what}; use "
                           "strategy parameter_server or remove them", [0]))
    out += ps_machine_warnings(v) + ps_restart_warnings(v)
    worker = v.pools.get("worker", Pool("worker"))
    for name in ("parameter_server", "evaluator"):
        pool = v.pools.get(name, Pool(name))
        if name == "parameter_server" and v.strategy == "parameter_server":
            continue  # an error there (rules.check_parameter_servers): workers are required
        if pool.used and not worker.used and not (name == "parameter_server" and has_tpu(v)):
            out.append(problem(f"topology.{name}.replica_count",
                               f"with no workers, Vertex drops the empty worker pool 1 and the {name} "
                               "pool moves into workerpool1, where the trainer sees it as a worker", [0]))
    for gpu in dict.fromkeys(p.accelerator_type for p in pools if p.accelerator_type in cat.gpus):
        info = cat.gpus[gpu]
        paths = [f"topology.{p.name}.accelerator_type" for p in pools if p.accelerator_type == gpu]
        if info.status in ("retired", "legacy"):
            out.append(problem(paths[0], info.advice(), info.use_instead))
        out += precision_warnings(v.job.training, info)
    if v.job.topology.tpu_tf_version and not has_tpu(v):
        out.append(problem("topology.tpu_tf_version", "is ignored: the job has no TPU", [""]))
    return out


def precision_warnings(training: config_lib.Training, gpu: Gpu) -> list[Problem]:
    """A reduced precision asked for explicitly (``training.precision``) on a GPU where it cannot pay, by the
    replica's own rule of which GPU computes what fast (``trainers.gpus``, the catalog's compute capability):
    float16 without tensor cores or Pascal GP100's double rate (K80, P4), bfloat16 before Ampere (no bf16 tensor
    cores: emulated, slower than float32). ``auto`` decides per device and is never warned about; the deprecated
    ``mixed_precision: true`` means ``auto``."""
    cc = gpu.compute_capability
    if cc is None or training.precision not in ("float16", "bfloat16"):
        return []
    what = f"{gpu.name} (compute capability {cc[0]}.{cc[1]})"
    if training.precision == "float16" and not fast_float16(cc) and cc < AMPERE:
        why = "has no tensor cores and no fast float16: float16 will not speed training up"
    elif training.precision == "bfloat16" and cc < AMPERE:
        why = "has no bf16 tensor cores (Ampere, 8.0, and later): bfloat16 is emulated and slower than float32"
    else:
        return []
    return [problem("training.precision", f"{what} {why}", ["auto", "float32"])]


def ps_machine_warnings(v: JobView) -> list[Problem]:
    """parameter_server: GPUs on the parameter servers (they store and update variables) or on the chief (it
    coordinates) are paid for and idle; only the workers compute."""
    if v.strategy != "parameter_server" or has_tpu(v):
        return []
    out = []
    roles = {"parameter_server": "parameter servers only store and update the variables",
             "chief": "the chief only coordinates (schedules steps, writes checkpoints)"}
    for name, role in roles.items():
        pool = v.pools.get(name, Pool(name))
        if pool.ok and pool.used and pool.accelerator_type and pool.accelerator_count > 0:
            out.append(problem(f"topology.{name}.accelerator_count",
                               f"{role}: its {pool.accelerator_count} x {pool.accelerator_type} would sit idle, paid "
                               "for; only workers compute under parameter_server. Allowed, but a CPU machine does "
                               "the same", [0]))
    return out


def ps_restart_warnings(v: JobView) -> list[Problem]:
    """parameter_server with restart_job_on_worker_restart: true defeats asynchronous training's tolerance."""
    if v.strategy != "parameter_server" or not v.job.scheduling.restart_job_on_worker_restart:
        return []
    return [problem("scheduling.restart_job_on_worker_restart",
                    "with parameter servers a restarted worker rejoins on its own and the chief reschedules its "
                    "steps; true restarts the whole job (chief and parameter servers too) every time one worker "
                    "restarts", ["false"])]
