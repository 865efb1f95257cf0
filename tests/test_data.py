"""trainers.data: vectorized decode, sharding policies, resume by skip, determinism, eval."""
from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from trainers import data, image_records, prepare
from jobfile.errors import ConfigError

SIZE = 12
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data") / "images"
    prepare.synthesize_image_folder(str(root), num_classes=3, images_per_class=12, image_size=16, seed=0)
    return root


@pytest.fixture(scope="module")
def four(images) -> tuple[str, dict]:
    out = str(images.parent / "four")
    prepare.prepare_tfrecords(str(images), out, SIZE, num_shards=4, validation_fraction=0.2)
    return out, data.load_manifest(out)


@pytest.fixture(scope="module")
def one(images) -> tuple[str, dict]:
    out = str(images.parent / "one")
    prepare.prepare_tfrecords(str(images), out, SIZE, num_shards=1, validation_fraction=0.2)
    return out, data.load_manifest(out)


def _all_records(path: str, manifest: dict, split: str) -> collections.Counter:
    files = [f"{path}/{n}" for n in manifest["files"][split]]
    ds = tf.data.TFRecordDataset(files).batch(1000).map(lambda s: data.decode_batch(s, SIZE))
    out = collections.Counter()
    for x, y in ds.as_numpy_iterator():
        out.update(_keys(x, y))
    return out


def _keys(images, labels) -> list[tuple[bytes, int]]:
    return [(img.astype(np.uint8).tobytes(), int(lab)) for img, lab in zip(images, labels)]


def _take(ds, n) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(x, y) for x, y in ds.take(n).as_numpy_iterator()]


def _ctx(pipelines, pipeline_id, replicas=None):
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline_id,
                                      num_replicas_in_sync=replicas or pipelines)


def test_decode_batch_round_trips_pixels():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(5, 7, 7, 3), dtype=np.uint8)
    serialized = tf.constant([image_records.example_bytes(im.tobytes(), i % 3, 7, f"c/{i}.jpg")
                              for i, im in enumerate(imgs)])
    x, y = data.decode_batch(serialized, 7)
    assert x.dtype == tf.float32 and y.dtype == tf.int32
    assert x.shape == (5, 7, 7, 3) and y.shape == (5,)
    np.testing.assert_array_equal(x.numpy().astype(np.uint8), imgs)
    assert np.array_equal(x.numpy(), imgs.astype(np.float32))
    assert y.numpy().tolist() == [0, 1, 2, 0, 1]


def test_train_batches_shape_and_options(four):
    path, m = four
    ds = data.train_dataset_fn(path, m, per_replica_batch_size=4, seed=0)(None)
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [4, SIZE, SIZE, 3] and x_spec.dtype == tf.float32
    assert y_spec.shape.as_list() == [4] and y_spec.dtype == tf.int32
    assert ds.cardinality().numpy() == tf.data.INFINITE_CARDINALITY
    opts = ds.options()
    assert opts.deterministic is True
    assert opts.experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.OFF
    x, y = next(iter(ds))
    assert float(tf.reduce_max(x)) <= 255.0 and set(y.numpy()) <= {0, 1, 2}


def _pipeline_records(path, m, pipelines, pipeline_id, expected_policy, caplog):
    fn = data.train_dataset_fn(path, m, per_replica_batch_size=1, seed=0, shuffle_buffer=0)
    policy, _, count, _ = data.choose_sharding(m["shards"]["train"], pipelines, pipeline_id, 1)
    assert policy == expected_policy
    with caplog.at_level(logging.INFO, logger="trainers.data"):
        ds = fn(_ctx(pipelines, pipeline_id))
    assert f"{expected_policy} sharding" in caplog.text
    elems = _take(ds, count + 1)
    # unshuffled + infinite: the element after one epoch is the first one again
    assert np.array_equal(elems[count][0], elems[0][0])
    out = collections.Counter()
    for x, y in elems[:count]:
        out.update(_keys(x, y))
    return out


def test_file_policy_4_files_2_pipelines(four, caplog):
    path, m = four
    assert len(m["files"]["train"]) == 4
    a = _pipeline_records(path, m, 2, 0, "FILE", caplog)
    b = _pipeline_records(path, m, 2, 1, "FILE", caplog)
    assert not set(a) & set(b)
    assert a + b == _all_records(path, m, "train")
    _, files0, _, _ = data.choose_sharding(m["shards"]["train"], 2, 0, 1)
    _, files1, _, _ = data.choose_sharding(m["shards"]["train"], 2, 1, 1)
    assert (files0, files1) == ([0, 2], [1, 3])


def test_data_policy_1_file_2_pipelines(one, caplog):
    path, m = one
    assert len(m["files"]["train"]) == 1
    a = _pipeline_records(path, m, 2, 0, "DATA", caplog)
    b = _pipeline_records(path, m, 2, 1, "DATA", caplog)
    assert not set(a) & set(b)
    assert a + b == _all_records(path, m, "train")


def test_data_policy_when_files_cannot_hold_a_batch_each(four):
    path, m = four
    counts = [s["num_examples"] for s in m["shards"]["train"]]
    big = min(counts[0] + counts[2], counts[1] + counts[3]) + 1
    policy, files, n, reason = data.choose_sharding(m["shards"]["train"], 2, 0, big)
    assert policy == "DATA" and files == [0, 1, 2, 3] and "< batch" in reason


def test_too_large_batch_is_a_config_error(one):
    path, m = one
    n = m["num_examples"]["train"]
    with pytest.raises(ConfigError, match="training.per_replica_batch_size"):
        data.train_dataset_fn(path, m, per_replica_batch_size=n + 1, seed=0)
    fn = data.train_dataset_fn(path, m, per_replica_batch_size=n // 2 + 1, seed=0)
    with pytest.raises(ConfigError, match="fewer than one batch"):
        fn(_ctx(2, 0))


def _same(xs, ys) -> bool:
    return len(xs) == len(ys) and all(
        np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(xs, ys))


def test_resume_by_skip_is_bitwise_equal_across_epochs(four):
    path, m = four
    batch = 4
    per_epoch = m["num_examples"]["train"] // batch
    assert per_epoch >= 3
    total = 3 * per_epoch + 2
    full = _take(data.train_dataset_fn(path, m, batch, seed=5)(None), total)
    for k in (1, per_epoch - 1, per_epoch + 2):  # resume before and after an epoch boundary
        resumed = _take(data.train_dataset_fn(path, m, batch, seed=5, start_step=k)(None), total - k)
        assert _same(resumed, full[k:]), k
    # 2 replicas fed by one pipeline: each global step consumes 2 elements
    full2 = _take(data.train_dataset_fn(path, m, batch, seed=5)(_ctx(1, 0, replicas=2)), total)
    resumed2 = _take(data.train_dataset_fn(path, m, batch, seed=5, start_step=3)(_ctx(1, 0, 2)), total - 6)
    assert _same(resumed2, full2[6:])


def test_epochs_are_reshuffled_and_seed_matters(four):
    path, m = four
    per_epoch = m["num_examples"]["train"] // 4
    a = _take(data.train_dataset_fn(path, m, 4, seed=7)(None), 2 * per_epoch)
    b = _take(data.train_dataset_fn(path, m, 4, seed=7, cache=False)(None), 2 * per_epoch)
    c = _take(data.train_dataset_fn(path, m, 4, seed=8)(None), 2 * per_epoch)
    assert _same(a, b)  # same seed, rebuilt (and cache on/off) -> same sequence
    assert not _same(a, c)
    assert not _same(a[:per_epoch], a[per_epoch:])  # each epoch reshuffled


_DIGEST_SCRIPT = textwrap.dedent("""
    import hashlib, sys
    from trainers import data
    path = sys.argv[1]
    m = data.load_manifest(path)
    h = hashlib.sha256()
    for x, y in data.train_dataset_fn(path, m, 4, seed=11, start_step=2)(None).take(9).as_numpy_iterator():
        h.update(x.tobytes()); h.update(y.tobytes())
    print("DIGEST", h.hexdigest())
""")


@pytest.mark.integration
def test_same_sequence_in_separate_processes(four):
    path, _ = four
    procs = []
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "TF_CPP_MIN_LOG_LEVEL": "3",
               "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        procs.append(subprocess.Popen([sys.executable, "-c", _DIGEST_SCRIPT, path], env=env, cwd=REPO,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    digests = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        digests.append([line for line in out.splitlines() if line.startswith("DIGEST")][0])
    assert digests[0] == digests[1]


_MIRRORED_SCRIPT = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from trainers import data
    path = sys.argv[1]
    m = data.load_manifest(path)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    def run(start, steps):
        fn = data.train_dataset_fn(path, m, 2, seed=3, start_step=start)
        it = iter(strategy.distribute_datasets_from_function(fn))
        out = []
        for _ in range(steps):
            x, y = next(it)
            out.append([t.numpy().tobytes() for t in strategy.experimental_local_results(x)])
        return out
    full, resumed = run(0, 7), run(3, 4)
    print("MATCH" if full[3:] == resumed and full[0] != full[1] else "DIFFER")
""")


@pytest.mark.integration
def test_resume_under_mirrored_strategy_two_replicas(four):
    """start_step counts global steps: each consumes one element per local replica."""
    path, _ = four
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", _MIRRORED_SCRIPT, path], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "MATCH" in p.stdout


def test_eval_dataset_finite_covers_validation_once(four):
    path, m = four
    n = m["num_examples"]["validation"]
    ds = data.eval_dataset(path, m, batch_size=3)
    assert ds.options().deterministic is True
    batches = list(ds.as_numpy_iterator())
    assert sum(len(y) for _, y in batches) == n
    assert all(len(y) == 3 for _, y in batches[:-1])
    seen = collections.Counter()
    for x, y in batches:
        seen.update(_keys(x, y))
    assert seen == _all_records(path, m, "validation")
    again = list(data.eval_dataset(path, m, batch_size=3).as_numpy_iterator())
    assert _same(again, batches)


def test_steps_per_epoch(four):
    _, m = four
    n = m["num_examples"]["train"]
    assert data.steps_per_epoch(m, 4) == n // 4
    assert data.steps_per_epoch(m, 10 * n) == 1


def test_load_manifest_errors_point_to_prepare(tmp_path):
    with pytest.raises(ConfigError) as err:
        data.load_manifest(str(tmp_path / "nothing"))
    text = str(err.value)
    assert text.startswith("data.path:") and "does not exist" in text and "python -m trainers.prepare" in text
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "train-00000-of-00001.tfrecord").write_bytes(b"")
    with pytest.raises(ConfigError, match="no manifest.json.*python -m trainers.prepare"):
        data.load_manifest(str(tmp_path / "half"))


def test_load_manifest_detects_missing_shard(four, tmp_path):
    import shutil

    path, m = four
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    (copy / m["files"]["train"][1]).unlink()
    with pytest.raises(ConfigError, match=m["files"]["train"][1]):
        data.load_manifest(str(copy))


def test_object_store_round_trip(images):
    out = f"ram://data-test-{uuid.uuid4().hex[:8]}/rec"
    prepare.prepare_tfrecords(str(images), out, SIZE, num_shards=2)
    m = data.load_manifest(out)
    n = sum(len(y) for _, y in data.eval_dataset(out, m, 8).as_numpy_iterator())
    assert n == m["num_examples"]["validation"]
    x, _ = next(iter(data.train_dataset_fn(out, m, 2, seed=0)(None)))
    assert x.shape == (2, SIZE, SIZE, 3)


def test_configure_threads_after_init_explains():
    tf.constant(1) + 1  # the runtime is initialized now
    data.configure_threads(0, 0)  # no-op
    current = tf.config.threading.get_intra_op_parallelism_threads()
    data.configure_threads(current, 0) if current > 0 else None  # same value: accepted
    with pytest.raises(RuntimeError, match="before any TF op"):
        data.configure_threads(current + 3, 0)


@pytest.mark.parametrize("fixture", ["four", "one"])  # FILE and DATA sharding
def test_parameter_server_worker_shards_equal_the_pipelines_of_an_input_context(fixture, request):
    """ParameterServerStrategy runs ONE traced input function on every worker; the worker is told apart at run
    time (``worker_index``, a tensor): worker i must get exactly what input pipeline i of n gets, resume skip
    included (start_step = the steps that worker did)."""
    path, m = request.getfixturevalue(fixture)
    for worker in (0, 1):
        plain = data.train_dataset_fn(path, m, 2, seed=7, start_step=3, cache=False)(_ctx(2, worker, replicas=2))
        ps = data.train_dataset_fn(path, m, 2, seed=7, start_step=3, cache=False, num_workers=2,
                                   worker_index=lambda w=worker: tf.constant(w, tf.int64))(_ctx(1, 0, replicas=1))
        a, b = _take(plain, 12), _take(ps, 12)
        assert len(a) == len(b) == 12 and all(np.array_equal(x1, x2) and np.array_equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))
