"""The IAM API's service accounts (iam.googleapis.com v1), as ``jobs.cloud.apis.iam`` reads them.

* ``GET /v1/projects/-/serviceAccounts/EMAIL``: the ServiceAccount resource (its JSON fields as the API reference
  lists them) when ``EMAIL`` is in ``accounts``, else 404;
* ``POST /v1/projects/-/serviceAccounts/EMAIL:testIamPermissions``: the body decoded strictly as
  ``google.iam.v1.TestIamPermissionsRequest`` (an unknown field is a 400), answered with a
  ``TestIamPermissionsResponse`` holding the permissions asked for that ``accounts[EMAIL]`` grants the caller.
"""
from __future__ import annotations

import json
import re
from urllib.parse import unquote

from tests.standins.base import BadRequest, Request, StandIn, google_error


class Iam:
    def __init__(self, standin: StandIn, project: str = "my-proj", accounts: dict[str, set[str]] | None = None):
        self.project = project
        self.accounts = {k: set(v) for k, v in (accounts or {}).items()}
        standin.route("GET", r"/v1/projects/([^/]+)/serviceAccounts/([^/:]+)", self._get)
        standin.route("POST", r"/v1/projects/([^/]+)/serviceAccounts/([^/:]+):testIamPermissions", self._test)

    def _get(self, req: Request, m: re.Match):
        email = unquote(m[2])
        if email not in self.accounts:
            return 404, google_error(404, f"Unknown service account: {email}")
        return 200, {"name": f"projects/{self.project}/serviceAccounts/{email}", "projectId": self.project,
                     "uniqueId": "1234567890", "email": email, "etag": "MDEwMjE5MjA=", "oauth2ClientId": "1234567890"}

    def _test(self, req: Request, m: re.Match):
        from google.iam.v1 import iam_policy_pb2
        from google.protobuf import json_format

        request = iam_policy_pb2.TestIamPermissionsRequest()
        try:
            json_format.ParseDict(json.loads(req.body or b"{}"), request)
        except (json_format.ParseError, ValueError) as exc:
            raise BadRequest(f"Invalid JSON payload received. {' '.join(str(exc).split())}") from None
        email = unquote(m[2])
        if email not in self.accounts:
            return 404, google_error(404, f"Unknown service account: {email}")
        held = [p for p in request.permissions if p in self.accounts[email]]
        return 200, json_format.MessageToDict(iam_policy_pb2.TestIamPermissionsResponse(permissions=held))
