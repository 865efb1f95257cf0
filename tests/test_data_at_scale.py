"""Data larger than memory: JPEG-encoded shards, cache-or-stream by a memory budget, stateless augmentation,
and exact resume with all three (``trainers.image_records``, ``trainers.input_cache``, ``trainers.data``)."""
from __future__ import annotations

import io
import signal
from pathlib import Path

import numpy as np
import pytest

from trainers import data, image_records, input_cache, prepare

SIZE = 24
MB = 1 << 20


# -- the memory-budget decision (pure) ------------------------------------------------------------------
def test_budget_zero_never_caches_and_an_explicit_budget_is_a_hard_limit():
    assert input_cache.decide(10, 0, 64 << 30, 1)[0] is False
    ok, why = input_cache.decide(99 * MB, 100, 0, 1)
    assert ok and "data.cache_budget_mb" in why
    ok, why = input_cache.decide(101 * MB, 100, 64 << 30, 1)
    assert not ok and "streamed" in why


def test_default_budget_is_half_the_memory_split_between_the_replicas_on_the_machine():
    memory = 8 << 30
    assert input_cache.default_budget_mb(memory, 1) == 4096
    assert input_cache.default_budget_mb(memory, 2) == 2048
    assert input_cache.decide(2000 * MB, -1, memory, 2)[0] is True
    ok, why = input_cache.decide(2100 * MB, -1, memory, 2)
    assert not ok and "2 replica(s) on this machine" in why
    assert input_cache.decide(1, -1, 0, 1) == (False, "machine memory unknown and no data.cache_budget_mb: streaming")


def test_replicas_on_this_machine_count_the_tasks_sharing_its_host():
    cluster = {"chief": ["localhost:2222"], "worker": ["localhost:2223", "10.0.0.7:2222"], "ps": ["localhost:9"]}
    assert input_cache.replicas_on_this_machine(cluster, "chief", 0) == 2
    assert input_cache.replicas_on_this_machine(cluster, "worker", 1) == 1
    assert input_cache.replicas_on_this_machine({}, "chief", 0) == 1


def test_pipeline_bytes_counts_payload_and_splits_data_sharding():
    assert input_cache.pipeline_bytes([1000, 2000], 10, "FILE", 2) == 3000 - 160
    assert input_cache.pipeline_bytes([1000, 2000], 10, "DATA", 2) == (3000 - 160) // 2


def test_memory_bytes_reads_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384 kB\nMemFree: 1 kB\n")
    assert 0 < input_cache.memory_bytes(str(meminfo)) <= 16384 * 1024
    assert input_cache.memory_bytes(str(tmp_path / "none")) >= 0


# -- JPEG records ------------------------------------------------------------------------------------------
def test_jpeg_encoding_round_trip_is_close_to_the_pixels_and_matches_pillow():
    import tensorflow as tf
    from PIL import Image

    rng = np.random.default_rng(1)
    grid = Image.fromarray(rng.integers(0, 256, size=(3, 3, 3)).astype(np.uint8))
    base = np.asarray(grid.resize((SIZE, SIZE), Image.BILINEAR)).astype(int)  # smooth, like a photo
    imgs = [np.clip(base + k * 9, 0, 255).astype(np.uint8) for k in range(4)]
    encoded = [image_records.encode_pixels(im.tobytes(), SIZE, "jpeg", 95) for im in imgs]
    assert all(e[:2] == b"\xff\xd8" for e in encoded)  # JPEG SOI marker
    serialized = tf.constant([image_records.example_bytes(e, k % 2, SIZE, f"c/{k}.jpg", "jpeg")
                              for k, e in enumerate(encoded)])
    x, y = image_records.decode_batch(serialized, SIZE, "jpeg")
    assert x.shape == (4, SIZE, SIZE, 3) and x.dtype == tf.float32 and y.numpy().tolist() == [0, 1, 0, 1]
    for k, im in enumerate(imgs):
        got = x[k].numpy()
        assert np.abs(got - im).mean() < 4.0  # lossy, but close at quality 95
        pil = np.asarray(Image.open(io.BytesIO(encoded[k])).convert("RGB"), dtype=np.float32)
        assert np.abs(got - pil).mean() < 1.5  # TF's and Pillow's decoders agree (chroma upsampling differs)
    with pytest.raises(ValueError, match="data.encoding"):
        image_records.encode_pixels(imgs[0].tobytes(), SIZE, "png")


@pytest.fixture(scope="module")
def jpeg_records(tmp_path_factory) -> tuple[str, dict, str, dict]:
    root = tmp_path_factory.mktemp("scale")
    images = str(root / "images")
    prepare.synthesize_image_folder(images, num_classes=3, images_per_class=16, image_size=SIZE, seed=3)
    raw = prepare.prepare_tfrecords(images, str(root / "raw"), SIZE, num_shards=4, validation_fraction=0.2, seed=3)
    jpeg = prepare.prepare_tfrecords(images, str(root / "jpeg"), SIZE, num_shards=4, validation_fraction=0.2,
                                     seed=3, encoding="jpeg")
    return str(root / "raw"), raw, str(root / "jpeg"), jpeg


def test_jpeg_shards_are_smaller_hold_the_same_examples_and_say_their_encoding(jpeg_records):
    raw_dir, raw, jpeg_dir, jpeg = jpeg_records
    assert (raw["encoding"], jpeg["encoding"]) == ("raw", "jpeg") and jpeg["jpeg_quality"] == 95
    assert "image/jpeg" in jpeg["features"] and "image/raw" not in jpeg["features"]
    assert jpeg["shards"] == raw["shards"] and jpeg["counts"] == raw["counts"]
    size = lambda d, m: sum(Path(d, f).stat().st_size for f in m["files"]["train"])  # noqa: E731
    assert size(jpeg_dir, jpeg) < size(raw_dir, raw)
    xr, yr = next(iter(data.eval_dataset(raw_dir, raw, 64)))
    xj, yj = next(iter(data.eval_dataset(jpeg_dir, jpeg, 64)))
    assert yr.numpy().tolist() == yj.numpy().tolist()
    assert np.abs(xr.numpy() - xj.numpy()).mean() < 6.0


def _take(ds, n):
    return [(x.numpy(), y.numpy()) for x, y in ds.take(n)]


def _equal(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x1, x2) and np.array_equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))


def test_streamed_and_cached_pipelines_give_the_same_sequence_and_the_budget_decides(jpeg_records, caplog):
    import logging

    _, _, path, m = jpeg_records
    cached = _take(data.train_dataset_fn(path, m, 4, seed=5, cache=True)(None), 15)
    with caplog.at_level(logging.INFO, logger="trainers.data"):
        streamed = _take(data.train_dataset_fn(path, m, 4, seed=5, cache_budget_mb=0)(None), 15)
    assert _equal(cached, streamed)
    assert any("jpeg records, streamed (data.cache_budget_mb=0" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trainers.data"):
        data.train_dataset_fn(path, m, 4, seed=5, cache_budget_mb=1)(None)
    assert any("cached (" in r.getMessage() and "fit the 1 MB budget" in r.getMessage() for r in caplog.records)


# -- augmentation ------------------------------------------------------------------------------------------
def test_augmentation_is_a_pure_function_of_seed_pipeline_and_batch_position():
    import tensorflow as tf

    images = tf.random.stateless_uniform([6, SIZE, SIZE, 3], seed=[1, 2], maxval=255.0)
    a = image_records.augment_batch(images, 7, 0, tf.constant(3, tf.int64)).numpy()
    assert np.array_equal(a, image_records.augment_batch(images, 7, 0, tf.constant(3, tf.int64)).numpy())
    assert a.shape == images.shape and a.min() >= 0 and a.max() <= 255
    for other in [(8, 0, 3), (7, 1, 3), (7, 0, 4)]:
        assert not np.array_equal(a, image_records.augment_batch(images, *other[:2], tf.constant(other[2], tf.int64)).numpy())
    assert not np.array_equal(a, images.numpy())


def test_augmentation_flips_mirror_the_crop():
    import tensorflow as tf

    ramp = tf.tile(tf.reshape(tf.range(SIZE, dtype=tf.float32), [1, 1, SIZE, 1]), [64, SIZE, 1, 3])
    out = image_records.augment_batch(ramp, 0, 0, tf.constant(0, tf.int64)).numpy()
    rising = out[:, 0, -1, 0] > out[:, 0, 0, 0]
    assert 10 < rising.sum() < 54  # about half the examples are mirrored


def test_resume_with_jpeg_streaming_and_augmentation_is_bitwise_exact_in_the_pipeline(jpeg_records):
    _, _, path, m = jpeg_records
    fn = lambda start: data.train_dataset_fn(path, m, 4, seed=9, start_step=start, cache_budget_mb=0,  # noqa: E731
                                             augment=True)(None)
    full = _take(fn(0), 20)
    for k in (1, 7, 13):
        assert _equal(_take(fn(k), 20 - k), full[k:]), f"resume at {k} differs"
    plain = _take(data.train_dataset_fn(path, m, 4, seed=9, cache_budget_mb=0)(None), 20)
    assert [y.tolist() for _, y in plain] == [y.tolist() for _, y in full]  # same examples, augmented pixels
    assert not _equal(plain, full)


# -- one real job: 2-worker MWMS, kill -9 of the chief, resume, bitwise equal -------------------------------
SCALE = ("data.cache_budget_mb=0", "data.augment=true")


@pytest.fixture(scope="module")
def jpeg_prepared(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("jpegdata")
    prepare.synthesize_image_folder(str(root / "images"), num_classes=3, images_per_class=40, image_size=32, seed=42)
    prepare.prepare_tfrecords(str(root / "images"), str(root / "tfrecords"), image_size=32, num_shards=4,
                              validation_fraction=0.2, seed=42, encoding="jpeg")
    return str(root / "tfrecords")


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_kill_9_with_jpeg_streaming_and_augmentation_resumes_bitwise_exactly(tmp_path, jpeg_prepared):
    from jobs.run_records import records
    from jobs.steps import calls as steps
    from tests.conftest import assert_no_processes_left
    from tests.test_resilience import (EVERY, JOB_TIMEOUT_S, STEPS, Recorder, _cfg, assert_resumed,
                                       assert_same_final_model, steps_of)

    reference = tmp_path / "reference"
    lines: list[str] = []
    result = steps.run_local(_cfg(reference, jpeg_prepared, *SCALE), timeout_s=JOB_TIMEOUT_S, log=lines.append)
    assert result.returncode == 0, "\n".join(lines[-30:])
    assert steps_of(lines, "chief") == list(range(1, STEPS + 1))
    assert any("jpeg records, streamed" in line and "augmented" in line for line in lines), "\n".join(lines[:40])

    base = tmp_path / "killed"
    rec = Recorder(str(base), "workerpool0", "[chief-0] step 17/")
    try:
        result = steps.run_local(_cfg(base, jpeg_prepared, *SCALE, "scheduling.max_restarts=2"),
                                  timeout_s=JOB_TIMEOUT_S, log=rec)
        assert rec.fired and result.returncode == 0 and result.attempts == 2, result.message
        assert result.restarts[0].failure.exit_status == -signal.SIGKILL
        # What restore picks up is the newest checkpoint once every replica was dead: the kill lands at step
        # 17 or later (how much later depends on the machine's load), never before a 5-step checkpoint
        # at or after 15, never at the end.
        resumed = result.restarts[0].resumed_step
        latest, files = rec.checkpoints_at_restart[0]
        assert resumed == latest and f"ckpt-{latest}.index" in files, (resumed, latest, files)
        assert resumed % EVERY == 0 and 10 <= resumed < STEPS, resumed
        from jobs.local.process.faults import attempt_lines

        assert_resumed(attempt_lines(rec.lines, 2), resumed, STEPS)
        assert_same_final_model(base, reference)
    finally:
        assert_no_processes_left(str(base))
        assert_no_processes_left(str(reference))
