"""Incoming webhooks, as strict as the real ones, for tests of ``notify:``.

``WebhookStandIn(kind)`` answers ``POST /hooks/<secret path>`` (the path is the secret part of a real webhook's URL)
and keeps every body it accepted in ``received``:

* ``chat``: Google Chat's incoming webhook: the body decoded as ``google.apps.chat_v1.Message`` (the real API type,
  strictly: an unknown field is a 400, as the Chat API answers), then answered with the message;
* ``slack``: Slack's incoming webhook: a JSON object of Slack's documented fields only (``text``, ``blocks``,
  ``attachments``, ``thread_ts``, ``mrkdwn``, ``unfurl_links``, ``unfurl_media``), ``text`` a string, else 400
  ``invalid_payload``, as Slack answers; 200 ``ok``;
* ``json``: the product's own message: exactly its fields (``kind``, ``text``, ``run``, ``cause``, ``model``,
  ``cost``, ``links``), else 400.

Misbehaviour on purpose: ``fault(500)`` and the other faults of :class:`~tests.standins.base.StandIn` (``hang`` never
answers); ``redirect_to(url, status)`` answers every POST with a redirect to ``url`` (another host, or the same).
"""
from __future__ import annotations

import json
from typing import Any

from tests.standins.base import BadRequest, Request, StandIn, decode

SLACK_FIELDS = {"text", "blocks", "attachments", "thread_ts", "mrkdwn", "unfurl_links", "unfurl_media"}
JSON_FIELDS = {"kind", "text", "run", "cause", "model", "cost", "links"}
SECRET_PATH = "/hooks/T000-secret-B000-XXXXXXXXXXXXXXXX"


class WebhookStandIn(StandIn):
    def __init__(self, kind: str = "json", path: str = SECRET_PATH):
        super().__init__()
        assert kind in ("chat", "slack", "json"), kind
        self.kind, self.path = kind, path
        self.received: list[dict[str, Any]] = []
        self.redirect: tuple[int, str] | None = None
        if kind == "chat":
            from google.apps import chat_v1  # noqa: F401  (imported before the first request, not during it)
        self.route("POST", r"/hooks/.*", self._post)

    @property
    def hook_url(self) -> str:
        """The webhook's secret URL."""
        return self.url + self.path

    def redirect_to(self, url: str, status: int = 302) -> None:
        self.redirect = (status, url)

    def _post(self, req: Request, m) -> tuple:
        if self.redirect is not None:
            status, url = self.redirect
            return status, "", {"Location": url, "Content-Type": "text/plain"}
        if req.path != self.path:
            return 404, "no_service"
        if not req.headers.get("Content-Type", "").startswith("application/json"):
            return 400, "invalid_payload"
        try:
            body = json.loads(req.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return 400, "invalid_payload"
        if self.kind == "chat":
            from google.apps import chat_v1

            message = decode(req, chat_v1.Message, body)  # BadRequest (400) on an unknown field
            self.received.append(body)
            return 200, {"name": "spaces/AAAA/messages/1", "text": message.text}
        if not isinstance(body, dict):
            return 400, "invalid_payload"
        allowed = SLACK_FIELDS if self.kind == "slack" else JSON_FIELDS
        unknown = set(body) - allowed
        if unknown or not isinstance(body.get("text"), str) or (self.kind == "json" and set(body) != JSON_FIELDS):
            raise BadRequest(f"invalid_payload: unknown or missing fields {sorted(unknown or JSON_FIELDS - set(body))}")
        self.received.append(body)
        return 200, "ok", {"Content-Type": "text/plain"}
