"""The ``notify:`` section's spec: its rules, run by validation before anything is spent, and the one rule for where
a Vertex run can read the webhook's URL (:func:`vertex_problems`, the preflight's). Pure: no I/O, no cloud client.

The URL of a webhook is a secret (whoever has it can post into the channel): the job file names where it is read,
never the URL itself. An environment variable is read where the run's last step runs: on this machine for a local
run; a Vertex task sees no variable of this machine, so a run on Vertex reads a Secret Manager version (the
pipeline's service account needs ``roles/secretmanager.secretAccessor`` on the secret).
"""
from __future__ import annotations

import re

from jobfile import config as config_lib
from jobfile.errors import Problem, problem

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
#: a Secret Manager version (``SecretManagerService.AccessSecretVersion``'s ``name``): a secret id is letters,
#: digits, ``-`` and ``_`` (up to 255); a version a number or ``latest``
SECRET_VERSION_RE = re.compile(r"^projects/[a-z0-9][a-z0-9.:-]{0,62}/secrets/[A-Za-z0-9_-]{1,255}/versions/"
                               r"(?:latest|[1-9][0-9]*)$")
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")
#: Vertex AI Pipelines' e-mail notification: "up to three email addresses" (cloud.google.com/vertex-ai/docs/pipelines/
#: email-notifications, recalled 2026-11-29, not seen on a stored copy): more is a warning, Vertex decides
EMAIL_MAX = 3
SECRET_EXAMPLE = "projects/PROJECT/secrets/run-webhook/versions/latest"


def notify_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The section's rules: exactly one place for the webhook's URL, each in its form and never a URL itself, a
    message for at least one end, e-mail addresses in their form."""
    n, w, p = cfg.notify, cfg.notify.webhook, []
    for field, value in (("notify.webhook.url_env", w.url_env), ("notify.webhook.url_secret", w.url_secret)):
        if "://" in value or value.lower().startswith(("hooks.", "www.")):
            p.append(problem(field, "holds a URL: the webhook's URL is a secret and never goes into the job file "
                                    "(it would travel in every compiled pipeline, log and image); put it in an "
                                    "environment variable or a Secret Manager version and name that here",
                             ["url_env: VTP_WEBHOOK_URL", f"url_secret: {SECRET_EXAMPLE}"]))
            return p
    if w.url_env and w.url_secret:
        p.append(problem("notify.webhook", "names both url_env and url_secret: give one place to read the URL from "
                                           "(url_secret works here and on Vertex, url_env only on this machine)",
                         ["url_secret: " + SECRET_EXAMPLE]))
    if w.url_env and not ENV_NAME_RE.match(w.url_env):
        p.append(problem("notify.webhook.url_env", f"{w.url_env!r} is not an environment variable's name (letters, "
                                                   "digits and '_', not starting with a digit)", ["VTP_WEBHOOK_URL"]))
    if w.url_secret and not SECRET_VERSION_RE.match(w.url_secret):
        p.append(problem("notify.webhook.url_secret", f"{w.url_secret!r} is not a Secret Manager version "
                                                      "(projects/PROJECT/secrets/SECRET/versions/VERSION, VERSION a "
                                                      "number or latest)", [SECRET_EXAMPLE]))
    if w.format != "auto" and not (w.url_env or w.url_secret):
        p.append(problem("notify.webhook.format", f"{w.format!r} is set but no URL is named: add url_env or "
                                                  "url_secret, or remove the webhook", ["url_env: VTP_WEBHOOK_URL"]))
    if n.enabled and not n.on:
        p.append(problem("notify.on", "is empty: no end of the run would be sent; name at least one, or remove "
                                      "the notify section", ["[failed, cancelled]", "[succeeded, failed, cancelled]"]))
    for i, address in enumerate(n.email):
        if not EMAIL_RE.match(address):
            p.append(problem(f"notify.email[{i}]", f"{address!r} is not an e-mail address", ["ml-team@example.com"]))
    return p


def notify_warnings(cfg: config_lib.JobConfig) -> list[Problem]:
    """What the section does that a user may not expect: more e-mail addresses than Vertex takes."""
    if len(cfg.notify.email) > EMAIL_MAX:
        return [problem("notify.email", f"{len(cfg.notify.email)} addresses; Vertex AI Pipelines' e-mail notification "
                                        f"takes up to {EMAIL_MAX} (its documentation, recalled): Vertex decides")]
    return []


def vertex_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """What a run on Vertex cannot do: read this machine's environment variable (the exit handler runs on Vertex)."""
    w = cfg.notify.webhook
    if w.url_env and not w.url_secret:
        return [problem("notify.webhook.url_env", f"${w.url_env} is this machine's variable, which a run on Vertex "
                                                  "never sees (its exit handler runs there): store the URL in Secret "
                                                  "Manager and name the version (the pipeline's service account "
                                                  "needs roles/secretmanager.secretAccessor on it)",
                        [f"notify.webhook.url_secret={SECRET_EXAMPLE}"])]
    return []


def local_note(cfg: config_lib.JobConfig) -> str | None:
    """What a run here does not send: Vertex's e-mail."""
    if cfg.notify.email:
        return ("notify.email is sent by Vertex AI Pipelines only; a run on this machine sends "
                + ("the webhook message" if cfg.notify.webhook.url_env or cfg.notify.webhook.url_secret else
                   "no message (add notify.webhook for one here)"))
    return None
