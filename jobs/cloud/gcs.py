"""Put a local file into Cloud Storage (``gs://bucket/path``): the build context Cloud Build reads.

Cloud Build reads its source from a GCS object, so a build context goes through here first. The real
google-cloud-storage client is used; where it points is decided by :func:`storage_endpoint`:

* ``STORAGE_EMULATOR_HOST`` set (the variable the storage client itself honours): that host;
* else the ``endpoint`` given, when it is a loopback stand-in (``http://127.0.0.1:P``): the same server
  that stands in for the other APIs in tests;
* else Google's endpoint. A non-loopback ``endpoint`` (e.g. a regional Cloud Build endpoint) is never
  reused for storage, because it does not serve the storage API.

Credentials come from :mod:`jobs.cloud.clients` (anonymous for a loopback stand-in, else ADC). Every failure
is a :class:`~jobs.cloud.clients.CloudError` with one line: a missing bucket says so and how to create it.
"""
from __future__ import annotations

import os
from pathlib import Path

from jobs.cloud import clients
from jobs.cloud.clients import CloudError


def parse_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/path`` -> ``("bucket", "some/path")`` (path may be empty); only gs://."""
    from jobs.cloud import preflight

    problems = preflight.gcs_problems("uri", uri, "gs://BUCKET/PATH", path_required=False)
    if problems:
        raise CloudError(problems[0].message)
    bucket, _, path = uri[5:].partition("/")
    return bucket, path.strip("/")


def storage_endpoint(endpoint: str | None = None) -> str | None:
    """The storage API endpoint to use (None = Google's), see the module docstring."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        return emulator if "://" in emulator else f"http://{emulator}"
    return endpoint if clients.is_local_endpoint(endpoint) else None


def storage_client(project: str | None = None, endpoint: str | None = None):
    """A ``google.cloud.storage.Client`` for ``project`` with credentials from :mod:`jobs.cloud.clients`."""
    from google.cloud import storage

    url = storage_endpoint(endpoint)
    kwargs = {"credentials": clients.credentials(url, "Cloud Storage")}
    if url:
        kwargs["client_options"] = {"api_endpoint": url}
    return storage.Client(project=project, **kwargs)


def upload(local: str | Path, uri: str, *, project: str | None = None, endpoint: str | None = None,
           content_type: str = "application/octet-stream", client=None, label: str | None = None) -> str:
    """Upload ``local`` to the object ``uri`` (``gs://bucket/name``); returns ``uri``. ``label`` names the
    file in error lines when ``local`` is a temporary copy.

    Small files go as one multipart request, large ones as a resumable upload (the client decides).
    The client policy of ``jobs.cloud.clients`` applies through the storage client's own ``timeout`` and
    ``retry`` arguments (its predicate knows its transport's errors): transient failures (5xx, 429,
    connection errors) are retried with the policy's backoff and total; that is safe here because the
    callers' object names are content-addressed (a repeat writes the same bytes).
    """
    from google.api_core import exceptions as core
    from google.cloud.storage.retry import DEFAULT_RETRY
    from google.cloud.storage.exceptions import InvalidResponse

    bucket_name, name = parse_uri(uri)
    if not name:
        raise CloudError(f"{uri!r} names a bucket, not an object; expected gs://BUCKET/PATH")
    doing = f"uploading {label or local} to {uri}"
    client = client or storage_client(project, endpoint)
    blob = client.bucket(bucket_name).blob(name)
    p = clients.policy()
    retry = DEFAULT_RETRY.with_timeout(p.total_s).with_delay(initial=p.first_s, maximum=p.max_s, multiplier=2.0)
    try:
        blob.upload_from_filename(str(local), content_type=content_type, retry=retry, timeout=p.timeout)
    except KeyboardInterrupt:
        raise
    except core.RetryError as exc:  # gave up on transient failures: say the last one
        cause = exc.cause or exc
        detail = clients.describe(cause) if clients.failure_kind(cause) else _status_and_message(cause)[1]
        raise CloudError(f"{doing}: gave up after retrying for {p.total_s:g} s: {detail}; the same upload can be "
                         "run again safely") from None
    except (core.GoogleAPICallError, InvalidResponse) as exc:
        status, message = _status_and_message(exc)
        if status == 404:
            raise CloudError(f"{doing}: 404 bucket gs://{bucket_name} does not exist or is not visible to "
                             f"these credentials (create it: gcloud storage buckets create gs://{bucket_name}); "
                             f"{message}") from None
        hint = (f" (the caller needs roles/storage.objectCreator on gs://{bucket_name})"
                if status == 403 else "")
        raise CloudError(f"{doing}: {status or ''} {message}{hint}".replace(":  ", ": ")) from None
    except (ValueError, OSError) as exc:  # an answer that is not JSON, an unreadable file
        raise CloudError(clients.failure_line(exc, doing)) from None
    return uri


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
