"""Where am I running? The only code that reads CLUSTER_SPEC, TF_CONFIG, TPU_CONFIG and AIP_*.

Vertex AI custom training (and ``jobs.local.launch`` locally, which reproduces it) gives each replica:

* ``CLUSTER_SPEC``  ``{"cluster": {"workerpool0": [...], "workerpool1": [...]}, "environment": "cloud",
  "task": {"type": "workerpool1", "index": 0}}``; a single-replica job has only ``workerpool0``.
* ``TF_CONFIG``     the same cluster in TensorFlow's names (chief / worker / ps; evaluator only as a task).
* ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR``, ``AIP_TENSORBOARD_LOG_DIR`` when the job has a
  ``base_output_directory``.
* AI Platform's TPU workers get ``TPU_CONFIG`` (``{"tpu_node_name": ..., "zone": ..., "project": ...}``).

No environment at all means a plain local process: one replica, the chief.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Mapping

from jobfile.errors import ConfigError, problem
from jobfile.paths import join

#: Where Vertex puts each output under a job's ``base_output_directory`` (and so does the launcher).
OUTPUT_LAYOUT = {"model": ("AIP_MODEL_DIR", "model"), "checkpoints": ("AIP_CHECKPOINT_DIR", "checkpoints"),
                 "logs": ("AIP_TENSORBOARD_LOG_DIR", "logs")}

#: Vertex worker pool index -> TensorFlow task type.
POOL_ROLES = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps", "workerpool3": "evaluator"}

#: Set to "1" by ``jobs.local.launch`` in every replica it starts (``jobs.rules.replica_env.replica_environment``).
#: Its CLUSTER_SPEC looks exactly like Vertex's, so this is how a replica tells that its "machines" are
#: processes on one computer, where pools that ask for GPUs/TPUs run over CPUs on purpose.
LOCAL_LAUNCHER_ENV = "VTP_LOCAL_LAUNCHER"


#: The port of a TPU host's gRPC server (TensorFlow's ``tpu/client`` default endpoint port).
TPU_GRPC_PORT = 8470


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    task_type: str  # chief | worker | ps | evaluator
    task_index: int
    #: TensorFlow-style cluster: {"chief": [...], "worker": [...], "ps": [...]} (evaluator excluded)
    cluster: Mapping[str, tuple[str, ...]]
    tf_config: str | None  # the TF_CONFIG the strategy should see (None: not multi-worker)
    model_dir: str | None
    checkpoint_dir: str | None
    tensorboard_dir: str | None
    tpu_config: Mapping[str, str] | None = None
    source: str = "none"  # CLUSTER_SPEC | TF_CONFIG | none
    local_launcher: bool = False  # started by jobs.local.launch (LOCAL_LAUNCHER_ENV)
    #: the hosts of a multi-host TPU VM slice, as the Cloud TPU VM runtime names them (TPU_WORKER_HOSTNAMES,
    #: comma-separated) and this host's index among them (TPU_WORKER_ID); () on anything else
    tpu_hosts: tuple[str, ...] = ()
    tpu_worker_id: int = 0

    @property
    def tpu_resolver_input(self) -> str | None:
        """What ``TPUClusterResolver(tpu=...)`` needs to reach every host of a multi-host slice: the hosts' gRPC
        endpoints, comma-separated (TF's TPU client reads such a list without a Cloud TPU API call); None for one
        host or no slice (the resolver finds a single TPU itself)."""
        if len(self.tpu_hosts) < 2:
            return None
        return ",".join(h if h.startswith("grpc://") else f"grpc://{h}:{TPU_GRPC_PORT}" for h in self.tpu_hosts)

    @property
    def on_cloud(self) -> bool:
        """A replica of a real cloud job: the service set CLUSTER_SPEC/TF_CONFIG, not the local launcher.
        Only there must the accelerators a pool asked for be present (``trainers.strategy.check_accelerators``)."""
        return self.source != "none" and not self.local_launcher

    @property
    def pool(self) -> str:
        """This replica's Vertex worker pool (``workerpool0`` chief ... ``workerpool3`` evaluator)."""
        return {"chief": "workerpool0", "worker": "workerpool1", "ps": "workerpool2",
                "evaluator": "workerpool3"}.get(self.task_type, "workerpool0")

    @property
    def num_workers(self) -> int:
        """Machines that train together (chief + workers)."""
        return len(self.cluster.get("chief", ())) + len(self.cluster.get("worker", ()))

    @property
    def is_chief(self) -> bool:
        """The one replica that writes real checkpoints, summaries and the exported model.

        Without a chief in the cluster (a TF_CONFIG with workers only), worker 0 is the chief.
        """
        if self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and not self.cluster.get("chief")

    @property
    def replica_id(self) -> str:
        return f"{self.task_type}-{self.task_index}"


#: What a replica does, by :func:`replica_role`.
ROLE_TRAIN, ROLE_SERVE, ROLE_EVALUATE, ROLE_IDLE = "train", "serve", "evaluate", "idle"


def replica_role(info: ClusterInfo, strategy: str) -> str:
    """What this replica runs under ``topology.strategy`` (``trainers.task`` dispatches on it):

    * ``evaluate``  the evaluator (pool 3, any strategy): the side-car loop of ``trainers.evaluator``. It must
      never build a multi-worker strategy: TensorFlow's multi-worker set-up has no ``evaluator`` task
      (``KeyError: 'evaluator'``).
    * ``serve``     under ``parameter_server``, every worker and parameter server: a ``tf.distribute.Server``
      that runs what the chief (the coordinator) sends it, until it is stopped.
    * ``idle``      a parameter server under a strategy that does not use one (validation warns): nothing to do.
    * ``train``     the chief, and every worker under the all-reduce strategies: the training loop.
    """
    if info.task_type == "evaluator":
        return ROLE_EVALUATE
    if strategy == "parameter_server" and info.task_type in ("worker", "ps"):
        return ROLE_SERVE
    if info.task_type == "ps":
        return ROLE_IDLE
    return ROLE_TRAIN


def _parse_json(name: str, text: str) -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([problem(name, f"environment variable is not valid JSON ({exc})")]) from None
    if not isinstance(doc, dict):
        raise ConfigError([problem(name, "environment variable must hold a JSON object")])
    return doc


def _from_cluster_spec(doc: dict) -> tuple[str, int, dict[str, tuple[str, ...]]]:
    pools = doc.get("cluster") or {}
    task = doc.get("task") or {}
    pool = task.get("type", "workerpool0")
    if pool not in POOL_ROLES:
        raise ConfigError([problem("CLUSTER_SPEC.task.type", f"unknown worker pool {pool!r}", list(POOL_ROLES))])
    cluster = {
        POOL_ROLES[name]: tuple(addrs)
        for name, addrs in pools.items()
        if name in POOL_ROLES and addrs and POOL_ROLES[name] != "evaluator"
    }
    return POOL_ROLES[pool], int(task.get("index", 0)), cluster


def _from_tf_config(doc: dict) -> tuple[str, int, dict[str, tuple[str, ...]]]:
    task = doc.get("task") or {}
    cluster = {k: tuple(v) for k, v in (doc.get("cluster") or {}).items() if v and k != "evaluator"}
    task_type = task.get("type") or ("chief" if "chief" in cluster else "worker")
    if task_type == "master":  # AI Platform's legacy name for the chief
        task_type = "chief"
    cluster = {("chief" if k == "master" else k): v for k, v in cluster.items()}
    return task_type, int(task.get("index", 0)), cluster


def read_cluster(env: Mapping[str, str] | None = None) -> ClusterInfo:
    """Read the replica's place in the job from the environment Vertex (or the local launcher) set."""
    env = os.environ if env is None else env
    spec, tf_config = env.get("CLUSTER_SPEC"), env.get("TF_CONFIG")
    if tf_config:  # TF's own view wins when present: it is what the strategy reads
        task_type, index, cluster = _from_tf_config(_parse_json("TF_CONFIG", tf_config))
        source = "TF_CONFIG"
    elif spec:
        task_type, index, cluster = _from_cluster_spec(_parse_json("CLUSTER_SPEC", spec))
        source = "CLUSTER_SPEC"
    else:
        task_type, index, cluster, source = "chief", 0, {}, "none"

    workers = len(cluster.get("chief", ())) + len(cluster.get("worker", ()))
    strategy_tf_config = None
    if workers > 1 or cluster.get("ps"):
        strategy_tf_config = json.dumps(
            {"cluster": {k: list(v) for k, v in cluster.items()}, "task": {"type": task_type, "index": index}}
        )
    tpu = env.get("TPU_CONFIG")
    return ClusterInfo(
        task_type=task_type,
        task_index=index,
        cluster=cluster,
        tf_config=strategy_tf_config,
        model_dir=env.get("AIP_MODEL_DIR") or None,
        checkpoint_dir=env.get("AIP_CHECKPOINT_DIR") or None,
        tensorboard_dir=env.get("AIP_TENSORBOARD_LOG_DIR") or None,
        tpu_config=_parse_json("TPU_CONFIG", tpu) if tpu else None,
        source=source,
        local_launcher=env.get(LOCAL_LAUNCHER_ENV) == "1",
        tpu_hosts=tuple(h.strip() for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()),
        tpu_worker_id=int(env["TPU_WORKER_ID"]) if env.get("TPU_WORKER_ID", "").isdigit() else 0,
    )


def output_dirs(info: ClusterInfo | None, base_output_dir: str) -> dict[str, str]:
    """THE layout of a job's outputs (the job side calls it with ``info=None``): model / checkpoints / logs
    directories, Vertex's AIP_* when the replica has them, else under ``base_output_dir`` laid out exactly as
    Vertex lays them out (``<base>/model``, ``<base>/checkpoints``, ``<base>/logs``), without a trailing ``/``."""
    given = ({"model": info.model_dir, "checkpoints": info.checkpoint_dir, "logs": info.tensorboard_dir}
             if info is not None else {})
    return {key: (given.get(key) or join(base_output_dir, leaf)).rstrip("/") for key, (_, leaf) in OUTPUT_LAYOUT.items()}


def record_dir(info: ClusterInfo, base_output_dir: str) -> str:
    """Where the chief writes the run's records (``metrics.json``): the folder that holds ``AIP_MODEL_DIR`` when
    it is set, else ``base_output_dir``. For a plain job both are the same folder (``AIP_MODEL_DIR`` is
    ``<base>/model/``); a tuning trial's ``AIP_MODEL_DIR`` is ``<base>/<trial_id>/model/`` (Vertex's layout for
    a trial), so each trial's figures land in its own ``<base>/<trial_id>/`` and parallel trials never
    overwrite one another's."""
    if not info.model_dir or not info.model_dir.rstrip("/"):
        return base_output_dir
    return info.model_dir.rstrip("/").rsplit("/", 1)[0] or "/"


def replica_dir(info: ClusterInfo, directory: str) -> str:
    """The chief writes ``directory``; every other replica a throwaway ``directory/workertemp_<id>``
    (the lab seed's pattern: saving can involve collectives, so all replicas must save somewhere)."""
    if info.is_chief:
        return directory
    sep = "/" if directory.startswith("gs://") else os.sep
    return f"{directory.rstrip('/')}{sep}workertemp_{info.task_type}_{info.task_index}"
