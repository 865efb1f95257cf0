"""trainers.tfrecord: Example records and TFRecord files equal, byte for byte, to TensorFlow's own; a local
prepare never imports TensorFlow."""
import os
import subprocess
import sys
import textwrap

import pytest

from trainers import image_records, tfrecord

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FEATURES = [
    {"image/raw": bytes(range(256)) * 3, "image/height": 16, "image/width": 16, "label": 2,
     "image/path": "roses/roses_0001.jpg".encode()},
    {"z": [b"", b"\x00", "é".encode()], "a": [0, -1, 2 ** 63 - 1, -(2 ** 63)], "m": b"x"},
    {"only": 7, "empty": []},
    {},
]


def _tf_example(features):
    import tensorflow as tf

    feature = {}
    for key, value in features.items():
        values = value if isinstance(value, list) else [value]
        if all(isinstance(v, bytes) for v in values):
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        else:
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


@pytest.mark.parametrize("features", FEATURES)
def test_example_bytes_equal_tensorflows(features):
    ours = tfrecord.example_bytes(features)
    assert ours == _tf_example(features)
    assert tfrecord.parse_example(ours) == {k: v if isinstance(v, list) else [v] for k, v in features.items()}


def test_feature_order_does_not_change_the_bytes():
    a = {"label": 1, "image/path": b"p", "image/raw": b"r"}
    assert tfrecord.example_bytes(a) == tfrecord.example_bytes(dict(reversed(list(a.items()))))


def test_record_example_is_the_one_training_parses():
    import tensorflow as tf

    data = image_records.example_bytes(bytes(range(48)), 1, 4, "daisy/d.jpg")
    parsed = tf.io.parse_single_example(data, {"image/raw": tf.io.FixedLenFeature([], tf.string),
                                               "label": tf.io.FixedLenFeature([], tf.int64),
                                               "image/path": tf.io.FixedLenFeature([], tf.string)})
    assert parsed["image/raw"].numpy() == bytes(range(48))
    assert int(parsed["label"]) == 1 and parsed["image/path"].numpy() == b"daisy/d.jpg"


def test_mixed_or_unknown_values_are_refused():
    with pytest.raises(TypeError, match="'k'"):
        tfrecord.example_bytes({"k": [b"a", 1]})
    with pytest.raises(TypeError):
        tfrecord.example_bytes({"k": True})
    with pytest.raises(TypeError):
        tfrecord.example_bytes({"k": 1.5})


def test_file_equal_to_tensorflows_writer_and_readable_by_tf_data(tmp_path):
    import tensorflow as tf

    recs = [tfrecord.example_bytes(f) for f in FEATURES] + [b"", b"\xff" * 70_000]
    ours, theirs = tmp_path / "ours.tfrecord", tmp_path / "theirs.tfrecord"
    assert tfrecord.write_records(str(ours), iter(recs)) == len(recs)
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for r in recs:
            writer.write(r)
    assert ours.read_bytes() == theirs.read_bytes()
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(ours))] == recs
    assert tfrecord.read_records(str(ours)) == recs


def test_corrupt_or_truncated_file_is_named(tmp_path):
    path = tmp_path / "r.tfrecord"
    tfrecord.write_records(str(path), [b"hello", b"world"])
    data = bytearray(path.read_bytes())
    data[14] ^= 1  # inside the first record's data
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt record data at byte 0"):
        tfrecord.read_records(str(path))
    tfrecord.write_records(str(path), [b"hello", b"world"])
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated record at byte 21"):
        tfrecord.read_records(str(path))


def test_local_prepare_never_imports_tensorflow(tmp_path):
    """The default job's prepare step (synthetic images -> shards) in a fresh interpreter: the shards are
    written and readable, and ``tensorflow`` was never imported (that import was 3-5 s of the step)."""
    code = textwrap.dedent(f"""
        import sys
        from jobfile import config as config_lib
        from jobs import records, steps
        cfg = config_lib.load("local", ["output.base_dir={tmp_path}"])
        data_dir, manifest = steps.prepare(cfg)
        assert "tensorflow" not in sys.modules, "prepare imported tensorflow"
        print(data_dir)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data_dir = proc.stdout.strip().splitlines()[-1]
    from trainers import data as data_lib

    manifest = data_lib.load_manifest(data_dir)
    total = 0
    for split in ("train", "validation"):
        for name in manifest["files"][split]:
            recs = tfrecord.read_records(os.path.join(data_dir, name))
            total += len(recs)
            assert all(tfrecord.parse_example(r)["image/height"] == [manifest["image_size"]] for r in recs)
    assert total == sum(manifest["num_examples"].values()) > 0
