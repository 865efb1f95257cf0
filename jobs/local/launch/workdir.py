"""A replica's working directory here: its own, as a Vertex replica's is its container's.

On Vertex every replica is a container of the job's image, and its working directory is the image's WORKDIR: for a
user's trainer ``/workspace/code``, which holds the code ``vtp build`` copied in (``jobs.images.user``), in the
container's own writable layer. What a trainer writes there (a data set it downloads or unpacks "here",
``__pycache__``) stays in that container and goes with it: the image, and the user's folder, never see it.

The process runner gives each replica of each attempt the same (:class:`ReplicaWorkdirs`): a fresh folder under the
temporary directory holding a copy of exactly the files the image holds (``jobs.images.user_code.collect_code``, the
same filter: no ``runs/``, no output folder, no credential), made its working directory. ``python -m <module>``
imports the code from there, as the image's python does from its WORKDIR (the project's own packages come from
``PYTHONPATH``, as the image's ``/app`` does). The folder is removed when the attempt ends; ``trainer.source_dir`` is
only read. A copy, not links: a trainer that rewrites a file of its own must not change the user's.

The docker runner needs none of this: each replica is a fresh container of the job's image, its WORKDIR the image's,
removed when it ends (``jobs.local.launch.replica_container``). The built-in trainer (no ``trainer.source_dir``)
writes nothing but its ``AIP_*`` folders and keeps the launcher's working directory, where a relative ``data.path``
given on the command line is found.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from jobs.images.user_code import collect_code

#: a copy this large is said once (each replica of each attempt makes one, as each Vertex container has one)
LARGE_BYTES = 256 << 20


class ReplicaWorkdirs:
    """The working folders of one launch's replicas: :meth:`make` one per replica and attempt, :meth:`remove` it when
    the attempt ends. ``source_dir``: the trainer's code (read, never written)."""

    def __init__(self, source_dir: str, output_dir: str = ""):
        self.source_dir = os.path.abspath(source_dir)
        self.files, _ = collect_code(Path(self.source_dir), output_dir)
        self.bytes = sum(os.lstat(os.path.join(self.source_dir, rel)).st_size for rel in self.files)

    def describe(self) -> str:
        """The launcher's one line about it."""
        size = f"{self.bytes / (1 << 20):.1f} MB" if self.bytes >= 1 << 20 else f"{self.bytes / 1024:.1f} KB"
        large = (f"; that much is copied for every replica: keep data out of trainer.source_dir (.dockerignore), "
                 "which also keeps it out of the image" if self.bytes >= LARGE_BYTES else "")
        return (f"each replica runs in its own working folder, a copy of the {len(self.files)} file(s) ({size}) of "
                f"{self.source_dir} the image's WORKDIR holds; what a replica writes there is discarded when it "
                f"ends, as a Vertex container's is{large}")

    def make(self, replica: str) -> str:
        """A fresh working folder for ``replica`` (``chief-0``) holding the code."""
        folder = tempfile.mkdtemp(prefix=f"vtp-{replica}-")
        try:
            for rel in self.files:
                source, target = os.path.join(self.source_dir, rel), os.path.join(folder, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if os.path.islink(source):
                    os.symlink(os.readlink(source), target)
                else:
                    shutil.copyfile(source, target)
                    shutil.copymode(source, target)
        except BaseException:
            self.remove(folder)
            raise
        return folder

    @staticmethod
    def remove(folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        if os.path.isdir(folder):  # a folder the trainer made read-only: writable again, then removed
            for current, _, _ in os.walk(folder):
                os.chmod(current, 0o700)
            shutil.rmtree(folder, ignore_errors=True)
