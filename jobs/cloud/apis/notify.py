"""Sending a run's end to the webhook ``notify.webhook`` names (the message is ``jobs.steps.notify_message``'s).

**The URL is a secret** (whoever holds it posts into the channel). It is read when the run ends, from where the job
file says (:func:`webhook_url`): an environment variable of the process that sends (a run on this machine), or a
Secret Manager version (``projects/P/secrets/S/versions/V``: read through the real client library,
``google-cloud-secret-manager``'s ``SecretManagerServiceClient`` over REST, under the one client policy of
``jobs.cloud.apis.clients``; the payload's CRC32C checked when the answer carries one). It is never printed, logged,
written to a record or put in a pipeline: every line names where it came from (``$VTP_WEBHOOK_URL``, the secret's
version) instead, and any text that could carry it (an answer's body, a redirect) is said without it.

**Sending** (:func:`send`) is one POST of JSON (:func:`body`: ``{"text": ...}`` for Slack and Google Chat incoming
webhooks, both of which take that; the whole message as fields for ``json``), bounded by the policy's connect and
read timeouts. One attempt: a run's end is not held for a channel, and a repeat after a lost answer could post the
message twice. Only ``https`` is sent to (a loopback ``http`` stand-in in tests); a redirect is followed only to the
same host (307/308, which keep the POST), never to another host. Whatever goes wrong (no variable, a secret that
cannot be read, a refused connection, no answer, a 4xx/5xx, a redirect elsewhere) is one ``warning:`` line and
:func:`send` returns False: a failing notification never fails the run.

Why not ``jobs.cloud.apis.clients.http`` (every other plain HTTP call's way): it repeats a call after a 5xx or a lost
answer (a webhook would post the message twice), follows a redirect to another host (it keeps only the Google token
from going there; here the message itself, with its run's cause and lines, must not go to a host the user never
named), and its failure lines describe the ``requests`` exception, whose text names the URL. The timeouts are the
policy's (``jobs.cloud.apis.policy``), as everywhere.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping
from urllib.parse import urljoin, urlsplit

from jobs.cloud.apis import clients
from jobs.cloud.apis.credentials import client_kwargs, is_local_endpoint
from jobs.cloud.apis.policy import policy
from jobs.rules.errors import CloudError
from jobfile.config_notify import Webhook

SERVICE = "Secret Manager"
#: the hosts whose webhooks take ``{"text": ...}`` only: Slack's and Google Chat's incoming webhooks
FORMAT_BY_HOST = {"hooks.slack.com": "slack", "chat.googleapis.com": "chat"}
MAX_SAME_HOST_REDIRECTS = 3


class NotSent(Exception):
    """Why the message was not delivered, in words that never carry the URL."""


def where(webhook: Webhook) -> str:
    """Where the URL comes from, as every line names it (never the URL)."""
    return f"${webhook.url_env}" if webhook.url_env and not webhook.url_secret else f"secret {webhook.url_secret}"


def read_secret(name: str, api_endpoint: str = "") -> str:
    """The payload of Secret Manager version ``name`` as text (``AccessSecretVersion``); a failure is one CloudError
    line (403: the role the reader needs). ``api_endpoint``: a loopback stand-in (tests), else Google's."""
    from google.cloud import secretmanager_v1

    client = secretmanager_v1.SecretManagerServiceClient(**client_kwargs(api_endpoint or None, SERVICE))
    answer = clients.call(client.access_secret_version, name=name, doing=f"reading {name}", service=SERVICE,
                          hints={403: "the account the run runs as needs roles/secretmanager.secretAccessor on the "
                                      "secret", 404: "no such secret or version"})
    data = bytes(answer.payload.data)
    if answer.payload.data_crc32c:
        import google_crc32c

        if google_crc32c.value(data) != answer.payload.data_crc32c:
            raise CloudError(f"reading {name}: the payload does not match its CRC32C: it was damaged on the way")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise CloudError(f"reading {name}: the payload is not UTF-8 text (a webhook URL is)") from None
    return text


def webhook_url(webhook: Webhook, *, api_endpoint: str = "", env: Mapping[str, str] | None = None) -> str:
    """The webhook's URL from where ``webhook`` says; CloudError (one line, without the URL) when it cannot be read
    or is no URL to send to (``https``, or ``http`` to a loopback stand-in)."""
    env = os.environ if env is None else env
    if webhook.url_secret:
        url = read_secret(webhook.url_secret, api_endpoint)
    else:
        url = str(env.get(webhook.url_env) or "").strip()
        if not url:
            raise CloudError(f"notify.webhook.url_env: ${webhook.url_env} is not set in the environment of the step "
                             "that sends (a run on Vertex never sees this machine's variables: use "
                             "notify.webhook.url_secret there)")
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and is_local_endpoint(url):
        return url
    what = "is not a URL" if not parts.hostname else f"is {parts.scheme or 'no'}:// , not https:// (the secret would travel in clear)"
    raise CloudError(f"the webhook URL in {where(webhook)} {what}: not sent")


def format_for(webhook: Webhook, url: str) -> str:
    """``webhook.format``; ``auto``: Slack's or Google Chat's by the URL's host, else ``json``."""
    if webhook.format != "auto":
        return webhook.format
    return FORMAT_BY_HOST.get((urlsplit(url).hostname or "").lower(), "json")


def body(message: dict[str, Any], fmt: str) -> dict[str, Any]:
    """What is posted: ``{"text"}`` for ``slack`` and ``chat`` (their incoming webhooks' message), else the text
    and every field of the message."""
    if fmt in ("slack", "chat"):
        return {"text": message["text"]}
    return dict(message)


def _scrub(text: str, url: str) -> str:
    """``text`` without the URL or its path (an answer may echo the request), on one line, bounded."""
    parts = urlsplit(url)
    for secret in {url, url.split("?")[0], parts.path, parts.query}:
        if secret and len(secret) > 3:
            text = text.replace(secret, "<the webhook URL>")
    text = " ".join(text.split())
    return text if len(text) <= 160 else text[:157] + "..."


def _failure(exc: BaseException, timeout: tuple[float, float]) -> str:
    """A ``requests`` failure in words, never its own text (which names the URL)."""
    import requests

    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return f"no connection within {timeout[0]:g} s"
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return f"no answer within {timeout[1]:g} s"
    if isinstance(exc, requests.exceptions.SSLError):
        return "the TLS handshake failed"
    if isinstance(exc, requests.exceptions.ConnectionError):
        text = repr(exc)
        if any(t in text for t in ("NameResolutionError", "Name or service not known", "nodename nor servname")):
            return "its host name does not resolve"
        if any(t in text for t in ("NewConnectionError", "Connection refused")):
            return "the connection was refused"
        return "the connection was dropped before an answer"
    return f"{type(exc).__name__}"


def post(url: str, payload: dict[str, Any]) -> int:
    """POST ``payload`` as JSON to ``url`` once, following a redirect only to the same host (307/308); returns the
    final status (2xx); :class:`NotSent` otherwise."""
    import requests

    timeout = policy().timeout
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    target = url
    for _ in range(MAX_SAME_HOST_REDIRECTS + 1):
        try:
            answer = requests.post(target, data=data, headers={"Content-Type": "application/json; charset=UTF-8"},
                                   timeout=timeout, allow_redirects=False)
        except requests.exceptions.RequestException as exc:
            raise NotSent(_failure(exc, timeout)) from None
        if answer.is_redirect:
            moved = urljoin(target, answer.headers.get("Location", ""))
            here, there = urlsplit(target), urlsplit(moved)
            if (there.hostname, there.port, there.scheme) != (here.hostname, here.port, here.scheme):
                raise NotSent(f"it answered {answer.status_code}, a redirect to another host "
                              f"({there.hostname or 'none'}), which is never followed")
            if answer.status_code not in (307, 308):
                raise NotSent(f"it answered {answer.status_code}, a redirect that would turn the POST into a GET")
            target = moved
            continue
        if 200 <= answer.status_code < 300:
            return answer.status_code
        raise NotSent(f"it answered {answer.status_code} {_scrub(answer.text or '', url)}".rstrip())
    raise NotSent(f"more than {MAX_SAME_HOST_REDIRECTS} redirects")


def send(webhook: Webhook, message: dict[str, Any], *, api_endpoint: str = "", env: Mapping[str, str] | None = None,
         say: Callable[[str], None] = print) -> bool:
    """Deliver ``message`` to the webhook (module docstring); True when it answered 2xx. Never raises: a failure is
    one ``warning:`` line (``say``) naming where the URL came from, never the URL."""
    state = (message.get("run") or {}).get("state", "")
    try:
        url = webhook_url(webhook, api_endpoint=api_endpoint, env=env)
        post(url, body(message, format_for(webhook, url)))
    except CloudError as exc:
        say(f"warning: notify: the run's end ({state}) was not sent: {exc}")
        return False
    except NotSent as exc:
        say(f"warning: notify: the run's end ({state}) was not sent to the webhook in {where(webhook)}: {exc}")
        return False
    except Exception as exc:  # a notification never fails the run
        say(f"warning: notify: the run's end ({state}) was not sent to the webhook in {where(webhook)}: "
            f"{type(exc).__name__}")
        return False
    say(f"notify: the run's end ({state}) was sent to the webhook in {where(webhook)}")
    return True
