"""Resources a job may name, each answered as the real API's type (``typed``) or 404: Compute Engine networks
(``GET /compute/v1/projects/P/global/networks/N``) and reservations
(``GET /compute/v1/projects/P/zones/Z/reservations/R``), and Vertex AI persistent resources
(``GET /v1/projects/P/locations/L/persistentResources/ID``)."""
from __future__ import annotations

import re

from tests.standins.base import Request, StandIn, google_error, typed


class Resources:
    def __init__(self, standin: StandIn, networks: set[str] = frozenset(), reservations: set[str] = frozenset(),
                 persistent_resources: set[str] = frozenset()):
        self.networks, self.reservations = set(networks), set(reservations)
        self.persistent_resources = set(persistent_resources)
        standin.route("GET", r"/compute/v1/projects/([^/]+)/global/networks/([^/]+)", self._network)
        standin.route("GET", r"/compute/v1/projects/([^/]+)/zones/([^/]+)/reservations/([^/]+)", self._reservation)
        standin.route("GET", r"/v1/(projects/[^/]+/locations/[^/]+/persistentResources/[^/]+)", self._persistent)

    def _network(self, req: Request, m: re.Match):
        from google.cloud import compute_v1

        name = f"projects/{m[1]}/global/networks/{m[2]}"
        if name not in self.networks:
            return 404, google_error(404, f"The resource '{name}' was not found")
        return 200, typed(req, compute_v1.Network(name=m[2], self_link=f"https://www.googleapis.com/compute/v1/{name}"))

    def _reservation(self, req: Request, m: re.Match):
        from google.cloud import compute_v1

        name = f"projects/{m[1]}/zones/{m[2]}/reservations/{m[3]}"
        if name not in self.reservations:
            return 404, google_error(404, f"The resource '{name}' was not found")
        return 200, typed(req, compute_v1.Reservation(name=m[3], zone=m[2], status="READY"))

    def _persistent(self, req: Request, m: re.Match):
        from google.cloud import aiplatform_v1

        if m[1] not in self.persistent_resources:
            return 404, google_error(404, f"PersistentResource {m[1]} not found")
        return 200, typed(req, aiplatform_v1.PersistentResource(name=m[1]))
