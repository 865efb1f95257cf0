"""The build's artifacts as Cloud Build would upload them (``artifacts.objects``: where they would go, every
file matched, its size and digest), the image and template lists they hold, and each image pinned by digest
checked in the local registry (an Artifact Registry name looked up there under the same path)."""
from __future__ import annotations

import hashlib
from pathlib import Path

from jobs.commands.ci_local.build_file import Build
from jobs.commands.ci_local.standins import GOOGLE_REGISTRY
from jobs.commands.ci_local.substitutions import expand
from jobs.images import parse_reference


def artifact_lines(build: Build, subs: dict[str, str], workspace: Path, registry: str | None = None) -> list[str]:
    """``artifacts.objects`` as Cloud Build would upload them (location, each file), the image and template
    lists they hold, each pinned image on a loopback registry checked there by digest."""
    if not build.artifacts_paths:
        return ["artifacts: none declared"]
    location = expand(build.artifacts_location, lambda n: subs.get(n, ""), "artifacts.objects.location")
    lines = [f"artifacts (artifacts.objects, not uploaded: Cloud Build would put them in {location}):"]
    for pattern in build.artifacts_paths:
        matches = sorted(p for p in workspace.glob(pattern) if p.is_file())
        if not matches:
            lines.append(f"  {pattern}: no file matches (Cloud Build fails the build on that)")
        for path in matches:
            data = path.read_bytes()
            lines.append(f"  {path.relative_to(workspace).as_posix()}  {len(data)} bytes  "
                         f"sha256:{hashlib.sha256(data).hexdigest()[:16]}...  -> {location.rstrip('/')}/{path.name}")
            if path.suffix == ".txt":
                for entry in data.decode(errors="replace").splitlines():
                    if entry.strip():
                        lines.append(f"      {entry.strip()}{_pinned_check(entry.strip(), registry)}")
    return lines


def _pinned_check(entry: str, registry: str | None) -> str:
    """`` (in HOST:PORT)`` when ``entry`` is an image pinned by digest that the local registry holds (an
    Artifact Registry name is looked up there under the same path), `` (NOT in ...)`` when it does not;
    empty for anything else."""
    if "@sha256:" not in entry or "://" in entry or not registry:
        return ""

    try:
        ref = parse_reference(entry)
    except Exception:
        return ""
    if not ref.pinned or not GOOGLE_REGISTRY.match(ref.registry + "/"):
        return ""
    import requests

    name = ref.path
    accept = ", ".join(["application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
                        "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json"])
    digest = entry.rsplit("@", 1)[1]
    try:
        r = requests.head(f"http://{registry}/v2/{name}/manifests/{digest}", headers={"Accept": accept}, timeout=10)
        return f"  (in {registry})" if r.status_code == 200 else f"  (NOT in {registry}: HTTP {r.status_code})"
    except requests.RequestException as exc:
        return f"  (not checked: {type(exc).__name__})"
