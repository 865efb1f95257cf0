"""A Docker Registry HTTP API v2 stand-in (as Artifact Registry, Docker Hub or any registry answers) and a
token realm, for the "does this tag exist" check and the credentials rule around it.

* ``HEAD /v2/<name>/manifests/<tag>``: without ``Authorization: Bearer <granted>`` -> 401 with
  ``WWW-Authenticate: Bearer realm="<realm>",service="<service>",scope="repository:<name>:pull"`` (the realm
  can be on any host: that is the point); with it -> 200 and ``Docker-Content-Digest`` when the tag is in
  ``tags``, else 404.
* :class:`TokenRealm` (install it on the registry's own stand-in or on another host's):
  ``GET <path>?service=...&scope=...`` -> ``{"token": <granted>}`` to anyone (a hostile realm grants
  gladly); ``require_basic``: only with ``Basic oauth2accesstoken:<expected>`` (Artifact Registry's realm).
"""
from __future__ import annotations

import base64
import re

from tests.standins.base import Request, StandIn


def basic_credentials(req: Request) -> str | None:
    """``user:password`` of a Basic Authorization header, decoded; None without one."""
    auth = next((v for k, v in req.headers.items() if k.lower() == "authorization"), "")
    if not auth.lower().startswith("basic "):
        return None
    try:
        return base64.b64decode(auth.split(" ", 1)[1]).decode()
    except Exception:
        return "(undecodable)"


class RegistryStandIn(StandIn):
    def __init__(self, realm: str, granted: str = "registry-token", service: str = "registry",
                 tags: dict[tuple[str, str], str] | None = None):
        super().__init__()
        self.realm, self.granted, self.service = realm, granted, service
        self.tags = dict(tags or {})
        self.route("HEAD", r"/v2/(?P<name>.+)/manifests/(?P<tag>[^/]+)", self._manifest)

    def _manifest(self, req: Request, m: re.Match):
        auth = next((v for k, v in req.headers.items() if k.lower() == "authorization"), "")
        if auth != f"Bearer {self.granted}":
            return 401, b"", {"WWW-Authenticate": f'Bearer realm="{self.realm}",service="{self.service}",'
                                                  f'scope="repository:{m["name"]}:pull"'}
        digest = self.tags.get((m["name"], m["tag"]))
        return (200, b"", {"Docker-Content-Digest": digest}) if digest else (404, b"")


class TokenRealm:
    def __init__(self, standin: StandIn, path: str = "/token", granted: str = "registry-token",
                 require_basic: str | None = None):
        self.granted, self.require_basic = granted, require_basic
        standin.route("GET", path, self._grant)

    def _grant(self, req: Request, m: re.Match):
        if self.require_basic is not None and basic_credentials(req) != f"oauth2accesstoken:{self.require_basic}":
            return 403, {"errors": [{"code": "DENIED", "message": "bad credentials"}]}
        return 200, {"token": self.granted}
