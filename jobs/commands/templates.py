"""Pipeline templates in Artifact Registry: upload the compiled pipeline, download one to run it.

``python pipelines/run.py upload-template --config X --host https://REGION-kfp.pkg.dev/PROJECT/REPO
[--tag T ...] [--set k=v]`` runs the plan and the preflight that submit runs (``jobs.cloud.planning``: the option of
``placement`` it takes, region and strategy, is what the template carries; ``jobs.rules.preflight.job_problems``: a
template never carries what submit would refuse: images pinned by digest, no placeholders, gs:// output),
compiles the pipeline exactly as ``--compile-only`` does and uploads it: one multipart POST of the YAML
(``content``) with the tags (``tags``, comma-separated), the request ``kfp.registry.RegistryClient``
sends. It prints ``<package>/sha256:<hex>`` and the URI that ``run.py --project P --template URI`` runs.

Why not ``RegistryClient`` itself: it posts with the module-level ``requests.post`` and no timeout, and
offers no session or timeout to set; an endpoint that accepts the connection and never answers hung it
forever. The same request goes through ``jobs.cloud.apis.clients.http`` instead (connect/read timeouts; the
same bytes give the same version, so a lost answer is retried). The answer must be exactly
``<pipeline name>/sha256:<sha256 of the bytes sent>``: a 200 saying anything else is not an upload.

Credentials: for ``https://*-kfp.pkg.dev`` the Application Default Credentials' token (Google hosts only);
for a loopback stand-in (``http://127.0.0.1:P/proj/repo``) a fixed dummy bearer token, nothing else.
Exit status: 0 uploaded, 2 bad arguments/config, 1 the upload failed, 130 Ctrl-C.
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
from pathlib import Path

from jobs.cloud import planning
from jobs.cloud.apis import clients
from jobs.rules import preflight, validate
from jobs.cloud.apis.policy import CREATE_OWN_ID
from jobs.cloud.apis.lines import http_message, run_command
from jobs.cloud.apis.credentials import access_token, is_local_endpoint
from jobs.rules.command_line import plain, shown
from jobs.commands.flag_file import flag_file_warnings, max_cost_problems
from jobs.commands import output_file
from jobs.rules.errors import CloudError
from jobs.run_records.own_outputs import is_compiled_pipeline
from jobfile.config_files import load_document
from jobfile.errors import ConfigError

AR_HOST_RE = re.compile(r"^https://(?P<location>[a-z]+-[a-z]+[0-9]+)-kfp\.pkg\.dev/(?P<project>[^/]+)/(?P<repo>[^/]+)/?$")
LOCAL_HOST_RE = re.compile(r"^http://(?:127\.[0-9.]+|localhost):[0-9]+/(?P<project>[^/]+)/(?P<repo>[^/]+)/?$")
TAG_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$")
STAND_IN_TOKEN = "local-stand-in"


def host_problem(host: str) -> str | None:
    """None when ``host`` is an Artifact Registry KFP repository (or a loopback stand-in), else why not."""
    if AR_HOST_RE.fullmatch(host) or LOCAL_HOST_RE.fullmatch(host):
        return None
    return (f"--host: {host!r} is not a Kubeflow Pipelines repository in Artifact Registry; expected "
            "https://REGION-kfp.pkg.dev/PROJECT/REPO (create one with: gcloud artifacts repositories create REPO "
            "--repository-format=kfp --location=REGION); valid choices: https://us-central1-kfp.pkg.dev/PROJECT/REPO")


def _auth(url: str) -> tuple[dict[str, str], str | None]:
    """(extra headers, Google token): a dummy bearer for a loopback stand-in, else the ADC token."""
    if is_local_endpoint(url):
        return {"Authorization": f"Bearer {STAND_IN_TOKEN}"}, None
    return {}, access_token("Artifact Registry")


def upload(package_path: str, host: str, tags: list[str] | None = None) -> tuple[str, str]:
    """Upload a compiled pipeline YAML; returns (package name, ``sha256:<hex>`` version)."""
    import yaml

    content = Path(package_path).read_bytes()
    package = yaml.safe_load(content)["pipelineInfo"]["name"]
    version = "sha256:" + hashlib.sha256(content).hexdigest()
    headers, token = _auth(host)
    doing = f"uploading the template to {host}"
    response = clients.http("POST", host, kind=CREATE_OWN_ID, doing=doing, service="Artifact Registry",
                            headers=headers, google_token=token,
                            files={"content": (Path(package_path).name, content)},
                            data={"tags": ",".join(tags)} if tags else None,
                            unsure="the same bytes can be uploaded again safely")
    if response.status_code != 200:
        hint = " (the account needs roles/artifactregistry.writer on the repository)" if response.status_code == 403 else ""
        raise CloudError(f"{doing}: {response.status_code} {http_message(response)}{hint}")
    answer = " ".join(response.text.split())
    if answer != f"{package}/{version}":
        shown = answer if len(answer) <= 120 and not answer.startswith("<") else "(an HTML page or long text)"
        raise CloudError(f"{doing}: the registry answered 200 {shown!r}, not {package}/{version}: the upload "
                                 "is not confirmed; check --host (an Artifact Registry KFP repository) and try again")
    return package, version


def download(uri: str, path: str, api_endpoint: str | None = None) -> str:
    """Download template ``uri`` to ``path`` (for ``run.py --template``): the ADC token goes only to the
    Google host (none when ``api_endpoint`` is a loopback stand-in: a test run has no credentials)."""
    token = None if is_local_endpoint(api_endpoint) else access_token("Artifact Registry")
    doing = f"downloading the template {uri}"
    response = clients.http("GET", uri, doing=doing, service="Artifact Registry", google_token=token)
    if response.status_code != 200:
        raise CloudError(f"{doing}: {response.status_code} {http_message(response)}")
    import yaml

    try:
        spec = yaml.safe_load(response.content)
        spec["pipelineInfo"]["name"]
    except Exception:
        raise CloudError(f"{doing}: the answer is not a compiled pipeline (an HTML page or other text)") \
            from None
    Path(path).write_bytes(response.content)
    return path


def main(argv: list[str], compile_pipeline) -> int:
    """``run.py upload-template``; ``compile_pipeline(cfg, path, "vertex", base_image=...)`` is the caller's
    (this package never imports ``pipelines/``)."""
    return run_command(lambda a: _main(a, compile_pipeline), argv)


def _fail(problems) -> int:
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 2


def _main(argv: list[str], compile_pipeline) -> int:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py upload-template"), description=plain(__doc__.split("\n\n")[0]))
    p.add_argument("--config", default="local", help="preset or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set container.image_uri=REPO@sha256:... (repeatable)")
    p.add_argument("--host", required=True, help="https://REGION-kfp.pkg.dev/PROJECT/REPO")
    p.add_argument("--tag", dest="tags", action="append", default=[], help="tag of the uploaded version (repeatable)")
    p.add_argument("--image", help="base image for the pipeline's components")
    p.add_argument("--keep", metavar="OUT.yaml", default="",
                   help="also write the uploaded YAML here (the bytes of the version uploaded, for a build's artifacts)")
    p.add_argument("--max-cost", type=float, metavar="USD", help="refuse a plan that can cost more (as budget.max_total)")
    p.add_argument("--prices", default="", metavar="FILE", help="your own price file (as budget.prices)")
    p.add_argument("--require-checks", action="store_true",
                   help="a check of the project that could not be made (no credentials or permission) is an error")
    args = p.parse_args(argv)
    problems = [host_problem(args.host)] + [
        f"--tag: {t!r} is not a tag (letters, digits, '.', '_', '-'; not sha256:...); valid choices: latest, v1"
        for t in args.tags if not TAG_RE.fullmatch(t)] + [str(e) for e in max_cost_problems(args.max_cost)]
    warnings: list[str] = []
    try:
        cfg, report = validate.validate_document(load_document(args.config, args.overrides), check_data=False)
        problems += [str(e) for e in report.errors]
    except ConfigError as exc:
        cfg = None
        problems += [str(e) for e in exc.problems]
    if args.keep:
        kept = output_file.output_problem(args.keep, "--keep", "upload-template", inputs=[args.config],
                                          example="pipeline.yaml", ours=is_compiled_pipeline)
        problems += [str(kept)] if kept else []
    match = AR_HOST_RE.fullmatch(args.host) or LOCAL_HOST_RE.fullmatch(args.host)
    placement = None
    if cfg is not None and match:
        # the plan first (jobs.cloud.planning): the template carries the option it takes (region, strategy) and the
        # judgement of every option (the default of its placement_plan parameter)
        try:
            plan = planning.decide(cfg, match["project"], cfg.topology.region, max_cost=args.max_cost,
                                   require_checks=args.require_checks, price_file=args.prices)
        except ConfigError as exc:
            return _fail(exc.problems)
        for line in planning.short_lines(plan):
            print(line, file=sys.stderr)  # stdout is the uploaded version, read by scripts (cloudbuild.yaml)
        cfg = plan.submitted
        placement = plan.placement_doc() if plan.pick is not None else None
        errors, warnings = preflight.job_problems(cfg, match["project"], cfg.topology.region,
                                                  components_image=args.image or "")
        problems += plan.errors + [str(e) for e in errors]
        warnings = [*flag_file_warnings(cfg, "", "", "", args.max_cost), *plan.unchecked, *plan.warnings, *warnings]
    if preflight.say(problems, warnings):
        return 2
    cfg = preflight.placeholder_free(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        path = compile_pipeline(cfg, str(Path(tmp) / f"{cfg.name}.yaml"), "vertex", base_image=args.image,
                                placement=placement)
        package, version = upload(path, args.host, args.tags)
        if args.keep:  # exactly the bytes uploaded (their sha256 is the version), under THE output rule
            try:
                output_file.write_output(args.keep, Path(path).read_bytes(), "--keep", "upload-template",
                                         inputs=[args.config], ours=is_compiled_pipeline)
            except output_file.OutputRefused as exc:
                return _fail([f"{exc} (the template was uploaded: {package}/{version})"])
    print(f"{package}/{version}")
    ref = args.tags[0] if args.tags else version
    print(shown(f"run it with: python pipelines/run.py --project PROJECT --region REGION --pipeline-root "
                f"gs://BUCKET/PATH --template {args.host.rstrip('/')}/{package}/{ref}"), file=sys.stderr)
    return 0
