"""Upload the compiled pipeline to Artifact Registry as a Vertex AI Pipelines template.

``python pipelines/run.py upload-template --config X --host https://REGION-kfp.pkg.dev/PROJECT/REPO
[--tag T ...] [--set k=v]`` compiles the pipeline exactly as ``--compile-only`` does and uploads it with
``kfp.registry.RegistryClient`` (a multipart POST of the YAML with the tags). It prints
``<package>/sha256:<hex>`` and the URI that ``run.py --project P --template URI`` (or the console's "Create
run from template") runs.

Credentials: for a Kubeflow Pipelines host in Artifact Registry (``https://*-kfp.pkg.dev``), Application
Default Credentials through :mod:`jobs.cloud.clients`; for a loopback stand-in (``http://127.0.0.1:P/proj/repo``)
a fixed token, nothing else. Every failure is one line and exit status 1 (2 for bad arguments/config).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from jobs.cloud import clients
from trainers import config as config_lib

AR_HOST_RE = re.compile(r"^https://(?P<location>[a-z]+-[a-z]+[0-9]+)-kfp\.pkg\.dev/(?P<project>[^/]+)/(?P<repo>[^/]+)/?$")
TAG_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$")


def host_problem(host: str) -> str | None:
    """None when ``host`` is an Artifact Registry KFP repository (or a loopback stand-in), else why not."""
    if AR_HOST_RE.match(host) or (clients.is_local_endpoint(host) and host.startswith("http")):
        return None
    return (f"--host: {host!r} is not a Kubeflow Pipelines repository in Artifact Registry; expected "
            "https://REGION-kfp.pkg.dev/PROJECT/REPO (create one with: gcloud artifacts repositories create REPO "
            "--repository-format=kfp --location=REGION); valid choices: https://us-central1-kfp.pkg.dev/PROJECT/REPO")


def _registry_auth(host: str):
    if clients.is_local_endpoint(host):
        from kfp.registry.registry_client import ApiAuth

        return ApiAuth("local-stand-in")  # the stand-in checks only that a bearer token comes
    return clients.credentials(None, "Artifact Registry")


def _http_error(exc: Exception, host: str) -> str:
    import requests

    response = getattr(exc, "response", None)
    if isinstance(exc, requests.HTTPError) and response is not None:
        try:
            message = response.json()["error"]["message"]
        except Exception:
            message = response.text or response.reason
        hint = " (the account needs roles/artifactregistry.writer on the repository)" if response.status_code == 403 else ""
        return clients.one_line(RuntimeError(f"{response.status_code} {message}{hint}"), f"uploading the template to {host}")
    return clients.one_line(exc, f"uploading the template to {host}")


def upload(package_path: str, host: str, tags: list[str] | None = None) -> tuple[str, str]:
    """Upload a compiled pipeline YAML; returns (package name, ``sha256:<hex>`` version)."""
    import requests
    from kfp.registry import RegistryClient

    auth = _registry_auth(host)
    try:
        client = RegistryClient(host=host, auth=auth)
        return client.upload_pipeline(file_name=package_path, tags=list(tags or []) or None)
    except (requests.RequestException, ValueError, OSError) as exc:
        raise clients.CloudError(_http_error(exc, host)) from None
    except Exception as exc:  # google.auth refresh errors and the like
        raise clients.CloudError(clients.one_line(exc, f"uploading the template to {host}")) from None


def main(argv: list[str]) -> int:
    from jobs import validate
    from trainers.errors import ConfigError

    p = argparse.ArgumentParser(prog="python pipelines/run.py upload-template", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="local", help="preset or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--host", required=True, help="https://REGION-kfp.pkg.dev/PROJECT/REPO")
    p.add_argument("--tag", dest="tags", action="append", default=[], help="tag of the uploaded version (repeatable)")
    p.add_argument("--image", help="base image for the pipeline's components")
    args = p.parse_args(argv)
    problems = [host_problem(args.host)] + [
        f"--tag: {t!r} is not a tag (letters, digits, '.', '_', '-'; not sha256:...); valid choices: latest, v1"
        for t in args.tags if not TAG_RE.match(t)]
    try:
        cfg, report = validate.validate_document(config_lib.load_document(args.config, args.overrides), check_data=False)
        problems += [str(e) for e in report.errors]
    except ConfigError as exc:
        problems += [str(e) for e in exc.problems]
    problems = [x for x in problems if x]
    for x in problems:
        print(f"error: {x}", file=sys.stderr)
    if problems:
        return 2
    from pipelines.training_pipeline import compile_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        path = compile_pipeline(cfg, str(Path(tmp) / f"{cfg.name}.yaml"), base_image=args.image)
        try:
            package, version = upload(path, args.host, args.tags)
        except clients.CloudError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"{package}/{version}")
    ref = args.tags[0] if args.tags else version
    print(f"run it with: python pipelines/run.py --project PROJECT --region REGION --pipeline-root gs://BUCKET/PATH "
          f"--template {args.host.rstrip('/')}/{package}/{ref}", file=sys.stderr)
    return 0
