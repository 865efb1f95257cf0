"""File helpers over ``tf.io.gfile`` (so ``gs://`` works), with atomic installs.

Plain paths (local, and Vertex's ``/gcs/`` mount) go through Python's own file functions: importing
TensorFlow costs 2-9 s, which a step that writes one JSON file must not pay. ``scheme://`` paths go
through ``tf.io.gfile``.

Local paths install a fully written temporary sibling directory with one rename; object stores
(``gs://``) and Vertex's GCS FUSE mount (``/gcs/...``) cannot rename a directory atomically, so callers
write files under temporary names and a marker/manifest LAST. TensorFlow is imported lazily.
"""
from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import uuid
from typing import Any, Callable

from jobfile.errors import ConfigError, problem
from jobfile.paths import join
from jobfile.regular_file import read_regular

log = logging.getLogger(__name__)



def tf_gfile():
    import tensorflow as tf  # lazy: importing trainers must stay cheap

    return tf.io.gfile


def is_local(path: str) -> bool:
    """True where renaming a directory is atomic: a plain local path.

    Object stores (``gs://``, ``ram://``...) and Vertex's GCS FUSE mount (``/gcs/...``, where gcsfuse
    renames a directory object by object, if at all) use the "temp names, manifest last" protocol.
    """
    if path.startswith("file://"):
        path = path[len("file://"):]
    return "://" not in path and not (path == "/gcs" or path.startswith("/gcs/"))



def plain_path(path: str) -> str | None:
    """The OS path for a path Python's own file functions handle (no ``scheme://``), else None."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if "://" in path else path


def exists(path: str) -> bool:
    plain = plain_path(path)
    return os.path.exists(plain) if plain is not None else bool(tf_gfile().exists(path))


def isdir(path: str) -> bool:
    plain = plain_path(path)
    return os.path.isdir(plain) if plain is not None else bool(tf_gfile().isdir(path))


def makedirs(path: str) -> None:
    plain = plain_path(path)
    if plain is not None:
        os.makedirs(plain, exist_ok=True)
    else:
        tf_gfile().makedirs(path)


def size(path: str) -> int:
    plain = plain_path(path)
    return os.stat(plain).st_size if plain is not None else int(tf_gfile().stat(path).length)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """``src`` to ``dst``; with ``overwrite`` an existing file ``dst`` is replaced (as ``gfile.rename``)."""
    a, b = plain_path(src), plain_path(dst)
    if a is not None and b is not None:
        if not overwrite and os.path.exists(b):
            raise FileExistsError(f"{dst} already exists")
        os.replace(a, b) if overwrite else os.rename(a, b)
    else:
        tf_gfile().rename(src, dst, overwrite=overwrite)


def split_parent(path: str) -> tuple[str, str]:
    path = path.rstrip("/")
    parent, base = posixpath.split(path)
    return parent or ".", base


def listdir(path: str) -> list[str]:
    plain = plain_path(path)
    if plain is not None:
        return sorted(os.listdir(plain))
    # GCS lists sub-directories as "name/".
    return sorted({name.rstrip("/") for name in tf_gfile().listdir(path) if name.rstrip("/")})


def write_bytes(path: str, data: bytes) -> None:
    plain = plain_path(path)
    if plain is not None:
        with open(plain, "wb") as f:
            f.write(data)
        return
    with tf_gfile().GFile(path, "wb") as f:
        f.write(data)


def read_bytes(path: str, field: str = "file") -> bytes:
    """The whole file; a plain path must be a regular file of bounded size (:func:`read_regular`)."""
    plain = plain_path(path)
    if plain is not None:
        return read_regular(plain, field)
    with tf_gfile().GFile(path, "rb") as f:
        return f.read()


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Readers see the old file or the whole new one: temp name, then rename over."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    write_bytes(tmp, data)
    plain = plain_path(tmp)
    if plain is not None:
        os.replace(plain, plain_path(path))
    else:
        tf_gfile().rename(tmp, path, overwrite=True)


def write_json_atomic(path: str, obj: Any) -> None:
    write_bytes_atomic(path, json_bytes(obj))


def rmtree_quiet(path: str) -> None:
    plain = plain_path(path)
    if plain is not None:
        shutil.rmtree(plain, ignore_errors=True)
        return
    gfile = tf_gfile()
    try:
        if gfile.exists(path):
            gfile.rmtree(path)
    except Exception as exc:  # pragma: no cover - best effort cleanup
        log.warning("could not remove %s: %s", path, exc)


def remove_quiet(path: str) -> None:
    plain = plain_path(path)
    if plain is not None:
        try:
            os.remove(plain)
        except FileNotFoundError:
            pass
        except OSError as exc:  # pragma: no cover - best effort cleanup
            log.warning("could not remove %s: %s", path, exc)
        return
    gfile = tf_gfile()
    try:
        if gfile.exists(path):
            gfile.remove(path)
    except Exception as exc:  # pragma: no cover - best effort cleanup
        log.warning("could not remove %s: %s", path, exc)


def install_dir(tmp_dir: str, final_dir: str, may_replace: Callable[[str], bool], field: str) -> None:
    """Rename a fully written ``tmp_dir`` to ``final_dir`` (local paths only).

    An existing ``final_dir`` is moved aside first (only if ``may_replace`` says it is ours), then the
    new one is renamed in and the old one removed: a reader sees the old dataset or the new one.
    """
    if exists(final_dir):
        if not isdir(final_dir) or not may_replace(final_dir):
            raise ConfigError(problem(
                field, f"{final_dir!r} already exists and holds files this step did not write; "
                       "choose a new or empty folder, or delete it"))
        parent, base = split_parent(final_dir)
        old = join(parent, f".{base}.old-{uuid.uuid4().hex[:8]}")
        rename(final_dir, old)
        try:
            rename(tmp_dir, final_dir)
        except Exception:
            rename(old, final_dir)  # put the previous version back
            raise
        rmtree_quiet(old)
    else:
        rename(tmp_dir, final_dir)
