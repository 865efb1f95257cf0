"""``vtp schedule``: the same job on a schedule, as a Vertex AI ``PipelineJobSchedule`` (``aiplatform_v1``'s
``ScheduleServiceClient``, REST, every call under the one client policy of ``jobs.cloud.apis.clients``).

    vtp schedule create --config JOB --cron "TZ=America/New_York 0 3 * * *" --project P [--region R]
                        --pipeline-root gs://BUCKET/root (--host https://R-kfp.pkg.dev/P/REPO | --template URI)
                        [--name NAME] [--service-account SA] [--network N] [--labels K=V ...] [--max-cost USD]
                        [--require-checks]
    vtp schedule list   --project P [--region R]
    vtp schedule pause | resume [--catch-up] | delete  SCHEDULE --project P [--region R]

**create** checks what submit checks (``jobs.commands.submit.preflight``, after the plan: ``jobs.cloud.planning.decide``; its
pick is what every run carries) and the cron expression and its time zone (``jobs.rules.cron``: one ``error:`` line
each), compiles the pipeline as ``--compile-only`` does and uploads it to Artifact Registry (``--host``: the bytes'
``sha256`` version, never a tag that can move; or ``--template``: one already uploaded, its images checked), then
creates the schedule. Every run it starts:

* is that template, with the job's config, the region, ``folder_per_run`` (each run writes into
  ``<output.base_dir>/<its pipeline job name>``: a shared folder would resume last night's finished checkpoint and
  train nothing) and ``require_checks`` as its parameters;
* carries the labels (``jobs.rules.labels.run_labels``: the job, the schedule, ``--labels``) and runs as the service
  account (``--service-account``, else ``vertex.service_account``), which Vertex copies from the schedule's pipeline
  job into each run it starts (runs started without them: googleapis/python-aiplatform#2929, #4039);
* begins with the plan's checks inside the pipeline (``components/check_plan``: quota, budget, the project, as the
  run starts) and, when they fail, ends with one message through ``notify:`` and no job created.

**Choices** (documented in docs/vertex.md): ``max_concurrent_run_count`` 1 and ``allow_queueing`` false: a run due
while the last one still runs is skipped, not queued: two runs of one job would share quota and budget, and a queue
piles up runs after an outage that nobody asked for. Catch-up: off; ``resume --catch-up`` starts the runs missed
while the schedule was paused (Vertex's ``ResumeScheduleRequest.catch_up``), one after another.

The create's id is the server's, so a create whose answer was lost is not repeated (the line says a schedule may exist
and the command that lists them). Exit status: 0 done, 2 bad input or a preflight problem, 1 a cloud call failed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from jobs.cloud import planning
from jobs.cloud.apis import clients, vertex
from jobs.commands import submit, templates
from jobs.rules import preflight as checks
from jobs.cloud.apis.credentials import client_kwargs
from jobs.cloud.apis.lines import run_command
from jobs.cloud.apis.policy import CREATE_SERVER_ID
from jobs.rules import cron as cron_rules, validate
from jobs.rules.command_line import shown
from jobs.rules.labels import run_labels
from jobfile.errors import ConfigError, problem

#: at most one run of a schedule at a time, and a run due meanwhile is skipped (module docstring)
MAX_CONCURRENT_RUNS = 1
ALLOW_QUEUEING = False
SERVICE = "Vertex AI"
SCHEDULE_ID_RE = r"^[0-9]+$"
FULL_NAME_RE = r"^projects/[^/]+/locations/[^/]+/schedules/[^/]+$"


def schedule_client(location: str, api_endpoint: str | None = None):
    from google.cloud import aiplatform_v1

    return aiplatform_v1.ScheduleServiceClient(**client_kwargs(vertex.endpoint_for(location, api_endpoint), SERVICE))


def listing_command(project: str, region: str) -> str:
    return shown(f"python pipelines/run.py schedule list --project {project} --region {region}")


def schedule_request(request, *, project: str, region: str, display_name: str, cron: str):
    """The ``Schedule`` to create: ``request`` (the ``PipelineJob`` every run is made from) in a
    ``CreatePipelineJobRequest``, the cron with its time zone, at most :data:`MAX_CONCURRENT_RUNS` at once."""
    from google.cloud import aiplatform_v1

    return aiplatform_v1.Schedule(
        display_name=display_name, cron=" ".join(cron.split()), max_concurrent_run_count=MAX_CONCURRENT_RUNS,
        allow_queueing=ALLOW_QUEUEING,
        create_pipeline_job_request=aiplatform_v1.CreatePipelineJobRequest(
            parent=f"projects/{project}/locations/{region}", pipeline_job=request))


def _when(value: Any) -> str:
    """A timestamp of the API as ``2026-11-30 08:00 UTC`` ("-" when unset)."""
    try:
        return value.strftime("%Y-%m-%d %H:%M UTC") if value else "-"
    except (AttributeError, ValueError):
        return "-"


def _state(schedule) -> str:
    return getattr(schedule.state, "name", str(schedule.state))


# --------------------------------------------------------------------------------------------------
# create


def template_lacks(path: str, cfg, template: str) -> list:
    """What an uploaded template (``--template``) lacks that every scheduled run needs: the plan's checks at its start
    (``check-plan``), the parameters a schedule sets, and the exit handler ``notify:`` asks for (its structure is
    the template's, whatever the config says)."""
    import yaml

    spec = yaml.safe_load(Path(path).read_text()) or {}
    tasks = json.dumps(spec.get("components", {})) + json.dumps(spec.get("root", {}))
    parameters = set(((spec.get("root") or {}).get("inputDefinitions") or {}).get("parameters") or {})
    again = ["upload it again from this job file (vtp upload-template), or give --host to compile and upload it now"]
    out = []
    if '"comp-check-plan"' not in tasks or not {"folder_per_run", "require_checks"} <= parameters:
        out.append(problem("--template", f"{template} was compiled by an earlier version: its runs would not make "
                                         "the plan's checks when they start, nor each write a folder of its own", again))
    if (cfg.notify.webhook.url_secret or cfg.notify.webhook.url_env) and '"comp-notify"' not in tasks:
        out.append(problem("--template", f"{template} was compiled without notify: (no exit handler sends the run's "
                                         "end): the job file's notify.webhook would do nothing", again))
    return out


def _create(args: argparse.Namespace, compile_pipeline) -> int:
    err = lambda line: print(line, file=sys.stderr)  # noqa: E731 (stdout is the schedule's name, for scripts)
    problems = cron_rules.cron_problems(args.cron) + checks.project_problems("--project", args.project)
    if args.region is not None:
        problems += checks.region_problems("--region", args.region)
    if bool(args.host) == bool(args.template):
        problems.append(problem("--host/--template", "give one: --host uploads the compiled pipeline to an Artifact "
                                                     "Registry KFP repository, --template names one uploaded before "
                                                     "(vtp upload-template)",
                                ["--host https://us-central1-kfp.pkg.dev/PROJECT/pipelines"]))
    elif args.host and templates.host_problem(args.host):
        problems.append(templates.host_problem(args.host))
    if args.max_cost is not None and not (args.max_cost >= 0 and args.max_cost != float("inf")):
        problems.append(problem("--max-cost", f"{args.max_cost:g} is not a price in US dollars", ["100"]))
    if problems:
        return checks.say(problems, [], err) and 2
    said: list[str] = []
    overrides = list(args.overrides) + ([f"budget.max_total={args.max_cost}"] if args.max_cost is not None else [])
    try:  # --max-cost travels as budget.max_total: every run's own plan check holds it too
        cfg = validate.load(args.config, overrides, region=args.region, check_data=False, warn=said.append)
    except ConfigError as exc:
        return checks.say(exc.problems, said, err) and 2
    name = args.name or cfg.name
    with clients.within():
        region = args.region or cfg.topology.region
        plan = planning.decide(cfg, args.project, region, require_checks=args.require_checks,
                               api_endpoint=args.api_endpoint or "")
        for line in planning.short_lines(plan):
            err(line)
        if plan.pick is not None:
            cfg, region = plan.submitted, plan.option.region
        errors, warnings, labels = submit.preflight(
            cfg, args.project, region, args.pipeline_root or "", service_account=args.service_account or "",
            network=args.network or "", labels=args.labels or [], template=args.template or "",
            components_image=args.image or "")
        warnings = [*said, *plan.unchecked, *plan.warnings, *warnings]
        if not (cfg.notify.webhook.url_secret or cfg.notify.email):
            warnings.append("notify: a scheduled run that fails tells nobody: add notify.webhook.url_secret (or "
                            "notify.email) to the job file")
        if checks.say([*plan.errors, *errors], warnings, err):
            return 2
        cfg = checks.placeholder_free(cfg)
        if region != cfg.topology.region and plan.pick is None:
            cfg = cfg.with_overrides([f"topology.region={region}"])
        params = {"config_json": cfg.for_vertex().to_json(), "location": region,
                  "service_account": args.service_account or "", "network": args.network or "",
                  "folder_per_run": True, "require_checks": bool(args.require_checks)}
        with tempfile.TemporaryDirectory() as tmp:
            if args.template:
                path, template_uri = templates.download(args.template, str(Path(tmp) / "template.yaml"),
                                                        args.api_endpoint), args.template
                errors, warnings = submit.template_problems(path, args.project, region)
                if checks.say([*errors, *template_lacks(path, cfg, args.template)], warnings, err):
                    return 2
            else:
                path = compile_pipeline(cfg, str(Path(tmp) / f"{cfg.name}.yaml"), "vertex", base_image=args.image)
                package, version = templates.upload(path, args.host, args.tags)
                template_uri = f"{args.host.rstrip('/')}/{package}/{version}"
                err(f"uploaded the template: {package}/{version}")
            request = vertex.pipeline_job_request(
                path, project=args.project, location=region, job_id=submit.job_id_for(cfg.name), display_name=cfg.name,
                pipeline_root=args.pipeline_root, parameter_values=params,
                labels=run_labels(cfg, labels, schedule=name), service_account=args.service_account or
                cfg.vertex.service_account or None, network=args.network, template_uri=template_uri)
        schedule = schedule_request(request, project=args.project, region=region, display_name=name, cron=args.cron)
        client = schedule_client(region, args.api_endpoint)
        parent = f"projects/{args.project}/locations/{region}"
        created = clients.call(client.create_schedule, parent=parent, schedule=schedule, kind=CREATE_SERVER_ID,
                               doing=f"creating schedule {name!r} in {parent}", service=SERVICE,
                               unsure=f"a schedule may have been created even so: {listing_command(args.project, region)}",
                               hints={403: "the account needs roles/aiplatform.user in the project"})
    job = created.create_pipeline_job_request.pipeline_job
    print(created.name)
    err(f"created schedule {created.name}: {created.display_name!r} at {cron_rules.describe(created.cron)}, "
        f"state {_state(created)}, next run {_when(created.next_run_time)}")
    err(f"  every run: the template {job.template_uri or template_uri}, as {job.service_account or 'Vertex’s default service account'}, "
        f"labels {', '.join(f'{k}={v}' for k, v in sorted(job.labels.items()))}, in its own folder "
        f"{cfg.output.base_dir.rstrip('/')}/<pipeline job name>, the plan's checks first")
    err(f"  at most {created.max_concurrent_run_count} run at a time (a run due meanwhile is skipped, not queued); "
        f"missed runs are not caught up on resume unless --catch-up")
    return 0


# --------------------------------------------------------------------------------------------------
# list, pause, resume, delete


def _list(args: argparse.Namespace) -> int:
    region = args.region or "us-central1"
    client = schedule_client(region, args.api_endpoint)
    parent = f"projects/{args.project}/locations/{region}"

    def every_page(**policy):  # the pager reads later pages with the retry and timeout given here
        return list(client.list_schedules(request={"parent": parent, "filter": "create_pipeline_job_request:*"},
                                          **policy))

    found = clients.call(every_page, doing=f"listing the schedules of {parent}", service=SERVICE,
                         hints={403: "the account needs roles/aiplatform.viewer in the project"})
    if not found:
        print(f"no pipeline schedules in {parent}")
        return 0
    rows = [("SCHEDULE", "STATE", "CRON", "NEXT RUN", "RUNS", "NAME")]
    for s in found:
        rows.append((s.name.rsplit("/", 1)[-1], _state(s), s.cron, _when(s.next_run_time), str(s.started_run_count),
                     s.display_name))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        print("  ".join(f"{v:<{w}}" for v, w in zip(r, widths)) + "  " + r[5])
    return 0


def full_name(schedule: str, project: str, region: str) -> str | None:
    """A schedule's resource name from its id or its name; None when it is neither."""
    import re

    if re.match(FULL_NAME_RE, schedule):
        return schedule
    if re.match(SCHEDULE_ID_RE, schedule):
        return f"projects/{project}/locations/{region}/schedules/{schedule}"
    return None


def _change(args: argparse.Namespace) -> int:
    region = args.region or "us-central1"
    name = full_name(args.schedule, args.project, region)
    if name is None:
        print(f"error: {problem('SCHEDULE', f'{args.schedule!r} is neither a schedule id nor its resource name', ['1234567890', f'projects/{args.project}/locations/{region}/schedules/1234567890'])}", file=sys.stderr)
        return 2
    client = schedule_client(name.split("/")[3], args.api_endpoint)
    doing = {"pause": "pausing", "resume": "resuming", "delete": "deleting"}[args.action] + f" schedule {name}"
    hints = {404: f"no such schedule: {listing_command(args.project, region)}",
             403: "the account needs roles/aiplatform.user in the project"}
    if args.action == "pause":
        clients.call(client.pause_schedule, name=name, doing=doing, service=SERVICE, hints=hints)
        print(f"paused {name}: no run starts until it is resumed (runs already started go on)")
    elif args.action == "resume":
        clients.call(client.resume_schedule, name=name, catch_up=bool(args.catch_up), doing=doing, service=SERVICE,
                     hints=hints)
        print(f"resumed {name}" + (": the runs missed while it was paused start first, one at a time"
                                   if args.catch_up else ": the runs missed while it was paused are not started"))
    else:
        operation = clients.call(client.delete_schedule, name=name, doing=doing, service=SERVICE, hints=hints,
                                 unsure=f"it may be deleted even so: {listing_command(args.project, region)}")
        done = getattr(getattr(operation, "operation", None), "done", False)
        print(f"deleted {name}" if done else f"deleting {name} (operation {operation.operation.name}); "
              f"{listing_command(args.project, region)} shows when it is gone")
    return 0


# --------------------------------------------------------------------------------------------------
# the command


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py schedule"),
                                description="The same job on a schedule: a Vertex AI pipeline schedule.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=shown(__doc__.split("\n\n")[1]))
    actions = p.add_subparsers(dest="action", required=True, metavar="create|list|pause|resume|delete")

    def common(q):
        q.add_argument("--project", required=True, help="the Google Cloud project")
        q.add_argument("--region", help="the schedule's region (create: the plan's pick; else us-central1)")
        q.add_argument("--api-endpoint", help="Vertex AI endpoint (e.g. a local stand-in http://127.0.0.1:PORT)")

    c = actions.add_parser("create", help="compile, upload and schedule the job")
    common(c)
    c.add_argument("--config", default="local", help="preset or YAML file")
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--cron", required=True, help=f"when, with its time zone: {cron_rules.EXAMPLE!r}")
    c.add_argument("--name", help="the schedule's display name (default: the job's name)")
    c.add_argument("--pipeline-root", required=True, help="gs://BUCKET/PATH where Vertex keeps the runs' artifacts")
    c.add_argument("--host", help="upload the compiled pipeline to this Artifact Registry KFP repository "
                                  "(https://REGION-kfp.pkg.dev/PROJECT/REPO)")
    c.add_argument("--tag", dest="tags", action="append", default=[], help="with --host: a tag of the upload")
    c.add_argument("--template", help="an uploaded template instead (https://REGION-kfp.pkg.dev/P/REPO/PACKAGE/VERSION)")
    c.add_argument("--service-account", help="every run's account (default: vertex.service_account)")
    c.add_argument("--network", help="VPC peering network, projects/PROJECT_NUMBER/global/networks/NAME")
    c.add_argument("--labels", nargs="+", metavar="KEY=VALUE", help="every run's labels")
    c.add_argument("--image", help="the components' image")
    c.add_argument("--max-cost", type=float, metavar="USD", help="every run's budget (as budget.max_total)")
    c.add_argument("--require-checks", action="store_true",
                   help="a check of the project that cannot be made (no permission) fails the run")
    common(actions.add_parser("list", help="the project's pipeline schedules in a region"))
    for action, what in (("pause", "start no run until resumed"), ("resume", "start runs again"),
                         ("delete", "delete the schedule (runs already started go on)")):
        q = actions.add_parser(action, help=what)
        q.add_argument("schedule", help="the schedule's id or resource name (vtp schedule list)")
        common(q)
        if action == "resume":
            q.add_argument("--catch-up", action="store_true", help="start the runs missed while it was paused")
    return p


def main(argv: list[str], compile_pipeline) -> int:
    """``vtp schedule``; ``compile_pipeline(cfg, path, "vertex", base_image=...)`` is the caller's."""
    return run_command(lambda a: _main(a, compile_pipeline), argv)


def _main(argv: list[str], compile_pipeline) -> int:
    args = parser().parse_args(argv)
    if args.action == "create":
        return _create(args, compile_pipeline)
    project_problems = checks.project_problems("--project", args.project)
    if args.region is not None:
        project_problems += checks.region_problems("--region", args.region)
    if project_problems:
        return checks.say(project_problems, [], lambda line: print(line, file=sys.stderr)) and 2
    return _list(args) if args.action == "list" else _change(args)
