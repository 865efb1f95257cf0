"""A folder's every file and its bytes, to assert that a refused or skipped command left a folder as it was."""
from __future__ import annotations

import os
from pathlib import Path


def tree_bytes(root: Path | str) -> dict[str, bytes | str]:
    """``{relative path: bytes}`` for every file under ``root`` (a link: ``"-> target"``; a folder: ``"dir"``),
    so an added, removed or changed file or folder shows up in a comparison."""
    root = Path(root)
    out: dict[str, bytes | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = path.read_bytes()
    return out
