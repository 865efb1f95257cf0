"""Training / evaluation input pipelines over the TFRecords written by :mod:`trainers.prepare`.

Training pipeline, per input pipeline (= per worker), in the order the tf.data guide recommends::

    sorted shard files -> shard (FILE or DATA policy) -> TFRecordDataset(num_parallel_reads)
      -> [cache() if it fits the memory budget] -> shuffle(buffer, seed, reshuffle_each_iteration)
      -> batch(per_replica, drop_remainder) -> repeat() -> zip(batch counter)
      -> skip(start_step * replicas_per_pipeline)
      -> map(decode_batch [+ augment_batch])  [one parse_example per batch; raw: decode_raw, jpeg:
         decode_jpeg per image; AUTOTUNE parallel batches] -> prefetch(AUTOTUNE)

* Caching the *serialized* records before ``shuffle`` keeps the shuffle order fresh each epoch while
  reading the files once; ``batch`` before ``map`` lets one op parse a whole batch.
* Cache or stream: ``cache()`` holds the pipeline's records in RAM, so it is used only when they fit
  ``data.cache_budget_mb`` (``trainers.input_cache``); otherwise the files are re-read every epoch with
  parallel reads, and shuffle/prefetch hide the latency. Both give the same sequence.
* Decoding after ``skip``: a resume skips serialized batches without decoding them, and the batch counter
  zipped in before ``skip`` keys the stateless augmentation (``trainers.image_records.augment_batch``) on the
  batch's position in the stream, so augmented batches after a resume equal the uninterrupted run's.
* The dataset is infinite, so a fixed number of steps never hangs a multi-worker job whose workers
  hold unequal numbers of examples.  Batches never straddle an epoch (``drop_remainder`` per epoch).
* Determinism: ``options.deterministic = True``, a sorted file list, a seeded shuffle.  The same
  ``seed`` gives the same sequence in every process (the order also depends on TF's global seed when
  one is set with ``tf.random.set_seed``/``keras.utils.set_random_seed``, so set that the same way too).
* Resume: ``start_step`` is the *global* step already done; every global step consumes
  ``num_replicas_in_sync / num_input_pipelines`` elements of each pipeline, so that many are skipped
  per step and element ``k`` of a resumed run equals element ``k + skipped`` of an uninterrupted run.
* tf.data auto-sharding is switched OFF: we shard explicitly (FILE when every worker can get whole
  shard files holding at least one batch, else DATA) and log which policy was used and why.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Callable

from trainers import input_cache
from jobfile.errors import ConfigError, problem
from trainers.image_records import augment_batch, decode_batch as decode
from jobfile.paths import join

log = logging.getLogger(__name__)

F_PATH = "data.path"
F_BATCH = "training.per_replica_batch_size"
F_SHUFFLE = "data.shuffle_buffer"
F_VAL = "data.validation_fraction"
MANIFEST = "manifest.json"
SUPPORTED_FORMAT_VERSIONS = (1,)
MAX_PARALLEL_READS = 4
READ_BUFFER_BYTES = 4 << 20  # per file being read; large reads suit GCS


def load_manifest(tfrecord_dir: str) -> dict:
    """Read ``<tfrecord_dir>/manifest.json``; ConfigError (field ``data.path``) if it is not usable."""
    import tensorflow as tf

    hint = ("run the prepare step first: python -m trainers.prepare --images <image folder> "
            f"--out {tfrecord_dir or '<folder>'}")
    if not tfrecord_dir:
        raise ConfigError(problem(F_PATH, f"is empty; give the folder of prepared TFRecords ({hint})"))
    gfile = tf.io.gfile
    if not gfile.exists(tfrecord_dir):
        raise ConfigError(problem(F_PATH, f"TFRecord folder {tfrecord_dir!r} does not exist; {hint}"))
    if not gfile.isdir(tfrecord_dir):
        raise ConfigError(problem(F_PATH, f"{tfrecord_dir!r} is not a directory; {hint}"))
    path = join(tfrecord_dir, MANIFEST)
    if not gfile.exists(path):
        raise ConfigError(problem(
            F_PATH, f"{tfrecord_dir!r} has no {MANIFEST}: it is not a prepared dataset or its preparation "
                    f"did not finish; {hint}"))
    try:
        with gfile.GFile(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
        version = manifest["format_version"]
        files = manifest["files"]
        _ = manifest["classes"], manifest["image_size"], manifest["shards"], manifest["num_examples"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(problem(F_PATH, f"{path!r} is not a valid manifest ({exc}); {hint}")) from None
    if version not in SUPPORTED_FORMAT_VERSIONS:
        raise ConfigError(problem(
            F_PATH, f"{path!r} has format_version {version!r}, this trainer reads "
                    f"{list(SUPPORTED_FORMAT_VERSIONS)}; prepare the data again with this version",
            SUPPORTED_FORMAT_VERSIONS))
    missing = [n for split in ("train", "validation") for n in files.get(split, [])
               if not gfile.exists(join(tfrecord_dir, n))]
    if missing:
        raise ConfigError(problem(
            F_PATH, f"{tfrecord_dir!r} lacks shard file(s) listed in its manifest: {', '.join(missing)}; "
                    f"{hint}"))
    return manifest


def decode_batch(serialized, image_size: int, encoding: str = "raw"):
    """Vectorized decode of a batch of serialized records -> (float32 [B,H,W,3] in 0..255, int32 [B])."""
    return decode(serialized, image_size, encoding)


def encoding_of(manifest: dict) -> str:
    """How the manifest's records store pixels (manifests written before ``data.encoding`` are raw)."""
    return str(manifest.get("encoding", "raw"))


def _options():
    import tensorflow as tf

    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _reader(files, count: int | None = None):
    """TFRecords of ``files`` (a list, or a dataset of ``count`` file names)."""
    import tensorflow as tf

    reads = min(len(files) if count is None else count, MAX_PARALLEL_READS)
    return tf.data.TFRecordDataset(files, buffer_size=READ_BUFFER_BYTES,
                                   num_parallel_reads=reads if reads > 1 else None)


def choose_sharding(shards: list[dict], num_pipelines: int, pipeline_id: int,
                    per_replica_batch_size: int) -> tuple[str, list[int], int, str]:
    """Decide how pipeline ``pipeline_id`` of ``num_pipelines`` gets its part of the train shards.

    ``shards`` is ``manifest["shards"]["train"]`` (sorted by file name).  Returns
    ``(policy, file indices, examples per epoch, reason)``.  The decision only depends on the manifest
    and ``num_pipelines``, so every worker reaches the same one.

    FILE: worker ``i`` reads files ``i, i+n, ...`` -- chosen when there are at least ``n`` files and
    every worker's files hold at least one per-replica batch.  Otherwise DATA: every worker reads all
    files and keeps records ``i, i+n, ...``.
    """
    n, i = num_pipelines, pipeline_id
    counts = [int(s["num_examples"]) for s in shards]
    total = sum(counts)
    if n == 1:
        return "NONE", list(range(len(shards))), total, "a single input pipeline reads every file"
    per_worker = [sum(counts[w::n]) for w in range(n)]
    if len(shards) >= n and min(per_worker) >= per_replica_batch_size:
        reason = (f"{len(shards)} train files >= {n} input pipelines and each pipeline's files hold "
                  f"{min(per_worker)}..{max(per_worker)} examples (>= batch {per_replica_batch_size})")
        return "FILE", list(range(i, len(shards), n)), per_worker[i], reason
    if len(shards) < n:
        why = f"only {len(shards)} train file(s) for {n} input pipelines"
    else:
        why = (f"splitting {len(shards)} files over {n} pipelines leaves one with {min(per_worker)} "
               f"examples (< batch {per_replica_batch_size})")
    examples = len(range(i, total, n))
    return "DATA", list(range(len(shards))), examples, why + "; every pipeline reads all files and keeps every " \
                                                              f"{n}th record"


def train_dataset_fn(manifest_dir: str, manifest: dict, per_replica_batch_size: int, seed: int,
                     start_step: int = 0, shuffle_buffer: int = 1024, cache: bool | None = None,
                     cache_budget_mb: int = -1, augment: bool = False,
                     replicas_per_machine: int | None = None,
                     worker_index: Callable[[], Any] | None = None, num_workers: int = 1) -> Callable[[Any], Any]:
    """Return ``dataset_fn(input_context)`` for ``strategy.distribute_datasets_from_function``.

    Each element is one per-replica batch ``(images float32 [b,H,W,3], labels int32 [b])``; the
    dataset is infinite.  ``input_context=None`` means one pipeline, one replica.  ``shuffle_buffer``
    <= 1 disables shuffling.  ``start_step`` = global steps already trained (see module doc).
    ``cache``: None = decided by ``cache_budget_mb`` (``trainers.input_cache``), True/False forces it.
    ``augment``: seeded stateless random crop + flip (resume stays exact). ``replicas_per_machine``
    (for the default cache budget): None = read from this process's cluster environment.

    ``worker_index`` (parameter-server training): ParameterServerStrategy gives every worker the SAME input
    function (one input pipeline in its input context), so the worker is told apart at run time by
    ``worker_index()`` (``tf.distribute.coordinator.experimental_get_current_worker_index``, a tensor) and the
    data is sharded over ``num_workers`` with it; every step is one worker's batch, and ``start_step`` is then
    the steps THIS worker already did.
    """
    shards = list(manifest["shards"]["train"])
    _check_train_input(manifest_dir, shards, per_replica_batch_size, start_step, shuffle_buffer)
    image_size = int(manifest["image_size"])
    encoding = encoding_of(manifest)
    files = [join(manifest_dir, s["file"]) for s in shards]
    sizes = input_cache.file_sizes(files) if cache is None else []
    on_machine = replicas_per_machine
    if on_machine is None and cache is None:
        on_machine = input_cache.replicas_on_this_machine(*input_cache.this_replica())
    memory = input_cache.memory_bytes()

    def dataset_fn(input_context=None):
        import tensorflow as tf

        n, i, per_pipeline_replicas = _pipeline_of(input_context, worker_index, num_workers)
        static_i = 0 if worker_index is not None else i  # the decision is the same for every pipeline
        policy, idx, examples, reason = choose_sharding(shards, n, static_i, per_replica_batch_size)
        if examples < per_replica_batch_size:
            raise ConfigError(problem(
                F_BATCH, f"input pipeline {static_i} of {n} gets {examples} training examples per epoch, fewer "
                         f"than one batch of {per_replica_batch_size}; use a smaller per-replica batch, "
                         "fewer workers or more data"))
        log.info("input pipeline %s/%d: %s sharding (%s); %d examples, %d batches of %d per epoch",
                 "w" if worker_index is not None else i, n, policy, reason, examples,
                 examples // per_replica_batch_size, per_replica_batch_size)
        use_cache, why = (cache, "forced by the caller") if cache is not None else input_cache.decide(
            input_cache.pipeline_bytes([sizes[k] for k in idx], sum(int(shards[k]["num_examples"]) for k in idx),
                                       policy, n),
            cache_budget_mb, memory, on_machine)
        log.info("input pipeline %s/%d: %s records, %s (%s)%s", "w" if worker_index is not None else i, n,
                 encoding, "cached" if use_cache else "streamed", why, ", augmented" if augment else "")
        if worker_index is not None and policy == "FILE":
            ds = _reader(tf.data.Dataset.from_tensor_slices(files).shard(n, i), len(idx))
        else:
            ds = _reader([files[k] for k in idx])
        if policy == "DATA":
            ds = ds.shard(n, i)
        return _train_batches(ds, cache=use_cache, shuffle_buffer=shuffle_buffer, seed=seed,
                              batch_size=per_replica_batch_size, skip_batches=start_step * per_pipeline_replicas,
                              image_size=image_size, encoding=encoding, augment=augment, pipeline=i)

    return dataset_fn


def _check_train_input(manifest_dir: str, shards: list[dict], per_replica_batch_size: Any, start_step: Any,
                       shuffle_buffer: Any) -> None:
    """Raise :class:`ConfigError` listing what is wrong with :func:`train_dataset_fn`'s numbers."""
    problems = []
    if isinstance(per_replica_batch_size, bool) or not isinstance(per_replica_batch_size, int) \
            or per_replica_batch_size < 1:
        problems.append(problem(F_BATCH, f"must be an integer >= 1, got {per_replica_batch_size!r}"))
    if not isinstance(start_step, int) or start_step < 0:
        problems.append(problem("start_step", f"must be an integer >= 0, got {start_step!r}"))
    if not isinstance(shuffle_buffer, int) or shuffle_buffer < 0:
        problems.append(problem(F_SHUFFLE, f"must be an integer >= 0, got {shuffle_buffer!r}"))
    total = sum(int(s["num_examples"]) for s in shards)
    if not problems and per_replica_batch_size > total:
        problems.append(problem(
            F_BATCH, f"{per_replica_batch_size} is larger than the {total} training examples in "
                     f"{manifest_dir!r}; use a smaller batch or more data"))
    if problems:
        raise ConfigError(problems)


def _pipeline_of(input_context: Any, worker_index: Callable[[], Any] | None, num_workers: int) -> tuple[Any, Any, int]:
    """(input pipelines, this pipeline's index, replicas per pipeline) of one call of a dataset function."""
    replicas = input_context.num_replicas_in_sync if input_context is not None else 1
    if worker_index is not None:  # a tensor: the same traced function runs on every worker
        return max(1, num_workers), worker_index(), replicas
    if input_context is None:
        return 1, 0, 1
    n = input_context.num_input_pipelines
    return n, input_context.input_pipeline_id, max(1, replicas // n)


def _train_batches(ds, *, cache: bool, shuffle_buffer: int, seed: int, batch_size: int, skip_batches: int,
                   image_size: int, encoding: str, augment: bool, pipeline: Any):
    """One pipeline's serialized records as endless decoded batches: cached, shuffled, batched, the batches
    already trained skipped (serialized: nothing decoded), decoded (augmented, keyed by batch position)."""
    import tensorflow as tf

    if cache:
        ds = ds.cache()
    if shuffle_buffer > 1:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(batch_size, drop_remainder=True).repeat()
    ds = tf.data.Dataset.zip((tf.data.Dataset.counter(), ds))  # batch position: keys augmentation
    if skip_batches:
        ds = ds.skip(skip_batches)  # serialized batches: nothing decoded

    def decode(position, serialized):
        images, labels = decode_batch(serialized, image_size, encoding)
        if augment:
            images = augment_batch(images, seed, pipeline, position)
        return images, labels

    ds = ds.map(_plain_graph(decode), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    return ds.with_options(_options())


def _plain_graph(fn):
    """``fn`` traced as written, without AutoGraph's source conversion (0.3 s per map on 2 cores, paid by
    every replica and by verify). The decode functions branch only on Python values (encoding, augment), never
    on tensors, so the graph is the same as AutoGraph's."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def eval_dataset(manifest_dir: str, manifest: dict, batch_size: int):
    """Finite, unshuffled, unsharded validation dataset of ``(images, labels)`` batches (last may be short)."""
    import tensorflow as tf

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(problem(F_BATCH, f"evaluation batch must be an integer >= 1, got {batch_size!r}"))
    names = list(manifest["files"].get("validation", []))
    if not names or not manifest["num_examples"].get("validation"):
        raise ConfigError(problem(
            F_VAL, f"{manifest_dir!r} has no validation examples; prepare the data again with "
                   "validation_fraction > 0"))
    image_size = int(manifest["image_size"])
    ds = _reader([join(manifest_dir, n) for n in sorted(names)])
    encoding = encoding_of(manifest)
    ds = ds.batch(batch_size)
    ds = ds.map(_plain_graph(lambda s: decode_batch(s, image_size, encoding)), num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE).with_options(_options())


def steps_per_epoch(manifest: dict, global_batch_size: int) -> int:
    """Whole global batches in one pass over the training split (at least 1)."""
    if global_batch_size < 1:
        raise ConfigError(problem(F_BATCH, f"global batch must be >= 1, got {global_batch_size!r}"))
    return max(1, int(manifest["num_examples"]["train"]) // global_batch_size)


def configure_threads(intra_op: int, inter_op: int) -> None:
    """Apply ``tf.config.threading`` pool sizes where > 0 (0 = TensorFlow's default).

    Must run BEFORE the TensorFlow runtime initializes -- before the first op, dataset or strategy is
    created -- because TF fixes its thread pools then.  Called later with a different value, it raises
    RuntimeError saying so (the same values as already in effect are accepted).
    """
    import tensorflow as tf

    threading = tf.config.threading
    for value, getter, setter, name in (
            (intra_op, threading.get_intra_op_parallelism_threads,
             threading.set_intra_op_parallelism_threads, "intra_op"),
            (inter_op, threading.get_inter_op_parallelism_threads,
             threading.set_inter_op_parallelism_threads, "inter_op")):
        if not value or value <= 0 or getter() == value:
            continue
        try:
            setter(int(value))
        except RuntimeError as exc:
            raise RuntimeError(
                f"cannot set {name} threads to {value}: TensorFlow is already initialized ({exc}); "
                "call trainers.data.configure_threads() at process start, before any TF op") from None
    log.info("TF threads: intra_op=%s inter_op=%s", threading.get_intra_op_parallelism_threads(),
             threading.get_inter_op_parallelism_threads())
