"""Where the job side's Google credentials come from and where the Google token may go: the one place for
credentials (endpoints, the token host rule, Application Default Credentials, a GAPIC client's arguments).

**Credentials.** ``api_endpoint`` on loopback (``http://127.0.0.1:P``, ``http://localhost:P``): a local
stand-in of the real API (tests): anonymous credentials, nothing else is contacted. Otherwise Application
Default Credentials; none found, or a broken ``GOOGLE_APPLICATION_CREDENTIALS`` file, is one line saying
which file and why. The Google token goes only where :func:`may_receive_google_token` says: over https, to
a Google host (``*.googleapis.com``, ``*.pkg.dev``, ``gcr.io``, ``*.gcr.io``). A non-loopback endpoint that
is not such a host is refused before any credentials are loaded; :func:`http` attaches the token only to
such URLs and follows redirects itself so it never travels to another host. The decision is made on the
real scheme and host name (tests reach Google host names through a TLS proxy on 127.0.0.1, never through a
hook in this code).
"""
from __future__ import annotations

import functools
import json
import os
import re
from typing import Any
from urllib.parse import urlsplit

from jobs.cloud import lines
from jobs.cloud.policy import policy
from jobs.spec.errors import CloudError


AUTH_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
             "service-account key file")


GOOGLE_SUFFIXES = (".googleapis.com", ".pkg.dev", ".gcr.io")


GOOGLE_HOSTS = ("gcr.io",)


SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def is_local_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return False
    host = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}").hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def is_google_host(host: str) -> bool:
    host = (host or "").lower()
    return bool(re.fullmatch(r"[a-z0-9.-]+", host)) and (host in GOOGLE_HOSTS or host.endswith(GOOGLE_SUFFIXES))


def may_receive_google_token(url: str) -> bool:
    """True only for ``https://`` URLs on a Google host (default port, no user info): the one rule for
    where a Google access token may be sent."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return False
    return (parts.scheme == "https" and port in (None, 443) and parts.username is None
            and parts.password is None and is_google_host(parts.hostname or ""))


def _endpoint_url(endpoint: str) -> str:
    return endpoint if "://" in endpoint else f"https://{endpoint}"  # GAPIC's REST default scheme


def credentials(endpoint: str | None = None, what: str = "Google Cloud"):
    """Anonymous credentials for a loopback stand-in; else Application Default Credentials, only for an
    endpoint that may receive the Google token (None = the API's own Google endpoint)."""
    if is_local_endpoint(endpoint):
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    if endpoint and not may_receive_google_token(_endpoint_url(endpoint)):
        raise CloudError(f"{what} endpoint {endpoint!r} is not a Google host over https (*.googleapis.com, "
                         "*.pkg.dev, gcr.io, *.gcr.io): the Google token is sent nowhere else; leave the "
                         "endpoint out, or give a loopback stand-in such as http://127.0.0.1:PORT")
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        creds, _ = google.auth.default(scopes=SCOPES)
    except DefaultCredentialsError as exc:
        raise CloudError(_credentials_problem(exc, what)) from None
    return creds


def _credentials_problem(exc: Exception, what: str) -> str:
    """Which credentials file is broken and why (never its contents), or that none was found."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        if not os.path.exists(path):
            why = "no such file"
        elif os.path.isdir(path):
            why = "it is a folder, not a key file"
        else:
            try:
                with open(path, encoding="utf-8") as f:
                    doc = json.load(f)
                kind = doc.get("type") if isinstance(doc, dict) else None
                why = (f"google-auth cannot use it (type {kind!r}: {_first_sentence(exc)})" if kind
                       else "it is JSON without a 'type' (a service-account key or authorized_user file has one)")
            except OSError as err:
                why = f"it cannot be read ({err.strerror})"
            except (ValueError, UnicodeDecodeError):
                why = "it is not JSON (a service-account key file is)"
        return (f"the credentials for {what} in GOOGLE_APPLICATION_CREDENTIALS={path} cannot be used: {why}; "
                "fix or unset it, or run `gcloud auth application-default login`")
    message = _first_sentence(exc)
    if "not found" in message.lower() and "default credentials" in message.lower():
        return f"no Google Cloud credentials found for {what}: {AUTH_HINT}"
    return f"the Application Default Credentials for {what} cannot be used: {message}; {AUTH_HINT}"


def _first_sentence(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text.split(". ")[0] if ". " in text else text)[:300]


def client_kwargs(endpoint: str | None = None, what: str = "Google Cloud") -> dict[str, Any]:
    """``credentials``/``transport``/``client_options`` for a google-cloud-* GAPIC client (REST transport:
    the policy's connect and read timeouts apply to it, and the stand-ins speak the same transport)."""
    kwargs: dict[str, Any] = {"credentials": credentials(endpoint, what), "transport": "rest"}
    if endpoint:
        kwargs["client_options"] = {"api_endpoint": endpoint}
    return kwargs


def access_token(what: str) -> str:
    """A fresh Application Default Credentials access token (the refresh is bounded by the policy)."""
    import google.auth.transport.requests

    creds = credentials(None, what)
    request = functools.partial(google.auth.transport.requests.Request(), timeout=policy().timeout)
    try:
        creds.refresh(request)
    except Exception as exc:  # google.auth RefreshError / TransportError
        raise CloudError(lines.failure_line(exc, f"getting a Google access token for {what}")) from None
    return creds.token
