"""A Docker build context as a deterministic tar, and a tag that is the hash of that tar.

Why: the image tag is derived from what goes into the build, so the same sources always give the same
tag (a registry that already holds it needs no build) and any changed file gives a new one. Both builders
(``jobs.images.builders``: a Docker engine, Cloud Build) send exactly the bytes :func:`write_tar` writes, so
the tag names what was built.

What is in the context follows Docker's own rules: a ``.dockerignore`` at the root (``#`` comments,
``**``, ``!`` exceptions), evaluated by the ``docker`` SDK's matcher (the one ``docker build`` through
the SDK uses); the Dockerfile and ``.dockerignore`` are always sent. Only regular files and symlinks are
archived (directories are created by the engine as needed; sockets and FIFOs cannot be sent).

Determinism: entries sorted by path, mtime 0, uid/gid 0, empty user/group names, modes normalised to
0644 (0755 when any execute bit is set), GNU tar format (no pax headers carrying times); gzip, when
asked for, with mtime 0 and no file name.
"""
from __future__ import annotations

import dataclasses
import gzip as gzip_lib
import hashlib
import os
import stat
import tarfile
from pathlib import Path
from typing import IO, Mapping

from jobs.rules.image_reference import BuildError

DEFAULT_DOCKERFILE = "containers/Dockerfile"
TAG_PREFIX = "ctx-"


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """``root``: the context directory; ``dockerfile``: its path relative to root (posix);
    ``files``: the included regular files and symlinks, relative posix paths, sorted."""

    root: Path
    dockerfile: str
    files: tuple[str, ...]


def _read_dockerignore(root: Path) -> list[str]:
    path = root / ".dockerignore"
    if not path.is_file():
        return []
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def make_context(root: Path | str, dockerfile: str = DEFAULT_DOCKERFILE) -> BuildContext:
    """The files a ``docker build -f DOCKERFILE ROOT`` would send, honouring ``ROOT/.dockerignore``.

    ``dockerfile`` is relative to ``root`` (as ``docker build -f`` is, when given inside the context);
    an absolute path inside ``root`` is accepted too. Raises :class:`BuildError` with one line when the
    context or the Dockerfile is missing.
    """
    from docker.utils.build import exclude_paths

    root = Path(root).resolve()
    if not root.is_dir():
        raise BuildError(f"build context {root} is not a directory")
    dockerfile_path = Path(dockerfile)
    if dockerfile_path.is_absolute():
        try:
            dockerfile_path = dockerfile_path.resolve().relative_to(root)
        except ValueError:
            raise BuildError(f"Dockerfile {dockerfile} is outside the build context {root}") from None
    rel_dockerfile = dockerfile_path.as_posix()
    if not (root / rel_dockerfile).is_file():
        raise BuildError(f"Dockerfile {rel_dockerfile} not found in build context {root}")

    included = exclude_paths(str(root), _read_dockerignore(root), dockerfile=rel_dockerfile)
    files = []
    for rel in included:
        full = root / rel
        mode = os.lstat(full).st_mode
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            files.append(Path(rel).as_posix())
    return BuildContext(root=root, dockerfile=rel_dockerfile, files=tuple(sorted(files)))


def _tarinfo(ctx: BuildContext, rel: str) -> tuple[tarfile.TarInfo, Path]:
    full = ctx.root / rel
    st = os.lstat(full)
    info = tarfile.TarInfo(rel)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISLNK(st.st_mode):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(full)
        info.mode = 0o777
        info.size = 0
    else:
        info.type = tarfile.REGTYPE
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
        info.size = st.st_size
    return info, full


class _HashingWriter:
    """Passes bytes through to ``sink`` (if any) and hashes them."""

    def __init__(self, sink: IO[bytes] | None):
        self.sink = sink
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        if self.sink is not None:
            self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        if self.sink is not None and hasattr(self.sink, "flush"):
            self.sink.flush()


def write_tar(ctx: BuildContext, fileobj: IO[bytes] | None, *, gzip: bool = False) -> str:
    """Write the context as a deterministic tar (gzipped when ``gzip``) to ``fileobj``.

    Returns the sha256 hex digest of the *uncompressed* tar, which does not depend on gzip settings.
    ``fileobj=None`` only computes the digest. A file that vanished or changed size while being read
    raises :class:`BuildError` (the archive would not be what was hashed).
    """
    gz = gzip_lib.GzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0) if gzip and fileobj else None
    hasher = _HashingWriter(gz if gz is not None else fileobj)
    with tarfile.open(fileobj=hasher, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for rel in ctx.files:
            try:
                info, full = _tarinfo(ctx, rel)
                if info.type == tarfile.SYMTYPE:
                    tar.addfile(info)
                    continue
                with open(full, "rb") as f:
                    if os.fstat(f.fileno()).st_size != info.size:
                        raise BuildError(f"{rel} changed while the build context was being archived")
                    tar.addfile(info, f)
            except OSError as exc:
                raise BuildError(f"cannot read {rel} in build context {ctx.root}: {exc.strerror or exc}") from None
    if gz is not None:
        gz.close()
    if fileobj is not None and hasattr(fileobj, "flush"):
        fileobj.flush()
    return hasher.sha256.hexdigest()


def content_tag(ctx: BuildContext, build_args: Mapping[str, str] | None = None) -> str:
    """``ctx-<16 hex>``: sha256 over the deterministic tar, the Dockerfile path and any build args.

    Identical content gives the identical tag whatever the files' mtimes, owners or the machine; any
    included file's bytes, name or execute bit changing gives another tag. Build args are part of the
    hash because the same context built with ``VARIANT=gpu`` is a different image.
    """
    digest = hashlib.sha256(write_tar(ctx, None).encode())
    digest.update(b"\0dockerfile=" + ctx.dockerfile.encode())
    for key in sorted(build_args or {}):
        digest.update(f"\0{key}={build_args[key]}".encode())
    return TAG_PREFIX + digest.hexdigest()[:16]
