"""Submit the training pipeline to Vertex AI Pipelines: preflight, compile, create, follow.

``python pipelines/run.py --config X --project P --region R --pipeline-root gs://BUCKET/PATH`` lands in
:func:`submit`. Everything Vertex would reject later is checked first (``jobs.rules.preflight``, shared
with ``upload-template``), plus what only a submission has:

* ``--pipeline-root``: ``gs://BUCKET/PATH`` (only gs://; a folder, not a whole bucket);
* the job id ``<name>-<UTC time>-<4 random [a-z0-9]>`` within ``^[a-z][-a-z0-9]{0,127}$``: two
  submissions in the same second get different ids;
* ``--service-account`` / ``--network`` / ``--labels`` forms; Vertex TensorBoard needs a service account;
* ``--template URI``: an Artifact Registry KFP template, downloaded here (token to Google hosts only, under
  the policy) and its components' images checked like compiled ones.

Then the pipeline is compiled exactly as ``--compile-only`` compiles it (or the template is used), created
through ``jobs.cloud.apis.vertex`` and, unless ``--no-wait``, followed to its end. Exit status: 0 succeeded (or
submitted with ``--no-wait``), 1 the job failed or a cloud call failed, 2 a preflight problem, 130 Ctrl-C
(the job itself goes on: the line names it and where to cancel it).
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import re
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jobs.cloud import planning
from jobs.cloud.apis import clients, vertex
from jobs.commands import templates
from jobs.rules import preflight as checks
from jobs.cloud.apis.lines import ended, keeps_running, run_command
from jobs.rules import labels as run_labels
from jobs.rules.command_line import plain, seconds_problem, shown
from jobs.commands.flag_file import empty_flag_problems, flag_file_warnings, max_cost_problems
from jobs.rules.hardware.vertex_rules import identity_problems, peering_problems
from jobfile import config as config_lib
from jobfile.errors import ConfigError, Problem, problem

JOB_ID_RE = re.compile(r"^[a-z][-a-z0-9]{0,127}$")
TEMPLATE_RE = re.compile(r"^https://[a-z0-9-]+-kfp\.pkg\.dev/[^/]+/[^/]+/[^/]+/[^/]+$")
#: the flags that only a Vertex run takes (run.py refuses them without --project)
VERTEX_ONLY = ("--region", "--pipeline-root", "--service-account", "--network", "--labels", "--no-wait",
               "--no-cache", "--api-endpoint", "--template", "--poll-seconds", "--max-cost", "--require-checks",
               "--prices")


#: ``--poll-seconds``' ceiling: a longer interval between state checks would miss a job's end by over an hour.
POLL_MAX_S = 3600.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The Vertex AI options of ``run.py`` (used with ``--project``; refused without it)."""
    g = p.add_argument_group("Vertex AI Pipelines (with --project)")
    g.add_argument("--region", help="Vertex AI region of the pipeline job (default: topology.region)")
    g.add_argument("--pipeline-root", help="gs://BUCKET/PATH where Vertex keeps the pipeline's artifacts")
    g.add_argument("--service-account", help="run as NAME@PROJECT.iam.gserviceaccount.com (default: the "
                                             "Compute Engine default service account)")
    g.add_argument("--network", help="VPC peering network, projects/PROJECT_NUMBER/global/networks/NAME")
    g.add_argument("--labels", nargs="+", metavar="KEY=VALUE", help="labels of the pipeline job")
    g.add_argument("--no-wait", action="store_true", default=None, help="print the job's name and link, do not follow it")
    g.add_argument("--no-cache", action="store_true", default=None, help="run every step again (default: Vertex "
                                                                       "reuses the results of unchanged steps)")
    g.add_argument("--api-endpoint", help="Vertex AI endpoint (e.g. a local stand-in http://127.0.0.1:PORT)")
    g.add_argument("--template", metavar="URI", help="run an uploaded template (https://REGION-kfp.pkg.dev/"
                                                     "PROJECT/REPO/PACKAGE/TAG) instead of compiling")
    g.add_argument("--poll-seconds", type=float, help="longest interval between state checks (default 20)")
    g.add_argument("--max-cost", type=float, metavar="USD", help="refuse a plan that can cost more (as budget.max_total; "
                                                                 "vtp plan shows the figure)")
    g.add_argument("--prices", metavar="FILE", help="your own price file (the form of jobs/rules/hardware/prices.yaml; "
                                                    "as budget.prices): its figures win over the table's")
    g.add_argument("--require-checks", action="store_true", default=None,
                   help="a check of the project that could not be made (no credentials or permission) is an error")


def vertex_flag_problems(args: argparse.Namespace) -> list[Problem]:
    """``--project ""`` and the Vertex-only flags without ``--project``: a cloud run must never silently
    become a local one; ``--poll-seconds`` > 0."""
    if args.project is not None and not args.project.strip():
        return [problem("--project", "is empty: give the Google Cloud project to submit to, or leave --project "
                                     "out to run on this machine", [checks.PROJECT_FORM])]
    out = []
    if args.project is None:
        for flag in VERTEX_ONLY:
            if getattr(args, flag[2:].replace("-", "_"), None) is not None:
                out.append(problem(flag, "only for Vertex runs; add --project PROJECT or remove it"))

    if seconds_problem("--poll-seconds", args.poll_seconds, POLL_MAX_S):
        out.append(problem("--poll-seconds", f"must be a finite number of seconds above 0 and at most "
                                             f"{POLL_MAX_S:g}, got {args.poll_seconds:g}", ["20"]))
    out += max_cost_problems(getattr(args, "max_cost", None)) + empty_flag_problems(args)
    return out


def job_id_for(name: str, now: float | None = None) -> str:
    """``<name>-<UTC YYYYmmddHHMMSS>-<4 random [a-z0-9]>``: unique even for submissions in one second."""
    suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=4))
    return f"{name}-{time.strftime('%Y%m%d%H%M%S', time.gmtime(now))}-{suffix}"


def preflight(cfg: config_lib.JobConfig, project: str, region: str, pipeline_root: str, *,
              service_account: str = "", network: str = "", labels: list[str] = (), template: str = "",
              components_image: str = "", max_cost: float | None = None) -> tuple[list[Problem], list[str], dict[str, str]]:
    """Every problem Vertex would have (errors), what it would do surprisingly (warnings), the labels."""
    errors = checks.project_problems("--project", project) + checks.region_problems("--region", region)
    errors += checks.gcs_problems("--pipeline-root", pipeline_root, f"gs://{checks.BUCKET_FORM}/pipeline-root")
    region_ok = not any(p.field == "--region" for p in errors)
    if checks.PIPELINE_NAME_RE.fullmatch(cfg.name):
        job_id = job_id_for(cfg.name)
        if not JOB_ID_RE.fullmatch(job_id):
            fixed = ("tf-" + cfg.name if not cfg.name[0].isalpha() else cfg.name)[:108]
            errors.append(problem("name", f"the job id {job_id!r} would break Vertex's rule ^[a-z][-a-z0-9]{{0,127}}$ "
                                          "(it is the name plus '-', a 14-digit UTC time, '-' and 4 random "
                                          "characters)", [fixed]))
    identity = identity_problems(service_account, network, project)
    errors += identity
    if network and not any(p.field == "--network" for p in identity):
        errors += peering_problems("--network", network, cfg)
    if cfg.output.tensorboard and not (service_account or cfg.vertex.service_account):
        errors.append(problem("--service-account", "output.tensorboard (Vertex TensorBoard) needs the training job "
                                                   "to run as a service account with roles/aiplatform.user and "
                                                   "roles/storage.objectAdmin on the bucket",
                              [f"pipeline-runner@{project}.iam.gserviceaccount.com"]))
    parsed, label_problems = checks.parse_labels(list(labels))
    errors += label_problems
    if template and not TEMPLATE_RE.fullmatch(template):
        errors.append(problem("--template", f"{template!r} is not a template in Artifact Registry (it is "
                                            "https://REGION-kfp.pkg.dev/PROJECT/REPO/PACKAGE/TAG-or-sha256:HEX)",
                              [f"https://{region}-kfp.pkg.dev/{project}/REPO/{cfg.name}/latest"]))
    warnings: list[str] = flag_file_warnings(cfg, region, service_account, network, max_cost)
    if region_ok:  # the job's own rules need a real region
        job_errors, job_warnings = checks.job_problems(cfg, project, region, components_image=components_image,
                                                       replicas_only=bool(template))
        errors += job_errors
        warnings += job_warnings
    return errors, warnings, parsed


def template_problems(path: str, project: str, region: str) -> tuple[list[Problem], list[str]]:
    """The images inside a downloaded template (its components' executors), checked like compiled ones."""
    import yaml

    spec = yaml.safe_load(Path(path).read_text()) or {}
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    images = {f"--template ({name})": e["container"]["image"] for name, e in sorted(executors.items())
              if isinstance(e, dict) and "container" in e and "gcr.io/ml-pipeline/google-cloud-pipeline-components"
              not in e["container"].get("image", "")}
    return checks.images_problems(images, project, region)


# --------------------------------------------------------------------------------------------------
# The flow


@dataclasses.dataclass
class Decision:
    """What the plan decided, as a submission sends it: the job under the pick (its region and strategy), the
    placement judgement the pipeline's training step ranks (``placement_plan``), the pipeline job's id (a saved
    plan names it; empty: made at submission), and the plan's lines, errors and warnings."""
    cfg: config_lib.JobConfig | None
    region: str
    placement: dict[str, Any] | None
    job_id: str = ""
    lines: list[str] = dataclasses.field(default_factory=list)
    errors: list[Any] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


def decide(cfg: config_lib.JobConfig, args: argparse.Namespace, region: str) -> Decision:
    """The plan made now (``jobs.cloud.planning.decide``), as :class:`Decision`; a price file that cannot be read is one
    error."""
    try:
        plan = planning.decide(cfg, args.project, region, max_cost=getattr(args, "max_cost", None),
                               require_checks=bool(getattr(args, "require_checks", None)),
                               price_file=getattr(args, "prices", None) or "")
    except ConfigError as exc:
        return Decision(None, region, None, errors=list(exc.problems))
    picked = plan.pick is not None
    return Decision(plan.submitted if picked else None, plan.option.region if picked else region,
                    plan.placement_doc() if picked else None, lines=planning.short_lines(plan), errors=plan.errors,
                    warnings=[*plan.unchecked, *plan.warnings])


def submit(cfg: config_lib.JobConfig, args: argparse.Namespace, compile_pipeline, out=print, err=None,
           decision: Decision | None = None) -> int:
    """Preflight, compile (``compile_pipeline(cfg, path, "vertex", base_image=..., placement=...)``, the caller's:
    this package never imports ``pipelines/``) or download ``--template``, create the job, print its name and
    link, follow it. ``decision``: a saved plan's (``vtp apply``); None: the plan is made first, as ``vtp plan``
    makes it."""
    return run_command(lambda _: _submit(cfg, args, compile_pipeline, out, err, decision), [])


def _submit(cfg: config_lib.JobConfig, args: argparse.Namespace, compile_pipeline, out=print, err=None,
            decision: Decision | None = None) -> int:
    err = err or (lambda line: print(line, file=sys.stderr))
    # the create, and everything before it (the plan included), ends within the policy's total_s of the command's
    # start (README: "a create gives up within 120 s"); following the job afterwards is not bounded by it
    with clients.within():
        region = args.region or cfg.topology.region
        # the plan first (jobs.cloud.planning): the option it takes (region, strategy) is what is checked and sent
        if decision is None and not checks.region_problems("--region", region):
            decision = decide(cfg, args, region)
        if decision is not None:
            for line in decision.lines:
                err(line)
            if decision.cfg is not None:
                cfg, region = decision.cfg, decision.region
        errors, warnings, labels = preflight(cfg, args.project, region, args.pipeline_root or "",
                                             service_account=args.service_account or "", network=args.network or "",
                                             labels=args.labels or [], template=args.template or "",
                                             components_image=getattr(args, "image", None) or "",
                                             max_cost=getattr(args, "max_cost", None))
        if decision is not None:
            warnings = [*decision.warnings, *warnings]
            errors = [*decision.errors, *errors]
        if checks.say(errors, warnings, err):
            return 2
        cfg = checks.placeholder_free(cfg)
        if region != cfg.topology.region and not (decision is not None and decision.cfg is not None):
            cfg = cfg.with_overrides([f"topology.region={region}"])  # said by a flag_file_warnings line
        job_id = (decision.job_id if decision is not None else "") or job_id_for(cfg.name)
        labels = {**labels, **run_labels.for_job(cfg.for_vertex(), job_id, trial="")}  # the run, by id and config
        params = {"config_json": cfg.for_vertex().to_json(), "location": region,
                  "service_account": args.service_account or "", "network": args.network or ""}
        if decision is not None and decision.placement:
            params["placement_plan"] = decision.placement
        with tempfile.TemporaryDirectory() as tmp:
            if args.template:
                path = templates.download(args.template, str(Path(tmp) / "template.yaml"), args.api_endpoint)
                if checks.say(*template_problems(path, args.project, region), err):
                    return 2
            else:
                path = compile_pipeline(cfg, str(Path(tmp) / "pipeline.yaml"), "vertex", base_image=args.image,
                                        placement=decision.placement if decision is not None else None)
            if "placement_plan" in params and "placement_plan" not in _parameters(path):
                params.pop("placement_plan")
                err("warning: --template: this template has no placement_plan parameter (made before it): its "
                    "training step ranks the placement it was uploaded with, not this plan's")
            request = vertex.pipeline_job_request(
                path, project=args.project, location=region, job_id=job_id, display_name=cfg.name,
                pipeline_root=args.pipeline_root, parameter_values=params, labels=labels,
                service_account=args.service_account, network=args.network,
                enable_caching=False if args.no_cache else None, template_uri=args.template or "")
        client, job = vertex.submit_pipeline(request, project=args.project, location=region, job_id=job_id,
                                             api_endpoint=args.api_endpoint, log=out)
    keeps_running(f"pipeline job {job.name}", vertex.job_hint(job.name))
    out(f"submitted pipeline job {job.name}")
    out(f"  {vertex.console_url(args.project, region, job_id)}")
    if args.no_wait:
        return 0
    state, message = vertex.follow(client, job.name, poll_s=args.poll_seconds or 20.0, log=out)
    ended(f"pipeline job {job.name}")
    if state != "PIPELINE_STATE_SUCCEEDED":
        err(f"error: pipeline job {job.name} ended {state.replace('PIPELINE_STATE_', '')}: {message}")
        return 1
    out(f"pipeline job {job_id} succeeded; model and logs under {cfg.output.base_dir}")
    return 0


def _parameters(path: str) -> set[str]:
    """The root parameters a compiled pipeline declares."""
    import yaml

    spec = yaml.safe_load(Path(path).read_text()) or {}
    return set((((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {}))


def register_main(argv: list[str]) -> int:
    """``python pipelines/run.py register-model``: register an exported SavedModel folder (gs://) in the Model
    Registry with the same request the pipeline's Vertex branch sends."""
    return run_command(_register, argv)


def _register(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py register-model"), description=plain(register_main.__doc__))
    p.add_argument("--config", default="local")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. --set container.image_uri=REPO@sha256:... (repeatable)")
    p.add_argument("--project", required=True)
    p.add_argument("--region", help="default: topology.region")
    p.add_argument("--model-dir", required=True, help="gs://BUCKET/PATH holding saved_model.pb")
    p.add_argument("--api-endpoint")
    args = p.parse_args(argv)
    try:
        cfg = config_lib.load(args.config, args.overrides)
    except ConfigError as exc:
        for prob in exc.problems:
            print(f"error: {prob}", file=sys.stderr)
        return 2
    region = args.region or cfg.topology.region
    problems = checks.project_problems("--project", args.project) + checks.region_problems("--region", region)
    problems += checks.gcs_problems("--model-dir", args.model_dir, f"gs://{checks.BUCKET_FORM}/runs/<name>/model")
    for prob in problems:
        print(f"error: {prob}", file=sys.stderr)
    if problems:
        return 2
    request = vertex.model_upload_request(cfg, args.model_dir, args.project, region)
    name = vertex.upload_model(request, region, args.api_endpoint)
    print(f"registered {name} (container {request['model']['containerSpec']['imageUri']})")
    return 0
