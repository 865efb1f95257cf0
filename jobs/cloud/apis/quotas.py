"""The project's Vertex AI training quotas, read through the Cloud Quotas API, against what a job needs.

**Reading.** ``CloudQuotasClient.list_quota_infos(parent="projects/P/locations/global/services/
aiplatform.googleapis.com")`` (google-cloud-quotas, REST transport, every page under the one policy of
``jobs.cloud.apis.clients``): one ``QuotaInfo`` per quota, each with its limit per region in ``dimensions_infos``
(:func:`limit_in`). One listing answers every region, so the regions where the project's limits cover the job
come from the same answer. The listing needs ``cloudquotas.quotas.get`` (``roles/cloudquotas.viewer``).

**Comparing.** The need per quota is ``jobs.rules.hardware.quotas.job_needs`` (the names are data in
``jobs/rules/hardware/quotas.yaml``); the check is against the limit alone: the Cloud Quotas API gives limits, not usage
(``quotas.yaml``'s ``usage``). Each need is one :class:`~jobs.rules.placement.Finding`: ok, a shortfall (naming the quota,
the region, the need and the limit, the regions where the project's limits cover the whole job and the hardware
catalog offers it, and the ``gcloud`` command that asks for more), or not checked (no known name, a name the
project does not list, no limit for the region).
"""
from __future__ import annotations

from typing import Any, Iterable

from jobs.cloud.apis import clients
from jobs.cloud.apis.credentials import client_kwargs
from jobs.rules.hardware import quotas as quota_names, rules
from jobs.rules.placement import Finding, Option, with_option

#: what listing the quotas needs (one line when it is missing)
PERMISSION = "cloudquotas.quotas.get"
ROLE = "roles/cloudquotas.viewer"


def console_url(project: str) -> str:
    """The console's quota page, filtered to Vertex AI."""
    return (f"https://console.cloud.google.com/iam-admin/quotas?project={project}"
            f"&service={quota_names.load_quotas().service}")


def quotas_client(endpoint: str | None = None):
    """A ``CloudQuotasClient`` (REST) with credentials from ``jobs.cloud.apis.credentials``."""
    from google.cloud import cloudquotas_v1

    return cloudquotas_v1.CloudQuotasClient(**client_kwargs(endpoint, "Cloud Quotas"))


def training_quotas(project: str, endpoint: str | None = None, client: Any = None) -> list[Any]:
    """Every ``QuotaInfo`` of Vertex AI in ``project`` (all pages, under the policy); a failure is one
    CloudError line (403: the permission it takes)."""
    client = client or quotas_client(endpoint)
    service = quota_names.load_quotas().service
    parent = f"projects/{project}/locations/global/services/{service}"

    def every_page(**policy):  # the pager reads later pages with the retry and timeout given here
        return list(client.list_quota_infos(parent=parent, **policy))

    return clients.call(every_page, doing=f"reading project {project}'s Vertex AI quotas (Cloud Quotas API)",
                        service="Cloud Quotas",
                        hints={403: f"the caller needs {PERMISSION} ({ROLE}), and the Cloud Quotas API enabled: "
                                    f"gcloud services enable cloudquotas.googleapis.com --project {project}",
                               404: f"no such project {project!r}, or it is not visible to these credentials"})


def find(infos: Iterable[Any], name: quota_names.QuotaName, service: str) -> Any | None:
    """The ``QuotaInfo`` of ``name``: by its metric (``service/metric``), else by its quota id."""
    infos = list(infos)
    if name.metric:
        full = name.full_metric(service)
        found = next((i for i in infos if i.metric == full or i.metric == name.metric), None)
        if found is not None:
            return found
    if name.quota_id:
        return next((i for i in infos if i.quota_id == name.quota_id), None)
    return None


def _regions(dim: Any) -> list[str]:
    region = dict(dim.dimensions).get("region", "")
    return [region] if region else list(dim.applicable_locations)


def limit_in(info: Any, region: str) -> int | None:
    """The limit of ``info`` in ``region``: the dimensions info naming the region (``dimensions.region``), else
    one whose ``applicable_locations`` hold it, else the one without dimensions (the project's default); None
    when none applies. A negative value (no limit) is returned as it is."""
    dims = list(info.dimensions_infos)
    for d in dims:
        if dict(d.dimensions).get("region") == region:
            return int(d.details.value)
    for d in dims:
        if region in d.applicable_locations:
            return int(d.details.value)
    for d in dims:
        if not dict(d.dimensions):
            return int(d.details.value)
    return None


def covers(limit: int | None, need: int) -> bool:
    return limit is not None and (limit < 0 or limit >= need)


def named_regions(infos: Iterable[Any]) -> list[str]:
    """Every region the infos name, sorted."""
    return sorted({r for info in infos for d in info.dimensions_infos for r in _regions(d) if r and r != "global"})


def _offered(cfg: Any, region: str) -> bool:
    """The hardware catalog offers the job's hardware in ``region`` (or has no data for it: Vertex decides):
    the one region rule, ``jobs.rules.hardware.rules.check_regions``."""
    moved = with_option(cfg, Option(region, cfg.scheduling.strategy))
    return not rules.check_regions(moved.to_dict())


def covering_regions(cfg: Any, strategy: str, infos: list[Any], *, skip: str = "") -> list[str]:
    """The regions where the project's limits cover every need of the job under ``strategy`` whose quota the
    project lists, and the hardware catalog offers the job's hardware."""
    table = quota_names.load_quotas()
    pairs = []
    for need in quota_names.job_needs(cfg, strategy):
        info = find(infos, need.name, table.service) if need.name else None
        if info is not None:
            pairs.append((need, info))
    if not pairs:
        return []
    return [r for r in named_regions(i for _, i in pairs)
            if r != skip and all(covers(limit_in(i, r), n.amount) for n, i in pairs) and _offered(cfg, r)]


def request_command(project: str, info: Any, region: str, value: int) -> str:
    """The ``gcloud`` line that asks for ``value`` of ``info`` in ``region`` (a quota preference)."""
    service = quota_names.load_quotas().service
    quota_id = info.quota_id or "QUOTA_ID"
    return (f"gcloud beta quotas preferences create --service={service} --quota-id={quota_id} "
            f"--preferred-value={value} --dimensions=region={region} --project={project} --email=YOUR_EMAIL")


def findings(cfg: Any, option: Option, infos: list[Any], project: str) -> list[Finding]:
    """One finding per quota the job needs under ``option`` (module docstring)."""
    table = quota_names.load_quotas()
    region, strategy = option.region, option.strategy
    job = with_option(cfg, option)
    needs = quota_names.job_needs(job, strategy)
    copies = quota_names.concurrent_jobs(job)
    study = ""
    if copies > 1:
        study = (f" ({copies - 1} trials at once + the baseline)" if job.tuning.baseline
                 else f" ({copies} trials at once)")
    alone = "checked against the limit alone: current usage is not read"
    out: list[Finding] = []
    elsewhere: list[str] | None = None
    for need in needs:
        what = f"quota for {need.what} in {region}"
        if need.name is None:
            out.append(Finding(what, None, f"{need.what}: {need.why}"))
            continue
        label = f"{table.service}/{need.name.metric or need.name.quota_id}"
        info = find(infos, need.name, table.service)
        if info is None:
            guess = " (the name is inferred, not seen in a source)" if need.name.status == "inferred" else ""
            out.append(Finding(f"quota {need.name} in {region}", None,
                               f"{label}: project {project} lists no such Vertex AI quota{guess}; the job's need of "
                               f"{need.amount} {need.what}{study} in {region} is not checked (quotas.yaml, read "
                               f"{table.date})"))
            continue
        limit = limit_in(info, region)
        if limit is None:
            out.append(Finding(f"quota {need.name} in {region}", None,
                               f"{label}: no limit for {region} in project {project}'s answer; the need of "
                               f"{need.amount} {need.what}{study} is not checked"))
            continue
        shown = "no limit" if limit < 0 else str(limit)
        if covers(limit, need.amount):
            out.append(Finding(f"quota {need.name} in {region}", True,
                               f"{label} in {region}: the job needs {need.amount} {need.what}{study}, the limit is "
                               f"{shown}; {alone}"))
            continue
        if elsewhere is None:
            elsewhere = covering_regions(job, strategy, infos, skip=region)
        where = (f"regions where the project's limits cover the whole job and the catalog offers it: "
                 f"{', '.join(elsewhere)}" if elsewhere else
                 "no region of the project has limits that cover the whole job")
        fix = request_command(project, info, region, need.amount)
        out.append(Finding(f"quota {need.name} in {region}", False,
                           f"{label} in {region}: the job needs {need.amount} {need.what}{study} ({strategy}), the "
                           f"project's limit is {shown}, {alone}; {where}; ask for more on {console_url(project)} "
                           f"or: {fix}", fix=fix))
    return out
