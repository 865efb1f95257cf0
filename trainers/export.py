"""Export a trained model as a SavedModel with documented serving signatures, atomically, and verify it.

Signatures (both return the same outputs):

* ``serving_default(image_bytes: tf.string [batch])``: encoded JPEG/PNG/GIF/BMP images, any size; they
  are decoded to RGB and resized to the training size (bilinear), exactly as the prepare step did.
* ``serving_pixels(image: float32 [batch, size, size, 3])``: pixels in 0..255, already resized.

Outputs: ``probabilities`` float32 [batch, classes]; ``class_index`` int32 [batch] (arg-max);
``class_name`` string [batch]; ``class_names`` string [batch, classes] (the class of each column).

Atomicity: the SavedModel is written to a temporary sibling directory and renamed into place only when
complete (``metadata.json`` is written inside it before the rename), so a crash never leaves a half
model that looks whole. Only the chief exports; the model is rebuilt outside any distribution strategy
from the trained weights, which works the same for every strategy.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from typing import Any, Sequence
from trainers import data as data_lib

SIGNATURE_DOC = {
    "serving_default": {"inputs": {"image_bytes": "string [batch]: encoded JPEG/PNG images"}},
    "serving_pixels": {"inputs": {"image": "float32 [batch, size, size, 3]: pixels in 0..255"}},
    "outputs": {
        "probabilities": "float32 [batch, classes]",
        "class_index": "int32 [batch]",
        "class_name": "string [batch]",
        "class_names": "string [batch, classes]",
    },
}


def _serving_module(model, class_names: Sequence[str], image_size: int):
    import tensorflow as tf

    names = tf.constant(list(class_names))

    class Serving(tf.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def _outputs(self, pixels):
            probs = tf.cast(self.model(pixels, training=False), tf.float32)
            index = tf.argmax(probs, axis=-1, output_type=tf.int32)
            batch = tf.shape(probs)[0]
            return {
                "probabilities": probs,
                "class_index": index,
                "class_name": tf.gather(names, index),
                "class_names": tf.tile(names[tf.newaxis, :], [batch, 1]),
            }

        @tf.function(input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.float32, name="image")])
        def serving_pixels(self, image):
            return self._outputs(image)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serving_default(self, image_bytes):
            def decode(data):
                img = tf.io.decode_image(data, channels=3, expand_animations=False)
                img = tf.image.resize(tf.cast(img, tf.float32), [image_size, image_size], method="bilinear")
                return tf.ensure_shape(img, [image_size, image_size, 3])

            pixels = tf.map_fn(decode, image_bytes, fn_output_signature=tf.TensorSpec([image_size, image_size, 3], tf.float32))
            return self._outputs(pixels)

    return Serving()


def _is_gcs(path: str) -> bool:
    return path.startswith("gs://")


def export_model(model, export_dir: str, class_names: Sequence[str], image_size: int,
                 metadata: dict[str, Any] | None = None) -> str:
    """Write the SavedModel to ``export_dir`` atomically; returns ``export_dir``."""
    import tensorflow as tf

    module = _serving_module(model, class_names, image_size)
    export_dir = export_dir.rstrip("/")
    parent = os.path.dirname(export_dir) or "."
    tmp = f"{parent}/.{os.path.basename(export_dir)}.tmp-{uuid.uuid4().hex[:8]}"
    meta = {
        "classes": list(class_names),
        "image_size": image_size,
        "signatures": SIGNATURE_DOC,
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        **(metadata or {}),
    }
    tf.io.gfile.makedirs(parent)
    tf.saved_model.save(module, tmp, signatures={
        "serving_default": module.serving_default,
        "serving_pixels": module.serving_pixels,
    })
    with tf.io.gfile.GFile(f"{tmp}/metadata.json", "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    if _is_gcs(export_dir):
        # No directory rename on GCS: copy, then the metadata last, so readers key on metadata.json.
        if tf.io.gfile.exists(export_dir):
            tf.io.gfile.rmtree(export_dir)
        for root, _, files in tf.io.gfile.walk(tmp):
            rel = root[len(tmp):].lstrip("/")
            for name in files:
                if rel == "" and name == "metadata.json":
                    continue
                dst = "/".join(p for p in (export_dir, rel, name) if p)
                tf.io.gfile.makedirs(os.path.dirname(dst))
                tf.io.gfile.copy(f"{root}/{name}", dst, overwrite=True)
        tf.io.gfile.copy(f"{tmp}/metadata.json", f"{export_dir}/metadata.json", overwrite=True)
        tf.io.gfile.rmtree(tmp)
    else:
        old = None
        if os.path.exists(export_dir):
            old = f"{parent}/.{os.path.basename(export_dir)}.old-{uuid.uuid4().hex[:8]}"
            os.replace(export_dir, old)
        os.replace(tmp, export_dir)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    return export_dir


def evaluate_export(export_dir: str, data_dir: str, max_examples: int = 0, batch_size: int = 64,
                    loaded: Any = None) -> dict[str, Any]:
    """Load the SavedModel (in this process; ``loaded``: that load already made here) and run
    ``serving_pixels`` over the validation split."""
    import numpy as np
    import tensorflow as tf

    manifest = data_lib.load_manifest(data_dir)
    loaded = loaded if loaded is not None else tf.saved_model.load(export_dir)
    fn = loaded.signatures["serving_pixels"]
    split = "validation"
    ds = data_lib.eval_dataset(data_dir, manifest, batch_size)
    classes = list(manifest["classes"])
    correct = seen = 0
    loss_sum = 0.0
    sample: list[dict[str, Any]] = []
    confusion = np.zeros((len(classes), len(classes)), dtype=np.int64)  # rows: true class, columns: predicted
    gallery: list[dict[str, Any]] = []
    quota, cap = gallery_quota(len(classes))
    shown = np.zeros(len(classes), dtype=np.int64)
    for images, labels in ds:
        out = fn(image=images)
        probs = out["probabilities"].numpy()
        lab = labels.numpy()
        pred = probs.argmax(-1)
        correct += int((pred == lab).sum())
        loss_sum += float(-np.log(np.clip(probs[np.arange(len(lab)), lab], 1e-7, 1.0)).sum())
        np.add.at(confusion, (lab.astype(np.int64), pred.astype(np.int64)), 1)
        seen += len(lab)
        if len(sample) < 5:
            names = out["class_name"].numpy()
            sample += [{"label": classes[int(l)], "predicted": n.decode()} for l, n in zip(lab, names)][: 5 - len(sample)]
        picked = []
        for i, label in enumerate(lab):  # the first images of every class, not the first of the split
            if len(gallery) + len(picked) < cap and shown[int(label)] < quota:
                shown[int(label)] += 1
                picked.append(i)
        if picked:
            gallery += _thumbnails(images, lab, pred, probs, classes, picked)
        if max_examples and seen >= max_examples:
            break
    if seen == 0:
        raise ValueError(f"no examples to evaluate in {data_dir}")
    with tf.io.gfile.GFile(f"{export_dir.rstrip('/')}/metadata.json") as f:
        meta = json.load(f)
    return {"accuracy": correct / seen, "loss": loss_sum / seen, "examples": seen, "split": split,
            "sample": sample, "classes": classes, "confusion_matrix": confusion.tolist(), "gallery": gallery,
            "metadata": meta}


#: validation images kept (as small PNGs) for the run report's gallery: about this many, from every class.
GALLERY_SIZE = 12
#: ... and never more than this many (one per class for the first ones of a many-class model).
GALLERY_MAX = 48


def gallery_quota(num_classes: int) -> tuple[int, int]:
    """(images per class, images in all) for the gallery: GALLERY_SIZE shared among the classes, at least one
    each, never more than GALLERY_MAX. Why per class: the first GALLERY_SIZE images of the split were seen to
    be of two classes only while a third had 11 validation images (issue 29)."""
    per_class = max(1, GALLERY_SIZE // max(1, num_classes))
    return per_class, min(GALLERY_MAX, max(GALLERY_SIZE, num_classes))


def _thumbnails(images, labels, predicted, probs, classes, indices: list[int], size: int = 96) -> list[dict[str, Any]]:
    """Small base64 PNGs of the batch's images at ``indices`` with their true and predicted class."""
    import base64

    import tensorflow as tf

    out = []
    for i in indices:
        pixels = tf.cast(tf.clip_by_value(tf.image.resize(images[i], (size, size)), 0, 255), tf.uint8)
        out.append({"label": classes[int(labels[i])], "predicted": classes[int(predicted[i])],
                    "probability": float(probs[i, int(predicted[i])]),
                    "png_base64": base64.b64encode(tf.io.encode_png(pixels).numpy()).decode("ascii")})
    return out


def verify_in_fresh_process(export_dir: str, data_dir: str, max_examples: int = 0, timeout_s: float = 300) -> dict[str, Any]:
    """Evaluate the export in a new Python process: proves it loads without any training code state."""
    env = {k: v for k, v in os.environ.items() if k not in ("CLUSTER_SPEC", "TF_CONFIG")}
    proc = subprocess.run(
        [sys.executable, "-m", "trainers.export", "verify", export_dir, data_dir, str(max_examples)],
        capture_output=True, text=True, timeout=timeout_s, env=env,
    )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"the exported model at {export_dir} failed to load/run in a fresh process:\n{tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "verify":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        result = evaluate_export(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
        print(json.dumps(result))
    else:
        print("usage: python -m trainers.export verify EXPORT_DIR DATA_DIR [MAX_EXAMPLES]", file=sys.stderr)
        sys.exit(2)
