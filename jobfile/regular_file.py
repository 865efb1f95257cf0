"""THE check before every read of a file a user names: a regular file of bounded size, else one problem naming the
field (a named pipe would block ``open()`` until a writer came, a device never ends). Local paths only; ``gs://`` is
read through TensorFlow (``trainers.fileio``). Below both sides of the tree: the job file's loader reads the job file
under it, and so do the replica (records) and the job side (every file a user names).
"""
from __future__ import annotations

import os
import stat

from jobfile.errors import ConfigError, problem

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
