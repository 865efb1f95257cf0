"""Which Google APIs are enabled in a project: the Service Usage API (google-cloud-service-usage, REST transport,
under the one policy of ``jobs.cloud.apis.clients``).

``ServiceUsageClient.batch_get_services(parent="projects/P", names=["projects/P/services/NAME", ...])`` answers
each service's ``state`` (``ENABLED``/``DISABLED``) in one call (at most 30 names a call, the API's limit). It
needs ``serviceusage.services.get`` (``roles/serviceusage.serviceUsageViewer``).
"""
from __future__ import annotations

from typing import Any

from jobs.cloud.apis import clients
from jobs.cloud.apis.credentials import client_kwargs

PERMISSION = "serviceusage.services.get"
ROLE = "roles/serviceusage.serviceUsageViewer"
#: the most names one batchGet takes ("a maximum of 30 services at a time": BatchGetServicesRequest.names in
#: google-cloud-service-usage 1.18's types)
BATCH = 30


def service_usage_client(endpoint: str | None = None):
    from google.cloud import service_usage_v1

    return service_usage_v1.ServiceUsageClient(**client_kwargs(endpoint, "Service Usage"))


def enable_command(project: str, apis: list[str]) -> str:
    return f"gcloud services enable {' '.join(apis)} --project {project}"


def states(project: str, apis: list[str], endpoint: str | None = None, client: Any = None) -> dict[str, bool]:
    """``{api: enabled}`` for every API named (``aiplatform.googleapis.com``...); a failure is one CloudError line."""
    from google.cloud import service_usage_v1

    client = client or service_usage_client(endpoint)
    out: dict[str, bool] = {}
    for start in range(0, len(apis), BATCH):
        names = [f"projects/{project}/services/{api}" for api in apis[start:start + BATCH]]
        answer = clients.call(client.batch_get_services, request={"parent": f"projects/{project}", "names": names},
                              doing=f"asking Service Usage which APIs project {project} has enabled",
                              service="Service Usage",
                              hints={403: f"the caller needs {PERMISSION} ({ROLE}) on project {project}",
                                     404: f"no such project {project!r}, or it is not visible to these credentials"})
        for service in answer.services:
            api = service.name.rsplit("/", 1)[-1] or service.config.name
            out[api] = service.state == service_usage_v1.State.ENABLED
    for api in apis:
        out.setdefault(api, False)  # not in the answer: Service Usage knows no such enabled service
    return out
