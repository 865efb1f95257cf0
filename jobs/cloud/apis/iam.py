"""A service account of the job: does it exist, and may the caller act as it (``iam.serviceAccounts.actAs``).

Through the IAM API's JSON interface (``https://iam.googleapis.com/v1/``) with ``jobs.cloud.apis.clients.http``, the
one policy and the one token rule, rather than a GAPIC client: google-cloud-iam's admin client
(``iam_admin_v1.IAMClient``) ships a gRPC transport only (shared FACTS.md, 2026-11-27), and gRPC gets one deadline
per call where the policy sets a connect and a read timeout, and the stand-ins speak HTTP. The bodies are the real
API types where one is installed: the permission check sends and reads ``google.iam.v1``'s
``TestIamPermissionsRequest``/``Response`` (grpc-google-iam-v1, a dependency of every google-cloud-* client).

* ``GET v1/projects/-/serviceAccounts/EMAIL``: 200 (it exists), 404 (it does not), 403 (the caller needs
  ``iam.serviceAccounts.get``: ``roles/iam.serviceAccountViewer``);
* ``POST v1/projects/-/serviceAccounts/EMAIL:testIamPermissions`` ``{"permissions": ["iam.serviceAccounts.actAs"]}``:
  the answer's ``permissions`` are those the caller holds (``roles/iam.serviceAccountUser`` grants actAs).
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from jobs.cloud.apis import clients
from jobs.cloud.apis.lines import http_message
from jobs.cloud.apis.credentials import access_token, credentials, is_local_endpoint
from jobs.rules.errors import CloudError

IAM_ENDPOINT = "https://iam.googleapis.com"
ACT_AS = "iam.serviceAccounts.actAs"
GET_PERMISSION = "iam.serviceAccounts.get"


@dataclass(frozen=True)
class Account:
    """What IAM said: ``exists`` True/False, None (could not tell: ``why``); ``may_act_as`` likewise."""
    exists: bool | None
    may_act_as: bool | None
    why: str = ""


def _base(endpoint: str | None) -> str:
    return (endpoint or IAM_ENDPOINT).rstrip("/")


def _token(endpoint: str | None) -> str | None:
    """The caller's token for Google's IAM endpoint; none for a loopback stand-in (``clients.http`` sends a token
    only to a Google host over https in any case)."""
    if is_local_endpoint(endpoint):
        return None
    if endpoint:
        credentials(endpoint, "IAM")  # refuses an endpoint that may not receive the token, in one line
    return access_token("IAM")


def check(email: str, endpoint: str | None = None) -> Account:
    """Does ``email`` exist, and may the caller act as it. Failures other than 403/404 are one CloudError line."""
    from google.iam.v1 import iam_policy_pb2
    from google.protobuf import json_format

    token = _token(endpoint)
    resource = f"{_base(endpoint)}/v1/projects/-/serviceAccounts/{quote(email, safe='@')}"
    got = clients.http("GET", resource, doing=f"reading service account {email} (IAM)", google_token=token,
                       service="IAM")
    if got.status_code == 404:
        return Account(False, None, "it does not exist")
    if got.status_code == 403:
        exists, why = None, f"the caller needs {GET_PERMISSION} (roles/iam.serviceAccountViewer) to see it"
    elif got.status_code == 200:
        try:
            body = got.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or "email" not in body and "name" not in body:
            raise CloudError(f"reading service account {email} (IAM): the answer was not the API's JSON "
                                     "(an HTML page or garbage: a proxy in the way, or a wrong endpoint?)")
        exists, why = True, ""
    else:
        raise CloudError(f"reading service account {email} (IAM): HTTP {got.status_code} "
                                 f"{http_message(got)}")
    request = iam_policy_pb2.TestIamPermissionsRequest(permissions=[ACT_AS])
    body = json_format.MessageToDict(request)  # {"permissions": [...]}; the resource is the URL's
    answer = clients.http("POST", f"{resource}:testIamPermissions", json=body, google_token=token, service="IAM",
                          doing=f"asking IAM whether the caller may act as {email}")
    if answer.status_code == 404:
        return Account(False, None, "it does not exist")
    if answer.status_code == 403:
        return Account(exists, None, why or f"the caller may not test permissions on {email}")
    if answer.status_code != 200:
        raise CloudError(f"asking IAM whether the caller may act as {email}: HTTP {answer.status_code} "
                                 f"{http_message(answer)}")
    response = iam_policy_pb2.TestIamPermissionsResponse()
    try:
        json_format.ParseDict(answer.json(), response, ignore_unknown_fields=True)
    except (ValueError, json_format.ParseError):
        raise CloudError(f"asking IAM whether the caller may act as {email}: the answer was not the API's "
                                 "JSON (an HTML page or garbage: a proxy in the way, or a wrong endpoint?)") from None
    return Account(exists, ACT_AS in response.permissions, why)
