"""Vertex AI's schedules (``ScheduleService``, v1 REST), as much of it as ``vtp schedule`` uses.

* ``POST /v1/projects/P/locations/L/schedules`` (a ``Schedule``): decoded strictly (an unknown field is a 400), its
  ``createPipelineJobRequest`` decoded again on its own as a ``CreatePipelineJobRequest``; refused as Vertex refuses
  it: no cron or display name, ``maxConcurrentRunCount`` not positive, a request's parent in another project or
  region. Answered with the schedule: a server-assigned id, ACTIVE, ``nextRunTime``; kept in ``schedules``;
* ``GET .../schedules`` (``filter``, ``pageSize``, ``pageToken``; decoded as ``ListSchedulesRequest``): one
  ``ListSchedulesResponse`` page of ``page_size`` (a listing spans pages);
* ``GET .../schedules/ID``; ``POST .../schedules/ID:pause`` (PAUSED) and ``:resume`` (ACTIVE, ``catchUp`` kept),
  each decoded as its request type; ``DELETE .../schedules/ID``: a finished long-running operation. An unknown
  schedule is 404.

Install it on a :class:`~tests.standins.base.StandIn` (the Vertex stand-in: one server carries the whole API):
``Schedules(standin)``.
"""
from __future__ import annotations

import itertools
import json
import re
from typing import Any

from tests.standins.base import BadRequest, Request, StandIn, decode, decode_query, google_error, typed

_PREFIX = r"/v1/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/schedules"
NEXT_RUN = "2026-11-30T08:00:00Z"


class Schedules:
    def __init__(self, standin: StandIn, page_size: int = 2):
        from google.cloud import aiplatform_v1  # noqa: F401  (before the first request, not during it)

        self.standin, self.page_size = standin, page_size
        self.schedules: dict[str, Any] = {}  # full name -> aiplatform_v1.Schedule as kept
        self.created: list[dict[str, Any]] = []  # the bodies as received
        self._ids = itertools.count(4_000_000_001)
        standin.route("POST", _PREFIX, self._create)
        standin.route("GET", _PREFIX, self._list)
        standin.route("GET", _PREFIX + r"/(?P<id>[^/:]+)", self._get)
        standin.route("POST", _PREFIX + r"/(?P<id>[^/:]+):pause", self._pause)
        standin.route("POST", _PREFIX + r"/(?P<id>[^/:]+):resume", self._resume)
        standin.route("DELETE", _PREFIX + r"/(?P<id>[^/:]+)", self._delete)

    def _create(self, req: Request, m: re.Match):
        from google.cloud import aiplatform_v1

        schedule = decode(req, aiplatform_v1.Schedule)
        body = req.json()
        request = decode(req, aiplatform_v1.CreatePipelineJobRequest, body.get("createPipelineJobRequest") or {})
        parent = f"projects/{m['project']}/locations/{m['location']}"
        if not schedule.cron or not schedule.display_name:
            raise BadRequest("Schedule.cron and Schedule.display_name are required.")
        if schedule.max_concurrent_run_count <= 0:
            raise BadRequest("Schedule.max_concurrent_run_count must be positive.")
        if request.parent != parent:
            raise BadRequest(f"CreatePipelineJobRequest.parent {request.parent!r} must be {parent!r}.")
        if not request.pipeline_job.pipeline_spec:
            raise BadRequest("CreatePipelineJobRequest.pipeline_job.pipeline_spec is required.")
        name = f"{parent}/schedules/{next(self._ids)}"
        schedule.name = name
        schedule.state = aiplatform_v1.Schedule.State.ACTIVE
        schedule.create_time = schedule.update_time = "2026-11-29T12:00:00Z"
        schedule.next_run_time = NEXT_RUN
        self.schedules[name] = schedule
        self.created.append(body)
        return 200, typed(req, schedule)

    def _named(self, m: re.Match):
        return self.schedules.get(f"projects/{m['project']}/locations/{m['location']}/schedules/{m['id']}")

    def _missing(self, m: re.Match):
        return 404, google_error(404, f"Schedule projects/{m['project']}/locations/{m['location']}/schedules/"
                                      f"{m['id']} not found.")

    def _list(self, req: Request, m: re.Match):
        from google.cloud import aiplatform_v1

        parent = f"projects/{m['project']}/locations/{m['location']}"
        request = decode_query(req, aiplatform_v1.ListSchedulesRequest, {"parent": parent})
        mine = [s for name, s in sorted(self.schedules.items()) if name.startswith(parent + "/")]
        if request.filter and request.filter != "create_pipeline_job_request:*":
            raise BadRequest(f"this stand-in reads one filter, not {request.filter!r}")
        start = int(request.page_token or 0)
        size = request.page_size or self.page_size
        page = mine[start:start + size]
        token = str(start + size) if start + size < len(mine) else ""
        return 200, typed(req, aiplatform_v1.ListSchedulesResponse(schedules=page, next_page_token=token))

    def _get(self, req: Request, m: re.Match):
        found = self._named(m)
        return (200, typed(req, found)) if found is not None else self._missing(m)

    def _state(self, req: Request, m: re.Match, request_type: str, state: str, **fields):
        from google.cloud import aiplatform_v1

        found = self._named(m)
        if found is None:
            return self._missing(m)
        body = json.loads(req.body or b"{}")
        request = decode(req, getattr(aiplatform_v1, request_type), {**body, "name": found.name})
        if state == "PAUSED" and found.state != aiplatform_v1.Schedule.State.ACTIVE:
            return 400, google_error(400, f"Schedule {found.name} is not ACTIVE; it cannot be paused.")
        if state == "ACTIVE" and found.state != aiplatform_v1.Schedule.State.PAUSED:
            return 400, google_error(400, f"Schedule {found.name} is not PAUSED; it cannot be resumed.")
        found.state = getattr(aiplatform_v1.Schedule.State, state)
        if request_type == "ResumeScheduleRequest":
            found.catch_up = request.catch_up
        return 200, {}

    def _pause(self, req: Request, m: re.Match):
        return self._state(req, m, "PauseScheduleRequest", "PAUSED")

    def _resume(self, req: Request, m: re.Match):
        return self._state(req, m, "ResumeScheduleRequest", "ACTIVE")

    def _delete(self, req: Request, m: re.Match):
        found = self._named(m)
        if found is None:
            return self._missing(m)
        del self.schedules[found.name]
        return 200, {"name": f"{found.name.rsplit('/schedules/', 1)[0]}/operations/77", "done": True,
                     "response": {"@type": "type.googleapis.com/google.protobuf.Empty"}}
