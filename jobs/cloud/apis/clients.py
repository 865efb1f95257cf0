"""How the job side makes a cloud call: every call goes through here, under the one client policy.

Every cloud module (``cloudbuild``, ``gcs``, ``templates``, ``vertex``, ``job_runner``, ``custom_job``,
``tuning_job``, and ``jobs.cloud.apis.registry``/``jobs.images.docker``/``jobs.images.cloudbuild``) builds its client
and makes its calls through this module:

* :func:`call`: a GAPIC client method (google-cloud-*, REST transport) under the policy;
* :func:`http`: one ``requests`` call under the policy, the Google token attached only where the token rule
  allows, redirects followed here so the token never travels to another host;
* :func:`retried`: the loop both use (and :func:`retry`, a decorator for code that bounds its own attempts):
  each attempt's connect and read timeouts capped by the budget left, a ``warning:`` line per retry
  (:func:`retry_line`), google-api-core's ``RetryError`` when the budget is spent.

The decisions it applies have a module each, whose names it hands on (``clients.X`` is what cloud modules and
tests use): the policy's figures and what may be repeated (``jobs.cloud.apis.policy``), credentials and where the
Google token may go (``jobs.cloud.apis.credentials``), and what a failure or Ctrl-C says in one line
(``jobs.cloud.apis.lines``); the error itself is ``jobs.rules.errors.CloudError``.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import sys
import time
from typing import Any, Callable
from urllib.parse import urljoin, urlsplit

from jobs.cloud.apis.credentials import may_receive_google_token
from jobs.cloud.apis.lines import (_Status, _RETRY_STATUS, describe, failure_kind, failure_line, seconds, service_of,
                              service_of_url)
from jobs.cloud.apis.policy import CREATE_SERVER_ID, MIN_ATTEMPT_S, READ, Policy, policy
from jobs.rules.command_line import command_started
from jobs.rules.errors import CloudError


# The clock, the sleep and where the retry lines go: module attributes so that tests can put a fake clock
# in (``monkeypatch.setattr(clients, "monotonic", fake)``); looked up at each use.
monotonic: Callable[[], float] = time.monotonic
wall_time: Callable[[], float] = time.time
sleep: Callable[[float], None] = time.sleep


#: the deadline (on :data:`monotonic`'s clock) that every call made inside :func:`within` ends by, whatever
#: its own budget: a command's promise ("a create gives up within 120 s", counted from when it was started)
_COMMAND_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("vtp_command_deadline", default=None)
#: the last second of a command's bound is its process's: printing the line and exiting (0.2-0.7 s measured after
#: a submit, with ``jobs.rules.command_line``'s gc.freeze; 1.7-7.5 s before it), so the calls inside :func:`within` end by then
EXIT_RESERVE_S = 1.0


@contextlib.contextmanager
def within(total_s: float | None = None, *, since: float | None = None):
    """Every call made inside ends within ``total_s`` (default: the policy's ``command_s``) of ``since`` (a
    :data:`monotonic` time; default: when the command started, ``jobs.rules.command_line.command_started``, else now): the
    deadline caps each call's own budget, so the calls of one command, and the start-up and compiling before
    them, share one bound (less :data:`EXIT_RESERVE_S`, the process's own end). Nested: the earlier deadline wins. A call's first attempt still gets one whole
    attempt's time (:func:`retried`), so a command whose local work alone took the whole bound still tries once."""
    total_s = policy().command_s if total_s is None else total_s
    if since is None:
        since = command_started()
    at = (monotonic() if since is None else since) + total_s - EXIT_RESERVE_S
    outer = _COMMAND_DEADLINE.get()
    token = _COMMAND_DEADLINE.set(at if outer is None else min(at, outer))
    try:
        yield
    finally:
        _COMMAND_DEADLINE.reset(token)


def say(line: str) -> None:
    """Where a retry line goes: stderr, at once (``warning: `` lines are always shown by the local console)."""
    print(line, file=sys.stderr, flush=True)


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
    command = _COMMAND_DEADLINE.get()
    if command is not None:  # a command's own bound (:func:`within`), but never less than one whole first attempt
        deadline = min(deadline, max(command, started + max(p.timeout)))
    budget_s = round(deadline - started, 1)
    delays = exponential_sleep_generator(p.first_s, p.max_s, 2.0)
    tries, longest, failed = 0, (0.0, 0.0), None
    while True:
        left = deadline - monotonic()
        if failed is not None and left < MIN_ATTEMPT_S:
            # the sleep overran what was left (a busy machine): the bound holds, the try is not made
            _remember_timeout(failed, longest)
            raise _gave_up(failed, budget_s, tries) from None
        tries += 1
        timeout = p.attempt_timeout(left)
        longest = (max(longest[0], timeout[0]), max(longest[1], timeout[1]))
        try:
            return target(timeout)
        except CloudError:
            raise
        except Exception as exc:
            _remember_timeout(exc, timeout)
            if not repeat(exc):
                raise
            failed = exc
            delay = next(delays)
            now = monotonic()
            if now + delay + MIN_ATTEMPT_S > deadline:
                # the give-up sums up the tries: "no answer within" the longest wait, not the last try's
                # remainder of the budget
                _remember_timeout(exc, longest)
                raise _gave_up(exc, budget_s, tries) from None
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
