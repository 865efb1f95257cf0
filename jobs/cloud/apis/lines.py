"""What the job side says about a cloud call that failed, in one line, and what Ctrl-C says.

* :func:`failure_kind` classifies a failure (429, 5xx, no connection, a connection dropped, no answer in time)
  for the policy (``jobs.cloud.apis.clients.retryable``) and for the line;
* :func:`describe` / :func:`failure_line`: ``doing: what happened[; what may exist and how to see it]``, the
  give-up of every call (a ``jobs.rules.errors.CloudError``): the service and resource, what happened, what to
  do, never a traceback, never a token;
* :func:`keeps_running` / :func:`interrupted_line` / :func:`run_command`: a cloud command interrupted with
  Ctrl-C says in one line what it left running in the cloud and how to see and cancel it.
"""
from __future__ import annotations

import json
import re
import sys
from typing import Callable
from urllib.parse import urlsplit

from jobs.cloud.apis.policy import policy
from jobs.rules.errors import CloudError


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


def http_message(response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except Exception:
        text = " ".join((response.text or response.reason or "").split())
        return text if not text.lstrip().startswith("<") else "(an HTML page, not the API's answer)"


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
