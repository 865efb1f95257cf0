"""The job config's ``notify:`` section: where a run's end (succeeded, failed, cancelled) is sent, as the schema
(one dataclass per part, as in ``jobfile.config``). The webhook's URL is a secret and never appears in the job
file: the section names where it is read at the run's end (an environment variable, or a Secret Manager version).
Its rules are ``jobs.rules.notify_section``; the message and its sending, the pipeline's exit handler
(``components/notify``). Nothing here changes what a replica computes; it never imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

#: the ends a run can have, as the message names them
ENDS = ("succeeded", "failed", "cancelled")


@dataclasses.dataclass
class Webhook:
    """An HTTP webhook that takes JSON (Slack and Google Chat incoming webhooks do). Exactly one of ``url_env`` and
    ``url_secret`` names where its URL is read when the run ends."""
    #: the environment variable holding the URL, e.g. ``VTP_WEBHOOK_URL``: read by a run on this machine (a Vertex
    #: task never sees this machine's environment: use ``url_secret`` there)
    url_env: str = ""
    #: a Secret Manager version holding the URL, ``projects/P/secrets/S/versions/V`` (``latest`` allowed): read by
    #: the exit handler, here and on Vertex (the pipeline's service account needs roles/secretmanager.secretAccessor)
    url_secret: str = ""
    #: the body: ``slack`` and ``chat`` send ``{"text": ...}`` (what both incoming webhooks take), ``json`` the text
    #: and the whole message as fields; ``auto`` decides from the URL's host (hooks.slack.com, chat.googleapis.com)
    format: Literal["auto", "slack", "chat", "json"] = "auto"


@dataclasses.dataclass
class Notify:
    """Where a run's end is sent; empty: nowhere. ``email`` is Vertex's own notification (GCPC's
    ``VertexNotificationEmailOp``: a run on Vertex only, the state without the cause); the webhook carries the cause."""
    #: which ends send a message
    on: list[Literal["succeeded", "failed", "cancelled"]] = dataclasses.field(default_factory=lambda: list(ENDS))
    webhook: Webhook = dataclasses.field(default_factory=Webhook)
    #: e-mail addresses Vertex AI Pipelines notifies (at most 3, Vertex's limit)
    email: list[str] = dataclasses.field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return bool(self.webhook.url_env or self.webhook.url_secret or self.email)
