"""The TFRecord format of prepared data: how one image becomes a record, and how a batch of records
becomes float32 pixels again -- shared by the single-process prepare step, the Beam pipeline and the
trainer's input pipeline, so all three agree byte for byte.

Two encodings (``data.encoding``):

* ``raw``  ``image/raw`` = uint8 [size, size, 3] row-major RGB. Reading costs nothing, but a 180x180 image
  takes 97 KB: 3,670 flowers are 356 MB, and ImageNet-sized sets do not fit in memory.
* ``jpeg`` ``image/jpeg`` = the *already resized* image, JPEG-encoded by Pillow at ``data.jpeg_quality``
  (~10x smaller at 95). Decoding costs CPU in the input pipeline, which is why it runs there in parallel
  with the training step (``tf.data`` map with AUTOTUNE parallelism) and only once per image per epoch.

Augmentation (``data.augment``) is *stateless*: the random crop box and flip of example ``j`` of the
pipeline's batch ``k`` come from ``tf.random.stateless_uniform`` keyed on ``(seed, pipeline, k)``, never
from a stateful RNG, so a resumed run (which skips ``k`` batches) draws exactly what an uninterrupted run
drew at the same position -- resume stays bitwise exact with augmentation on.
"""
from __future__ import annotations

import io
from trainers import tfrecord

ENCODINGS = ("raw", "jpeg")

#: Human-readable description of a record, stored in the manifest.
FEATURES = {
    "raw": {
        "image/raw": "bytes: uint8 [image_size, image_size, 3], row-major RGB",
        "image/height": "int64",
        "image/width": "int64",
        "label": "int64: index into classes",
        "image/path": "bytes: <class>/<file name> relative to the source folder",
    },
    "jpeg": {
        "image/jpeg": "bytes: JPEG of the image resized to image_size x image_size (Pillow, RGB)",
        "image/height": "int64",
        "image/width": "int64",
        "label": "int64: index into classes",
        "image/path": "bytes: <class>/<file name> relative to the source folder",
    },
}
_KEY = {"raw": "image/raw", "jpeg": "image/jpeg"}

# Random-resized-crop range of the augmentation: the crop keeps 80..100% of each side.
CROP_MIN = 0.8


def encode_pixels(raw: bytes, image_size: int, encoding: str, quality: int = 95) -> bytes:
    """The stored image bytes for RGB ``raw`` pixels (already ``image_size`` square)."""
    if encoding == "raw":
        return raw
    if encoding != "jpeg":
        raise ValueError(f"data.encoding: {encoding!r} is not one of {', '.join(ENCODINGS)}")
    from PIL import Image

    buf = io.BytesIO()
    Image.frombytes("RGB", (image_size, image_size), raw).save(buf, format="JPEG", quality=int(quality))
    return buf.getvalue()


def example_bytes(image: bytes, label: int, image_size: int, rel: str, encoding: str = "raw") -> bytes:
    """One serialized ``tf.train.Example`` (``image`` from :func:`encode_pixels`), made without importing
    TensorFlow (:mod:`trainers.tfrecord`; sorted feature map, so equal in every process and runner)."""
    return tfrecord.example_bytes({_KEY[encoding]: image, "image/height": int(image_size),
                                   "image/width": int(image_size), "label": int(label),
                                   "image/path": rel.encode("utf-8")})


def decode_batch(serialized, image_size: int, encoding: str = "raw"):
    """Decode a batch of serialized records -> (float32 [B,H,W,3] in 0..255, int32 [B]).

    One ``parse_example`` for the whole batch; raw pixels are one ``decode_raw`` + reshape; JPEGs are
    decoded one by one inside the batch (``decode_jpeg`` has no batched kernel), several batches at once
    by the caller's parallel ``map``."""
    import tensorflow as tf

    key = _KEY[encoding]
    parsed = tf.io.parse_example(serialized, {
        key: tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    })
    batch = serialized.shape[0] if serialized.shape.rank and serialized.shape[0] is not None else -1  # static B
    if encoding == "raw":
        pixels = tf.io.decode_raw(parsed[key], tf.uint8)  # [B, H*W*3]
        images = tf.reshape(pixels, [batch, image_size, image_size, 3])
    else:
        images = tf.map_fn(lambda data: tf.io.decode_jpeg(data, channels=3), parsed[key],
                           fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.uint8),
                           parallel_iterations=16)
        images = tf.reshape(images, [batch, image_size, image_size, 3])
    return tf.cast(images, tf.float32), tf.cast(parsed["label"], tf.int32)


def augment_batch(images, seed: int, pipeline_id, batch_index):
    """Seeded random crop (80..100% of each side, resized back) and horizontal flip of a batch.

    Stateless: the draws depend only on ``(seed, pipeline_id, batch_index)``, so the same batch position
    gets the same augmentation in any process, before or after a resume. One ``crop_and_resize`` does
    both: a box with x1 > x2 samples the crop mirrored left-right."""
    import tensorflow as tf

    size = tf.shape(images)[1:3]
    b = tf.shape(images)[0]
    key = tf.stack([tf.cast(seed, tf.int64) * 1_000_003 + tf.cast(pipeline_id, tf.int64),
                    tf.cast(batch_index, tf.int64)])
    u = tf.random.stateless_uniform([b, 4], seed=key)  # scale, y offset, x offset, flip
    side = CROP_MIN + (1.0 - CROP_MIN) * u[:, 0]
    y1 = (1.0 - side) * u[:, 1]
    x1 = (1.0 - side) * u[:, 2]
    y2, x2 = y1 + side, x1 + side
    flip = u[:, 3] < 0.5
    left, right = tf.where(flip, x2, x1), tf.where(flip, x1, x2)
    boxes = tf.stack([y1, left, y2, right], axis=1)
    return tf.image.crop_and_resize(images, boxes, tf.range(b), size, method="bilinear")
