"""``runs prune``: removing old ``--fresh`` copies (``<base>.<YYYYmmdd-HHMMSS>[-n]``, which ``jobs.local.run.folder``
makes), never a live run and never the current folder. Kept apart from ``jobs.local.history`` (which reads run
folders back): this is the one command that deletes.

A name is no proof: a folder is removed only when it is a copy that ``--fresh`` made (:func:`copy_of`): it
holds the copy record ``jobs.local.run.folder.archive`` writes into every copy (``.fresh-copy.json``, naming the folder it was
and the copy's own name), or, for a copy made before that record existed, its own run records say it ran in
``<root>/<base>`` and that folder is there beside it. Anything else named like a copy (a run of the user's called
``exp.20261127-101010``, a name whose time is not a date) is kept, and the prune says so in one line each. A folder
set aside by an interrupted prune (``.<copy>.removing``) is removed only when its own copy record names it (a prune
writes that record into a copy before it sets it aside); a folder of the user's named so is kept. A copy in which a
process of the run that made it still runs (it carries that run's token, ``jobs.local.run.lock``) is skipped; a prune
stops no process.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import sys

from jobs.run_records import records
from jobs.local.history.reader import ARCHIVE_RE, DEFAULT_ROOT, UsageError, is_run_folder, validated_config
from jobs.local.history.record_check import STAMP
from jobs.local.process import lifeline
from jobs.local.run.folder import COPY_RECORD, copy_record
from jobs.local.run.lock import FolderBusy, NotThisJob, RunLock, now_iso
from trainers import fileio
from jobfile.errors import problem


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


class Interrupted(Exception):
    """Ctrl-C during a prune: ``str(exc)`` is the one line saying what was removed and what is left."""


def _made_at(path: str) -> str | None:
    """The ``output.base_dir`` the run in ``path`` was started with, as its own records say (what made it, its
    run.json, or the validated config of its last pipeline run); None when none says."""
    for doc in (records.read_at(path, records.PROVENANCE_RECORD).get("config"),
                records.read_at(path, records.RUN_RECORD).get("config"), validated_config(path)):  # read_at: THE reader
        base = (doc or {}).get("output", {}).get("base_dir") if isinstance(doc, dict) and \
            isinstance(doc.get("output"), dict) else None
        if isinstance(base, str) and base:
            return base
    return None


def copy_of(root: str, name: str) -> tuple[dt.datetime | None, str]:
    """(when ``--fresh`` made the copy ``<root>/<name>``, "") when it is one; (None, why it is kept) when it is
    not known to be one (see the module docstring)."""
    m = ARCHIVE_RE.match(name)
    path = os.path.join(root, name)
    if not m:
        return None, "not named like a --fresh copy"
    try:
        made = dt.datetime.strptime(m.group("stamp"), STAMP)
    except ValueError:
        return None, f"named like a --fresh copy, but {m.group('stamp')} is not a date and time (--fresh writes one)"
    record = copy_record(path)
    if record:
        if record.get("copy") == name and record.get("copy_of") == m.group("base"):
            return made, ""
        return None, (f"its {COPY_RECORD} says it is {record.get('copy')!r}, a copy of {record.get('copy_of')!r}: "
                      "renamed since --fresh made it")
    original = os.path.join(root, m.group("base"))
    ran_in = _made_at(path)
    if ran_in and os.path.basename(ran_in.rstrip("/")) == m.group("base") and os.path.isdir(original):
        return made, ""  # a copy made before copies held their record: it ran in <base>, which is there
    return None, (f"named like a --fresh copy of {m.group('base')}, but nothing says --fresh made it (no "
                  f"{COPY_RECORD}" + (f"; it ran in {ran_in}" if ran_in else "") + "): a run of yours?")


def plan_prune(root: str, keep: int, older_than_days: float | None, now: dt.datetime | None = None
               ) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(copies to remove, copies kept, [(folder named like a copy, why it is not one)]) under ``root``: for each
    run folder, its newest ``keep`` copies are kept, and with ``older_than_days`` only copies made longer ago
    than that go (compared in seconds: any finite number of days, however large, means "none that old")."""
    now = now or dt.datetime.now()
    groups: dict[str, list[tuple[str, str, dt.datetime]]] = {}
    not_copies: list[tuple[str, str]] = []
    for name in sorted(os.listdir(root)):
        m = ARCHIVE_RE.match(name)
        path = os.path.join(root, name)
        if not m or os.path.islink(path) or not is_run_folder(path):
            continue
        made, why = copy_of(root, name)
        if made is None:
            not_copies.append((name, why))
            continue
        groups.setdefault(m.group("base"), []).append((m.group("stamp") + f"-{int(m.group('n') or 1):04d}", name, made))
    remove, kept = [], []
    for copies in groups.values():
        for i, (_, name, made) in enumerate(sorted(copies, reverse=True)):
            old_enough = older_than_days is None or (now - made).total_seconds() > older_than_days * 86400.0
            (remove if i >= keep and old_enough else kept).append(name)
    return remove, kept, not_copies


def prune(root: str, keep: int, older_than_days: float | None, dry_run: bool, out=None) -> int:
    """Remove the planned copies (each under its run lock, renamed aside first so a half-removed folder never
    looks like a run); returns the bytes freed (or that would be)."""
    out = out or sys.stdout
    if not os.path.isdir(root):
        raise UsageError(str(problem("--root", f"{root} is not a folder; give the folder that holds the run folders",
                                     [DEFAULT_ROOT])))
    remove: list[str] = []
    try:
        remove, kept, not_copies = plan_prune(root, keep, older_than_days)
        freed, removed = _remove(root, remove, dry_run, out)
        for name, why in not_copies:
            out.write(f"kept {os.path.join(root, name)}: {why}\n")
        verb = "would free" if dry_run else "freed"
        out.write(f"{verb} {freed:,} bytes ({_size(freed)}) in {removed} --fresh cop{'y' if removed == 1 else 'ies'}; "
                  f"kept {len(kept)} cop{'y' if len(kept) == 1 else 'ies'}"
                  + (f" ({', '.join(kept)})" if kept else "") + "; live run folders are never pruned\n")
    except KeyboardInterrupt:  # Ctrl-C: one line on what is gone and what is left (runs_cli: exit 130)
        raise Interrupted(_interrupted(root, remove)) from None
    return freed


def _interrupted(root: str, planned: list[str]) -> str:
    """The line after Ctrl-C: what is gone, what is left, and that the next prune finishes a half-removed copy."""
    aside = [n for n in os.listdir(root) if set_aside_by_prune(root, n)] if os.path.isdir(root) else []
    gone = [n for n in planned if not os.path.exists(os.path.join(root, n)) and f".{n}.removing" not in aside]
    left = (f"; {', '.join(aside)} was set aside half-removed: the next runs prune removes it" if aside else "")
    if not planned and not aside:
        return f"interrupted: nothing was removed under {root}"
    return (f"interrupted: removed {len(gone)} of {len(planned)} --fresh copies under {root}{left}; every other "
            "folder is as it was")


AWAY = ".removing"


def set_aside_by_prune(root: str, name: str) -> str | None:
    """The copy a folder ``.<copy>.removing`` under ``root`` was, when its own copy record says a prune set it aside
    (``copy`` names that copy); None for anything else (a folder of the user's named so)."""
    if not (name.startswith(".") and name.endswith(AWAY)) or len(name) <= len(AWAY) + 1:
        return None
    path, was = os.path.join(root, name), name[1:-len(AWAY)]
    if os.path.islink(path) or not os.path.isdir(path):
        return None
    return was if copy_record(path).get("copy") == was and ARCHIVE_RE.match(was) else None


def _remove(root: str, remove: list[str], dry_run: bool, out) -> tuple[int, int]:
    """Remove (or, ``dry_run``, say) the planned copies and what an interrupted prune set aside: (bytes, copies)."""
    freed, removed = 0, 0
    for name in sorted(os.listdir(root)):  # what an interrupted prune had already set aside
        if not (name.startswith(".") and name.endswith(AWAY)):
            continue
        leftover = os.path.join(root, name)
        if set_aside_by_prune(root, name) is None:
            if ARCHIVE_RE.match(name[1:-len(AWAY)]) and os.path.isdir(leftover) and not os.path.islink(leftover):
                out.write(f"kept {leftover}: named like a copy an interrupted prune set aside, but its own record "
                          f"({COPY_RECORD}) does not say a prune set it aside: a folder of yours?\n")
            continue
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
            freed, removed = freed + size, removed + 1
            continue
        try:
            lock = RunLock(path).acquire(claim=False)  # a prune stops no process, keeps the lock's record
        except (FolderBusy, NotThisJob) as exc:
            out.write(f"skipped {path}: {exc}\n")
            continue
        try:
            left = lifeline.carrying(lock.left_token)
            if left:
                out.write(f"skipped {path}: process(es) of the run that made it still run (pid "
                          f"{', '.join(map(str, left))}); a rerun in {path} stops them, or wait for them\n")
                continue
            if copy_record(path).get("copy") != name:  # a copy from before copies held their record: say it is
                fileio.write_json_atomic(os.path.join(path, COPY_RECORD), {
                    "copy_of": ARCHIVE_RE.match(name).group("base"), "copy": name, "made": now_iso(),
                    "by": "runs prune (a --fresh copy from before copies held this record)"})
            aside = os.path.join(root, f".{name}{AWAY}")
            os.rename(path, aside)
        finally:
            lock.release()
        shutil.rmtree(aside)
        freed, removed = freed + size, removed + 1
        out.write(f"removed {path} ({_size(size)})\n")
    return freed, removed
