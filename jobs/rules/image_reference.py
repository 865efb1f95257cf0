"""THE image-reference parser: ``[HOST[:PORT]/]PATH[:TAG][@sha256:HEX]`` -> :class:`ImageRef`, and the one
error of the image side (:class:`BuildError`, one line meant for a person; its home is ``jobs.rules.errors``).

Every caller that reads an image reference goes through :func:`parse_reference`: build, submit,
upload-template, the Cloud Build trigger helper, the registry probe, the docker runner, the hardware
catalog (TPU PyTorch images). Docker Hub's short names are normalised (``docker.io``, ``library/NAME``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from jobs.rules.errors import BuildError

__all__ = ["BuildError", "DIGEST_HINT", "DOCKER_HUB", "ImageRef", "parse_reference"]


# docker/distribution reference grammar (reference/regexp.go), without the tag/digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?"
_DOMAIN_RE = re.compile(rf"^{_DOMAIN}$")
_PATH_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImageRef:
    """An image reference as docker's grammar reads it (distribution/reference), normalised:
    ``registry`` is the host[:port] (``docker.io`` for Docker Hub, also when written ``index.docker.io`` or
    left out), ``path`` the repository inside it (``library/NAME`` for Hub's one-part names), ``tag`` and
    ``digest`` (``sha256:`` + 64 lowercase hex digits) when given."""

    registry: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def repository(self) -> str:
        """``registry/path``: what a tag is pushed to (Docker Hub spelt out as ``docker.io/...``)."""
        return f"{self.registry}/{self.path}"

    @property
    def api_host(self) -> str:
        """The host serving the registry's /v2/ API (Docker Hub's is registry-1.docker.io)."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    def __str__(self) -> str:
        return self.repository + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


DOCKER_HUB, DOCKER_HUB_API = "docker.io", "registry-1.docker.io"
DIGEST_HINT = "sha256:<64 lowercase hex digits>"


def parse_reference(ref: str) -> ImageRef:
    """THE image-reference parser (build, submit, upload-template, the Cloud Build trigger helper, the
    registry client): ``[HOST[:PORT]/]PATH[:TAG][@sha256:HEX]`` -> :class:`ImageRef`; :class:`BuildError`
    with one line saying what is wrong and what a valid reference looks like."""
    text = ref if isinstance(ref, str) else ""
    example = "e.g. us-central1-docker.pkg.dev/PROJECT/REPO/tf-trainer:TAG@sha256:..."
    if not text or text != text.strip():
        raise BuildError(f"bad image reference {ref!r}: empty or surrounded by spaces; {example}")
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST_RE.fullmatch(digest):
            raise BuildError(f"bad image reference {ref!r}: digest must be {DIGEST_HINT}")
    tag = None
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        text, tag = text.rsplit(":", 1)
        if not _TAG_RE.fullmatch(tag):
            raise BuildError(f"bad image reference {ref!r}: tag {tag!r} is not a valid tag (letters, digits, "
                             "'_', '.', '-', at most 128, not starting with '.' or '-')")
    first, _, rest = text.partition("/")
    has_domain = bool(rest) and ("." in first or ":" in first or first == "localhost")  # docker's rule
    valid = (_DOMAIN_RE.fullmatch(first) and _PATH_RE.fullmatch(rest)) if has_domain else _PATH_RE.fullmatch(text)
    if not valid or len(text) > 255:
        raise BuildError(f"bad image reference {ref!r}: expected HOST[:PORT]/PATH with lowercase letters, digits "
                         f"and . _ - separators; {example}")
    registry, path = (first, rest) if has_domain else (DOCKER_HUB, text)
    if registry == "index.docker.io":
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return ImageRef(registry, path, tag, digest)
