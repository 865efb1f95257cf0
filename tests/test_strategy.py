"""The one strategy switch, and the TPU paths tested through their logic (no TPU exists here)."""
import json
import subprocess
import sys
import time

import pytest

from trainers.cluster import read_cluster
from jobfile.errors import ConfigError
from trainers.strategy import TPUUnavailable, Watchdog, make_strategy, resolve_tpu


def test_one_device_on_cpu_is_tensorflows_default_strategy():
    """Without a GPU, ``one_device`` is TensorFlow's default strategy (``OneDeviceStrategy("/cpu:0")`` ran the
    same step 0.70-0.83x as fast; trainers/strategy.py): one replica, named ``DefaultStrategy`` in the records."""
    import tensorflow as tf

    from trainers.strategy import strategy_name

    strategy = make_strategy("one_device", read_cluster({}))
    assert strategy is tf.distribute.get_strategy() and strategy.num_replicas_in_sync == 1
    assert strategy_name(strategy) == "DefaultStrategy"
    assert strategy_name(tf.distribute.OneDeviceStrategy("/cpu:0")) == "OneDeviceStrategy"


@pytest.mark.integration
def test_mirrored_without_gpus_mirrors_over_logical_cpus():
    # Logical devices must be configured before TF initialises: use a fresh interpreter.
    code = ("from trainers.strategy import make_strategy; from trainers.cluster import read_cluster\n"
            "s = make_strategy('mirrored', read_cluster({}), cpu_replicas=3)\n"
            "print(type(s).__name__, s.num_replicas_in_sync, type(s.extended._cross_device_ops).__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-3:] == ["MirroredStrategy", "3", "ReductionToOneDevice"]


def test_multi_worker_without_a_cluster_says_how_to_run_it():
    with pytest.raises(ConfigError) as e:
        make_strategy("multi_worker", read_cluster({}))
    msg = str(e.value)
    assert msg.startswith("topology.strategy: multi_worker needs a cluster of at least 2 machines")
    assert "launcher" in msg and "one_device" in msg


def test_unknown_strategy():
    with pytest.raises(ConfigError, match="topology.strategy: unknown strategy 'horovod'"):
        make_strategy("horovod", read_cluster({}))


def test_tpu_off_google_cloud_is_one_clear_error():
    with pytest.raises(TPUUnavailable, match="no TPU found .* use topology.strategy=one_device, mirrored or multi_worker"):
        make_strategy("tpu", read_cluster({}), startup_timeout_s=60)


class FakeResolver:
    def __init__(self, jobs):
        self.jobs = jobs

    def cluster_spec(self):
        class Spec:
            def __init__(self, jobs):
                self._jobs = jobs

            def as_dict(self):
                return self._jobs

        return Spec(self.jobs)


def tpu_env():
    return read_cluster({"TPU_CONFIG": json.dumps({"tpu_node_name": "node-1", "zone": "us-central1-b", "project": "p"})})


def test_tpu_resolver_waits_for_provisioning_then_succeeds():
    calls, sleeps = [], []

    def factory(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("TPU VM is still being provisioned")
        return FakeResolver({} if len(calls) == 2 else {"worker": ["10.1.1.1:8470"]})

    resolver = resolve_tpu(tpu_env(), retries=5, wait_s=10, factory=factory, sleep=sleeps.append)
    assert resolver.cluster_spec().as_dict() == {"worker": ["10.1.1.1:8470"]}
    assert len(calls) == 3 and sleeps == [10, 10]
    assert calls[0] == {"tpu": ["node-1"], "zone": "us-central1-b", "project": "p", "job_name": "worker"}


def test_tpu_resolver_gives_up_after_the_retries_with_the_last_error():
    def factory(**kwargs):
        raise RuntimeError("quota exceeded for TPU_V3")

    sleeps = []
    with pytest.raises(TPUUnavailable, match=r"TPU 'node-1' was not ready after 4 attempts 2 s apart: quota exceeded"):
        resolve_tpu(tpu_env(), retries=4, wait_s=2, factory=factory, sleep=sleeps.append)
    assert sleeps == [2, 2, 2]


def test_tpu_config_without_a_node_name():
    info = read_cluster({"TPU_CONFIG": json.dumps({"zone": "us-central1-b"})})
    with pytest.raises(TPUUnavailable, match="TPU_CONFIG has no 'tpu_node_name'"):
        resolve_tpu(info, factory=lambda **k: FakeResolver({}), sleep=lambda s: None)


def test_tpu_name_is_passed_through_without_tpu_config():
    seen = {}

    def factory(**kwargs):
        seen.update(kwargs)
        return FakeResolver({"worker": ["x"]})

    resolve_tpu(read_cluster({}), tpu_name="my-tpu", factory=factory)
    assert seen == {"tpu": "my-tpu"}


def test_watchdog_kills_a_process_stuck_while_holding_the_gil():
    """A busy C-level wait cannot be interrupted by Python threads; the watchdog process still ends it."""
    code = ("import time\nfrom trainers.strategy import Watchdog\n"
            "Watchdog(1.5, 'joining the cluster').start()\n"
            "time.sleep(60)\n")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == -9
    assert "ERROR: joining the cluster did not finish within 1.5 s" in proc.stderr
    assert time.monotonic() - t0 < 20


@pytest.mark.process
def test_watchdog_cancelled_in_time_does_nothing():
    with Watchdog(30, "quick step") as dog:
        time.sleep(0.1)
    assert dog._proc is None


def test_parameter_server_needs_its_cluster_and_says_how_to_run_it():
    with pytest.raises(ConfigError) as e:
        make_strategy("parameter_server", read_cluster({}))
    msg = str(e.value)
    assert msg.startswith("topology.strategy: parameter_server needs a cluster with a chief (the coordinator), "
                          "workers and parameter servers") and "launcher" in msg
    chief_and_worker = {"CLUSTER_SPEC": json.dumps({"cluster": {"workerpool0": ["127.0.0.1:1"],
                                                                "workerpool1": ["127.0.0.1:2"]},
                                                    "task": {"type": "workerpool0", "index": 0}})}
    with pytest.raises(ConfigError, match="parameter_server needs a cluster"):
        make_strategy("parameter_server", read_cluster(chief_and_worker))


def test_only_workers_and_parameter_servers_run_a_server():
    from trainers.strategy import make_server

    with pytest.raises(ConfigError, match="only workers and parameter servers of a parameter_server job run a server, "
                                          "not chief-0"):
        make_server(read_cluster({}))


def test_replicas_in_sync_from_the_config():
    from jobfile import config as config_lib
    from trainers.strategy import replicas_in_sync

    assert replicas_in_sync(config_lib.load("local")) == 2
    assert replicas_in_sync(config_lib.load("gpu-1x4")) == 4
    assert replicas_in_sync(config_lib.load("multiworker")) == 8
    assert replicas_in_sync(config_lib.load("parameter-server")) == 1  # a step runs on one worker
    assert replicas_in_sync(config_lib.load("tpu")) == 8


def test_a_multi_host_tpu_slice_resolver_reaches_every_host():
    """Issue 33: a 4x4 v5e slice on ct5lp-hightpu-4t is 4 hosts (jobs.rules.hardware); on each host the Cloud TPU VM
    runtime lists them in TPU_WORKER_HOSTNAMES, and the resolver is given all of them. TensorFlow's own
    TPUClusterResolver turns that input into a cluster spec with one worker task per host, without any cloud call.
    Whether TPUStrategy then initialises across the hosts only a real slice can show."""
    import tensorflow as tf

    from jobs.rules.hardware.catalog import load_catalog

    hosts = load_catalog().machines["ct5lp-hightpu-4t"].hosts("4x4")
    names = [f"t1v-n-{i}-w-{i}" for i in range(hosts)]
    info = read_cluster({"TPU_WORKER_HOSTNAMES": ",".join(names), "TPU_WORKER_ID": "2"})
    assert info.tpu_hosts == tuple(names) and info.tpu_worker_id == 2
    assert info.tpu_resolver_input == ",".join(f"grpc://{n}:8470" for n in names)
    calls = []
    resolve_tpu(info, factory=lambda **k: calls.append(k) or "resolver")
    assert calls == [{"tpu": info.tpu_resolver_input}]
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=info.tpu_resolver_input)
    assert resolver.cluster_spec().as_dict() == {"worker": [f"{n}:8470" for n in names]}
    assert read_cluster({"TPU_WORKER_HOSTNAMES": "only-one"}).tpu_resolver_input is None  # one host: as before
