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


#: Where Vertex AI mounts Cloud Storage in training replicas and pipeline tasks (Cloud Storage FUSE).
FUSE_ROOT = "/gcs"


def fuse_path(uri: str) -> str:
    """Where a Vertex replica or pipeline task sees ``uri`` as a file: ``gs://B/P`` -> ``/gcs/B/P`` (Cloud Storage
    FUSE, mounted by Vertex whether or not this machine has the mount); anything else unchanged."""
    return FUSE_ROOT + "/" + uri[len("gs://"):] if uri.startswith("gs://") else uri


def gcs_uri(path: str) -> str:
    """The inverse of :func:`fuse_path`: ``/gcs/B/P`` -> ``gs://B/P`` (the bucket a mounted path lives in);
    anything else unchanged."""
    return "gs://" + path[len(FUSE_ROOT) + 1:] if path.startswith(FUSE_ROOT + "/") else path


def readable(uri: str) -> str:
    """A path Python's own file functions can read for ``uri``: ``gs://B/P`` -> ``/gcs/B/P`` where that mount
    exists (a Vertex replica or pipeline task), else ``uri`` unchanged (local paths; ``gs://`` elsewhere)."""
    import os

    return fuse_path(uri) if uri.startswith("gs://") and os.path.isdir(FUSE_ROOT) else uri
