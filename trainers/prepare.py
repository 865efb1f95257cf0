"""Data preparation: an image folder in, sharded TFRecords plus a manifest out.

Input layout (the flowers lab's)::

    <image_root>/<class>/<anything>.jpg|.jpeg|.png     (extensions case-insensitive)

Output (``out_dir``)::

    train-00000-of-00004.tfrecord ... validation-00000-of-00001.tfrecord
    manifest.json   classes.json   counts.json

Each record (see :data:`trainers.image_records.FEATURES`; ``encoding`` raw or jpeg):

===============  ======  ==============================================================
``image/raw``    bytes   uint8 ``image_size x image_size x 3`` (PIL decode, RGB, bilinear)
``image/jpeg``   bytes   (encoding jpeg, instead of image/raw) that image as a JPEG
``image/height`` int64   ``image_size``
``image/width``  int64   ``image_size``
``label``        int64   index into the sorted class names (``manifest["classes"]``)
``image/path``   bytes   ``<class>/<file name>`` relative to the image root
===============  ======  ==============================================================

Guarantees:

* **Validation first**: every problem (missing folder, no classes, an empty class, a corrupt image,
  bad parameters) is collected and raised as one :class:`~jobfile.errors.ConfigError`.
* **Deterministic**: the split and the shard of an image depend only on ``sha256(seed, <class>/<file>)``,
  so running twice gives identical files and adding an image moves no other image.
* **Atomic**: locally everything is written into a temporary sibling directory which is renamed into
  place; on object stores (``gs://``) the shards are written under temporary names and
  ``manifest.json`` is written LAST -- a reader treats "manifest present" as "dataset complete".
* **Idempotent**: an ``out_dir`` whose manifest has the same source fingerprint and parameters is
  returned as is.
* **Same output on every runner**: ``runner="local"`` decodes in threads here; ``"beam"``/``"dataflow"``
  run the decode/encode/write on Apache Beam (``trainers.prepare_beam``) from the same plan, producing the
  same files byte for byte. Scanning, the plan and the commit stay here.

File IO goes through :mod:`trainers.fileio`: ``gs://`` paths through ``tf.io.gfile``, plain paths (local,
and Vertex's GCS FUSE mount ``/gcs/<bucket>/...``) through Python's own functions, and records are written by
:mod:`trainers.tfrecord`, so preparing a local folder never imports TensorFlow (3-5 s on 2 cores).

CLI::

    python -m trainers.prepare --images DIR --out DIR [--image-size 64] [--shards 4]
                               [--validation-fraction 0.2] [--seed 0] [--encoding raw|jpeg]
                               [--runner local|beam]
    python -m trainers.prepare --synthesize DIR [--classes 3 --per-class 40] [--image-size 64]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import sys
import uuid
from typing import Any, Callable, Sequence

from trainers import fileio, record_reader, image_records, prepare_beam, sources
from jobfile.errors import ConfigError, Problem, problem
from jobfile.paths import join
from trainers.synthetic import synthesize_image_folder

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CLASSES_FILE = "classes.json"
COUNTS_FILE = "counts.json"
IMAGE_EXTENSIONS = sources.IMAGE_EXTENSIONS
SPLITS = sources.SPLITS

# Config fields named in errors (see jobfile/config.py).
F_PATH = "data.path"
F_OUT = "data.prepared_dir"
F_SIZE = "data.image_size"
F_SHARDS = "data.num_shards"
F_VAL = "data.validation_fraction"
F_SEED = "training.seed"

F_ENCODING = "data.encoding"
F_RUNNER = "data.prepare_runner"
RUNNERS = ("local", "beam", "dataflow")

_TFRECORD_SUFFIX = ".tfrecord"


# ---------------------------------------------------------------------------------------------
# prepare_tfrecords
# ---------------------------------------------------------------------------------------------

def shard_name(split: str, index: int, count: int) -> str:
    return f"{split}-{index:05d}-of-{count:05d}{_TFRECORD_SUFFIX}"


def _is_dataset_file(name: str) -> bool:
    return (name in (MANIFEST, CLASSES_FILE, COUNTS_FILE)
            or (name.endswith(_TFRECORD_SUFFIX) and name.split("-", 1)[0] in SPLITS)
            or ".tmp-" in name)


def _matches(manifest: dict | None, params: dict, fingerprint: str) -> bool:
    if not isinstance(manifest, dict) or manifest.get("fingerprint") != fingerprint:
        return False
    return all(manifest.get(k) == v for k, v in params.items())


def _complete(out_dir: str, manifest: dict) -> bool:
    try:
        return all(fileio.exists(join(out_dir, f)) for split in SPLITS
                   for f in manifest["files"].get(split, []))
    except (KeyError, TypeError, AttributeError):
        return False


def prepare_tfrecords(image_root: str, out_dir: str, image_size: int, num_shards: int = 4,
                      validation_fraction: float = 0.2, seed: int = 0, encoding: str = "raw",
                      jpeg_quality: int = 95, runner: str = "local", beam_options: Any = None,
                      progress: Callable[[int, int, int, int], None] | None = None) -> dict:
    """Convert ``<image_root>/<class>/*.{jpg,jpeg,png}`` to sharded TFRecords; return the manifest.

    ``encoding``: ``raw`` pixels or ``jpeg`` (see ``trainers.image_records``). ``runner``: ``local`` threads,
    or Apache Beam (``beam`` = DirectRunner, ``dataflow``) with ``beam_options`` (``PipelineOptions`` or
    ``config.Dataflow``). ``progress(shards_done, shards, images_done, images)``: after each shard (local
    runner; Beam and Dataflow report their own progress). Raises :class:`ConfigError` listing every problem found (layout, empty classes,
    corrupt images, parameters) before anything is left in ``out_dir``.
    """
    problems = _parameter_problems(image_root, out_dir, image_size, num_shards, validation_fraction, seed,
                                   encoding, runner)
    image_root = (image_root or "").rstrip("/")
    out_dir = (out_dir or "").rstrip("/")
    classes, files = sources.scan(image_root, problems)
    if problems:
        _raise_naming_corrupt(problems, files, image_root, image_size)

    validation_fraction = float(validation_fraction)
    fingerprint = sources.fingerprint(files)
    params = {"format_version": FORMAT_VERSION, "image_size": image_size, "num_shards": num_shards,
              "validation_fraction": validation_fraction, "seed": seed, "encoding": encoding}
    if encoding == "jpeg":
        params["jpeg_quality"] = int(jpeg_quality)
    existing = record_reader.read_or_none(join(out_dir, MANIFEST))
    if _matches(existing, params, fingerprint) and _complete(out_dir, existing):
        log.info("%s is up to date (fingerprint %s)", out_dir, fingerprint[:12])
        return existing

    shard_lists = sources.plan(classes, files, num_shards, validation_fraction, seed)
    manifest = _manifest(params, classes, image_root, fingerprint, len(files), shard_lists)
    _write_dataset(out_dir, manifest, shard_lists,
                   lambda targets: _encode_shards(sources.ShardSpec(image_root, image_size, encoding, int(jpeg_quality)),
                                                  targets, runner, beam_options, progress))
    log.info("wrote %d train + %d validation examples to %s", manifest["num_examples"]["train"],
             manifest["num_examples"]["validation"], out_dir)
    return manifest


def _parameter_problems(image_root: str, out_dir: str, image_size: Any, num_shards: Any, validation_fraction: Any,
                        seed: Any, encoding: str, runner: str) -> list[Problem]:
    """Every problem with :func:`prepare_tfrecords`' parameters (the image folder's content is checked apart)."""
    problems: list[Problem] = []
    if encoding not in image_records.ENCODINGS:
        problems.append(problem(F_ENCODING, f"{encoding!r} is not a known encoding", image_records.ENCODINGS))
    if runner not in RUNNERS:
        problems.append(problem(F_RUNNER, f"{runner!r} is not a known runner", RUNNERS))
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        problems.append(problem(F_SIZE, f"must be a positive integer (pixels per side), got {image_size!r}"))
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        problems.append(problem(F_SHARDS, f"must be an integer >= 1, got {num_shards!r}"))
    try:
        vf_ok = 0.0 <= float(validation_fraction) <= 0.9
    except (TypeError, ValueError):
        vf_ok = False
    if not vf_ok:
        problems.append(problem(
            F_VAL, f"must be a number in [0, 0.9] (share of images held out), got {validation_fraction!r}"))
    if isinstance(seed, bool) or not isinstance(seed, int):
        problems.append(problem(F_SEED, f"must be an integer, got {seed!r}"))
    if not out_dir:
        problems.append(problem(F_OUT, "is empty; give a folder for the TFRecord shards"))
    image_root = (image_root or "").rstrip("/")
    out_dir = (out_dir or "").rstrip("/")
    if image_root and out_dir and (out_dir == image_root or out_dir.startswith(image_root + "/")):
        problems.append(problem(
            F_OUT, f"{out_dir!r} is inside the image folder {image_root!r}; it would be read as a class "
                   "folder next time; choose a folder outside it"))
    return problems


def _raise_naming_corrupt(problems: list[Problem], files: list, image_root: str, image_size: Any) -> None:
    """Raise the problems found, still naming every corrupt image among the files found, so one run lists
    everything."""
    if files and not any(p.field == F_SIZE for p in problems):
        with concurrent.futures.ThreadPoolExecutor(sources.threads()) as pool:
            results = pool.map(lambda f: sources.try_load(join(image_root, f"{f[0]}/{f[1]}"), image_size), files)
            for (cls, name, _), (_, err) in zip(files, results):
                if err:
                    problems.append(sources.corrupt_problem(image_root, f"{cls}/{name}", err))
    raise ConfigError(problems)


def _manifest(params: dict[str, Any], classes: list[str], image_root: str, fingerprint: str, num_source_files: int,
              shard_lists: dict[str, list]) -> dict[str, Any]:
    """The dataset's ``manifest.json``: its parameters, classes, source, examples per split and class, shards."""
    by_split = {split: [it for shard in shard_lists[split] for it in shard] for split in SPLITS}
    return {
        **params,
        "channels": 3,
        "classes": classes,
        "num_classes": len(classes),
        "source": image_root,
        "fingerprint": fingerprint,
        "num_source_files": num_source_files,
        "features": image_records.FEATURES[params["encoding"]],
        "num_examples": {s: len(by_split[s]) for s in SPLITS},
        "counts": {s: {c: sum(1 for it in by_split[s] if it[1] == c) for c in classes} for s in SPLITS},
        "files": {s: [shard_name(s, i, len(shard_lists[s])) for i in range(len(shard_lists[s]))]
                  for s in SPLITS},
        "shards": {s: [{"file": shard_name(s, i, len(shard_lists[s])), "num_examples": len(sh)}
                       for i, sh in enumerate(shard_lists[s])] for s in SPLITS},
    }


def _ours(path: str) -> bool:
    """Every file in the folder is one a prepared dataset holds."""
    return all(_is_dataset_file(n) for n in fileio.listdir(path))


def _write_dataset(out_dir: str, manifest: dict[str, Any], shard_lists: dict[str, list],
                   encode_shards: Callable[[list], list]) -> None:
    """Write the shards (``encode_shards(targets)`` -> the corrupt images), the classes, the counts and the
    manifest under temporary names, then put them in place; on any failure remove what was written."""
    local = fileio.is_local(out_dir)
    token = uuid.uuid4().hex[:8]
    if fileio.exists(out_dir) and not (fileio.isdir(out_dir) and _ours(out_dir)):
        raise ConfigError(problem(
            F_OUT, f"{out_dir!r} already exists and holds files that are not a prepared dataset; "
                   "choose a new or empty folder, or delete it"))
    if local:
        # Everything goes into a temporary sibling directory, renamed into place at the end.
        parent, base = fileio.split_parent(out_dir)
        fileio.makedirs(parent)
        work = join(parent, f".{base}.tmp-{token}")
        fileio.makedirs(work)
        temp_name = lambda name: join(work, name)  # noqa: E731
    else:
        # Object store: every file under a temporary name first; the previous dataset stays valid
        # until all of them are written, then renames, and manifest.json LAST.
        fileio.makedirs(out_dir)
        work = out_dir
        temp_name = lambda name: join(out_dir, f"{name}.tmp-{token}")  # noqa: E731
    pending: list[tuple[str, str]] = []  # (temporary path, final name)

    def put(name: str, writer: Callable[[str], None]) -> None:
        tmp = temp_name(name)
        pending.append((tmp, name))
        writer(tmp)

    try:
        _write_files(manifest, shard_lists, temp_name, pending, encode_shards, put)
        if local:
            fileio.install_dir(work, out_dir, _ours, F_OUT)
        else:
            _commit_in_place(out_dir, pending, keep={n for s in SPLITS for n in manifest["files"][s]})
    except BaseException:
        if local:
            fileio.rmtree_quiet(work)
        else:
            for tmp, _ in pending:
                fileio.remove_quiet(tmp)
        raise


def _write_files(manifest: dict[str, Any], shard_lists: dict[str, list], temp_name: Callable[[str], str],
                 pending: list[tuple[str, str]], encode_shards: Callable[[list], list],
                 put: Callable[[str, Callable[[str], None]], None]) -> None:
    """The shards, then the classes, the counts and the manifest, each under its temporary name (in ``pending``)."""
    classes = manifest["classes"]
    label_of = {c: i for i, c in enumerate(classes)}
    targets = []  # (temporary path, [(rel, label)]) per shard, in the plan's order
    for split in SPLITS:
        for index, shard in enumerate(shard_lists[split]):
            name = shard_name(split, index, len(shard_lists[split]))
            pending.append((temp_name(name), name))
            targets.append((temp_name(name), [(rel, label_of[cls]) for rel, cls, _, _ in shard]))
    corrupt = encode_shards(targets)
    if corrupt:
        raise ConfigError([sources.corrupt_problem(manifest["source"], rel, err) for rel, err in corrupt])
    put(CLASSES_FILE, lambda p: fileio.write_bytes(p, fileio.json_bytes(classes)))
    put(COUNTS_FILE, lambda p: fileio.write_bytes(p, fileio.json_bytes(
        {"counts": manifest["counts"], "num_examples": manifest["num_examples"]})))
    put(MANIFEST, lambda p: fileio.write_bytes(p, fileio.json_bytes(manifest)))


def _encode_shards(encode: sources.ShardSpec, targets: list, runner: str, beam_options: Any,
                   progress: Callable[[int, int, int, int], None] | None) -> list:
    """Encode the images into the shards' files with the runner asked for; returns the corrupt images found."""
    if runner == "local":
        return sources.write_shards_threaded(encode, targets, progress)
    return prepare_beam.write_shards(encode, targets, runner, beam_options)


def _commit_in_place(out_dir: str, pending: list[tuple[str, str]], keep: set[str]) -> None:
    """Object-store commit: drop the old manifest, move files into place, manifest.json LAST."""
    fileio.remove_quiet(join(out_dir, MANIFEST))  # from here on the folder reads as "incomplete"
    manifest_tmp = None
    for tmp, name in pending:
        if name == MANIFEST:
            manifest_tmp = tmp
            continue
        fileio.rename(tmp, join(out_dir, name), overwrite=True)
    for name in fileio.listdir(out_dir):  # shards of an older layout
        if name.endswith(_TFRECORD_SUFFIX) and name not in keep:
            fileio.remove_quiet(join(out_dir, name))
    assert manifest_tmp is not None
    fileio.rename(manifest_tmp, join(out_dir, MANIFEST), overwrite=True)


# CLI
# ---------------------------------------------------------------------------------------------

def _summary(manifest: dict, out_dir: str) -> str:
    lines = [f"prepared {out_dir} (image_size {manifest['image_size']}, "
             f"fingerprint {manifest['fingerprint'][:12]})"]
    width = max(len(c) for c in manifest["classes"])
    lines.append(f"  {'class':<{width}}  {'train':>7}  {'validation':>10}")
    for c in manifest["classes"]:
        lines.append(f"  {c:<{width}}  {manifest['counts']['train'][c]:>7}  "
                     f"{manifest['counts']['validation'][c]:>10}")
    lines.append(f"  {'total':<{width}}  {manifest['num_examples']['train']:>7}  "
                 f"{manifest['num_examples']['validation']:>10}")
    for split in SPLITS:
        for s in manifest["shards"][split]:
            lines.append(f"  {s['file']}  {s['num_examples']} examples")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.prepare",
        description="Convert <images>/<class>/*.jpg to sharded TFRecords + manifest.json, "
                    "or write a small synthetic flower-like image folder.")
    parser.add_argument("--images", help="image folder: <images>/<class>/*.jpg|jpeg|png")
    parser.add_argument("--out", help="output folder for the TFRecord shards and manifest.json")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--validation-fraction", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--encoding", choices=image_records.ENCODINGS, default="raw",
                        help="raw pixels, or jpeg (~10x smaller, decoded while training)")
    parser.add_argument("--jpeg-quality", type=int, default=95)
    parser.add_argument("--runner", choices=("local", "beam"), default="local",
                        help="local threads or Apache Beam's DirectRunner (Dataflow: data.prepare_runner in a config)")
    parser.add_argument("--synthesize", metavar="DIR",
                        help="write a synthetic image folder to DIR (then prepare it if --out is given)")
    parser.add_argument("--classes", type=int, default=3, help="synthetic classes")
    parser.add_argument("--per-class", type=int, default=40, help="synthetic images per class")
    args = parser.parse_args(argv)
    if not args.synthesize and not (args.images and args.out):
        parser.error("give --images DIR --out DIR, or --synthesize DIR")
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ start-up noise off stderr
    try:
        images = args.images
        if args.synthesize:
            paths = synthesize_image_folder(args.synthesize, args.classes, args.per_class,
                                            args.image_size, args.seed)
            print(f"synthetic images: {len(paths)} in {args.classes} classes under {args.synthesize}")
            images = images or args.synthesize
        if args.out:
            manifest = prepare_tfrecords(images, args.out, args.image_size, args.shards,
                                         args.validation_fraction, args.seed, encoding=args.encoding,
                                         jpeg_quality=args.jpeg_quality, runner=args.runner)
            print(_summary(manifest, args.out))
    except ConfigError as err:
        for p in err.problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
