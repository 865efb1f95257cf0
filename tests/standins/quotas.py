"""The Cloud Quotas API (cloudquotas.googleapis.com v1), as much of it as ``jobs.cloud.apis.quotas`` reads.

* ``GET /v1/projects/P/locations/global/services/S/quotaInfos`` (``pageSize``, ``pageToken``): the request
  decoded strictly as ``ListQuotaInfosRequest``, the answer a real ``ListQuotaInfosResponse`` (two infos a page,
  so a listing spans pages). ``limits`` sets what the project has: ``{metric: {region: value}}``, with
  ``"*"`` the default of every region not named (a ``DimensionsInfo`` without dimensions, as the real API sends
  the project's default).

Install it on a :class:`~tests.standins.base.StandIn` (one server may carry every API): ``Quotas(standin,
project="my-proj", limits={...})``; faults come from the StandIn (``standin.fault(403, "quotaInfos")``).
"""
from __future__ import annotations

import re

from tests.standins.base import Request, StandIn, decode_query, google_error, typed

SERVICE = "aiplatform.googleapis.com"
PAGE = 2


def quota_id(metric: str) -> str:
    """A quota id in the API's style for a metric (``custom_model_training_nvidia_t4_gpus`` ->
    ``CustomModelTrainingNvidiaT4GpusPerProjectPerRegion``), for metrics the test does not give one."""
    return "".join(p.capitalize() for p in metric.split("_")) + "PerProjectPerRegion"


class Quotas:
    def __init__(self, standin: StandIn, project: str = "my-proj", limits: dict[str, dict[str, int]] | None = None,
                 ids: dict[str, str] | None = None):
        self.standin, self.project = standin, project
        self.limits = dict(limits or {})
        self.ids = dict(ids or {})
        standin.route("GET", r"/v1/projects/([^/]+)/locations/global/services/([^/]+)/quotaInfos", self._list)

    def infos(self, service: str):
        from google.cloud import cloudquotas_v1

        out = []
        for metric, regions in self.limits.items():
            dims = []
            for region, value in regions.items():
                if region == "*":
                    dims.append(cloudquotas_v1.DimensionsInfo(details={"value": value}, applicable_locations=[
                        r for r in ("us-central1", "us-east4", "europe-west4", "asia-east1") if r not in regions]))
                else:
                    dims.append(cloudquotas_v1.DimensionsInfo(dimensions={"region": region}, details={"value": value},
                                                              applicable_locations=[region]))
            qid = self.ids.get(metric, quota_id(metric))
            out.append(cloudquotas_v1.QuotaInfo(
                name=f"projects/{self.project}/locations/global/services/{service}/quotaInfos/{qid}",
                quota_id=qid, metric=f"{service}/{metric}", service=service, dimensions=["region"],
                is_precise=True, container_type=cloudquotas_v1.QuotaInfo.ContainerType.PROJECT,
                dimensions_infos=dims))
        return out

    def _list(self, req: Request, m: re.Match):
        from google.cloud import cloudquotas_v1

        request = decode_query(req, cloudquotas_v1.ListQuotaInfosRequest,
                               {"parent": f"projects/{m[1]}/locations/global/services/{m[2]}"})
        if m[1] != self.project:
            return 403, google_error(403, f"Permission denied on resource project {m[1]}.")
        infos = self.infos(m[2])
        start = int(request.page_token or 0)
        page = infos[start:start + PAGE]
        token = str(start + PAGE) if start + PAGE < len(infos) else ""
        return 200, typed(req, cloudquotas_v1.ListQuotaInfosResponse(quota_infos=page, next_page_token=token))
