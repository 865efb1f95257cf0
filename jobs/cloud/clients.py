"""The one place that decides how the job side talks to Google Cloud: endpoint, credentials, errors.

Every cloud API has its own client module (``cloudbuild``, ``gcs``, ``vertex``, ``templates``); each builds
its client with :func:`client_kwargs` / :func:`credentials` from here, and turns what the API answers into
one line with :func:`one_line`.

* ``api_endpoint`` given and on loopback (``http://127.0.0.1:P``, ``http://localhost:P``): a local
  stand-in of the real API (tests): anonymous credentials, REST transport, nothing else is contacted.
* otherwise: Application Default Credentials. None found -> :class:`CloudError` with one line saying how
  to authenticate; never a traceback, never a metadata-server probe that hangs (``NO_GCE_CHECK`` is
  honoured by google-auth; this module adds no probing of its own).
"""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

AUTH_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
             "service-account key file")


class CloudError(Exception):
    """A cloud call that cannot go on; ``str(exc)`` is one line meant for a person."""


def is_local_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return False
    host = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}").hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def credentials(endpoint: str | None = None, what: str = "Google Cloud"):
    """Credentials for a client: anonymous for a loopback stand-in, else Application Default Credentials."""
    if is_local_endpoint(endpoint):
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except DefaultCredentialsError:
        raise CloudError(f"no Google Cloud credentials found for {what}: {AUTH_HINT}") from None
    return creds


def client_kwargs(endpoint: str | None = None, what: str = "Google Cloud") -> dict[str, Any]:
    """``credentials``/``transport``/``client_options`` for a google-cloud-* GAPIC client."""
    kwargs: dict[str, Any] = {"credentials": credentials(endpoint, what)}
    if endpoint:
        kwargs["client_options"] = {"api_endpoint": endpoint}
        kwargs["transport"] = "rest"
    return kwargs


def one_line(exc: BaseException, doing: str) -> str:
    """``doing: <status> <message>`` from a google.api_core / google.auth / requests error, on one line."""
    from google.api_core import exceptions as core

    if isinstance(exc, core.GoogleAPICallError):
        code = getattr(exc, "code", None)
        status = f"{int(code)} " if code is not None else ""
        message = exc.message or str(exc)
        # REST transports prefix Google's message with "POST http://...?$alt=...: "; `doing` says that better.
        message = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", str(message))
    else:
        status, message = "", str(exc) or type(exc).__name__
    message = " ".join(str(message).split())
    if len(message) > 400:
        message = message[:397] + "..."
    return f"{doing}: {status}{message}"
