"""A local stand-in of Cloud Logging's v2 REST API: ``POST /v2/entries:list``, what google-cloud-logging's HTTP
client (``Client(_use_grpc=False)``) sends.

The body is decoded strictly as the real ``ListLogEntriesRequest`` (``tests.standins.base.decode``: an unknown
field is a 400); the answer is a real ``ListLogEntriesResponse``. The filter is read as the product writes it
(``resource.type="ml_job"``, ``resource.labels.job_id``, ``resource.labels.task_name``,
``labels."ml.googleapis.com/trial_id"``, ``timestamp>`` and ``timestamp>=``: the terms ANDed); a filter term it does not know is a 400,
so a typo in the product's filter fails the test. ``orderBy`` ``timestamp desc`` / ``timestamp asc``, ``pageSize``
entries per answer. Entries are given as ``add(job_id, task, message, ...)``; faults as in ``StandIn`` (403, 5xx,
drop, hang, html).
"""
from __future__ import annotations

import datetime
import re
from typing import Any

from tests.standins.base import BadRequest, Request, StandIn, decode, typed

_TERM = re.compile(r'^(resource\.type|resource\.labels\.job_id|resource\.labels\.task_name|'
                   r'labels\."ml\.googleapis\.com/trial_id"|timestamp)(=|>=|>)"([^"]*)"$')


class LoggingStandIn(StandIn):
    def __init__(self):
        super().__init__()
        from google.cloud.logging_v2 import types  # noqa: F401  imported now, not within the first request's timeout
        self.entries: list[dict[str, Any]] = []
        # entries start ten minutes ago: google-cloud-logging adds `timestamp>=` 24 hours ago to a filter without
        # a time of its own, and the stand-in honours every time term
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        self.epoch = now - datetime.timedelta(minutes=10)
        self.route("POST", r"/v2/entries:list", self._list)

    def add(self, job_id: str, task: str, message: str, *, severity: str = "INFO", trial: str = "",
            json_payload: bool = True, seconds: float | None = None) -> None:
        """One entry of the job ``job_id``'s replica ``task``; its time ``seconds`` after 08:00 (default: after
        the last one)."""
        n = len(self.entries)
        when = self.epoch + datetime.timedelta(seconds=n if seconds is None else seconds)
        self.entries.append({"job_id": job_id, "task": task, "message": message, "severity": severity,
                             "trial": trial, "json": json_payload, "time": when})

    def lines(self, job_id: str, task: str, messages: list[str], **kw) -> None:
        for m in messages:
            self.add(job_id, task, m, **kw)

    def _list(self, req: Request, m) -> tuple[int, Any]:
        from google.cloud.logging_v2.types import ListLogEntriesRequest, ListLogEntriesResponse, LogEntry

        request = decode(req, ListLogEntriesRequest)
        terms = [t.strip() for t in request.filter.split(" AND ")] if request.filter else []
        wanted: dict[str, str] = {}
        after, since = None, None
        for t in terms:
            match = _TERM.match(t)
            if not match:
                raise BadRequest(f"stand-in: unknown filter term {t!r}")
            key, op, value = match.groups()
            if key == "timestamp":
                when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
                after, since = (when, since) if op == ">" else (after, when)
            else:
                wanted[key] = value
        if wanted.get("resource.type") != "ml_job" or "resource.labels.job_id" not in wanted:
            raise BadRequest("stand-in: the filter must name resource.type=\"ml_job\" and a job id")
        if list(request.resource_names) != [f"projects/{p}" for p in self._projects(request)]:
            raise BadRequest("stand-in: resourceNames must be projects/<id>")
        found = [e for e in self.entries
                 if e["job_id"] == wanted["resource.labels.job_id"]
                 and e["task"] == wanted.get("resource.labels.task_name", e["task"])
                 and e["trial"] == wanted.get('labels."ml.googleapis.com/trial_id"', e["trial"])
                 and (after is None or e["time"] > after) and (since is None or e["time"] >= since)]
        order = (request.order_by or "timestamp asc").strip().lower()
        found.sort(key=lambda e: e["time"], reverse=order == "timestamp desc")
        if request.page_size:
            found = found[:request.page_size]
        out = []
        for e in found:
            entry = {"log_name": f"projects/p/logs/{'workerpool' if e['task'] else 'job'}",
                     "resource": {"type": "ml_job", "labels": {"job_id": e["job_id"], "task_name": e["task"],
                                                               "project_id": "p"}},
                     "severity": e["severity"], "timestamp": e["time"].strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                     "labels": {"ml.googleapis.com/trial_id": e["trial"]} if e["trial"] else {}}
            if e["json"]:
                entry["json_payload"] = {"message": e["message"], "levelname": e["severity"]}
            else:
                entry["text_payload"] = e["message"]
            out.append(LogEntry(entry))
        return 200, typed(req, ListLogEntriesResponse(entries=out))

    @staticmethod
    def _projects(request) -> list[str]:
        return [n.split("/", 1)[1] for n in request.resource_names if n.startswith("projects/")]
