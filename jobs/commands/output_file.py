"""THE rule for a file a command writes where the user names it (``vtp plan --out plan.json``): never over what the
user named as input, never over anything this product did not write, never through a link.

:func:`output_problem`, before the command does its work (one ``error:`` line naming the flag, the rule and a valid
alternative): the path is refused when it is empty, holds a name longer than the file system takes, lies in a folder
that does not exist or cannot be written, is a symbolic link, a folder, a named pipe, a device or a socket, is one of
the command's inputs (the job file), or is a file that exists and is not one this command wrote (a JSON document whose
``written_by`` is the command's :func:`mark`).

:func:`write_output`, at the end: the bytes written to a temporary file beside the target (same folder, so the rename
is atomic), then renamed over it, after the target is checked again (it may have changed while the command ran);
``os.replace`` replaces a name, it never writes through a link. A failure is :class:`OutputRefused` (one line), never
a traceback, and leaves no temporary file behind.
"""
from __future__ import annotations

import json
import os
import stat
import uuid
from typing import Any, Callable, Sequence

from trainers import record_reader
from jobfile.errors import Problem, problem

#: the key a JSON output carries to say which command wrote it (:func:`mark`)
MARK_KEY = "written_by"

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class OutputRefused(Exception):
    """The output cannot be written where it was named: ``str(exc)`` is the one line (``FIELD: ...``)."""


def mark(doc: dict[str, Any], writer: str) -> dict[str, Any]:
    """``doc`` with the key that says ``writer`` (e.g. ``vtp plan``) wrote it: what lets the next run replace it."""
    return {MARK_KEY: writer, **doc}


def written_by(path: str, writer: str) -> bool:
    """Whether the regular file ``path`` is a JSON document ``writer`` wrote (:func:`mark`), read by THE reader."""
    try:
        doc = record_reader.read(path, types={MARK_KEY: str})
    except record_reader.Unreadable:
        return False
    return isinstance(doc, dict) and doc.get(MARK_KEY) == writer


def _name_max(folder: str) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def output_problem(path: str, field: str, writer: str, *, inputs: Sequence[str] = (), example: str = "plan.json",
                   ours: Callable[[str], bool] | None = None) -> Problem | None:
    """Why ``path`` may not be written by ``writer`` (the module docstring's rule), or None. ``inputs``: the files
    the command reads (a path that names one of them is refused); ``ours``: how to tell an existing regular file
    ``writer`` wrote (default: :func:`written_by`; a writer with a mark of its own, e.g. a saved plan's ``kind``,
    passes its own test)."""
    if not isinstance(path, str) or not path.strip():
        return problem(field, "is empty: name the file to write, or leave the flag out", [example])
    if "\0" in path:
        return problem(field, "holds a NUL character, which no file name can", [example])
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    name = os.path.basename(path.rstrip("/"))
    limit = _name_max(folder) if os.path.isdir(folder) else 255
    if len(name.encode("utf-8", "surrogateescape")) > limit:
        return problem(field, f"its name is {len(name.encode('utf-8', 'surrogateescape')):,} bytes, more than the "
                              f"{limit} a file name may have here", [example])
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # ENOTDIR (a file where a folder should be), EACCES, ENAMETOOLONG...
        return problem(field, f"{path} cannot be written ({exc.strerror or exc})", [example])
    if st is not None:
        kind = next((what for test, what in _KINDS if test(st.st_mode)), None)
        if kind:
            return problem(field, f"{path} is {kind}: the output is written only to a new file or over one "
                                  f"{writer} wrote, never into or through anything else", [example])
        for given in inputs:
            try:
                if given and os.path.samefile(path, given):
                    return problem(field, f"{path} is this command's input (the job file {given}): it is never "
                                          "written over", [example])
            except OSError:
                continue
        if not (ours or (lambda p: written_by(p, writer)))(path):
            return problem(field, f"{path} exists and is not a file {writer} wrote: it is not written over; "
                                  "choose a new name, or remove it first", [example])
    if not os.path.isdir(folder):
        return problem(field, f"the folder of {path} ({folder}) does not exist", [example])
    if not os.access(folder, os.W_OK | os.X_OK):
        return problem(field, f"the folder of {path} ({folder}) cannot be written", [example])
    return None


def write_output(path: str, data: bytes, field: str, writer: str, *, inputs: Sequence[str] = (),
                 ours: Callable[[str], bool] | None = None) -> None:
    """``data`` to ``path`` by temp-and-rename beside it, once :func:`output_problem` (checked again now) allows
    it; :class:`OutputRefused` otherwise, or when the file system refuses (one line, no temporary file left)."""
    found = output_problem(path, field, writer, inputs=inputs, ours=ours)
    if found is not None:
        raise OutputRefused(str(found))
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    tmp = os.path.join(folder, f".vtp-{uuid.uuid4().hex[:12]}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputRefused(f"{field}: {path} could not be written ({exc.strerror or exc}); nothing was written "
                            "there") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_json_output(path: str, doc: dict[str, Any], field: str, writer: str, *, inputs: Sequence[str] = ()) -> None:
    """``doc`` (marked as ``writer``'s, :func:`mark`) as JSON to ``path`` under :func:`write_output`'s rule."""
    write_output(path, (json.dumps(mark(doc, writer), indent=1) + "\n").encode("utf-8"), field, writer, inputs=inputs)
