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
import stat
import uuid
from typing import Any, Callable

from trainers.errors import ConfigError, problem
from trainers.paths import join

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


#: the most bytes a user-named file read whole may hold (a job file, a record, a request, held-out examples, a log's
#: tail is read from its end): a bound, so that a huge file is one line rather than memory exhausted
READ_LIMIT_BYTES = 256 << 20

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


class NotARegularFile(ConfigError):
    """A user-named path that is not a regular file of bounded size: one problem naming the field."""


def _not_regular(path: str, field: str, mode: int) -> NotARegularFile:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    why = "" if stat.S_ISDIR(mode) else " (reading it could wait forever)"
    return NotARegularFile(problem(field, f"{path} is {kind}, not a regular file{why}", ["a regular file"]))


def open_regular(path: str, field: str, *, limit: int = READ_LIMIT_BYTES, text: bool = True):
    """``path`` opened for reading when it is a regular file of at most ``limit`` bytes; otherwise
    :class:`NotARegularFile` naming ``field`` (a ConfigError, so a command says it in one line). The one check
    before every read of a file a user names (``serving.eval_data``, a job file, a sample request, a run record, a
    log, a file under ``trainer.source_dir``): a named pipe blocks ``open()`` until a writer comes, a device
    (``/dev/zero``) never ends. The path is stat'ed first (a device is never opened), then opened with
    ``O_NONBLOCK`` and checked again on the descriptor (it may have been replaced in between). A missing or
    unreadable file is the ``OSError`` ``open()`` raises. Local paths only (gs:// is read through TensorFlow)."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(path, field, mode)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, field, st.st_mode)
        if st.st_size > limit:
            raise NotARegularFile(problem(field, f"{path} is {st.st_size:,} bytes, more than the {limit:,} read "
                                                 "here whole", [f"a file under {limit >> 20} MiB"]))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "r" if text else "rb", **({"encoding": "utf-8"} if text else {}))
    except BaseException:
        os.close(fd)
        raise
    return f


def read_regular(path: str, field: str, *, limit: int = READ_LIMIT_BYTES) -> bytes:
    """The bytes of ``path`` under :func:`open_regular`'s rule (at most ``limit`` read, even if it grew)."""
    with open_regular(path, field, limit=limit, text=False) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotARegularFile(problem(field, f"{path} grew past the {limit:,} bytes read here whole",
                                      [f"a file under {limit >> 20} MiB"]))
    return data


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
