"""Put a local file into Cloud Storage (``gs://bucket/path``): the build context Cloud Build reads.

Cloud Build reads its source from a GCS object, so a build context goes through here first. The real
google-cloud-storage client is used; where it points is decided by :func:`storage_endpoint`:

* ``STORAGE_EMULATOR_HOST`` set (the variable the storage client itself honours): that host;
* else the ``endpoint`` given, when it is a loopback stand-in (``http://127.0.0.1:P``): the same server
  that stands in for the other APIs in tests;
* else Google's endpoint. A non-loopback ``endpoint`` (e.g. a regional Cloud Build endpoint) is never
  reused for storage, because it does not serve the storage API.

Credentials come from :mod:`jobs.cloud.apis.clients` (anonymous for a loopback stand-in, else ADC). Every failure
is a :class:`~jobs.rules.errors.CloudError` with one line: a missing bucket says so and how to create it.
"""
from __future__ import annotations

import os
from pathlib import Path

from jobs.cloud.apis import clients
from jobs.rules import preflight
from jobs.cloud.apis.policy import CREATE_OWN_ID, READ, policy
from jobs.cloud.apis.lines import describe, failure_kind, failure_line, seconds
from jobs.cloud.apis.credentials import credentials, is_local_endpoint
from jobs.rules.errors import CloudError


def parse_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/path`` -> ``("bucket", "some/path")`` (path may be empty); only gs://."""
    problems = preflight.gcs_problems("uri", uri, f"gs://{preflight.BUCKET_FORM}/<path>", path_required=False)
    if problems:
        raise CloudError(problems[0].message)
    bucket, _, path = uri[5:].partition("/")
    return bucket, path.strip("/")


def storage_endpoint(endpoint: str | None = None) -> str | None:
    """The storage API endpoint to use (None = Google's), see the module docstring."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        return emulator if "://" in emulator else f"http://{emulator}"
    return endpoint if is_local_endpoint(endpoint) else None


def storage_client(project: str | None = None, endpoint: str | None = None):
    """A ``google.cloud.storage.Client`` for ``project`` with credentials from :mod:`jobs.cloud.apis.clients`."""
    from google.cloud import storage

    url = storage_endpoint(endpoint)
    kwargs = {"credentials": credentials(url, "Cloud Storage")}
    if url:
        kwargs["client_options"] = {"api_endpoint": url}
    return storage.Client(project=project, **kwargs)


def upload(local: str | Path, uri: str, *, project: str | None = None, endpoint: str | None = None,
           content_type: str = "application/octet-stream", client=None, label: str | None = None) -> str:
    """Upload ``local`` to the object ``uri`` (``gs://bucket/name``); returns ``uri``. ``label`` names the
    file in error lines when ``local`` is a temporary copy.

    Small files go as one multipart request, large ones as a resumable upload (the client decides).
    The client policy of ``jobs.cloud.apis.clients`` applies through :func:`clients.retried`: each attempt is a
    whole upload with the storage client's own retry off and its ``timeout`` capped by the budget left,
    and each repeat of a transient failure (5xx, 429, connection errors) is one line on stderr. Repeating is
    safe here because the callers' object names are content-addressed (a repeat writes the same bytes); a
    resumable upload interrupted mid-way starts again from its first byte (build contexts are small).
    """
    bucket_name, name = parse_uri(uri)
    if not name:
        raise CloudError(f"{uri!r} names a bucket, not an object; expected gs://BUCKET/PATH")
    doing = f"uploading {label or local} to {uri}"
    client = client or storage_client(project, endpoint)
    blob = client.bucket(bucket_name).blob(name)

    def attempt(timeout):
        blob.upload_from_filename(str(local), content_type=content_type, retry=None, timeout=timeout)

    def missing(message: str) -> CloudError:
        return CloudError(f"{doing}: 404 bucket gs://{bucket_name} does not exist or is not visible to these "
                          f"credentials (create it: gcloud storage buckets create gs://{bucket_name}); {message}")

    try:
        _storage_call(attempt, kind=CREATE_OWN_ID, doing=doing, missing=missing,
                      gave_up="; the same upload can be run again safely",
                      forbidden=f"the caller needs roles/storage.objectCreator on gs://{bucket_name}")
    except (ValueError, OSError) as exc:  # an answer that is not JSON, an unreadable file
        raise CloudError(failure_line(exc, doing)) from None
    return uri


def _storage_call(attempt, *, kind: str, doing: str, missing, forbidden: str, gave_up: str = ""):
    """``attempt(timeout)`` (a storage client call with its own retry off) under the client policy
    (:func:`clients.retried`); a give-up, a 404 (``missing(message)``: the error to raise), a 403 (``forbidden``:
    what the caller needs) or another API error is one CloudError line."""
    from google.api_core import exceptions as core
    from google.cloud.storage.exceptions import InvalidResponse

    p = policy()
    try:
        return clients.retried(attempt, kind=kind, doing=doing, service="Cloud Storage", what=_detail, p=p)
    except KeyboardInterrupt:
        raise
    except core.RetryError as exc:  # gave up on transient failures: say the last one
        raise CloudError(f"{doing}: gave up after retrying for {seconds(p.total_s)} s: "
                         f"{_detail(exc.cause or exc)}{gave_up}") from None
    except (core.GoogleAPICallError, InvalidResponse) as exc:
        status, message = _status_and_message(exc)
        if status == 404:
            raise missing(message) from None
        hint = f" ({forbidden})" if status == 403 else ""
        raise CloudError(f"{doing}: {status or ''} {message}{hint}".replace(":  ", ": ")) from None


def _detail(exc: BaseException) -> str:
    """A transient failure in a few words: the policy's wording for connection faults, else the status and
    Google's message (not the storage client's whole exception text)."""
    kind = failure_kind(exc)
    if kind not in ("throttled", "server"):
        return describe(exc)
    status, message = _status_and_message(exc)
    return f"{status} {message}" if status else message


def _status_and_message(exc: BaseException) -> tuple[int | None, str]:
    """The HTTP status and Google's own error message, from the response the storage client kept.

    The storage client's exception text is ``POST <url>: <whole JSON body>: (<tuple>)``; the person needs
    only the status and ``error.message``.
    """
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None) or getattr(exc, "code", None)
    try:
        message = response.json()["error"]["message"]
    except Exception:  # no response, or not Google's JSON error shape
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    message = " ".join(str(message).split())
    return (int(status) if status else None), (message[:397] + "..." if len(message) > 400 else message)


def bucket_location(uri: str, *, project: str | None = None, endpoint: str | None = None, client=None) -> str:
    """The location of ``uri``'s bucket as Cloud Storage names it (``US-CENTRAL1``, ``US``, ``EU``...): one
    ``GET /storage/v1/b/BUCKET`` (``Client.get_bucket``) under the client policy. A missing bucket is
    :class:`BucketMissing` (the caller names the command that creates it in the job's region); a 403 (the caller
    needs ``storage.buckets.get``), a give-up or an answer that is not the API's is one CloudError line."""
    bucket_name, _ = parse_uri(uri)
    doing = f"reading the location of bucket gs://{bucket_name}"
    client = client or storage_client(project, endpoint)

    def attempt(timeout):
        return client.get_bucket(bucket_name, timeout=timeout, retry=None)

    try:
        bucket = _storage_call(attempt, kind=READ, doing=doing,
                               missing=lambda message: BucketMissing(f"{doing}: bucket gs://{bucket_name} does not exist"),
                               forbidden=f"the caller needs storage.buckets.get on gs://{bucket_name}")
    except ValueError as exc:  # an answer that is not JSON
        raise CloudError(failure_line(exc, doing)) from None
    location = str(getattr(bucket, "location", "") or "")
    if not location:
        raise CloudError(f"{doing}: the answer names no location (not the Cloud Storage API's bucket resource?)")
    return location


class BucketMissing(CloudError):
    """The bucket does not exist (404), as distinct from a bucket that could not be read."""
