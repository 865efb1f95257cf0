"""The user's Google Cloud project as ``vtp plan`` sees it: :class:`CloudProject`, the :class:`~jobs.rules.placement.Project`
that answers through the real client libraries, each call under the one policy of ``jobs.cloud.apis.clients``.

* quotas (``jobs.cloud.apis.quotas``: Cloud Quotas API), read once per project and reused for every option;
* ``output.base_dir``'s bucket and its location (``jobs.cloud.apis.gcs.bucket_location``: Cloud Storage JSON API);
* the APIs the job uses are enabled (``jobs.cloud.apis.service_usage``: Service Usage API);
* the image exists in its registry, by digest when pinned (``jobs.cloud.apis.registry``: the Docker Registry API's
  manifest ``HEAD`` that Artifact Registry serves, the Google token only to Google hosts);
* the run-as service account exists and the caller may act as it (``jobs.cloud.apis.iam``);
* ``vertex.network`` and the reservations of ``scheduling.reservation_affinity`` (google-cloud-compute, REST:
  ``NetworksClient.get``, ``ReservationsClient.get``) and ``scheduling.persistent_resource_id``
  (``aiplatform_v1.PersistentResourceServiceClient.get_persistent_resource``, the job's regional endpoint).

Every check is one :class:`~jobs.rules.placement.Finding`: ok; a problem with the ``gcloud`` line that mends it; or
``ok=None`` when it could not be done (no credentials, a permission missing, a 5xx or silence past the policy's
budget), the line naming what is missing. Nothing here raises for a cloud failure.

Endpoints: ``api_endpoint`` None talks to Google (Application Default Credentials, ``jobs.cloud.apis.credentials``);
a loopback ``http://127.0.0.1:P`` points every API at one local stand-in (tests), anonymously, as the other
clients' ``--api-endpoint`` does. Try it: ``python -m jobs.cloud.apis.project --project P --config JOB [--region R]``.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable

from jobs.cloud.apis import clients, gcs, iam, quotas, registry, service_usage, vertex
from jobs.rules import preflight
from jobs.cloud.apis.lines import run_command
from jobs.cloud.apis.credentials import (access_token, client_kwargs, endpoint_problem, is_local_endpoint,
                                    may_receive_google_token)
from jobs.rules.errors import CloudError
from jobs.rules.image_reference import BuildError, parse_reference
from jobs.rules.job_image import job_image
from jobs.rules.placement import Finding, Option, Project, options, with_option
from jobfile import config as config_lib
from jobfile.errors import ConfigError, problem

#: the APIs every Vertex training job of this product uses (docs/vertex.md's one-time set-up)
BASE_APIS = ("aiplatform.googleapis.com", "storage.googleapis.com", "artifactregistry.googleapis.com")
COMPUTE_API = "compute.googleapis.com"
NETWORK_RE = re.compile(r"^projects/(?P<project>[^/]+)/global/networks/(?P<name>[^/]+)$")
RESERVATION_RE = re.compile(r"^projects/(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)$")
ENV_PROJECT = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")


class CloudProject(Project):
    """``project`` (its id) through the real APIs; ``api_endpoint``: see the module docstring."""

    def __init__(self, project: str, *, api_endpoint: str | None = None):
        self.project = project
        self.api_endpoint = api_endpoint or None
        self._quotas: list[Any] | CloudError | None = None
        self._buckets: dict[str, tuple[str | None, list[Finding]]] = {}
        self._apis: dict[tuple[str, ...], list[Finding]] = {}

    @classmethod
    def from_environment(cls, project: str | None = None, api_endpoint: str | None = None) -> "CloudProject":
        """The project named (``--project``), else ``GOOGLE_CLOUD_PROJECT`` / ``CLOUDSDK_CORE_PROJECT``; "" when
        none is named (then every check is one "not checked" line saying so)."""
        name = project or next((os.environ[v] for v in ENV_PROJECT if os.environ.get(v)), "")
        return cls(name, api_endpoint=api_endpoint)

    # ---- the Project interface ---------------------------------------------------------------------------------
    def quota(self, cfg, option: Option) -> list[Finding]:
        what = f"Vertex AI quotas in {option.region}"
        if not self.project:
            return [self._no_project(what)]
        infos = self._quota_infos()
        if isinstance(infos, CloudError):
            return [Finding(what, None, f"quotas not checked: {infos}")]
        return quotas.findings(cfg, option, infos, self.project)

    def bucket_location(self, uri: str) -> tuple[str | None, list[Finding]]:
        if uri in self._buckets:
            return self._buckets[uri]
        what = f"bucket of {uri}"
        if not uri.startswith("gs://"):
            found: tuple[str | None, list[Finding]] = (None, [Finding(
                what, None, f"{uri} is not in Cloud Storage (gs://BUCKET/PATH): no bucket to check")])
        else:
            bucket = uri[5:].split("/", 1)[0]
            try:
                location = gcs.bucket_location(uri, project=self.project or None, endpoint=self.api_endpoint)
                found = (location, [Finding(what, True, f"bucket gs://{bucket} exists, in {location}")])
            except gcs.BucketMissing as exc:
                fix = (f"gcloud storage buckets create gs://{bucket} --location=REGION --project={self.project or 'PROJECT'}"
                       "  (REGION: the job's region)")
                found = (None, [Finding(what, False, f"{exc}; create it in the job's region: {fix}", fix=fix)])
            except CloudError as exc:
                found = (None, [Finding(what, None, f"bucket not checked: {exc}")])
        self._buckets[uri] = found
        return found

    def setup(self, cfg, option: Option) -> list[Finding]:
        if not self.project:
            return [self._no_project("the project's set-up")]
        job = with_option(cfg, option)
        return [*self._apis_enabled(job), self._image(job), self._service_account(job), *self._network(job),
                *self._reservations(job), *self._persistent_resource(job)]

    # ---- the checks --------------------------------------------------------------------------------------------
    def _no_project(self, what: str) -> Finding:
        return Finding(what, None, f"{what} not checked: no project named (pass --project, or set "
                                   f"{' or '.join(ENV_PROJECT)})")

    def _quota_infos(self) -> list[Any] | CloudError:
        """The project's Vertex AI quotas, listed once (a failure too: it is not asked again per option)."""
        if self._quotas is None:
            try:
                self._quotas = quotas.training_quotas(self.project, self.api_endpoint)
            except CloudError as exc:
                self._quotas = exc
        return self._quotas

    def needed_apis(self, cfg) -> list[str]:
        apis = list(BASE_APIS)
        if cfg.vertex.network or cfg.scheduling.reservation_affinity.values:
            apis.append(COMPUTE_API)
        return apis

    def _apis_enabled(self, cfg) -> list[Finding]:
        apis = self.needed_apis(cfg)
        key = tuple(apis)
        if key not in self._apis:
            what = "APIs enabled"
            try:
                state = service_usage.states(self.project, apis, self.api_endpoint)
                off = [a for a in apis if not state.get(a)]
                if off:
                    fix = service_usage.enable_command(self.project, off)
                    found = Finding(what, False, f"project {self.project} has not enabled {', '.join(off)}: enable "
                                                 f"{'it' if len(off) == 1 else 'them'}: {fix}", fix=fix)
                else:
                    found = Finding(what, True, f"project {self.project} has enabled {', '.join(apis)}")
            except CloudError as exc:
                found = Finding(what, None, f"APIs not checked: {exc}")
            self._apis[key] = [found]
        return self._apis[key]

    def image_digest(self, image: str) -> tuple[str | None, str]:
        """The digest ``image``'s tag (``:latest`` when none) points at in its registry now (``None`` and why when it
        cannot be read): what a saved plan records of the image and ``vtp apply`` compares."""
        try:
            ref = parse_reference(image)
            # the tag as it moves (the digest beside it is what the plan pinned); a bare digest: whether it is there
            tagged = (parse_reference(f"{ref.repository}:{ref.tag}") if ref.tag else ref if ref.digest
                      else parse_reference(f"{image}:latest"))
            google = may_receive_google_token(registry.registry_url(tagged))
            token = access_token("Artifact Registry") if google else None
            answer = registry.registry_digest(tagged, google_token=token)
        except (CloudError, BuildError) as exc:
            return None, str(exc)
        if answer.digest:
            return answer.digest, ""
        return None, f"registry {tagged.registry} answered {answer.why or answer.status}"

    def _image(self, cfg) -> Finding:
        what = "the job's image"
        explicit = cfg.container.image_uri
        image = job_image(cfg)
        if not image:
            return Finding(what, None, "no image named (container.image_uri or container.image_repository): "
                                       "nothing to check")
        if not explicit:
            return Finding(what, None, f"the image is the one `vtp build` makes in {image.rsplit(':', 1)[0]} "
                                       "(its tag is the sources' hash): checked when it is built")
        try:
            ref = parse_reference(image)
            if not ref.tag and not ref.digest:
                ref = parse_reference(f"{image}:latest")
            google = may_receive_google_token(registry.registry_url(ref))
            token = access_token("Artifact Registry") if google else None
            answer = registry.registry_digest(ref, google_token=token)
        except CloudError as exc:
            return Finding(what, None, f"image not checked: {exc}")
        pinned = "" if ref.digest else " (not pinned by digest: the tag can move; vtp build prints REPO:TAG@sha256:...)"
        if answer.digest:
            return Finding(what, True, f"image {image} exists in {ref.registry}{pinned}")
        if answer.status == 404:
            fix = f"gcloud artifacts docker images list {ref.repository} --include-tags"
            return Finding(what, False, f"image {image} is not in its registry {ref.registry}: build and push it "
                                        f"(vtp build), or see what is there: {fix}", fix=fix)
        return Finding(what, None, f"image {image} not checked: registry {ref.registry} refused "
                                   f"({answer.why or answer.status}); reading it needs "
                                   "artifactregistry.repositories.downloadArtifacts (roles/artifactregistry.reader)")

    def _service_account(self, cfg) -> Finding:
        email = cfg.vertex.service_account
        what = "the run-as service account"
        if not email:
            return Finding(what, True, "no vertex.service_account: the replicas run as Vertex AI's service agent "
                                       "(a job with output.tensorboard needs a service account of its own)")
        try:
            account = iam.check(email, self._iam_endpoint())
        except CloudError as exc:
            return Finding(what, None, f"service account not checked: {exc}")
        name = email.split("@", 1)[0]
        if account.exists is False:
            fix = f"gcloud iam service-accounts create {name} --project={self.project}"
            return Finding(what, False, f"service account {email} does not exist: {fix}", fix=fix)
        if account.may_act_as is False:
            fix = (f"gcloud iam service-accounts add-iam-policy-binding {email} --member=user:YOUR_EMAIL "
                   f"--role=roles/iam.serviceAccountUser --project={self.project}")
            return Finding(what, False, f"the caller may not act as {email} (it lacks {iam.ACT_AS}; Vertex "
                                        f"refuses the job): {fix}", fix=fix)
        if account.may_act_as is None or account.exists is None:
            return Finding(what, None, f"service account {email} not fully checked: {account.why}")
        return Finding(what, True, f"service account {email} exists and the caller may act as it")

    def _iam_endpoint(self) -> str | None:
        return self.api_endpoint if is_local_endpoint(self.api_endpoint) else None

    def _get(self, what: str, get: Callable[[], Any], *, present: str, missing: str, fix: str,
             permission: str) -> Finding:
        """One ``get`` of a resource: there (ok), 404 (the problem and ``fix``), 403 (not checked: ``permission``),
        anything else not checked with its line."""
        from google.api_core import exceptions as core

        try:
            get()
        except core.NotFound:
            return Finding(what, False, f"{missing}: {fix}", fix=fix)
        except (core.Forbidden, core.PermissionDenied):
            return Finding(what, None, f"{what} not checked: the caller needs {permission}")
        except CloudError as exc:
            return Finding(what, None, f"{what} not checked: {exc}")
        return Finding(what, True, present)

    def _call(self, method: Callable, doing: str, **kwargs) -> Callable[[], Any]:
        from google.api_core import exceptions as core

        return lambda: clients.call(method, doing=doing, reraise=(core.NotFound, core.Forbidden, core.PermissionDenied),
                                    **kwargs)

    def _compute(self, client_name: str):
        from google.cloud import compute_v1

        return getattr(compute_v1, client_name)(**client_kwargs(self.api_endpoint, "Compute Engine"))

    def _network(self, cfg) -> list[Finding]:
        network = cfg.vertex.network
        if not network:
            return []
        what = f"network {network}"
        m = NETWORK_RE.fullmatch(network)
        if not m:
            return [Finding(what, False, f"vertex.network {network!r} is not projects/PROJECT_NUMBER/global/networks/NAME")]
        try:
            client = self._compute("NetworksClient")
        except CloudError as exc:
            return [Finding(what, None, f"{what} not checked: {exc}")]
        fix = f"gcloud compute networks create {m['name']} --project={m['project']}"
        return [self._get(what, self._call(client.get, f"reading network {network} (Compute Engine)",
                                           project=m["project"], network=m["name"]),
                          present=f"network {network} exists", missing=f"network {network} does not exist", fix=fix,
                          permission="compute.networks.get (roles/compute.networkViewer)")]

    def _reservations(self, cfg) -> list[Finding]:
        values = list(cfg.scheduling.reservation_affinity.values)
        out = []
        client = None
        for value in values:
            what = f"reservation {value}"
            m = RESERVATION_RE.fullmatch(value)
            if not m:
                out.append(Finding(what, False, f"{value!r} is not projects/PROJECT/zones/ZONE/reservations/NAME"))
                continue
            region = cfg.topology.region
            if not m["zone"].startswith(region + "-"):
                out.append(Finding(what, False, f"reservation {value} is in zone {m['zone']}, not in the job's region "
                                                f"{region}: name one of {region}'s zones, or run the job there"))
                continue
            try:
                client = client or self._compute("ReservationsClient")
            except CloudError as exc:
                out.append(Finding(what, None, f"{what} not checked: {exc}"))
                continue
            fix = (f"gcloud compute reservations create {m['name']} --zone={m['zone']} --project={m['project']} "
                   "--machine-type=MACHINE --vm-count=N [--accelerator=count=N,type=GPU]")
            out.append(self._get(what, self._call(client.get, f"reading reservation {value} (Compute Engine)",
                                                  project=m["project"], zone=m["zone"], reservation=m["name"]),
                                 present=f"reservation {value} exists", missing=f"reservation {value} does not exist",
                                 fix=fix, permission="compute.reservations.get (roles/compute.viewer)"))
        return out

    def _persistent_resource(self, cfg) -> list[Finding]:
        rid = cfg.scheduling.persistent_resource_id
        if not rid:
            return []

        region = cfg.topology.region
        name = f"projects/{self.project}/locations/{region}/persistentResources/{rid}"
        what = f"persistent resource {rid}"
        try:
            from google.cloud import aiplatform_v1

            client = aiplatform_v1.PersistentResourceServiceClient(**client_kwargs(
                vertex.endpoint_for(region, self.api_endpoint), "Vertex AI"))
        except CloudError as exc:
            return [Finding(what, None, f"{what} not checked: {exc}")]
        fix = (f"gcloud ai persistent-resources create --persistent-resource-id={rid} --region={region} "
               f"--project={self.project} --resource-pool-spec=replica-count=1,machine-type=MACHINE")
        return [self._get(what, self._call(client.get_persistent_resource, f"reading persistent resource {name}",
                                           name=name),
                          present=f"persistent resource {rid} exists in {region}",
                          missing=f"persistent resource {rid} does not exist in {region}", fix=fix,
                          permission="aiplatform.persistentResources.get (roles/aiplatform.viewer)")]


# ---- trying it: python -m jobs.cloud.apis.project --project P --config JOB ----------------------------------------------

def line(finding: Finding) -> str:
    """A finding as the console prints it: ``ok:``, ``error:``/``warning:``, or ``not checked:``."""
    if finding.ok is None:
        return f"not checked: {finding.line}"
    if finding.ok:
        return f"ok: {finding.line}"
    return f"{finding.severity}: {finding.line}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.cloud.apis.project",
                                     description="What the project says about a job: quotas, bucket, set-up.")
    parser.add_argument("--project", default="", help="the project id (default: GOOGLE_CLOUD_PROJECT)")
    parser.add_argument("--config", default="local", help="a preset name or a job file")
    parser.add_argument("--region", default="", help="the job's region (default: topology.region)")
    parser.add_argument("--api-endpoint", default="", help="a loopback stand-in of every API (tests)")
    args = parser.parse_args(argv)
    problems = ((preflight.project_problems("--project", args.project) if args.project else [])
                + (preflight.region_problems("--region", args.region) if args.region else []))
    if endpoint_problem(args.api_endpoint):
        problems.append(problem("--api-endpoint", endpoint_problem(args.api_endpoint), ["http://127.0.0.1:PORT"]))
    try:
        cfg = config_lib.load(args.config)
    except ConfigError as exc:
        problems += exc.problems
    if problems:  # by their forms, before any of them is used
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 2
    project = CloudProject.from_environment(args.project or None, args.api_endpoint or None)
    bad = 0
    for option in options(cfg, args.region):
        print(f"== {option}")
        found = [*project.quota(cfg, option), *project.setup(cfg, option)]
        if cfg.output.base_dir.startswith("gs://"):
            found += project.bucket_location(cfg.output.base_dir)[1]
        for f in found:
            print(line(f))
            bad += f.ok is False and f.severity == "error"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
