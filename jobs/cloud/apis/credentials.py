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

**A refresh refused.** Every credentials object this module hands out refreshes through :func:`_guarded`: a token
endpoint that refuses the refresh (``400 invalid_grant``: a revoked, deleted or expired key; a user login that
expired) is one CloudError line naming the credential's source and how to renew it (:func:`refresh_refused`),
wherever the credentials are used (the plan's bucket check, a Vertex call, ``upload-template``...): never a
``RefreshError`` traceback. A token endpoint that cannot be reached is a connection failure, retried and said by
the client policy as any other.

**Endpoints by their form.** :func:`endpoint_problem`: an ``--api-endpoint`` is ``host[:port]`` or
``http(s)://host[:port]``, a host name or an IP address (``[::1]`` in brackets), checked before anything uses it.
"""
from __future__ import annotations

import functools
import json
import os
import re
from typing import Any
from urllib.parse import urlsplit

from jobs.cloud.apis import lines
from jobs.cloud.apis.policy import policy
from jobs.rules.errors import CloudError


AUTH_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
             "service-account key file")


GOOGLE_SUFFIXES = (".googleapis.com", ".pkg.dev", ".gcr.io")


GOOGLE_HOSTS = ("gcr.io",)


SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


_HOST_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")


def endpoint_problem(endpoint: str | None) -> str | None:
    """Why ``endpoint`` is not an API endpoint (``host[:port]`` or ``http(s)://host[:port][/path]``, no user info,
    query or fragment), or None. The one form check of an ``--api-endpoint`` / ``--logging-endpoint``."""
    if not endpoint:
        return None
    try:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        port = parts.port
    except ValueError as exc:  # 'http://[::1' (an unclosed IPv6 bracket), a port that is not a number
        return f"{endpoint[:200]!r} is not an endpoint ({exc}); the form: https://HOST[:PORT] or http://127.0.0.1:PORT"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    host = netloc.rsplit(":", 1)[0] if port is not None or netloc.endswith(":") else netloc
    if (parts.scheme not in ("http", "https") or parts.username or parts.password or parts.query or parts.fragment
            or any(c.isspace() for c in parts.path) or not _HOST_RE.fullmatch(host or "")):
        return f"{endpoint[:200]!r} is not an endpoint; the form: https://HOST[:PORT] or http://127.0.0.1:PORT"
    return None


def is_local_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return False
    try:
        host = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}").hostname or ""
    except ValueError:  # not an endpoint at all (endpoint_problem says why): not a loopback one
        return False
    return host in ("localhost", "::1") or host.startswith("127.")


def is_google_host(host: str) -> bool:
    host = (host or "").lower()
    return bool(re.fullmatch(r"[a-z0-9.-]+", host)) and (host in GOOGLE_HOSTS or host.endswith(GOOGLE_SUFFIXES))


def may_receive_google_token(url: str) -> bool:
    """True only for ``https://`` URLs on a Google host (default port, no user info): the one rule for
    where a Google access token may be sent."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # not a URL (an unclosed IPv6 bracket, a port that is no number): no token
        return False
    return (parts.scheme == "https" and port in (None, 443) and parts.username is None
            and parts.password is None and is_google_host(parts.hostname or ""))


def _endpoint_url(endpoint: str) -> str:
    return endpoint if "://" in endpoint else f"https://{endpoint}"  # GAPIC's REST default scheme


def credentials(endpoint: str | None = None, what: str = "Google Cloud"):
    """Anonymous credentials for a loopback stand-in; else Application Default Credentials, only for an
    endpoint that may receive the Google token (None = the API's own Google endpoint)."""
    if endpoint_problem(endpoint):
        raise CloudError(f"{what} endpoint: {endpoint_problem(endpoint)}")
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
    return _guarded(creds, what)


def _guarded(creds, what: str):
    """``creds`` whose refresh, refused by the token endpoint, is one CloudError line (:func:`refresh_refused`).
    The instance's class becomes a subclass with that refresh: copies a client makes (``with_scopes``,
    ``with_quota_project``: ``self.__class__(...)``) keep it."""
    from google.auth.exceptions import RefreshError

    base = type(creds)
    if getattr(base, "vtp_guarded", False):
        return creds

    def refresh(self, request):
        try:
            return base.refresh(self, request)
        except RefreshError as exc:
            if exc.retryable:  # a 5xx of the token endpoint: the policy's to retry and say
                raise
            raise CloudError(refresh_refused(exc, self, what)) from None

    try:
        creds.__class__ = type(base.__name__, (base,), {"refresh": refresh, "vtp_guarded": True,
                                                        "__module__": base.__module__})
    except TypeError:  # a class whose instances cannot change class: used as it is
        pass
    return creds


def credential_source(creds: Any = None) -> tuple[str, str]:
    """(where the credentials came from, how to renew them), for a line; never a secret."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    kind = type(creds).__module__ if creds is not None else ""
    if "service_account" in kind:
        key = f"the service-account key GOOGLE_APPLICATION_CREDENTIALS={path}" if path else "a service-account key"
        email = getattr(creds, "service_account_email", None)
        return (key + (f" ({email})" if email else ""),
                "create a new key (gcloud iam service-accounts keys create KEY.json --iam-account="
                f"{email or 'EMAIL'}) and point GOOGLE_APPLICATION_CREDENTIALS at it, or unset it and run "
                "`gcloud auth application-default login`")
    if "compute_engine" in kind:
        return "this machine's service account (the metadata server)", "check the VM's service account and scopes"
    if path:
        return f"GOOGLE_APPLICATION_CREDENTIALS={path}", "renew that file, or unset it and run `gcloud auth " \
                                                         "application-default login`"
    return "the Application Default Credentials of `gcloud auth application-default login`", \
        "run `gcloud auth application-default login` again"


def refresh_refused(exc: Exception, creds: Any, what: str) -> str:
    """The one line for a refresh the token endpoint refused: its error (``invalid_grant: ...``), the credential's
    source and how to renew it."""
    info = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], dict) else {}
    error = " ".join(str(info.get("error") or "").split())[:60]
    description = " ".join(str(info.get("error_description") or "").split())[:160]
    said = ": ".join(x for x in (error, description) if x) or " ".join(str(exc.args[0] if exc.args else exc).split())[:200]
    source, renew = credential_source(creds)
    return (f"the credentials for {what} were refused by Google's token endpoint ({said}): {source} is revoked, "
            f"disabled or expired; {renew}")


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
    except CloudError:  # a refresh refused: already the one line (_guarded)
        raise
    except Exception as exc:  # google.auth RefreshError / TransportError
        raise CloudError(lines.failure_line(exc, f"getting a Google access token for {what}")) from None
    return creds.token
