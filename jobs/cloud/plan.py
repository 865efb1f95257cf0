"""``vtp plan``: the Vertex job you will pay for, where it runs and whether your project can run it, before anything
is sent. Like ``terraform plan``: every field of the request(s) the pipeline's training step will send, the price,
the options of ``placement`` with why each was taken or skipped, and one line per check of the project.

* The request is built by the step's own code: THE spec (``jobs.job_spec.custom_job_spec``, its parts as the
  ``validate_config`` step outputs them) parsed into the installed client's message by the step's own converter
  (``jobs.cloud.custom_job.custom_job``; a study: ``jobs.cloud.tuning_job.tuning_job`` and the baseline CustomJob
  from ``jobs.job_spec.baseline_job_spec``), shown as the client's JSON (``to_json``: camelCase; enums by name,
  where the REST transport sends their numbers). The built-in trainer's ``--config-json`` argument is shown
  shortened in the request and decoded beside it (the fields that differ from the defaults); ``--out`` writes
  the whole request, unshortened, atomically. Vertex AI Pipelines adds the run's system labels at run time.
* The options (``jobs.placement.options``): for each, the hardware catalog's rules in that region and strategy
  (``jobs.placement.with_option``), the project's quota there (``Project.quota``), the bucket's continent against
  the region's (another continent: a warning naming egress and latency), the price (``jobs.hardware.prices``) and
  the budget. The cheapest option that fits is taken (the user's order breaks ties and orders unknown prices).
* The project (``Project``, ``jobs.placement``): through :data:`PROJECT_FACTORY`. A finding that could not be
  checked (no credentials, no permission) is one ``warning: not checked`` line and the plan goes on;
  ``--require-checks`` makes each an error (for CI).

Submit (``jobs.cloud.submit``), ``upload-template`` (``jobs.cloud.templates``) and so the Cloud Build trigger's
submit step run :func:`decide` first and check and send its pick (region and strategy), their preflight's lines and
the plan's together (:func:`short_lines`, the unchecked items, the errors): one preflight, not two.
Exit status of ``vtp plan``: 0 a plan that fits, 2 a problem (bad input, nothing fits, over budget, a check
failed or, with ``--require-checks``, was not made).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from jobs import placement
from jobs.hardware import prices
from jobs.placement import Finding, Option, Project
from trainers import config as config_lib
from trainers.errors import Problem, problem

PROJECT_PLACEHOLDER = "PROJECT"


class Unchecked(Project):
    """A project the plan cannot ask: every check is one ``ok=None`` finding saying why."""

    def __init__(self, why: str):
        self.why = why

    def quota(self, cfg, option):
        return [Finding(f"quota in {option.region}", None, f"quota in {option.region} not checked: {self.why}")]

    def bucket_location(self, uri):
        return None, [Finding(f"bucket of {uri}", None, f"the bucket of {uri} not checked: {self.why}")]

    def setup(self, cfg, option):
        return [Finding("project set-up", None, "APIs, images, service account, network not checked: " + self.why)]


def _project(project_id: str | None, api_endpoint: str = "") -> Project:
    """THE hook that gives the plan its :class:`Project`: the project's own answers through the real client
    libraries (``jobs.cloud.project``: Cloud Quotas, Service Usage, Cloud Storage, Artifact Registry, IAM, Compute);
    ``api_endpoint`` a loopback stand-in points every one of them there. Without a project (no ``--project``, no
    ``GOOGLE_CLOUD_PROJECT``), every check is said as not made."""
    from jobs.cloud.project import CloudProject

    project = CloudProject.from_environment(project_id or None, api_endpoint or None)
    if not project.project:
        return Unchecked("no --project given (nor GOOGLE_CLOUD_PROJECT)")
    return project


#: ``(project id or None, api_endpoint) -> Project``; a test puts a fake here
PROJECT_FACTORY: Callable[[str | None, str], Project] = _project

#: where Cloud Storage locations and Vertex regions are, by continent (bucket location prefixes: regions such as
#: ``US-CENTRAL1``, multi-regions ``US``/``EU``/``ASIA``, predefined dual-regions ``NAM4``/``EUR4``/``ASIA1``;
#: https://cloud.google.com/storage/docs/locations, read via the catalog's region names, 2026-11-27)
CONTINENTS = (("northamerica", "North America"), ("us", "North America"), ("nam", "North America"),
              ("southamerica", "South America"), ("europe", "Europe"), ("eu", "Europe"), ("eur", "Europe"),
              ("asia", "Asia Pacific"), ("australia", "Asia Pacific"), ("me", "Middle East"), ("africa", "Africa"))


def continent(location: str) -> str | None:
    """The continent of a region (``europe-west4``) or a bucket location (``EU``, ``US-CENTRAL1``, ``NAM4``)."""
    head = location.lower().split("-")[0].rstrip("0123456789")
    return next((name for prefix, name in CONTINENTS if head == prefix), None)


# --------------------------------------------------------------------------------------------------
# The requests


def image_problem(cfg: config_lib.JobConfig) -> tuple[str, Problem | None]:
    """(what the request shows as the image, the problem when nothing names or builds one): the job's image; with
    no ``container.image_uri``, the image ``vtp build`` will make into ``container.image_repository``."""
    from jobs.cli import shown
    from jobs.image_reference import BuildError
    from jobs.job_image import build_repository

    if cfg.container.image_uri:
        return cfg.container.image_uri, None
    try:
        repository = build_repository(cfg)
    except BuildError as exc:
        return "", problem("container.image_uri", shown(f"is empty and nothing builds an image: {exc}"),
                           [shown("python pipelines/run.py build --config JOB --image REPO, then "
                                  "--set container.image_uri=<the reference it prints>")])
    return f"{repository}:<content tag>@sha256:<digest> (the image `vtp build` will make)", None


@dataclasses.dataclass
class Request:
    title: str  # "CustomJob", "HyperparameterTuningJob", "CustomJob (the baseline)"
    collection: str  # customJobs | hyperparameterTuningJobs
    message: Any  # the aiplatform_v1 message

    def body(self) -> dict[str, Any]:
        """The request body as the client's REST transport writes it (camelCase, fields at their defaults left
        out), enums by name where the transport writes their numbers."""
        return json.loads(type(self.message).to_json(self.message, use_integers_for_enums=False, indent=0,
                                                     always_print_fields_with_no_presence=False))

    def url(self, project: str, region: str) -> str:
        return f"POST https://{region}-aiplatform.googleapis.com/v1/projects/{project}/locations/{region}/{self.collection}"


def requests(cfg: config_lib.JobConfig, *, image: str = "", service_account: str = "", network: str = "") -> list[Request]:
    """The request(s) the compiled pipeline's training step sends for ``cfg`` started with its defaults: the
    config as the pipeline carries it (``JobConfig.for_vertex``), the image the build step hands on, the spec's
    parts as ``validate_config`` outputs them, converted by the step's own code."""
    from jobs import job_spec
    from jobs.cloud import custom_job, tuning_job

    cfg = cfg.for_vertex().with_image(image) if image else cfg.for_vertex()
    spec = job_spec.custom_job_spec(cfg, service_account=service_account, network=network)
    if not cfg.tuning.enabled:
        return [Request("CustomJob", "customJobs", custom_job.custom_job(display_name=cfg.name, **job_spec.parts(spec)))]
    out = [Request("HyperparameterTuningJob", "hyperparameterTuningJobs", tuning_job.tuning_job(
        display_name=cfg.name, tuning=tuning_job.study_of(cfg.tuning), trial_job_spec=spec))]
    if cfg.tuning.baseline:  # named as validate_config names it
        base = job_spec.parts(job_spec.baseline_job_spec(cfg, service_account=service_account, network=network))
        parts = {**job_spec.parts(spec), "worker_pool_specs": base["worker_pool_specs"],
                 "base_output_directory": base["base_output_directory"]}
        out.append(Request("CustomJob (the baseline beside the study)", "customJobs",
                           custom_job.custom_job(display_name=f"{cfg.name}-baseline", **parts)))
    return out


CONFIG_FLAG = "--config-json"


def shortened(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every ``--config-json`` argument replaced by a line saying what it is (decoded beside)."""
    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            out = []
            for i, v in enumerate(value):
                if i and value[i - 1] == CONFIG_FLAG and isinstance(v, str):
                    out.append(f"<the job config: {len(v)} characters of JSON, decoded below>")
                else:
                    out.append(walk(v))
            return out
        return value
    return walk(body)


def config_changes(config_json: str) -> dict[str, Any]:
    """The fields of a ``--config-json`` that differ from the defaults, flattened (``training.epochs: 10``)."""
    given = json.loads(config_json)
    defaults = config_lib.JobConfig().to_dict()

    def flat(doc, base, prefix=""):
        out = {}
        for key, value in doc.items():
            default = base.get(key) if isinstance(base, dict) else None
            if isinstance(value, dict) and value and isinstance(default, dict):
                out.update(flat(value, default, f"{prefix}{key}."))
            elif value != default:
                out[f"{prefix}{key}"] = value
        return out
    return flat(given, defaults)


def config_argument(body: dict[str, Any]) -> str | None:
    for pool in (body.get("jobSpec") or body.get("trialJobSpec") or {}).get("workerPoolSpecs") or []:
        args = ((pool or {}).get("containerSpec") or {}).get("args") or []
        if CONFIG_FLAG in args[:-1]:
            return args[args.index(CONFIG_FLAG) + 1]
    return None


# --------------------------------------------------------------------------------------------------
# The options and the choice


@dataclasses.dataclass
class Verdict:
    option: Option
    cost: prices.Cost
    fits: bool = True
    why: str = ""  # why skipped, or the notes of a fitting option
    taken: bool = False
    findings: list[Finding] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Plan:
    cfg: config_lib.JobConfig  # the job under the pick (its region and strategy)
    project: str
    verdicts: list[Verdict]
    pick: Verdict | None
    findings: list[Finding]  # the pick's project checks (quota, bucket, set-up)
    errors: list[str]
    warnings: list[str]
    unchecked: list[str]

    @property
    def option(self) -> Option | None:
        return self.pick.option if self.pick else None


def _bucket_warning(region: str, location: str | None, uri: str) -> str:
    where, there = continent(region), continent(location or "")
    if location and where and there and where != there:
        return (f"output.base_dir: the bucket of {uri} is in {location} ({there}) and the job in {region} ({where}): "
                "every checkpoint, log and model crosses continents (inter-continental egress charges, slower "
                f"reads and writes); use a bucket in {region}")
    return ""


def decide(cfg: config_lib.JobConfig, project_id: str | None = None, region: str = "", *, project: Project | None = None,
           max_cost: float | None = None, require_checks: bool = False, api_endpoint: str = "") -> Plan:
    """Every option of ``cfg`` checked, the cheapest that fits taken; the pick's project checks. ``project``: the
    :class:`Project` to ask (default: :data:`PROJECT_FACTORY`)."""
    from jobs import validate

    project = project if project is not None else PROJECT_FACTORY(project_id, api_endpoint)
    errors: list[str] = []
    warnings: list[str] = []
    unchecked: list[str] = []
    uri = cfg.output.base_dir
    location, bucket_findings = (project.bucket_location(uri) if uri.startswith("gs://") else (None, []))
    verdicts: list[Verdict] = []
    for option in placement.options(cfg, region):
        job = placement.with_option(cfg, option)
        v = Verdict(option, prices.cost(job, option.region, option.strategy))
        report = validate.validate(job, check_data=False)
        if report.errors:
            v.fits, v.why = False, f"the hardware catalog: {report.errors[0]}"
            verdicts.append(v)
            continue
        v.warnings += [str(w) for w in report.warnings]
        v.findings = project.quota(job, option)
        short = [f for f in v.findings if f.ok is False and f.severity == "error"]
        if short:
            v.fits, v.why = False, short[0].line
        elif prices.budget_problems(job, v.cost, max_cost):
            over = prices.budget_problems(job, v.cost, max_cost)[0]
            v.fits, v.why = False, f"over budget: {over.field}: {over.message}"
        far = _bucket_warning(option.region, location, uri)
        if far:
            v.warnings.append(far)
        verdicts.append(v)
    fitting = [v for v in verdicts if v.fits]
    known = [v for v in fitting if v.cost.most is not None]
    pick = min(known, key=lambda v: (v.cost.most, v.cost.per_hour)) if known else (fitting[0] if fitting else None)
    findings: list[Finding] = []
    if pick is None:
        reasons = "; ".join(f"{v.option}: {v.why}" for v in verdicts)
        errors.append(str(problem("placement", f"no option fits ({reasons})",
                                  _alternatives(cfg, verdicts, max_cost))))
        chosen = cfg
    else:
        pick.taken = True
        pick.why = ("the cheapest that fits" if len(known) > 1 else "the only one that fits" if len(fitting) == 1
                    else "the first that fits (price unknown)" if not known else "fits")
        chosen = placement.with_option(cfg, pick.option)
        warnings += pick.warnings
        findings = [*pick.findings, *bucket_findings, *project.setup(chosen, pick.option)]
        errors += [str(p) for p in prices.budget_problems(chosen, pick.cost, max_cost)]
        unpriced = prices.unpriced_bars(chosen, pick.cost, max_cost)
        if require_checks:
            errors += [f"{b} (--require-checks)" for b in unpriced]
        else:
            warnings += unpriced
    for f in findings:
        line = f.line + (f"; fix: {f.fix}" if f.fix else "")
        if f.ok is None:
            (errors if require_checks else unchecked).append(
                f"not checked: {line}" + (" (--require-checks)" if require_checks else ""))
        elif f.ok is False:
            (errors if f.severity == "error" else warnings).append(line)
    return Plan(chosen, project_id or PROJECT_PLACEHOLDER, verdicts, pick, findings, errors, warnings, unchecked)


def _alternatives(cfg: config_lib.JobConfig, verdicts: list[Verdict], max_cost: float | None) -> list[str]:
    """What would fit when nothing does: the budget of the cheapest option, the quota's own fix, the strategies
    not tried yet, another region."""
    out = []
    cheapest = min((v.cost for v in verdicts if v.cost.most is not None and "over budget" in v.why),
                   key=lambda c: c.most, default=None)
    if cheapest is not None:
        per_hour = "budget.max_per_hour" in " ".join(v.why for v in verdicts)
        out.append(f"budget.max_per_hour={cheapest.per_hour:.2f}" if per_hour else
                   f"--max-cost {cheapest.most:.2f}" if max_cost is not None else f"budget.max_total={cheapest.most:.2f}")
    out += list(dict.fromkeys(f.fix for v in verdicts for f in v.findings if f.ok is False and f.fix))
    tried = {v.option.strategy for v in verdicts}
    if tried != set(placement.STRATEGIES):
        out.append(f"placement.strategies={list(dict.fromkeys([*sorted(tried), *placement.STRATEGIES]))}".replace("'", ""))
    if any("hardware catalog" in v.why for v in verdicts):
        out.append("another region in placement.regions (vtp hardware --accelerator TYPE lists where the catalog "
                   "offers it)")
    return out


# --------------------------------------------------------------------------------------------------
# Saying it


def options_table(plan: Plan) -> list[str]:
    rows = [("option", "per hour", "at most", "")]
    for v in plan.verdicts:
        verdict = f"taken: {v.why}" if v.taken else ("fits" if v.fits else f"skipped: {v.why}")
        rows.append((str(v.option), prices.money(v.cost.per_hour), prices.money(v.cost.most), verdict))
    w0, w1, w2 = (max(len(r[i]) for r in rows) for i in range(3))
    return [f"  {a:<{w0}}  {b:>{w1}}  {c:>{w2}}  {d}".rstrip() for a, b, c, d in rows]


def cost_lines(plan: Plan) -> list[str]:
    if plan.pick is None:
        return []
    c = plan.pick.cost
    table = prices.load_prices()
    pools = ", ".join(f"{p.pool} {p.what} {prices.money(p.per_replica)} x {p.replicas}" for p in c.job.pools)
    lines = [f"cost: {prices.money(c.per_hour)} an hour, at most {prices.money(c.most)} ({c.note})",
             f"  one job: {prices.money(c.job.per_hour)} an hour in {c.job.region} {c.job.strategy}: {pools}"]
    if c.job.unknown:
        lines.append(f"  unknown: no figure for {', '.join(c.job.unknown)} in the price table")
    lines += [f"  assumes: {m}" for m in c.job.marks]
    lines.append(f"  prices: jobs/hardware/prices.yaml of {table['prices']['date']}, list prices in USD before "
                 f"discounts and taxes ({prices.source_line('vertex_pricing', table)})")
    return lines


def say(plan: Plan, reqs: list[Request], out=print) -> None:
    """The plan on ``out``: the request(s), the options, the cost, the checks (errors and warnings are the
    caller's, on stderr)."""
    pick = plan.option
    region = pick.region if pick else plan.cfg.topology.region
    out(f"plan: {plan.cfg.name} in project {plan.project}" + (f", {pick}" if pick else ""))
    for i, r in enumerate(reqs, 1):
        body = r.body()
        out(f"request {i} of {len(reqs)}: {r.title}")
        out(f"  {r.url(plan.project, region)}")
        out("\n".join("  " + line for line in json.dumps(shortened(body), indent=2).splitlines()))
        config_json = config_argument(body)
        if config_json:
            out("  --config-json, decoded (the fields that differ from the defaults):")
            for k, v in config_changes(config_json).items():
                out(f"    {k}: {json.dumps(v)}")
    out("  (+ the run's system labels, added by Vertex AI Pipelines when it runs)")
    out("options (placement):")
    for line in options_table(plan):
        out(line)
    for line in cost_lines(plan):
        out(line)
    ok = [f for f in plan.findings if f.ok]
    if ok:
        out("checks:")
        for f in ok:
            out(f"  ok: {f.line}")


def write_json(plan: Plan, reqs: list[Request], path: str) -> None:
    """The plan as JSON, written to a temporary file beside ``path`` and renamed over it."""
    pick = plan.pick
    doc = {"project": plan.project, "pick": str(pick.option) if pick else None,
           "region": pick.option.region if pick else None, "strategy": pick.option.strategy if pick else None,
           "requests": [{"title": r.title, "url": r.url(plan.project, pick.option.region if pick else
                                                         plan.cfg.topology.region), "body": r.body()} for r in reqs],
           "options": [{"option": str(v.option), "fits": v.fits, "taken": v.taken, "why": v.why,
                        "per_hour": v.cost.per_hour, "at_most": v.cost.most} for v in plan.verdicts],
           "cost": ({"per_hour": pick.cost.per_hour, "at_most": pick.cost.most, "note": pick.cost.note,
                     "unknown": list(pick.cost.job.unknown), "assumes": list(pick.cost.job.marks),
                     "prices_date": prices.load_prices()["prices"]["date"]} if pick else None),
           "checks": [dataclasses.asdict(f) for f in plan.findings],
           "errors": plan.errors, "warnings": plan.warnings, "unchecked": plan.unchecked}
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def verdict_lines(plan: Plan, err) -> bool:
    """Unchecked items and warnings as ``warning:`` lines, errors as ``error:`` lines; True when there is an error."""
    sys.stdout.flush()
    for line in plan.unchecked + plan.warnings:
        err(f"warning: {line}")
    for line in plan.errors:
        err(f"error: {line}")
    return bool(plan.errors)


PREFIX = "plan: "


def short_lines(plan: Plan) -> list[str]:
    """What submit and upload-template say of the plan (on stderr: their stdout is read by scripts), one line per
    option: the pick with its price, every other option fitting or skipped and why."""
    lines = []
    for v in sorted(plan.verdicts, key=lambda v: not v.taken):
        if v.taken:
            lines.append(f"{PREFIX}{v.option} taken ({v.why}): {prices.money(v.cost.per_hour)} an hour, at most "
                         f"{prices.money(v.cost.most)} ({v.cost.note})")
        elif v.fits:
            lines.append(f"{PREFIX}{v.option} fits too: {prices.money(v.cost.per_hour)} an hour, at most "
                         f"{prices.money(v.cost.most)}")
        else:
            lines.append(f"{PREFIX}{v.option} skipped: {v.why}")
    return lines


# --------------------------------------------------------------------------------------------------
# vtp plan


def main(argv: list[str]) -> int:
    from jobs.cloud import clients

    return clients.run_command(_main, argv)


def _main(argv: list[str]) -> int:
    from jobs import validate
    from jobs.cli import shown
    from jobs.cloud import preflight as checks
    from trainers.errors import ConfigError

    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py plan"), description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="local", help="preset or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--project", help="the Google Cloud project (default: PROJECT, and no project check)")
    p.add_argument("--region", help="the submission's region (default: topology.region; placement.regions wins)")
    p.add_argument("--out", metavar="plan.json", help="write the plan (whole requests, options, cost, checks) as JSON")
    p.add_argument("--max-cost", type=float, metavar="USD", help="refuse a plan that can cost more (as budget.max_total)")
    p.add_argument("--require-checks", action="store_true", help="what could not be checked is an error (for CI)")
    p.add_argument("--service-account", default="", help="as submit's --service-account")
    p.add_argument("--network", default="", help="as submit's --network")
    p.add_argument("--image", default="", help="the components' image, as submit's --image")
    p.add_argument("--api-endpoint", default="", help="the project checks' endpoint (a local stand-in)")
    args = p.parse_args(argv)
    problems: list[Any] = []
    if args.max_cost is not None and not (args.max_cost >= 0 and args.max_cost != float("inf")):
        problems.append(problem("--max-cost", f"{args.max_cost} is not a price in US dollars", ["100"]))
    if args.project is not None:
        problems += checks.project_problems("--project", args.project)
    if args.region is not None:
        problems += checks.region_problems("--region", args.region)
    if args.out and not Path(args.out).resolve().parent.is_dir():
        problems.append(problem("--out", f"the folder of {args.out} does not exist", ["plan.json"]))
    if problems:
        return _fail(problems)
    said: list[str] = []
    try:
        cfg = validate.load(args.config, args.overrides, region=args.region, check_data=False, warn=said.append)
    except ConfigError as exc:
        for line in said:
            print(f"warning: {line}", file=sys.stderr)
        return _fail(exc.problems)
    region = args.region or cfg.topology.region
    errors, warnings = checks.job_problems(cfg, args.project or PROJECT_PLACEHOLDER, region,
                                           components_image=args.image)
    image, image_error = image_problem(cfg)
    # the image is said by the plan itself (image_problem): the preflight's own line about it would repeat it
    errors = [e for e in errors if e.field not in ("container.image_uri", "the components' image")
              or (cfg.container.image_uri and e.field == "container.image_uri")]
    if image_error:
        errors.append(image_error)
    cfg = checks.placeholder_free(cfg)
    plan = decide(cfg, args.project, region, max_cost=args.max_cost, require_checks=args.require_checks,
                  api_endpoint=args.api_endpoint)
    reqs = requests(plan.cfg, image=image or "<no image: see the error on container.image_uri>",
                    service_account=args.service_account, network=args.network)
    say(plan, reqs)
    if args.out:
        write_json(plan, reqs, args.out)
        print(f"plan written to {args.out}")
    plan.warnings = list(dict.fromkeys(str(w) for w in [*said, *warnings, *plan.warnings]))
    plan.errors = [str(e) for e in errors] + plan.errors
    return 2 if verdict_lines(plan, lambda line: print(line, file=sys.stderr)) else 0


def _fail(problems) -> int:
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 2

