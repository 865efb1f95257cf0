"""The Cloud Build v1 API, as much of it as ``CloudBuildClient.create_build`` + operation polling use.

Routes are what the real client (google-cloud-build 3.43, REST transport) was seen to request:

* ``POST /v1/projects/P/builds`` (or ``/v1/projects/P/locations/L/builds``) with the Build as JSON
  (``$alt=json;enum-encoding=int``): answered with a long-running Operation named
  ``operations/build/P/<base64 id>`` whose metadata is a ``BuildOperationMetadata`` holding the build;
* ``GET /v1/projects/P/builds/ID`` (``get_build``, how the product follows a build) and
  ``GET /v1/<operation name>``: the build (or the operation holding it), moving QUEUED -> WORKING -> the
  final status over ``polls_to_finish`` polls; when done the Build is SUCCESS, with
  ``results.images[].digest`` for each of ``build.images``, or carries ``status``/``statusDetail``/
  ``failureInfo`` as the real service reports a failed build (the operation: ``response`` or ``error``).

The request body is parsed into the ``Build`` proto (unknown fields fail the request with 400, as the
real API does). When a :class:`~tests.standins.gcs.Gcs` is given, a ``storageSource`` object that was
never uploaded makes the build fail in FETCHSOURCE, like the real service.
Answers use integer enums when the client asked for them (``enum-encoding=int``), names otherwise.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re

from tests.standins.base import Request, StandIn, decode, google_error

BUILD_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.Build"
METADATA_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata"


class CloudBuild:
    def __init__(self, standin: StandIn, gcs=None, outcome: str = "SUCCESS", polls_to_finish: int = 2,
                 status_detail: str = "", failure_type: str = "USER_BUILD_STEP"):
        self.standin, self.gcs = standin, gcs
        self.outcome, self.polls_to_finish = outcome, polls_to_finish
        self.status_detail, self.failure_type = status_detail, failure_type
        self.report_digests = True  # False: a SUCCESS without results.images (to test the product's check)
        self.builds: dict[str, dict] = {}  # build id -> {"request": body, "project": P, "polls": n}
        self._ids = itertools.count(1)
        standin.route("POST", r"/v1/projects/([^/]+)(?:/locations/[^/]+)?/builds", self._create)
        standin.route("GET", r"/v1/(operations/build/([^/]+)/([^/]+))", self._get_operation)
        standin.route("GET", r"/v1/projects/([^/]+)(?:/locations/[^/]+)?/builds/([^/:]+)", self._get_build)

    @property
    def requests(self) -> list[dict]:
        """The Build bodies the product sent, in order."""
        return [b["request"] for b in self.builds.values()]

    @staticmethod
    def digest_for(image: str) -> str:
        return "sha256:" + hashlib.sha256(image.encode()).hexdigest()

    def _create(self, req: Request, m: re.Match):
        from google.cloud.devtools import cloudbuild_v1

        body = req.json()
        decode(req, cloudbuild_v1.Build)  # unknown fields, bad enums or durations: 400 as the real API
        build_id = f"00000000-0000-4000-8000-{next(self._ids):012d}"
        self.builds[build_id] = {"request": body, "project": m.group(1), "polls": 0}
        return 200, self._operation(req, build_id)

    def _get_operation(self, req: Request, m: re.Match):
        build_id = base64.urlsafe_b64decode(m.group(3) + "==").decode()
        if build_id not in self.builds:
            return 404, google_error(404, f"operation {m.group(1)} not found")
        self.builds[build_id]["polls"] += 1
        return 200, self._operation(req, build_id)

    def _get_build(self, req: Request, m: re.Match):
        build_id = m.group(2)
        if build_id not in self.builds or self.builds[build_id]["project"] != m.group(1):
            return 404, google_error(404, f"build {build_id} not found")
        self.builds[build_id]["polls"] += 1
        return 200, self._operation(req, build_id)["metadata"]["build"]

    def _status(self, build_id: str) -> tuple[str, str, dict]:
        """(status, statusDetail, failureInfo) of the build after the polls it has had."""
        entry = self.builds[build_id]
        polls = entry["polls"]
        if polls == 0:
            return "QUEUED", "", {}
        if polls < self.polls_to_finish:
            return "WORKING", "", {}
        source = entry["request"].get("source", {}).get("storageSource")
        if self.gcs is not None and source and (source["bucket"], source["object"]) not in self.gcs.objects:
            detail = f"fetching storage source: object gs://{source['bucket']}/{source['object']} does not exist"
            return "FAILURE", detail, {"type": "FETCH_SOURCE_FAILED", "detail": detail}
        if self.outcome == "SUCCESS":
            return "SUCCESS", "", {}
        detail = self.status_detail or f"build {self.outcome.lower()}"
        return self.outcome, detail, ({"type": self.failure_type, "detail": detail}
                                      if self.outcome == "FAILURE" else {})

    def _operation(self, req: Request, build_id: str) -> dict:
        from google.cloud.devtools import cloudbuild_v1

        entry = self.builds[build_id]
        status, detail, failure = self._status(build_id)
        build = dict(entry["request"], id=build_id, projectId=entry["project"], status=status,
                     logUrl=f"https://console.cloud.google.com/cloud-build/builds/{build_id}?project={entry['project']}",
                     createTime="2026-11-22T08:00:00Z")
        if detail:
            build["statusDetail"] = detail
        if failure:
            build["failureInfo"] = failure
        if status == "SUCCESS" and self.report_digests:
            build["results"] = {"images": [{"name": i, "digest": self.digest_for(i), "pushTiming": {}}
                                           for i in entry["request"].get("images", [])]}
        ints = "enum-encoding=int" in " ".join(req.query.get("$alt", []))
        pb = cloudbuild_v1.Build.pb(cloudbuild_v1.Build())
        from google.protobuf import json_format

        json_format.ParseDict(build, pb)  # what we answer is a valid Build, encoded as the client asked
        build = json.loads(json_format.MessageToJson(pb, use_integers_for_enums=ints))
        name = f"operations/build/{entry['project']}/{base64.urlsafe_b64encode(build_id.encode()).decode().rstrip('=')}"
        op = {"name": name, "metadata": {"@type": METADATA_TYPE, "build": build}}
        if status in ("QUEUED", "WORKING"):
            return op
        op["done"] = True
        if status == "SUCCESS":
            op["response"] = dict(build, **{"@type": BUILD_TYPE})
        else:
            op["error"] = {"code": 2 if status == "FAILURE" else 4,
                           "message": "Build failed; check build logs for details"}
        return op
