"""The Service Usage API (serviceusage.googleapis.com v1): ``GET /v1/projects/P/services:batchGet?names=...``,
decoded strictly as ``BatchGetServicesRequest`` (at most 30 names, each under the parent, as the real API
requires), answered with a real ``BatchGetServicesResponse``: each service ``ENABLED`` when it is in
``enabled``, else ``DISABLED``."""
from __future__ import annotations

import re

from tests.standins.base import BadRequest, Request, StandIn, decode_query, google_error, typed


class ServiceUsage:
    def __init__(self, standin: StandIn, project: str = "my-proj", enabled: set[str] | frozenset[str] = frozenset()):
        self.project, self.enabled = project, set(enabled)
        standin.route("GET", r"/v1/projects/([^/]+)/services:batchGet", self._batch_get)

    def _batch_get(self, req: Request, m: re.Match):
        from google.cloud import service_usage_v1

        request = decode_query(req, service_usage_v1.BatchGetServicesRequest, {"parent": f"projects/{m[1]}"})
        if len(request.names) > 30:
            raise BadRequest("A single request can get a maximum of 30 services at a time.")
        if any(not n.startswith(f"{request.parent}/services/") for n in request.names):
            raise BadRequest("Every name must be a service of the parent.")
        if m[1] != self.project:
            return 403, google_error(403, f"Permission denied to get services of project {m[1]}.")
        state = service_usage_v1.State
        services = [service_usage_v1.Service(name=n, parent=request.parent, config={"name": n.rsplit("/", 1)[-1]},
                                             state=state.ENABLED if n.rsplit("/", 1)[-1] in self.enabled
                                             else state.DISABLED) for n in request.names]
        return 200, typed(req, service_usage_v1.BatchGetServicesResponse(services=services))
