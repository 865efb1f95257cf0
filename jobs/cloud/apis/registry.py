"""The Docker Registry HTTP API v2 (Artifact Registry, Docker Hub, any registry), spoken to directly:
"does this tag exist, and which digest is it" without a Docker engine (the Cloud Build backend).

Who gets the Google token (the rule of ``jobs.cloud.apis.clients``, applied to registries): a registry answers
401 with a ``Bearer realm="URL"`` challenge naming where to get a registry token, and that realm may be
on any host (Docker Hub's is auth.docker.io; a hostile registry can name its own). The Google access
token goes to the realm only when the registry itself is a Google host over https and the realm is too
(``may_receive_google_token`` on both): Artifact Registry's realms are on the registry's own host.
Anything else is asked anonymously, and its answer is reported but never taken as proof that the image
exists (:attr:`Answer.trusted` is False): the caller builds anyway.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from jobs.cloud.apis import clients
from jobs.cloud.apis.credentials import is_local_endpoint, may_receive_google_token
from jobs.rules.errors import CloudError
from jobs.rules.image_reference import ImageRef

MANIFEST_TYPES = ("application/vnd.docker.distribution.manifest.v2+json",
                  "application/vnd.docker.distribution.manifest.list.v2+json",
                  "application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Answer:
    """What the registry said about a tag: its digest (None: not there, or we may not look), and whether
    that answer came with the Google token from Google hosts only (the only answer taken as proof)."""

    digest: str | None
    trusted: bool
    why: str = ""
    #: the registry's last HTTP status (200, 401, 403, 404), 0 when it was not asked
    status: int = 0


def registry_url(ref: ImageRef) -> str:
    """``https://HOST/v2/PATH/manifests/REFERENCE`` (plain http only for a loopback registry): the digest when
    ``ref`` is pinned (``sha256:...``: "does this image exist"), else the tag."""
    scheme = "http" if is_local_endpoint(ref.api_host) else "https"
    return f"{scheme}://{ref.api_host}/v2/{ref.path}/manifests/{ref.digest or ref.tag}"


def registry_digest(ref: ImageRef, *, google_token: str | None = None) -> Answer:
    """``HEAD /v2/<path>/manifests/<tag>``: the ``Docker-Content-Digest`` of ``ref``'s tag, and whether to
    trust it. ``google_token``: the caller's access token, sent only as the module doc says."""
    url = registry_url(ref)
    google_registry = may_receive_google_token(url)
    doing = f"asking registry {ref.registry} whether {ref.path}{'@' + ref.digest if ref.digest else ':' + str(ref.tag)} exists"
    headers = {"Accept": ", ".join(MANIFEST_TYPES)}
    answer = clients.http("HEAD", url, headers=headers, doing=doing,
                          google_token=google_token if google_registry else None)
    trusted, why = google_registry and bool(google_token), "" if google_registry else f"{ref.registry} is not a Google registry"
    challenge = answer.headers.get("WWW-Authenticate", "")
    if answer.status_code == 401 and challenge.lower().startswith("bearer "):
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.get("realm", "")
        with_token = google_registry and may_receive_google_token(realm)
        if not with_token:
            trusted = False
            why = why or f"its token realm {realm or '(none)'} is not a Google host over https"
        if not realm.startswith(("https://", "http://")):
            return Answer(None, False, f"{ref.registry} names no usable token realm ({realm or 'none'})", 401)
        grant = clients.http("GET", realm, doing=f"getting a registry token from {realm}",
                             params={k: v for k, v in params.items() if k in ("service", "scope")},
                             google_token=google_token if with_token else None, token_as="basic")
        token = _grant_token(grant)
        if token is None:
            return Answer(None, False, f"the token realm {realm} answered HTTP {grant.status_code}",
                          grant.status_code if grant.status_code in (401, 403) else 401)
        answer = clients.http("HEAD", url, headers={**headers, "Authorization": f"Bearer {token}"}, doing=doing)
    if answer.status_code == 200:
        digest = answer.headers.get("Docker-Content-Digest", "")
        if not _DIGEST.match(digest):
            return Answer(None, False, f"{ref.registry} answered 200 without a sha256 digest", 200)
        return Answer(digest, trusted, why, 200)
    if answer.status_code in (401, 403, 404):
        return Answer(None, trusted, why or f"HTTP {answer.status_code}", answer.status_code)
    raise CloudError(f"{doing}: registry answered HTTP {answer.status_code}")


def _grant_token(grant) -> str | None:
    if not grant.ok:
        return None
    try:
        body = grant.json()
        token = body.get("token") or body.get("access_token")
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) and token else None
