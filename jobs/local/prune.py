"""``runs prune``: removing old ``--fresh`` copies (``<base>.<YYYYmmdd-HHMMSS>[-n]``, which ``jobs.local.runs``
makes), never a live run and never the current folder. Kept apart from ``jobs.local.history`` (which reads run
folders back): this is the one command that deletes.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import sys

from jobs.local import runs
from jobs.local.history import ARCHIVE_RE, DEFAULT_ROOT, STAMP, UsageError, is_run_folder
from trainers.errors import problem


def folder_bytes(path: str) -> int:
    """Disk space the folder's files take (``du``: allocated blocks, each file once, links not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def plan_prune(root: str, keep: int, older_than_days: float | None, now: dt.datetime | None = None
               ) -> tuple[list[str], list[str]]:
    """(copies to remove, copies kept) among the ``--fresh`` copies under ``root``: for each run folder, its
    newest ``keep`` copies are kept, and with ``older_than_days`` only copies made longer ago than that go."""
    now = now or dt.datetime.now()
    groups: dict[str, list[tuple[str, str]]] = {}
    for name in sorted(os.listdir(root)):
        m = ARCHIVE_RE.match(name)
        path = os.path.join(root, name)
        if m and not os.path.islink(path) and is_run_folder(path):
            groups.setdefault(m.group("base"), []).append((m.group("stamp") + f"-{int(m.group('n') or 1):04d}", name))
    remove, kept = [], []
    for copies in groups.values():
        ordered = [name for _, name in sorted(copies, reverse=True)]
        for i, name in enumerate(ordered):
            made = dt.datetime.strptime(ARCHIVE_RE.match(name).group("stamp"), STAMP)
            old_enough = older_than_days is None or now - made > dt.timedelta(days=older_than_days)
            (remove if i >= keep and old_enough else kept).append(name)
    return remove, kept


def prune(root: str, keep: int, older_than_days: float | None, dry_run: bool, out=None) -> int:
    """Remove the planned copies (each under its run lock, renamed aside first so a half-removed folder never
    looks like a run); returns the bytes freed (or that would be)."""
    out = out or sys.stdout
    if not os.path.isdir(root):
        raise UsageError(str(problem("--root", f"{root} is not a folder; give the folder that holds the run folders",
                                     [DEFAULT_ROOT])))
    remove, kept = plan_prune(root, keep, older_than_days)
    freed = 0
    for name in sorted(os.listdir(root)):  # what an interrupted prune had already set aside
        leftover = os.path.join(root, name)
        if name.startswith(".") and name.endswith(".removing") and os.path.isdir(leftover) and not os.path.islink(leftover):
            size = folder_bytes(leftover)
            if not dry_run:
                shutil.rmtree(leftover)
            freed += size
            out.write(f"{'would remove' if dry_run else 'removed'} {leftover}, left by an interrupted prune "
                      f"({_size(size)})\n")
    for name in remove:
        path = os.path.join(root, name)
        size = folder_bytes(path)
        if dry_run:
            out.write(f"would remove {path} ({_size(size)})\n")
            freed += size
            continue
        try:
            lock = runs.RunLock(path).acquire()
        except runs.FolderBusy as exc:
            out.write(f"skipped {path}: {exc}\n")
            continue
        try:
            aside = os.path.join(root, f".{name}.removing")
            os.rename(path, aside)
        finally:
            lock.release()
        shutil.rmtree(aside)
        freed += size
        out.write(f"removed {path} ({_size(size)})\n")
    verb = "would free" if dry_run else "freed"
    out.write(f"{verb} {freed:,} bytes ({_size(freed)}) in {len(remove)} --fresh cop{'y' if len(remove) == 1 else 'ies'}; "
              f"kept {len(kept)} cop{'y' if len(kept) == 1 else 'ies'}"
              + (f" ({', '.join(kept)})" if kept else "") + "; live run folders are never pruned\n")
    return freed
