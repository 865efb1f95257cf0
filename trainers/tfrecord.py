"""``tf.train.Example`` records and TFRecord files without importing TensorFlow.

Why not ``tf.train.Example`` and ``tf.io.TFRecordWriter``: importing TensorFlow costs 3-5 s on 2 cores
(``import tensorflow`` also imports Keras and matplotlib), which was most of the prepare step's wall time
for the default job (0.3 s of work). Both formats are small and fixed:

* ``Example`` is a protocol buffer (``tensorflow/core/example/{example,feature}.proto``). The message
  classes here are built by ``google.protobuf`` from the same field numbers and types, in a private
  descriptor pool (no clash with TensorFlow's own classes in a process that imports both), so
  ``SerializeToString(deterministic=True)`` gives the same bytes as TensorFlow's.
* A TFRecord file is a sequence of ``uint64 length, uint32 masked_crc32c(length), data,
  uint32 masked_crc32c(data)`` (little-endian; TensorFlow's ``core/lib/io/record_writer.cc``), with the
  CRC-32C from ``google-crc32c`` (its C implementation).

``tests/test_tfrecord.py`` checks both byte for byte against TensorFlow's own writer. Object-store paths
(``gs://``) still go through ``tf.io.TFRecordWriter``: TensorFlow's filesystem is what writes there.
"""
from __future__ import annotations

import functools
import struct
from typing import Iterable
from trainers.fileio import plain_path

_MASK_DELTA = 0xA282EAD8


@functools.lru_cache(maxsize=None)
def _classes():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="vtp/tensorflow_example.proto", package="tensorflow",
                                             syntax="proto3")

    def message(name: str, fields: list[tuple[str, int, int, int, str]]):
        msg = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            field = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                field.type_name = type_name
        return msg

    rep, opt = F.LABEL_REPEATED, F.LABEL_OPTIONAL
    message("BytesList", [("value", 1, F.TYPE_BYTES, rep, "")])
    message("FloatList", [("value", 1, F.TYPE_FLOAT, rep, "")])
    message("Int64List", [("value", 1, F.TYPE_INT64, rep, "")])
    feature = message("Feature", [("bytes_list", 1, F.TYPE_MESSAGE, opt, ".tensorflow.BytesList"),
                                  ("float_list", 2, F.TYPE_MESSAGE, opt, ".tensorflow.FloatList"),
                                  ("int64_list", 3, F.TYPE_MESSAGE, opt, ".tensorflow.Int64List")])
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    features = message("Features", [("feature", 1, F.TYPE_MESSAGE, rep, ".tensorflow.Features.FeatureEntry")])
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=opt)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, label=opt, type_name=".tensorflow.Feature")
    message("Example", [("features", 1, F.TYPE_MESSAGE, opt, ".tensorflow.Features")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def example_bytes(features: dict[str, bytes | int | list[bytes] | list[int]]) -> bytes:
    """One serialized ``tf.train.Example``: ``bytes`` values become a ``bytes_list``, ``int`` values an
    ``int64_list`` (a list: all of one kind). Deterministic: the feature map is written sorted by key, so
    the same features give the same bytes in every process (what byte-identical shards need)."""
    example = _classes()()
    example.features.SetInParent()  # as tf.train.Example(features=...): present even when empty
    for key, value in features.items():
        values = value if isinstance(value, list) else [value]
        target = example.features.feature[key]
        if all(isinstance(v, bytes) for v in values):
            target.bytes_list.SetInParent()
            target.bytes_list.value.extend(values)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            target.int64_list.SetInParent()
            target.int64_list.value.extend(values)
        else:
            raise TypeError(f"feature {key!r}: bytes or int values, got {value!r}")
    return example.SerializeToString(deterministic=True)


def parse_example(data: bytes) -> dict[str, list[bytes] | list[int]]:
    """The features of one serialized ``Example`` (for tests and tools; training parses with TensorFlow)."""
    example = _classes()()
    example.ParseFromString(data)
    out: dict[str, list[bytes] | list[int]] = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[key] = list(getattr(feature, kind).value) if kind else []
    return out


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    """One record as it is stored in a TFRecord file (no compression)."""
    header = struct.pack("<Q", len(record))
    return b"".join((header, struct.pack("<I", _masked_crc(header)), record,
                     struct.pack("<I", _masked_crc(record))))


def read_records(path: str) -> list[bytes]:
    """Every record of a local, uncompressed TFRecord file, checking both checksums of each."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError(f"{path}: truncated record header at byte {pos}")
        header = data[pos:pos + 8]
        (length,), (crc,) = struct.unpack("<Q", header), struct.unpack("<I", data[pos + 8:pos + 12])
        if crc != _masked_crc(header):
            raise ValueError(f"{path}: corrupt record header at byte {pos}")
        record = data[pos + 12:pos + 12 + length]
        if len(record) != length or pos + 16 + length > len(data):
            raise ValueError(f"{path}: truncated record at byte {pos}")
        (crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if crc != _masked_crc(record):
            raise ValueError(f"{path}: corrupt record data at byte {pos}")
        out.append(record)
        pos += 16 + length
    return out


def write_records(path: str, records: Iterable[bytes]) -> int:
    """Write one TFRecord file of ``records`` in order; returns how many. A plain path (local, or Vertex's
    ``/gcs/`` mount) is written here; ``scheme://`` paths by ``tf.io.TFRecordWriter``."""
    count = 0
    local = plain_path(path)
    if local is None:
        import tensorflow as tf

        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
                count += 1
        return count
    with open(local, "wb") as f:
        for record in records:
            f.write(frame(record))
            count += 1
    return count
