"""The training plan: data, batch and step count, computed one way for every place that needs them.

The chief's training loop (``trainers.train``, ``trainers.train_ps``) and the side-car evaluator
(``trainers.evaluator``) must agree on the last step: the evaluator stops after the checkpoint of that step,
as Keras' ``SidecarEvaluator`` stops at a known step count. Both call :func:`make_plan`; the trainer with the
replicas its strategy really has, the evaluator with the replicas the config describes
(``trainers.strategy.replicas_in_sync``), and the trainer warns if the two differ.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from trainers import data as data_lib
from jobfile import config as config_lib
from trainers.strategy import replicas_in_sync


@dataclasses.dataclass(frozen=True)
class Plan:
    data_dir: str
    manifest: dict
    classes: list[str]
    image_size: int
    replicas: int
    per_replica_batch: int
    global_batch: int  # per-replica batch x replicas: the seeds' rule (one step's examples)
    steps_per_epoch: int
    total_steps: int

    def fingerprint(self, cfg: config_lib.JobConfig) -> dict[str, Any]:
        """What checkpoints record about the job that wrote them (``trainers.checkpoint.Checkpointer``)."""
        return {"model": cfg.model.name, "classes": self.classes, "image_size": self.image_size,
                "optimizer": cfg.training.optimizer}


def make_plan(cfg: config_lib.JobConfig, replicas: int) -> Plan:
    """Read the prepared data's manifest and derive batch sizes and the total step count."""
    replicas = max(1, int(replicas))
    per_replica = cfg.training.per_replica_batch_size
    if cfg.training.global_batch_size:
        per_replica = cfg.training.global_batch_size // replicas
    global_batch = per_replica * replicas
    data_dir = config_lib.prepared_data_dir(cfg)
    manifest = data_lib.load_manifest(data_dir)
    steps_per_epoch = data_lib.steps_per_epoch(manifest, global_batch)
    return Plan(data_dir=data_dir, manifest=manifest, classes=list(manifest["classes"]),
                image_size=int(manifest["image_size"]), replicas=replicas, per_replica_batch=per_replica,
                global_batch=global_batch, steps_per_epoch=steps_per_epoch,
                total_steps=cfg.training.steps or cfg.training.epochs * steps_per_epoch)


def evaluator_mismatch(cfg: config_lib.JobConfig, plan: Plan) -> str | None:
    """A warning when the chief's real replicas give another step count than the config's (an evaluator
    replica, which counts from the config, would then wait for a step that never comes)."""
    if cfg.topology.evaluator.replica_count <= 0:
        return None
    expected = make_plan(cfg, replicas_in_sync(cfg))
    if expected.total_steps == plan.total_steps:
        return None
    return (f"topology: the chief trains {plan.total_steps} steps over {plan.replicas} replica(s), but the config "
            f"describes {expected.replicas}, for which the evaluator expects {expected.total_steps} steps; set "
            "training.steps so that both agree")
