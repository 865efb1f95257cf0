"""Input-pipeline benchmark: examples/second of tf.data variants over the same TFRecords.

    python benchmarks/input_pipeline.py [--examples 2000] [--image-size 64] [--batch 32]
                                        [--batches 500] [--repeats 3] [--step-ms 0]
                                        [--workdir DIR] [--model] [--only a,f,g,h]
    python benchmarks/input_pipeline.py --image-size 180 --examples 1000 --batches 100 --model   # README figures

Variants (same data, same seed):

  a  recommended    files -> cache -> shuffle -> batch -> map(vectorized decode) -> repeat -> prefetch
  a' trainers.data  the real ``train_dataset_fn`` (should match ``a``)
  b  scalar map     files -> cache -> shuffle -> map(per-example parse+decode) -> batch -> repeat -> prefetch
  c  no cache       like ``a`` without ``cache()`` (files re-read every epoch)
  d  no prefetch    like ``a`` without ``prefetch``
  e  jpeg files     per-example read_file + decode_jpeg + resize from the image folder (no TFRecords)
  f  raw streamed   ``train_dataset_fn`` over raw shards, ``cache_budget_mb=0`` (files re-read every epoch)
  g  jpeg cached    ``train_dataset_fn`` over ``data.encoding=jpeg`` shards, records cached, decoded each epoch
  h  jpeg streamed  the same, streamed: what a data set larger than memory gets
  i  jpeg streamed + augment  ``h`` with the stateless random crop + flip

``--model`` also times the seed CNN's training step at this image size (batch ``--batch``, the precision
``training.precision: auto`` picks here) and prints each variant's rate as a multiple of what the model
consumes: an input pipeline needs to stay well above 1x (the goal here is 10x) to never starve the step.

``--step-ms`` simulates a training step by sleeping in the consumer, which is where ``prefetch``
pays off (it overlaps input work with the step).  Figures are printed, nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build(path: str, manifest: dict, batch: int, *, vectorized=True, cache=True, prefetch=True,
          seed=0, shuffle_buffer=1024):
    import tensorflow as tf

    from trainers import data

    size = manifest["image_size"]
    files = [f"{path}/{n}" for n in manifest["files"]["train"]]
    ds = tf.data.TFRecordDataset(files, num_parallel_reads=min(len(files), 4))
    if cache:
        ds = ds.cache()
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if vectorized:
        ds = ds.batch(batch, drop_remainder=True)
        ds = ds.map(lambda s: data.decode_batch(s, size), num_parallel_calls=tf.data.AUTOTUNE,
                    deterministic=True)
    else:
        def one(s):
            x, y = data.decode_batch(tf.expand_dims(s, 0), size)
            return x[0], y[0]
        ds = ds.map(one, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        ds = ds.batch(batch, drop_remainder=True)
    ds = ds.repeat()
    if prefetch:
        ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    return ds.with_options(options)


def jpeg_files(image_root: str, classes: list[str], size: int, batch: int, seed=0):
    import tensorflow as tf

    paths, labels = [], []
    for i, c in enumerate(classes):
        for p in sorted(Path(image_root, c).glob("*.jpg")):
            paths.append(str(p))
            labels.append(i)

    def load(p, y):
        img = tf.io.decode_jpeg(tf.io.read_file(p), channels=3)
        img = tf.image.resize(img, [size, size], method="bilinear")
        return img, tf.cast(y, tf.int32)

    ds = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths), seed=seed)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(batch, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)


def model_consumption(image_size: int, classes: int, batch: int, steps: int = 15) -> tuple[float, str]:
    """Examples/s the seed CNN's training step consumes here (fixed in-memory batch, no input pipeline)."""
    import keras
    import tensorflow as tf

    from trainers import precision
    from trainers.models import build_model

    choice = precision.choose("auto", precision.detect("one_device"))
    precision.apply(choice)
    model = build_model("small_cnn", image_size, classes)
    opt = keras.optimizers.Adam()
    x = tf.random.uniform([batch, image_size, image_size, 3], maxval=255.0)
    y = tf.random.uniform([batch], maxval=classes, dtype=tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x, training=True)))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for _ in range(3):
        step().numpy()
    start = time.perf_counter()
    for _ in range(steps):
        step().numpy()
    rate = steps * batch / (time.perf_counter() - start)
    keras.mixed_precision.set_global_policy("float32")
    return rate, choice.policy


def measure(ds, batches: int, warmup: int, step_s: float) -> tuple[float, float]:
    it = iter(ds)
    for _ in range(warmup):
        next(it)
    n = 0
    start = time.perf_counter()
    for _ in range(batches):
        x, _ = next(it)
        n += int(x.shape[0])
        if step_s:
            time.sleep(step_s)
    elapsed = time.perf_counter() - start
    return n / elapsed, elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=2000, help="synthetic images in total")
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--batches", type=int, default=500, help="timed batches per variant and repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant; the median is shown")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=0.0, help="simulated training step per batch")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workdir", help="keep the data here (default: a temp dir, removed after)")
    parser.add_argument("--model", action="store_true", help="also time the model's training step (consumption)")
    parser.add_argument("--only", help="comma list of variant letters, e.g. a,f,g,h")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    import tensorflow as tf  # noqa: F401

    from trainers import data, prepare

    t_import = time.perf_counter() - t0
    if args.model:  # before any tf.data op: the policy is set before the model exists
        model_rate, policy = model_consumption(args.image_size, args.classes, args.batch)
    tmp = None
    if args.workdir:
        work = Path(args.workdir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="input-bench-")
        work = Path(tmp.name)
    try:
        per_class = max(1, args.examples // args.classes)
        t0 = time.perf_counter()
        prepare.synthesize_image_folder(str(work / "images"), args.classes, per_class, args.image_size)
        t_syn = time.perf_counter() - t0
        t0 = time.perf_counter()
        manifest = prepare.prepare_tfrecords(str(work / "images"), str(work / "records"), args.image_size,
                                             num_shards=args.shards, validation_fraction=0.0)
        jpeg_path = str(work / "records-jpeg")
        jpeg = prepare.prepare_tfrecords(str(work / "images"), jpeg_path, args.image_size,
                                         num_shards=args.shards, validation_fraction=0.0, encoding="jpeg")
        size_of = lambda d, m: sum(os.path.getsize(os.path.join(d, f)) for f in m["files"]["train"]) / 2**20  # noqa: E731
        t_prep = time.perf_counter() - t0
        path = str(work / "records")
        n_train = manifest["num_examples"]["train"]
        print(f"TF import {t_import:.1f}s; synthesized {per_class * args.classes} JPEGs in {t_syn:.1f}s; "
              f"prepared {n_train} records ({args.shards} shards) in {t_prep:.1f}s")
        print(f"{args.image_size}x{args.image_size}x3, batch {args.batch}, {args.batches} timed batches "
              f"(~{args.batches * args.batch / max(1, n_train):.1f} epochs), median of {args.repeats}, "
              f"step {args.step_ms} ms, "
              f"{os.cpu_count()} CPUs; shards: raw {size_of(str(work / 'records'), manifest):.1f} MB, "
              f"jpeg {size_of(jpeg_path, jpeg):.1f} MB\n")
        variants = [
            ("a  recommended (batch -> vectorized map)", lambda: build(path, manifest, args.batch)),
            ("a' trainers.data.train_dataset_fn",
             lambda: data.train_dataset_fn(path, manifest, args.batch, seed=0)(None)),
            ("b  scalar map (map per example -> batch)",
             lambda: build(path, manifest, args.batch, vectorized=False)),
            ("c  no cache", lambda: build(path, manifest, args.batch, cache=False)),
            ("d  no prefetch", lambda: build(path, manifest, args.batch, prefetch=False)),
            ("e  JPEG files, per-example decode",
             lambda: jpeg_files(str(work / "images"), manifest["classes"], args.image_size, args.batch)),
            ("f  raw streamed (trainers.data)",
             lambda: data.train_dataset_fn(path, manifest, args.batch, seed=0, cache_budget_mb=0)(None)),
            ("g  jpeg cached (trainers.data)",
             lambda: data.train_dataset_fn(jpeg_path, jpeg, args.batch, seed=0, cache=True)(None)),
            ("h  jpeg streamed (trainers.data)",
             lambda: data.train_dataset_fn(jpeg_path, jpeg, args.batch, seed=0, cache_budget_mb=0)(None)),
            ("i  jpeg streamed + augment",
             lambda: data.train_dataset_fn(jpeg_path, jpeg, args.batch, seed=0, cache_budget_mb=0, augment=True)(None)),
        ]
        if args.only:
            variants = [v for v in variants if v[0].split()[0] in args.only.split(",")]
        rows = []
        for name, make in variants:
            runs = sorted(measure(make(), args.batches, args.warmup, args.step_ms / 1000.0)
                          for _ in range(max(1, args.repeats)))
            rate, secs = runs[len(runs) // 2]
            rows.append((name, rate, secs))
        base = rows[0][1]
        model_col = f" {'x model':>8}" if args.model else ""
        print(f"{'variant':<44} {'examples/s':>11} {'seconds':>8} {'vs a':>6}{model_col}")
        for name, rate, secs in rows:
            extra = f" {rate / model_rate:>7.1f}x" if args.model else ""
            print(f"{name:<44} {rate:>11,.0f} {secs:>8.2f} {rate / base:>6.2f}{extra}")
        if args.model:
            print(f"\nmodel consumption: {model_rate:,.0f} examples/s (seed CNN train step, {policy}, batch {args.batch}, "
                  f"{args.image_size}x{args.image_size}, input pipeline off)")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
