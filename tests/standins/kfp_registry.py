"""A local stand-in of an Artifact Registry Kubeflow Pipelines repository (``https://REGION-kfp.pkg.dev/P/R``).

Answers what ``kfp.registry.RegistryClient`` sends for a host ``http://127.0.0.1:PORT/PROJECT/REPO``:

* ``POST /PROJECT/REPO`` multipart (``content``: the pipeline YAML, ``tags``: comma-separated) ->
  ``<package>/sha256:<hex>`` where package is the YAML's ``pipelineInfo.name`` and hex the content's sha256;
* ``GET /PROJECT/REPO/PACKAGE/(sha256:HEX|TAG)`` -> the YAML (what a template URI downloads).

Uploads are kept in ``packages[package][version] = {"content", "tags"}``; a request without a bearer
token is answered 401 as the real host does; a form with other fields, or content that does not parse
strictly as the real type (``kfp.pipeline_spec.pipeline_spec_pb2.PipelineSpec``), is answered 400.
"""
from __future__ import annotations

import hashlib
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import yaml

from tests.standins.base import Request, StandIn


def multipart_fields(req: Request) -> dict[str, bytes]:
    """The form fields of a multipart/form-data body, by name."""
    content_type = req.headers.get("Content-Type") or req.headers.get("content-type") or ""
    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + req.body)
    return {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
            for part in message.iter_parts()}


class KfpRegistryStandIn(StandIn):
    def __init__(self, project: str = "proj", repo: str = "repo"):
        super().__init__()
        self.project, self.repo = project, repo
        self.packages: dict[str, dict[str, dict[str, Any]]] = {}
        self.route("POST", rf"/{project}/{repo}/?", self._upload)
        self.route("GET", rf"/{project}/{repo}/(?P<package>[^/]+)/(?P<ref>[^/]+)", self._download)

    @property
    def host(self) -> str:
        return f"{self.url}/{self.project}/{self.repo}"

    def _unauthorized(self, req: Request) -> bool:
        auth = req.headers.get("Authorization") or req.headers.get("authorization") or ""
        return not auth.startswith("Bearer ")

    def _upload(self, req: Request, m) -> tuple[int, Any]:
        if self._unauthorized(req):
            return 401, {"error": {"code": 401, "message": "Request is missing required authentication credential."}}
        from google.protobuf import json_format
        from kfp.pipeline_spec import pipeline_spec_pb2

        fields = multipart_fields(req)
        if not set(fields) <= {"content", "tags"} or "content" not in fields:
            return 400, {"error": {"code": 400, "message": f"unexpected form fields {sorted(fields)}"}}
        content = fields.get("content") or b""
        try:
            spec = json_format.ParseDict(yaml.safe_load(content), pipeline_spec_pb2.PipelineSpec())
            name = spec.pipeline_info.name
        except Exception:
            return 400, {"error": {"code": 400, "message": "the uploaded file is not a compiled KFP pipeline"}}
        version = "sha256:" + hashlib.sha256(content).hexdigest()
        tags = [t for t in (fields.get("tags") or b"").decode().split(",") if t]
        self.packages.setdefault(name, {})[version] = {"content": content, "tags": tags}
        return 200, f"{name}/{version}"

    def _download(self, req: Request, m) -> tuple[int, Any]:
        versions = self.packages.get(m["package"], {})
        for version, entry in versions.items():
            if m["ref"] == version or m["ref"] in entry["tags"]:
                return 200, entry["content"]
        return 404, {"error": {"code": 404, "message": f"{m['package']}/{m['ref']} not found"}}
