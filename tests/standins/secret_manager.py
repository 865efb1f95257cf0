"""Secret Manager (secretmanager.googleapis.com v1), as much of it as ``jobs.cloud.apis.notify`` reads.

* ``GET /v1/projects/P/secrets/S/versions/V:access``: the request decoded strictly as ``AccessSecretVersionRequest``
  (its query parameters too), the answer a real ``AccessSecretVersionResponse``: the payload's bytes and their
  CRC32C; ``damaged`` names versions whose CRC32C is wrong on purpose. ``secrets`` maps a version's name (``latest``
  or its number) to its text; any other version is 404, another project 403.

Install it on a :class:`~tests.standins.base.StandIn`: ``SecretManager(standin, secrets={...})``; faults come from
the StandIn (``standin.fault(503, ":access")``).
"""
from __future__ import annotations

import re

from tests.standins.base import Request, StandIn, decode_query, google_error, typed


class SecretManager:
    def __init__(self, standin: StandIn, project: str = "my-proj", secrets: dict[str, str] | None = None,
                 damaged: set[str] | None = None):
        self.standin, self.project = standin, project
        self.secrets = dict(secrets or {})
        self.damaged = set(damaged or ())
        self.accessed: list[str] = []
        from google.cloud import secretmanager_v1  # noqa: F401  (before the first request, not during it)

        standin.route("GET", r"/v1/projects/([^/]+)/secrets/([^/]+)/versions/([^/:]+):access", self._access)

    def _access(self, req: Request, m: re.Match):
        from google.cloud import secretmanager_v1
        import google_crc32c

        name = f"projects/{m[1]}/secrets/{m[2]}/versions/{m[3]}"
        request = decode_query(req, secretmanager_v1.AccessSecretVersionRequest, {"name": name})
        if m[1] != self.project:
            return 403, google_error(403, f"Permission 'secretmanager.versions.access' denied for resource '{name}'")
        if request.name not in self.secrets:
            return 404, google_error(404, f"Secret Version [{name}] not found.")
        self.accessed.append(request.name)
        data = self.secrets[request.name].encode("utf-8")
        crc = google_crc32c.value(data) ^ (1 if request.name in self.damaged else 0)
        answer = secretmanager_v1.AccessSecretVersionResponse(
            name=name, payload=secretmanager_v1.SecretPayload(data=data, data_crc32c=crc))
        return 200, typed(req, answer)
