"""The one strategy switch: config strategy + cluster environment -> ``tf.distribute.Strategy``.

* ``one_device``    ``OneDeviceStrategy`` on the first GPU; on a machine without one, TensorFlow's default
  strategy (no distribution: ``tf.distribute.get_strategy()``), since ``OneDeviceStrategy("/cpu:0")`` ran the
  seed CNN's whole step 0.70-0.83x as fast as the same step without it (44-53 vs 61-65 examples/s, 180x180,
  batch 32, 2 cores AMD EPYC Zen 3, alternating runs; the cost sits in the strategy's dataset iterator and
  per-step placement, not in the model). Both give one replica and the same variables, checkpoints and export.
* ``mirrored``      ``MirroredStrategy`` over the machine's GPUs (NCCL). Without GPUs (a laptop, CI) it
  runs over ``cpu_replicas`` logical CPU devices with ``ReductionToOneDevice`` (NCCL has no CPU kernel),
  so multi-replica code is exercised before it reaches the cloud.
* ``multi_worker``  ``MultiWorkerMirroredStrategy`` from the cluster in CLUSTER_SPEC/TF_CONFIG. Its
  constructor or its first collective blocks forever when a peer never starts, so the trainer runs
  start-up under a :class:`Watchdog` (from strategy creation to the first completed step) that ends the
  process (SIGKILL) after printing one clear line.
* ``parameter_server`` ``ParameterServerStrategy`` on the chief, which coordinates (``ClusterCoordinator``,
  ``trainers.train_ps``); workers and parameter servers run :func:`make_server` instead. No variable
  partitioner: TF 2.21 + Keras 3 fail in ``tape.gradient`` on a ``ShardedVariable`` (``'ShardedVariable' object
  has no attribute 'handle'``), so whole variables are placed round-robin over the parameter servers. The
  constructor waits for every server to answer: bounded by the same :class:`Watchdog`.
* ``tpu``           ``TPUStrategy`` through ``TPUClusterResolver``: with AI Platform's ``TPU_CONFIG`` the
  resolver is retried while the TPU is provisioned (TPU seed); otherwise built with no arguments so the
  service's environment supplies the connection. Connecting is bounded by the same watchdog, because
  connecting to an unreachable TPU hangs.
"""
from __future__ import annotations

import logging
import os
import sys
import subprocess
import time
from typing import Any, Callable

from trainers.cluster import ClusterInfo
from jobfile.errors import ConfigError, problem

log = logging.getLogger(__name__)

_WATCHDOG_CODE = """
import os, select, signal, sys
pid, seconds, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], seconds)
if not ready:  # no word from the replica (cancel or exit closes our stdin): it is stuck
    sys.stderr.write(message)
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)
"""


class Watchdog:
    """Kills this process (SIGKILL, after one clear line on stderr) if a blocking step outlives ``seconds``.

    TensorFlow blocks there in C++ *holding the GIL* (``context.ensure_initialized`` inside the
    MultiWorkerMirroredStrategy constructor) and ignores SIGTERM, so neither a Python thread nor a
    signal handler can run: the watchdog is a tiny separate process, cancelled by closing its stdin
    (which also happens when this process dies)."""

    def __init__(self, seconds: float, what: str):
        self.seconds, self.what = seconds, what
        self._proc: subprocess.Popen | None = None

    def start(self) -> "Watchdog":
        if self.seconds and self.seconds > 0 and self._proc is None:
            message = (f"ERROR: {self.what} did not finish within {self.seconds:g} s; stopping this replica "
                       "(SIGKILL). Check that every replica started and that they can reach each other.\n")
            self._proc = subprocess.Popen([sys.executable, "-c", _WATCHDOG_CODE, str(os.getpid()), str(self.seconds),
                                           message], stdin=subprocess.PIPE)
        return self

    def cancel(self) -> None:
        if self._proc is not None:
            self._proc.stdin.close()
            self._proc.wait()
            self._proc = None

    def __enter__(self) -> "Watchdog":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.cancel()


def setup_cpu_replicas(count: int) -> None:
    """Split the CPU into ``count`` logical devices (must run before TensorFlow initialises devices)."""
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    if count > 1 and not tf.config.list_physical_devices("GPU"):
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )


def strategy_name(strategy: Any) -> str:
    """The strategy's class name as the console and the run's records show it; TensorFlow's default strategy
    (``one_device`` without a GPU) is ``DefaultStrategy``, not its private class name."""
    name = type(strategy).__name__
    return "DefaultStrategy" if name == "_DefaultDistributionStrategy" else name


def make_strategy(name: str, info: ClusterInfo, *, cpu_replicas: int = 1, startup_timeout_s: float = 180,
                  tpu_name: str = "", tpu_retries: int = 40, tpu_wait_s: float = 10) -> Any:
    """Return the ``tf.distribute.Strategy`` for config ``topology.strategy`` in this environment."""
    import tensorflow as tf

    if name == "one_device":
        if tf.config.list_physical_devices("GPU"):
            return tf.distribute.OneDeviceStrategy("/gpu:0")
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if tf.config.list_physical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        setup_cpu_replicas(cpu_replicas)
        devices = [d.name for d in tf.config.list_logical_devices("CPU")][: max(1, cpu_replicas)]
        return tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if name == "multi_worker":
        if info.num_workers < 2:
            raise ConfigError([problem(
                "topology.strategy",
                f"multi_worker needs a cluster of at least 2 machines, but this replica sees "
                f"{info.num_workers} (source: {info.source}); run it through the launcher "
                "(python -m jobs.local.launch / pipelines/run.py) or on Vertex",
                ["one_device", "mirrored"],
            )])
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(  # a ps pool sits idle: not a peer
            tf.train.ClusterSpec({k: list(v) for k, v in info.cluster.items() if k in ("chief", "worker")}),
            task_type=info.task_type, task_id=info.task_index, rpc_layer="grpc",
        )
        implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL
                          if tf.config.list_physical_devices("GPU")
                          else tf.distribute.experimental.CommunicationImplementation.RING)
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver,
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation),
        )
    if name == "parameter_server":
        _check_ps_cluster(info)
        return tf.distribute.ParameterServerStrategy(_ps_resolver(info), variable_partitioner=None)
    if name == "tpu":
        resolver = resolve_tpu(info, tpu_name=tpu_name, retries=tpu_retries, wait_s=tpu_wait_s)
        with Watchdog(startup_timeout_s, "connecting to the TPU"):
            try:
                tf.config.experimental_connect_to_cluster(resolver)
                tf.tpu.experimental.initialize_tpu_system(resolver)
                return tf.distribute.TPUStrategy(resolver)
            except (tf.errors.OpError, IndexError, ValueError) as exc:
                raise TPUUnavailable(f"could not initialise the TPU: {type(exc).__name__}: {exc}") from None
    raise ConfigError([problem("topology.strategy", f"unknown strategy {name!r}", DISTRIBUTION_STRATEGIES)])


DISTRIBUTION_STRATEGIES = ("one_device", "mirrored", "multi_worker", "parameter_server", "tpu")


def _check_ps_cluster(info: ClusterInfo) -> None:
    if info.task_type != "chief" or not info.cluster.get("ps") or not info.cluster.get("worker"):
        raise ConfigError([problem(
            "topology.strategy",
            f"parameter_server needs a cluster with a chief (the coordinator), workers and parameter servers, "
            f"but this replica is {info.replica_id} in {sorted(info.cluster) or 'no cluster'} (source: {info.source}); "
            "run it through the launcher (python -m jobs.local.launch / pipelines/run.py) or on Vertex",
            ["one_device", "mirrored"])])


def _ps_resolver(info: ClusterInfo) -> Any:
    import tensorflow as tf

    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({k: list(v) for k, v in info.cluster.items()}),
        task_type=info.task_type, task_id=info.task_index, rpc_layer="grpc")


def make_server(info: ClusterInfo) -> Any:
    """The ``tf.distribute.Server`` a worker or parameter server of a ``parameter_server`` job runs (started).

    ``GRPC_FAIL_FAST=use_caller`` first, as TensorFlow's parameter-server tutorial sets it on workers and
    parameter servers: a call to an unreachable peer fails at once instead of waiting."""
    import tensorflow as tf

    if info.task_type not in ("worker", "ps") or not info.cluster.get(info.task_type):
        raise ConfigError([problem("topology.strategy", f"only workers and parameter servers of a parameter_server "
                                                        f"job run a server, not {info.replica_id}")])
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    return tf.distribute.Server(tf.train.ClusterSpec({k: list(v) for k, v in info.cluster.items()}),
                                job_name=info.task_type, task_index=info.task_index, protocol="grpc", start=True)


def replicas_in_sync(cfg: Any) -> int:
    """Replicas of one training step as the CONFIG describes them (the evaluator cannot see the trainers'
    devices): one_device 1; mirrored the chief's GPUs (or logical CPUs locally); multi_worker chief + workers
    x max(1, GPUs); parameter_server one worker's GPUs (a step runs on one worker); tpu its cores (8 unless a
    pod). The chief checks it against ``strategy.num_replicas_in_sync`` (``trainers.training_plan``)."""
    t = cfg.topology
    if t.strategy == "mirrored":
        return max(1, t.chief.accelerator_count)
    if t.strategy == "multi_worker":
        return sum(p.replica_count * max(1, p.accelerator_count) for p in (t.chief, t.worker)) or 1
    if t.strategy == "parameter_server":
        return max(1, t.worker.accelerator_count)
    if t.strategy == "tpu":
        return t.chief.accelerator_count if t.chief.accelerator_count > 0 else 8
    return 1


class TPUUnavailable(RuntimeError):
    """No TPU could be reached; the message says what was tried."""


#: Exit status of a cloud replica whose pool asked for accelerators this TensorFlow cannot see (task.py).
EXIT_NO_ACCELERATOR = 4


class AcceleratorMissing(RuntimeError):
    """A cloud replica lacks the accelerators its pool asked for; the message is one line naming the pool,
    what was asked for and what TensorFlow sees."""


def _is_tpu_vm(pool: Any) -> bool:
    """TPU VM machine types (``ct5lp-hightpu-4t``, ``ct6e-...``, ``ct4p-...``) or a pool with a TPU
    topology. The legacy ``cloud-tpu`` machine is not one: its TPU is remote, reached over gRPC, and a
    missing one is :class:`TPUUnavailable` (exit 3) when the strategy connects."""
    return bool(getattr(pool, "tpu_topology", "")) or str(getattr(pool, "machine_type", "")).startswith("ct")


def check_accelerators(cfg: Any, info: ClusterInfo, *, gpus: int | None = None,
                       has_tpu_runtime: bool | None = None) -> str | None:
    """Stop a cloud replica at once when its pool asked for GPUs/TPUs that this TensorFlow does not see.

    Why: a GPU pool running an image without CUDA (the cpu variant), or a TPU VM running one without
    libtpu, would otherwise train on the CPU, slowly and silently, while the accelerators are billed.
    Raises :class:`AcceleratorMissing` on a cloud machine (``info.on_cloud``). Off the cloud (plain local
    process, ``jobs.local.launch``) it returns a note saying the pool's accelerators are replaced by CPUs;
    None when nothing was asked for. ``gpus``/``has_tpu_runtime`` are for tests (default: ask TF).
    """
    pools = cfg.topology.pools()
    index = int(info.pool[-1])
    pool = pools[index] if index < len(pools) else None
    if pool is None:
        return None
    asked_gpu = bool(pool.accelerator_type) and int(pool.accelerator_count or 0) > 0 and not _is_tpu_vm(pool) \
        and pool.machine_type != "cloud-tpu" and not pool.accelerator_type.startswith("TPU")
    asked_tpu_vm = _is_tpu_vm(pool)
    if not (asked_gpu or asked_tpu_vm):
        return None
    role = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "parameter server",
            "workerpool3": "evaluator"}[info.pool]
    asked = (f"{pool.accelerator_count} x {pool.accelerator_type}" if asked_gpu
             else f"TPU VM {pool.machine_type}" + (f" ({pool.tpu_topology})" if pool.tpu_topology else ""))
    where = f"{info.pool} ({role}) asked for {asked} on {pool.machine_type}" if asked_gpu else \
        f"{info.pool} ({role}) asked for {asked}"
    if not info.on_cloud:
        why = "the local launcher" if info.local_launcher else "a local process"
        return f"{where}; running over CPUs here ({why}), as planned for local runs"
    import tensorflow as tf

    if asked_gpu:
        seen = len(tf.config.list_physical_devices("GPU")) if gpus is None else gpus
        if seen == 0:
            cuda = tf.sysconfig.get_build_info().get("cuda_version") or "none (a CPU-only build)"
            raise AcceleratorMissing(
                f"{where}, but TensorFlow {tf.__version__} sees no GPU (CUDA in this build: {cuda}); "
                "this replica stops instead of training on the CPU. Run the gpu image "
                "(python pipelines/run.py build --variant gpu, or leave container.image_uri empty)")
        if seen < int(pool.accelerator_count):
            return f"{where}, but TensorFlow sees only {seen} GPU(s); training on those"
        return None
    if has_tpu_runtime is None:
        import importlib.util

        has_tpu_runtime = importlib.util.find_spec("libtpu") is not None
    if not has_tpu_runtime:
        raise AcceleratorMissing(
            f"{where}, but TensorFlow {tf.__version__} has no TPU runtime (libtpu is not installed); this "
            "replica stops instead of training on the CPU. Run the tpu image "
            "(python pipelines/run.py build --variant tpu, or leave container.image_uri empty)")
    return None


def resolve_tpu(info: ClusterInfo, *, tpu_name: str = "", retries: int = 40, wait_s: float = 10,
                factory: Callable[..., Any] | None = None, sleep: Callable[[float], None] = time.sleep) -> Any:
    """A ``TPUClusterResolver`` for this job.

    * ``TPU_CONFIG`` set (AI Platform custom containers): wait for the TPU to be provisioned, retrying
      ``retries`` times ``wait_s`` apart until the resolver's cluster spec has a ``worker`` job (TPU seed).
    * a multi-host TPU VM slice (``TPU_WORKER_HOSTNAMES`` lists more than one host): the resolver is given
      every host's gRPC endpoint (``ClusterInfo.tpu_resolver_input``), so its cluster spec reaches all of them;
    * otherwise: ``TPUClusterResolver(tpu=tpu_name or None)``; with no name the service's environment
      supplies the connection details. Off Google Cloud that fails: the error says so plainly.
    """
    if factory is None:
        import tensorflow as tf

        factory = tf.distribute.cluster_resolver.TPUClusterResolver
    if info.tpu_config:
        node = info.tpu_config
        last: Exception | None = None
        for attempt in range(1, retries + 1):
            try:
                resolver = factory(tpu=[node["tpu_node_name"]], zone=node.get("zone"),
                                   project=node.get("project"), job_name="worker")
                if "worker" in resolver.cluster_spec().as_dict():
                    log.info("found TPU worker after %d attempt(s)", attempt)
                    return resolver
                last = RuntimeError("the TPU has no worker job yet")
            except KeyError:
                raise TPUUnavailable("TPU_CONFIG has no 'tpu_node_name'") from None
            except Exception as exc:  # the resolver raises many kinds while the TPU VM is provisioned
                last = exc
            if attempt < retries:
                log.info("still waiting for the TPU to be provisioned (%d/%d)", attempt, retries)
                sleep(wait_s)
        raise TPUUnavailable(f"TPU {node.get('tpu_node_name')!r} was not ready after {retries} attempts "
                             f"{wait_s:.0f} s apart: {last}")
    try:
        return factory(tpu=tpu_name or info.tpu_resolver_input or None)
    except (ValueError, RuntimeError) as exc:
        raise TPUUnavailable(
            f"no TPU found ({exc}). TPUStrategy runs on Vertex AI / AI Platform TPU workers or a TPU VM; "
            "to run this job here, use topology.strategy=one_device, mirrored or multi_worker"
        ) from None
