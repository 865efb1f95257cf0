"""The Docker Registry HTTP API v2 (Artifact Registry, Docker Hub, any registry), spoken to directly:
"does this tag exist, and which digest is it" without a Docker engine (the Cloud Build backend).
"""
from __future__ import annotations

import re

from jobs.build_context import BuildError
from jobs.cloud.docker_engine import _first_line
from jobs.images import registry_host

MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json")


def _is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in ("localhost", "[::1]") or name.startswith("127.")


def registry_digest(repository: str, tag: str, *, access_token: str | None = None,
                    timeout_s: float = 20.0) -> str | None:
    """``HEAD /v2/<name>/manifests/<tag>`` on the registry: its ``Docker-Content-Digest``, or None when the
    tag is not there (or we may not look: then building is the safe answer).

    Registries that want a token (Artifact Registry, Docker Hub) answer 401 with a ``Bearer realm=...``
    challenge: the token is fetched from that realm, with ``oauth2accesstoken:<access_token>`` as basic
    auth when a Google access token is given. Loopback registries are spoken to over plain HTTP."""
    import requests

    host = registry_host(repository)
    if host == "docker.io":
        host, name = "registry-1.docker.io", repository if "/" in repository else f"library/{repository}"
    else:
        name = repository[len(host) + 1:]
    url = f"{'http' if _is_loopback(host) else 'https'}://{host}/v2/{name}/manifests/{tag}"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    try:
        answer = requests.head(url, headers=headers, timeout=timeout_s)
        challenge = answer.headers.get("WWW-Authenticate", "")
        if answer.status_code == 401 and challenge.lower().startswith("bearer "):
            params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
            auth = ("oauth2accesstoken", access_token) if access_token else None
            grant = requests.get(params.get("realm", ""), auth=auth, timeout=timeout_s,
                                 params={k: v for k, v in params.items() if k in ("service", "scope")})
            if grant.ok:
                token = grant.json().get("token") or grant.json().get("access_token")
                answer = requests.head(url, headers={**headers, "Authorization": f"Bearer {token}"},
                                       timeout=timeout_s)
    except requests.RequestException as exc:
        raise BuildError(f"cannot reach registry {host}: {_first_line(exc)}") from None
    if answer.status_code == 200:
        return answer.headers.get("Docker-Content-Digest")
    if answer.status_code in (401, 403, 404):
        return None
    raise BuildError(f"registry {host} answered HTTP {answer.status_code} for {name}:{tag}")


