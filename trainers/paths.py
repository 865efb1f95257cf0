"""Paths that may be local (``/data``, ``/gcs/bucket/x``: Vertex's GCS FUSE mount) or URIs (``gs://b/x``)."""
from __future__ import annotations


def join(*parts: str) -> str:
    """Join with ``/`` (right for POSIX paths and for ``gs://`` URIs alike)."""
    out = str(parts[0])
    for part in parts[1:]:
        out = out.rstrip("/") + "/" + str(part).lstrip("/")
    return out


def is_uri(path: str) -> bool:
    return "://" in path
