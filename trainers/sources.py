"""The source side of data preparation: scanning ``<root>/<class>/*.jpg``, decoding one image the way
training expects it, and the deterministic split/shard plan -- shared by every prepare runner (threads
here, Apache Beam / Dataflow in ``trainers.prepare_beam``) so they all produce the same records.

Why here and not in ``trainers.prepare``: the Beam workers import only what a record needs (this module
and ``trainers.image_records``), not the commit logic of the driver.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
import typing
from typing import Callable, Iterable

from trainers import fileio, image_records, tfrecord
from jobfile.errors import Problem, problem
from jobfile.paths import join

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
SPLITS = ("train", "validation")
F_PATH = "data.path"


# Scanning and validation.
# ---------------------------------------------------------------------------------------------

def _hash_unit(seed: int, rel: str) -> tuple[float, int]:
    """(uniform in [0, 1) deciding the split, integer deciding the shard) for one file."""
    digest = hashlib.sha256(f"{seed}\0{rel}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64, int.from_bytes(digest[8:16], "big")


def scan(image_root: str, problems: list[Problem]) -> tuple[list[str], list[tuple[str, str, int]]]:
    """Return (classes, [(class, file name, size)]) and append structural problems."""
    layout = "expected <folder>/<class name>/<image>.jpg (one sub-folder per class, at least 2)"
    if not image_root:
        problems.append(problem(F_PATH, f"is empty; give the image folder ({layout})"))
        return [], []
    if not fileio.exists(image_root):
        problems.append(problem(F_PATH, f"{image_root!r} does not exist; {layout}"))
        return [], []
    if not fileio.isdir(image_root):
        problems.append(problem(F_PATH, f"{image_root!r} is not a directory; {layout}"))
        return [], []
    classes: list[str] = []
    files: list[tuple[str, str, int]] = []
    for name in fileio.listdir(image_root):
        if name.startswith("."):
            continue
        cdir = join(image_root, name)
        if not fileio.isdir(cdir):
            continue  # e.g. LICENSE.txt beside the class folders
        classes.append(name)
        images = [f for f in fileio.listdir(cdir)
                  if not f.startswith(".") and f.lower().endswith(IMAGE_EXTENSIONS)]
        if not images:
            problems.append(problem(
                F_PATH, f"class folder {name!r} in {image_root!r} holds no images "
                        f"({'/'.join(IMAGE_EXTENSIONS)}); add images or remove the folder"))
        files.extend((name, f, -1) for f in images)
    if files:  # sizes for the fingerprint; one request per file on object stores, so in threads
        with concurrent.futures.ThreadPoolExecutor(threads()) as pool:
            sizes = list(pool.map(lambda f: fileio.size(join(image_root, f"{f[0]}/{f[1]}")), files))
        files = [(c, f, size) for (c, f, _), size in zip(files, sizes)]
    if not classes:
        problems.append(problem(F_PATH, f"{image_root!r} has no class sub-folders; {layout}"))
    elif len(classes) < 2:
        problems.append(problem(
            F_PATH, f"{image_root!r} has only 1 class folder ({classes[0]!r}); a classifier needs at "
                    f"least 2; {layout}"))
    return classes, files


def fingerprint(files: Iterable[tuple[str, str, int]]) -> str:
    h = hashlib.sha256()
    for cls, name, size in sorted(files):
        h.update(f"{cls}/{name}\0{size}\n".encode("utf-8"))
    return h.hexdigest()


def _load_image(path: str, image_size: int) -> bytes:
    """Decode with PIL, convert to RGB, resize bilinear -> raw uint8 HxWx3 bytes."""
    from PIL import Image

    data = fileio.read_bytes(path)
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        rgb = img.convert("RGB")
    if rgb.size != (image_size, image_size):
        rgb = rgb.resize((image_size, image_size), Image.BILINEAR)
    raw = rgb.tobytes()
    assert len(raw) == image_size * image_size * 3
    return raw


def try_load(path: str, image_size: int) -> tuple[bytes | None, str | None]:
    try:
        return _load_image(path, image_size), None
    except Exception as exc:  # PIL raises many types for bad files
        return None, f"{type(exc).__name__}: {exc}"


def corrupt_problem(image_root: str, rel: str, err: str) -> Problem:
    return problem(F_PATH, f"image {join(image_root, rel)!r} cannot be read as an image ({err}); "
                           "delete or replace the file")


def threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


# ---------------------------------------------------------------------------------------------

def plan(classes: list[str], files: list[tuple[str, str, int]], num_shards: int, validation_fraction: float,
         seed: int) -> dict[str, list[list[tuple[str, str, float, int]]]]:
    """Split and shard assignment, a pure function of ``(seed, <class>/<file>)``: split -> shards -> items
    ``(rel, class, u, h)`` in file-name order. Every runner writes exactly this plan."""
    items = []  # (rel, class, u, h)
    for cls, name, _ in sorted(files):
        rel = f"{cls}/{name}"
        u, h = _hash_unit(seed, rel)
        items.append((rel, cls, u, h))
    split_of = {rel: ("validation" if u < validation_fraction else "train") for rel, _, u, _ in items}
    if validation_fraction > 0 and len(items) >= 2:
        # Tiny datasets: keep both splits non-empty, moving the file nearest the threshold.
        if not any(s == "validation" for s in split_of.values()):
            split_of[min(items, key=lambda it: it[2])[0]] = "validation"
        if not any(s == "train" for s in split_of.values()):
            split_of[max(items, key=lambda it: it[2])[0]] = "train"
    shard_lists: dict[str, list[list]] = {}
    for split in SPLITS:
        chosen = [it for it in items if split_of[it[0]] == split]
        k = min(num_shards, len(chosen))
        shards: list[list] = [[] for _ in range(k)]
        for it in chosen:
            shards[it[3] % k].append(it)
        shard_lists[split] = shards
    return shard_lists



class ShardSpec(typing.NamedTuple):
    """What turns a source image into a record (picklable: Beam ships it to its workers)."""
    image_root: str
    image_size: int
    encoding: str
    jpeg_quality: int

    def record(self, rel: str, label: int) -> tuple[bytes | None, str | None]:
        """(serialized record, None) or (None, error) for the image ``rel``."""
        raw, err = try_load(join(self.image_root, rel), self.image_size)
        if err:
            return None, err
        image = image_records.encode_pixels(raw, self.image_size, self.encoding, self.jpeg_quality)
        return image_records.example_bytes(image, label, self.image_size, rel, self.encoding), None


def write_shard(path: str, serialized: Iterable[bytes]) -> int:
    """One TFRecord file of ``serialized`` records in order; returns how many (no TensorFlow import for a
    local path: :mod:`trainers.tfrecord`)."""
    return tfrecord.write_records(path, serialized)


def write_shards_threaded(spec: ShardSpec, targets: list[tuple[str, list[tuple[str, int]]]],
                          progress: Callable[[int, int, int, int], None] | None = None) -> list[tuple[str, str]]:
    """Decode (in threads, in order) and write every shard; return [(rel, error)] of bad images.
    ``progress(shards_done, shards, images_done, images)`` is called after each shard."""
    corrupt: list[tuple[str, str]] = []
    total = sum(len(shard) for _, shard in targets)
    done = 0
    with concurrent.futures.ThreadPoolExecutor(threads()) as pool:
        for i, (path, shard) in enumerate(targets):
            results = list(pool.map(lambda it: spec.record(*it), shard))
            corrupt += [(rel, err) for (rel, _), (_, err) in zip(shard, results) if err]
            if not corrupt:
                write_shard(path, (rec for rec, _ in results))
            done += len(shard)
            if progress is not None:
                progress(i + 1, len(targets), done, total)
    return sorted(corrupt)


# ---------------------------------------------------------------------------------------------
