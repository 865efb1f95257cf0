"""The one place that decides how the job side talks to Google Cloud: endpoints, credentials, the client
policy (timeouts, retries), the one-line errors and what Ctrl-C says.

Every cloud module (``cloudbuild``, ``gcs``, ``registry``, ``templates``, ``vertex``, ``custom_job``,
``docker_engine``) builds its client and makes its calls through here.

**Credentials.** ``api_endpoint`` on loopback (``http://127.0.0.1:P``, ``http://localhost:P``): a local
stand-in of the real API (tests): anonymous credentials, nothing else is contacted. Otherwise Application
Default Credentials; none found, or a broken ``GOOGLE_APPLICATION_CREDENTIALS`` file, is one line saying
which file and why. The Google token goes only where :func:`may_receive_google_token` says: over https, to
a Google host (``*.googleapis.com``, ``*.pkg.dev``, ``gcr.io``, ``*.gcr.io``). A non-loopback endpoint that
is not such a host is refused before any credentials are loaded; :func:`http` attaches the token only to
such URLs and follows redirects itself so it never travels to another host. The decision is made on the
real scheme and host name (tests reach Google host names through a TLS proxy on 127.0.0.1, never through a
hook in this code).

**Policy** (:class:`Policy`, read from the environment by :func:`policy`, the one env reader):

* every call has a connect and a read timeout (``VTP_CLOUD_CONNECT_TIMEOUT_S`` 10, ``VTP_CLOUD_READ_TIMEOUT_S``
  60); GAPIC clients use the REST transport so that both apply (gRPC has one deadline per call);
* retries with exponential backoff and full jitter (google-api-core's ``Retry``: first delay
  ``VTP_CLOUD_RETRY_FIRST_S`` 1, doubling up to ``VTP_CLOUD_RETRY_MAX_S`` 30) for at most
  ``VTP_CLOUD_RETRY_TOTAL_S`` (300) seconds per call;
* what is retried (:data:`READ`, :data:`CREATE_OWN_ID`, :data:`CREATE_SERVER_ID`): reads, and creates whose
  id the client chose (a pipeline job's ``pipelineJobId``, an object at a content-addressed name, a
  template of the same bytes: a repeat either succeeds or answers "already exists"), on 429, 5xx, a dropped
  connection, no answer in time, or no connection at all. Creates whose id the server assigns (Cloud Build
  builds, CustomJobs, model uploads) are retried only when the failure proves nothing was created (429,
  or no connection was made): after a 5xx or a connection dropped once the request was sent, a repeat
  could run the work twice, so the one line says what may exist and the command that lists it;
* long-running resources are polled at most every ``VTP_CLOUD_POLL_S`` (20) seconds.

Each give-up is one :class:`CloudError` line: the service and resource, what happened, what to do.
"""
from __future__ import annotations

import functools
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urljoin, urlsplit

AUTH_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
             "service-account key file")
GOOGLE_SUFFIXES = (".googleapis.com", ".pkg.dev", ".gcr.io")
GOOGLE_HOSTS = ("gcr.io",)
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]

READ, CREATE_OWN_ID, CREATE_SERVER_ID = "read", "create-own-id", "create-server-id"


class CloudError(Exception):
    """A cloud call that cannot go on; ``str(exc)`` is one line meant for a person."""


# --------------------------------------------------------------------------------------------------
# Where the Google token may go


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
        raise CloudError(failure_line(exc, f"getting a Google access token for {what}")) from None
    return creds.token


# --------------------------------------------------------------------------------------------------
# The policy


@dataclass(frozen=True)
class Policy:
    connect_s: float = 10.0
    read_s: float = 60.0
    total_s: float = 300.0
    first_s: float = 1.0
    max_s: float = 30.0
    poll_s: float = 20.0

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` as ``requests`` takes it."""
        return self.connect_s, self.read_s


#: the policy's environment variables -> Policy field (README "Credentials, timeouts, retries")
POLICY_ENV = {"VTP_CLOUD_CONNECT_TIMEOUT_S": "connect_s", "VTP_CLOUD_READ_TIMEOUT_S": "read_s",
              "VTP_CLOUD_RETRY_TOTAL_S": "total_s", "VTP_CLOUD_RETRY_FIRST_S": "first_s",
              "VTP_CLOUD_RETRY_MAX_S": "max_s", "VTP_CLOUD_POLL_S": "poll_s"}


def policy() -> Policy:
    """The policy from the environment (production defaults when unset); a bad value is one line."""
    values = {}
    for variable, field in POLICY_ENV.items():
        raw = os.environ.get(variable)
        if raw is None or raw == "":
            continue
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not value > 0 or value != value or value == float("inf"):
            raise CloudError(f"{variable}={raw!r}: expected a number of seconds > 0, e.g. "
                             f"{getattr(Policy, field):g}")
        values[field] = value
    return Policy(**values)


class _Status(Exception):
    """An HTTP answer that the policy may retry (429, 5xx), raised inside :func:`http`."""

    def __init__(self, response):
        super().__init__(f"{response.status_code} {http_message(response)}")
        self.response = response
        self.code = response.status_code


_RETRY_STATUS = {429, 500, 502, 503, 504}


def failure_kind(exc: BaseException) -> str | None:
    """``throttled`` (429) / ``server`` (5xx) / ``unreached`` (no connection made: nothing was sent) /
    ``dropped`` (connection lost after sending) / ``timeout`` (no answer in time), or None: not transient."""
    import requests
    from google.api_core import exceptions as core

    code = getattr(exc, "code", None) if isinstance(exc, (core.GoogleAPICallError, _Status)) else None
    code = code if code is not None else getattr(exc, "status_code", None)  # docker.errors.APIError
    if isinstance(code, int) and code in _RETRY_STATUS:
        return "throttled" if code == 429 else "server"
    if isinstance(exc, core.GoogleAPICallError) and type(exc).__name__ in ("TooManyRequests", "ResourceExhausted"):
        return "throttled"
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return "unreached"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return "timeout"
    if isinstance(exc, requests.exceptions.ConnectionError):
        text = repr(exc)
        unreached = ("NewConnectionError", "NameResolutionError", "Connection refused", "No such file")
        return "unreached" if any(t in text for t in unreached) else "dropped"
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "dropped"
    from google.auth.exceptions import TransportError

    if isinstance(exc, TransportError):
        return failure_kind(exc.__cause__ or exc.__context__) if (exc.__cause__ or exc.__context__) else "dropped"
    return None


def retry(kind: str = READ):
    """google-api-core's ``Retry`` for a call of ``kind`` under the current policy (see the module doc)."""
    from google.api_core.retry import Retry

    p = policy()
    if kind == CREATE_SERVER_ID:
        def predicate(exc):
            return failure_kind(exc) in ("throttled", "unreached")
    else:
        def predicate(exc):
            return failure_kind(exc) is not None
    return Retry(predicate=predicate, initial=p.first_s, maximum=p.max_s, multiplier=2.0, timeout=p.total_s)


class ConnectReadTimeout:
    """google-api-core's timeout protocol (a decorator that sets each attempt's ``timeout`` argument)
    handing the REST transport's ``requests`` call the policy's ``(connect, read)`` pair; a plain number
    would be one value for both."""

    def __init__(self, p: Policy | None = None):
        self.value = (p or policy()).timeout

    def __call__(self, func):
        @functools.wraps(func)
        def with_timeout(*args, **kwargs):
            kwargs["timeout"] = self.value
            return func(*args, **kwargs)
        return with_timeout


def call(method: Callable, *args, kind: str = READ, doing: str, unsure: str = "",
         hints: dict[int, str] | None = None, **kwargs):
    """``method(*args, **kwargs)`` (a GAPIC client method) under the policy; any failure -> CloudError.
    ``unsure``: appended when the outcome is unknown (gave up on transient failures, or a garbage answer),
    e.g. "the job may still be running: ..."; ``hints``: appended for an HTTP status (403: which role)."""
    try:
        return method(*args, retry=retry(kind), timeout=ConnectReadTimeout(), **kwargs)
    except (KeyboardInterrupt, CloudError):
        raise
    except Exception as exc:  # google.api_core / google.auth / requests / protobuf parse errors
        code = getattr(exc, "code", None)
        hint = (hints or {}).get(code) if isinstance(code, int) else None
        raise CloudError(failure_line(exc, doing, unsure) + (f" ({hint})" if hint else "")) from None


def http(method: str, url: str, *, kind: str = READ, doing: str, unsure: str = "", google_token: str | None = None,
         token_as: str = "bearer", max_redirects: int = 5, **kwargs):
    """One ``requests`` call under the policy: timeouts, retries of 429/5xx and connection failures, and
    the Google token attached only where :func:`may_receive_google_token` allows (``token_as``: ``bearer``
    or ``basic``, the registries' ``oauth2accesstoken:<token>``); elsewhere the request goes anonymously.
    Redirects are followed here, so the token is re-attached only to an allowed host. Returns the last
    response (any status other than 429/5xx); a give-up is one CloudError line."""
    import requests

    headers = dict(kwargs.pop("headers", None) or {})

    def attempt():
        target, own = url, dict(headers)
        for _ in range(max_redirects + 1):
            sent = dict(own)
            auth = None
            if google_token and may_receive_google_token(target):
                if token_as == "basic":
                    auth = ("oauth2accesstoken", google_token)
                else:
                    sent["Authorization"] = f"Bearer {google_token}"
            response = requests.request(method, target, headers=sent, auth=auth, timeout=policy().timeout,
                                        allow_redirects=False, **kwargs)
            if response.is_redirect and response.headers.get("Location"):
                moved = urljoin(target, response.headers["Location"])
                if urlsplit(moved).netloc != urlsplit(target).netloc:  # no caller credentials to another host
                    own.pop("Authorization", None)
                target = moved
                continue
            if response.status_code in _RETRY_STATUS:
                raise _Status(response)
            return response
        raise CloudError(f"{doing}: more than {max_redirects} redirects")

    try:
        return retry(kind)(attempt)()
    except (KeyboardInterrupt, CloudError):
        raise
    except Exception as exc:
        raise CloudError(failure_line(exc, doing, unsure)) from None


def http_message(response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except Exception:
        text = " ".join((response.text or response.reason or "").split())
        return text if not text.lstrip().startswith("<") else "(an HTML page, not the API's answer)"


# --------------------------------------------------------------------------------------------------
# One line per failure


def _host_of(exc: BaseException) -> str:
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None) or ""
    return urlsplit(url).netloc if url else "the server"


def describe(exc: BaseException) -> str:
    """What went wrong, in a few words, from any error a cloud call raises."""
    from google.api_core import exceptions as core
    from google.protobuf.json_format import ParseError

    if isinstance(exc, core.RetryError):
        p = policy()
        cause = exc.cause if exc.cause is not None else exc
        return f"gave up after retrying for {p.total_s:g} s: {describe(cause)}"
    kind = failure_kind(exc)
    if kind == "unreached":
        return f"cannot connect to {_host_of(exc)} (no connection within {policy().connect_s:g} s, or refused)"
    if kind == "dropped":
        return f"the connection to {_host_of(exc)} dropped before an answer came"
    if kind == "timeout":
        return f"no answer from {_host_of(exc)} within {policy().read_s:g} s"
    if isinstance(exc, (ParseError, json.JSONDecodeError)) or (
            isinstance(exc, ValueError) and "JSON" in str(exc)):
        return "the answer was not the API's JSON (an HTML page or garbage: a proxy in the way, or a wrong endpoint?)"
    if isinstance(exc, core.GoogleAPICallError):
        code = getattr(exc, "code", None)
        message = exc.message or str(exc)
        # REST transports prefix Google's message with "POST http://...?$alt=...: "; `doing` says that better.
        message = re.sub(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ", "", str(message))
        if message.lstrip().startswith("<"):
            message = "(an HTML page, not the API's answer)"
        return f"{int(code)} {message}" if code is not None else message
    return str(exc) or type(exc).__name__


def is_unsure(exc: BaseException) -> bool:
    """The outcome is unknown: gave up on transient failures, or an answer that is not the API's."""
    from google.api_core import exceptions as core
    from google.protobuf.json_format import ParseError

    if isinstance(exc, core.RetryError):
        return True
    return failure_kind(exc) is not None or isinstance(exc, (ParseError, json.JSONDecodeError))


def failure_line(exc: BaseException, doing: str, unsure: str = "") -> str:
    """``doing: what happened[; unsure]`` on one line, at most ~600 characters."""
    message = " ".join(describe(exc).split())
    if len(message) > 400:
        message = message[:397] + "..."
    tail = f"; {unsure}" if unsure and is_unsure(exc) else ""
    return f"{doing}: {message}{tail}"


def one_line(exc: BaseException, doing: str) -> str:
    """``doing: <status> <message>`` (kept for callers that add their own hints)."""
    return failure_line(exc, doing)


# --------------------------------------------------------------------------------------------------
# Ctrl-C and the end of a command

#: what this process started in the cloud and keeps running without it: resource -> how to see/cancel it
_RUNNING: dict[str, str] = {}


def keeps_running(resource: str, how: str) -> None:
    _RUNNING[resource] = how


def ended(resource: str) -> None:
    _RUNNING.pop(resource, None)


def interrupted_line() -> str:
    if not _RUNNING:
        return "interrupted (Ctrl-C); nothing was left running in the cloud"
    return "interrupted (Ctrl-C): " + "; ".join(f"{r} keeps running ({how})" for r, how in _RUNNING.items())


def run_command(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run a cloud command: a CloudError that escaped is one ``error:`` line (exit 1); Ctrl-C anywhere is
    one line naming what keeps running in the cloud (exit 130)."""
    _RUNNING.clear()
    try:
        policy()  # a bad VTP_CLOUD_* value is bad input: said before anything is done
    except CloudError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        return main(argv)
    except KeyboardInterrupt:
        print(interrupted_line(), file=sys.stderr, flush=True)
        return 130
    except CloudError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
