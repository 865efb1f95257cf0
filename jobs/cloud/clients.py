"""The one place that decides how the job side talks to Google Cloud: endpoints, credentials, the client
policy (timeouts, retries), the one-line errors and what Ctrl-C says.

Every cloud module (``cloudbuild``, ``gcs``, ``templates``, ``vertex``, ``custom_job``, ``tuning_job``, and
``jobs.images.registry``/``jobs.images.docker``) builds its client and makes its calls through here.

Why one module of ~600 lines: where a token may go, how long a call may take and how often it is tried,
and what its failure says are one decision every cloud call passes through together; split, a call could
take one part without the others.

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

* every attempt has a connect and a read timeout (``VTP_CLOUD_CONNECT_TIMEOUT_S`` 10,
  ``VTP_CLOUD_READ_TIMEOUT_S`` 10), each capped by what is left of the call's budget, so no attempt runs
  past it; GAPIC clients use the REST transport so that both apply (gRPC has one deadline per call);
* retries with exponential backoff and full jitter (google-api-core's ``exponential_sleep_generator``:
  first delay ``VTP_CLOUD_RETRY_FIRST_S`` 1, doubling up to ``VTP_CLOUD_RETRY_MAX_S`` 30) within a budget of
  ``VTP_CLOUD_RETRY_TOTAL_S`` (120) seconds per call, attempts included (:func:`retried`);
* every retry is one ``warning:`` line on stderr the moment the failure is seen: the service, what was being
  done, what failed, the delay before the next try, when it gives up (:func:`retry_line`). The first
  failure of any kind is seen within 10 s (refused, 429, 5xx at once; silence at the read timeout; no
  connection at the connect timeout, per address tried), so nothing waits in silence longer than that
  (name resolution is the system resolver's and is not bounded here);
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
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urljoin, urlsplit

from jobs.errors import CloudError

AUTH_HINT = ("run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
             "service-account key file")
GOOGLE_SUFFIXES = (".googleapis.com", ".pkg.dev", ".gcr.io")
GOOGLE_HOSTS = ("gcr.io",)
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]

READ, CREATE_OWN_ID, CREATE_SERVER_ID = "read", "create-own-id", "create-server-id"




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
    """The client policy (module docstring). ``read_s`` defaults to 10 s, below the 15 s by which a person
    must see a first line whatever the fault: a silent endpoint is then reported at 10 s, a refused or
    throttled call at once. The APIs we call answer in about a second (a create returns the job or an
    operation at once, the work happens after), and the read timeout bounds silence between two reads, not
    the length of a transfer, so 10 s of silence already is the fault; a timer thread printing "still
    waiting" beside a longer read timeout would say the same later, with more code. ``total_s`` (120 s) is
    one call's whole budget, attempts included."""
    connect_s: float = 10.0
    read_s: float = 10.0
    total_s: float = 120.0
    first_s: float = 1.0
    max_s: float = 30.0
    poll_s: float = 20.0

    @property
    def timeout(self) -> tuple[float, float]:
        """``(connect, read)`` as ``requests`` takes it."""
        return self.connect_s, self.read_s

    def attempt_timeout(self, left_s: float) -> tuple[float, float]:
        """``(connect, read)`` for an attempt with ``left_s`` of the budget left: never past the budget."""
        left_s = max(left_s, MIN_ATTEMPT_S)
        return min(self.connect_s, left_s), min(self.read_s, left_s)


#: the policy's environment variables -> Policy field (docs/vertex.md "Credentials, timeouts, retries")
POLICY_ENV = {"VTP_CLOUD_CONNECT_TIMEOUT_S": "connect_s", "VTP_CLOUD_READ_TIMEOUT_S": "read_s",
              "VTP_CLOUD_RETRY_TOTAL_S": "total_s", "VTP_CLOUD_RETRY_FIRST_S": "first_s",
              "VTP_CLOUD_RETRY_MAX_S": "max_s", "VTP_CLOUD_POLL_S": "poll_s"}
#: no attempt is started with less of the budget left than this (it could only fail for want of time, and
#: its failure would hide the real one)
MIN_ATTEMPT_S = 0.25


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


# The clock, the sleep and where the retry lines go: module attributes so that tests can put a fake clock
# in (``monkeypatch.setattr(clients, "monotonic", fake)``); looked up at each use.
monotonic: Callable[[], float] = time.monotonic
wall_time: Callable[[], float] = time.time
sleep: Callable[[float], None] = time.sleep


def say(line: str) -> None:
    """Where a retry line goes: stderr, at once (``warning: `` lines are always shown by the local console)."""
    print(line, file=sys.stderr, flush=True)


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
    if code is None and not isinstance(exc, (core.GoogleAPICallError, requests.exceptions.RequestException)):
        code = getattr(getattr(exc, "response", None), "status_code", None)  # google-resumable-media InvalidResponse
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
    if isinstance(exc, ConnectionRefusedError):
        return "unreached"
    if isinstance(exc, ConnectionError):  # http.client.RemoteDisconnected, a reset: after the request went
        return "dropped"
    from google.auth.exceptions import TransportError

    if isinstance(exc, TransportError):
        return failure_kind(exc.__cause__ or exc.__context__) if (exc.__cause__ or exc.__context__) else "dropped"
    return None


def retryable(kind: str) -> Callable[[BaseException], bool]:
    """Which failures a call of ``kind`` repeats (module docstring: who picks the id decides)."""
    if kind == CREATE_SERVER_ID:
        return lambda exc: failure_kind(exc) in ("throttled", "unreached")
    return lambda exc: failure_kind(exc) is not None


def _gave_up(cause: BaseException, total_s: float, tries: int) -> Exception:
    """google-api-core's ``RetryError`` (what code written for its ``Retry`` catches), ``cause`` the last
    failure, with ``total_s`` (the budget) and ``tries``."""
    from google.api_core import exceptions as core

    error = core.RetryError(f"gave up after {tries} tries in {total_s:g} s", cause)
    error.total_s, error.tries = total_s, tries
    return error


def retried(target: Callable[[tuple[float, float]], Any], *, kind: str = READ, doing: str,
            service: str = "Google Cloud", predicate: Callable[[BaseException], bool] | None = None,
            what: Callable[[BaseException], str] | None = None, p: Policy | None = None):
    """``target(timeout)`` under the policy: each attempt gets ``timeout = (connect, read)`` capped by the
    budget left; a failure that ``kind`` repeats (or ``predicate`` when given) is one line on stderr at once
    (:func:`retry_line`: the service, ``doing``, what failed (``what(exc)``, default :func:`describe`), the
    next delay, when it gives up) and another try after that delay. Returns what ``target`` returns; raises
    a failure that is not repeated as it is, and the budget's end as google-api-core's ``RetryError`` whose
    ``cause`` is the last failure.

    Why a loop of our own over google-api-core's backoff (``exponential_sleep_generator``: the same
    truncated exponential backoff with full jitter that ``Retry`` uses) rather than ``Retry`` or
    ``retry_target``: the line must carry the delay that will be slept, but ``retry_target`` calls
    ``on_error`` *before* it draws that delay; each attempt's timeout must shrink to the budget left, but
    ``Retry`` hands the call no deadline (its ``timeout`` is only checked between attempts, so an attempt
    ran past it); and its clock and sleep are ``time``'s own, so a test could not use a fake clock."""
    from google.api_core.retry import exponential_sleep_generator

    p = p or policy()
    repeat = predicate or retryable(kind)
    started = monotonic()
    deadline = started + p.total_s
    delays = exponential_sleep_generator(p.first_s, p.max_s, 2.0)
    tries, longest = 0, (0.0, 0.0)
    while True:
        tries += 1
        timeout = p.attempt_timeout(deadline - monotonic())
        longest = (max(longest[0], timeout[0]), max(longest[1], timeout[1]))
        try:
            return target(timeout)
        except CloudError:
            raise
        except Exception as exc:
            _remember_timeout(exc, timeout)
            if not repeat(exc):
                raise
            delay = next(delays)
            now = monotonic()
            if now + delay + MIN_ATTEMPT_S > deadline:
                # the give-up sums up the tries: "no answer within" the longest wait, not the last try's
                # remainder of the budget
                _remember_timeout(exc, longest)
                raise _gave_up(exc, p.total_s, tries) from None
            say(retry_line(service, doing, (what or describe)(exc), delay, deadline - now, tries + 1))
            sleep(delay)


def _remember_timeout(exc: BaseException, timeout: tuple[float, float]) -> None:
    """Keep the attempt's real timeouts on its error, for "no answer within N s" (:func:`describe`)."""
    try:
        exc.vtp_timeout = timeout
    except AttributeError:  # an exception type with __slots__
        pass


def retry_line(service: str, doing: str, failure: str, delay: float, left_s: float, next_try: int) -> str:
    """``warning: SERVICE: DOING: FAILURE; next try (N) in D s, gives up by HH:MM:SS (L s left)``."""
    by = time.strftime("%H:%M:%S", time.localtime(wall_time() + left_s))
    failure = " ".join(failure.split())
    failure = failure if len(failure) <= 300 else failure[:297] + "..."
    return (f"warning: {service}: {doing}: {failure}; next try ({next_try}) in {seconds(delay)} s, gives up by "
            f"{by} ({seconds(left_s)} s left)")


def seconds(value: float) -> str:
    """A duration for a line: whole seconds from 10 s, else tenths from 1 s, else hundredths."""
    text = f"{value:.0f}" if value >= 9.95 else f"{value:.1f}" if value >= 0.995 else f"{value:.2f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


#: google-cloud-* client module -> the service named in lines
_SERVICES = (("aiplatform", "Vertex AI"), ("cloudbuild", "Cloud Build"), ("storage", "Cloud Storage"),
             ("artifactregistry", "Artifact Registry"))
#: Google host suffix -> the service named in lines (else the host itself)
_HOST_SERVICES = (("aiplatform.googleapis.com", "Vertex AI"), ("cloudbuild.googleapis.com", "Cloud Build"),
                  ("storage.googleapis.com", "Cloud Storage"), ("oauth2.googleapis.com", "Google sign-in"),
                  ("pkg.dev", "Artifact Registry"), ("gcr.io", "Container Registry"))


def service_of(method: Callable) -> str:
    """The service a GAPIC client method belongs to (``Vertex AI``, ``Cloud Build``...)."""
    owner = getattr(method, "__self__", None)
    module = type(owner).__module__ if owner is not None else (getattr(method, "__module__", "") or "")
    return next((name for part, name in _SERVICES if f".{part}" in f".{module}"), "Google Cloud")


def service_of_url(url: str) -> str:
    """The service a URL belongs to (``Artifact Registry`` for ``*.pkg.dev``...), else its ``host:port``."""
    host = _host_port(url)
    name = (urlsplit(url).hostname or "").lower()
    return next((service for suffix, service in _HOST_SERVICES if name == suffix or name.endswith("." + suffix)
                 or name.endswith("-" + suffix)), host or "the server")


def _host_port(url: str) -> str:
    """``host[:port]`` of ``url``, never its user info."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or ""
    return f"{host}:{port}" if host and port else host


def retry(kind: str = READ, *, doing: str = "a cloud call", service: str = "Google Cloud"):
    """A decorator that runs a function under the policy (:func:`retried`), for code that calls
    ``retry(kind)(func)(*args)``. The function gets no timeout: it must bound its own attempts (a GAPIC
    method's own ``timeout``, a docker client's). :func:`call`, :func:`http` and :func:`retried` are the ways
    that cap each attempt by the budget left."""
    def decorate(func):
        @functools.wraps(func)
        def with_retries(*args, **kwargs):
            return retried(lambda timeout: func(*args, **kwargs), kind=kind, doing=doing, service=service)
        return with_retries
    return decorate


class ConnectReadTimeout:
    """google-api-core's timeout protocol (a decorator that sets each attempt's ``timeout`` argument)
    handing the REST transport's ``requests`` call a ``(connect, read)`` pair (the policy's, or ``value``);
    a plain number would be one value for both."""

    def __init__(self, p: Policy | None = None, value: tuple[float, float] | None = None):
        self.value = value or (p or policy()).timeout

    def __call__(self, func):
        @functools.wraps(func)
        def with_timeout(*args, **kwargs):
            kwargs["timeout"] = self.value
            return func(*args, **kwargs)
        return with_timeout


def call(method: Callable, *args, kind: str = READ, doing: str, unsure: str = "",
         hints: dict[int, str] | None = None, service: str | None = None,
         reraise: tuple[type[BaseException], ...] = (), **kwargs):
    """``method(*args, **kwargs)`` (a GAPIC client method) under the policy (:func:`retried`: a line per
    retry, each attempt's timeout capped by the budget left; the client's own retry is turned off). Any
    failure -> CloudError, except ``reraise`` types, given back as they are (a 409 the caller handles).
    ``unsure``: appended when the outcome is unknown (gave up on transient failures, or a garbage answer),
    e.g. "the job may still be running: ..."; ``hints``: appended for an HTTP status (403: which role);
    ``service``: named in retry lines (default: from the client's module)."""
    def attempt(timeout):
        return method(*args, retry=None, timeout=ConnectReadTimeout(value=timeout), **kwargs)

    try:
        return retried(attempt, kind=kind, doing=doing, service=service or service_of(method))
    except reraise:
        raise
    except (KeyboardInterrupt, CloudError):
        raise
    except Exception as exc:  # google.api_core / google.auth / requests / protobuf parse errors
        code = getattr(exc, "code", None)
        hint = (hints or {}).get(code) if isinstance(code, int) else None
        raise CloudError(failure_line(exc, doing, unsure) + (f" ({hint})" if hint else "")) from None


def http(method: str, url: str, *, kind: str = READ, doing: str, unsure: str = "", google_token: str | None = None,
         token_as: str = "bearer", max_redirects: int = 5, service: str | None = None, **kwargs):
    """One ``requests`` call under the policy (:func:`retried`: timeouts capped by the budget left, a line
    per retry of 429/5xx and connection failures), and the Google token attached only where
    :func:`may_receive_google_token` allows (``token_as``: ``bearer`` or ``basic``, the registries'
    ``oauth2accesstoken:<token>``); elsewhere the request goes anonymously. Redirects are followed here, so
    the token is re-attached only to an allowed host. Returns the last response (any status other than
    429/5xx); a give-up is one CloudError line. ``service``: named in retry lines (default: from the host)."""
    import requests

    headers = dict(kwargs.pop("headers", None) or {})
    p = policy()
    deadline = monotonic() + p.total_s

    def attempt(timeout):
        target, own = url, dict(headers)
        for hop in range(max_redirects + 1):
            sent = dict(own)
            auth = None
            if google_token and may_receive_google_token(target):
                if token_as == "basic":
                    auth = ("oauth2accesstoken", google_token)
                else:
                    sent["Authorization"] = f"Bearer {google_token}"
            hop_timeout = timeout if hop == 0 else p.attempt_timeout(deadline - monotonic())
            response = requests.request(method, target, headers=sent, auth=auth, timeout=hop_timeout,
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
        return retried(attempt, kind=kind, doing=doing, service=service or service_of_url(url), p=p)
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
    return (_host_port(url) or "the server") if url else "the server"


def describe(exc: BaseException) -> str:
    """What went wrong, in a few words, from any error a cloud call raises."""
    from google.api_core import exceptions as core
    from google.protobuf.json_format import ParseError

    if isinstance(exc, core.RetryError):
        total_s = getattr(exc, "total_s", None) or policy().total_s
        cause = exc.cause if exc.cause is not None else exc
        return f"gave up after retrying for {seconds(total_s)} s: {describe(cause)}"
    kind = failure_kind(exc)
    connect_s, read_s = getattr(exc, "vtp_timeout", None) or policy().timeout  # the attempt's own (retried)
    if kind == "unreached":
        return f"cannot connect to {_host_of(exc)} ({_why_unreached(exc, connect_s)})"
    if kind == "dropped":
        return f"the connection to {_host_of(exc)} dropped before an answer came"
    if kind == "timeout":
        return f"no answer from {_host_of(exc)} within {seconds(read_s)} s"
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


def _why_unreached(exc: BaseException, connect_s: float) -> str:
    import requests

    text = repr(exc)
    if isinstance(exc, requests.exceptions.ConnectTimeout) or "timed out" in text:
        return f"no connection within {seconds(connect_s)} s"
    if "Connection refused" in text or isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if "NameResolutionError" in text or "Name or service not known" in text:
        return "its name does not resolve"
    return "no connection was made"


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
