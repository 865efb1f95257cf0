"""The plan of a Vertex job (``vtp plan`` says it: ``jobs.cloud.plan_cli``): the request(s) the pipeline's training
step will send, the price, the options of ``placement`` with why each was taken or skipped, and the checks of the
project, decided before anything is sent.

* The request is built by the step's own code: THE spec (``jobs.spec.job_spec.custom_job_spec``, its parts as the
  ``validate_config`` step outputs them) parsed into the installed client's message by the step's own converter
  (``jobs.cloud.custom_job.custom_job``; a study: ``jobs.cloud.tuning_job.tuning_job`` and the baseline CustomJob
  from ``jobs.spec.job_spec.baseline_job_spec``), shown as the client's JSON (``to_json``: camelCase; enums by name,
  where the REST transport sends their numbers). The built-in trainer's ``--config-json`` argument is shown
  shortened in the request and decoded beside it (the fields that differ from the defaults); ``--out`` writes
  the whole request, unshortened, atomically. Vertex AI Pipelines adds the run's system labels at run time.
* The options (``jobs.spec.placement.options``): for each, the hardware catalog's rules in that region and strategy
  (``jobs.spec.placement.with_option``), the project's quota there (``Project.quota``), the bucket's continent against
  the region's (another continent: a warning naming egress and latency), the price (``jobs.spec.hardware.prices``) and
  the budget. The cheapest option that fits is taken (the user's order breaks ties and orders unknown prices).
* The project (``Project``, ``jobs.spec.placement``): through :data:`PROJECT_FACTORY`. A finding that could not be
  checked (no credentials, no permission) is one ``warning: not checked`` line and the plan goes on;
  ``--require-checks`` makes each an error (for CI).

Submit (``jobs.cloud.submit``), ``upload-template`` (``jobs.cloud.templates``) and so the Cloud Build trigger's
submit step run :func:`decide` first and check and send its pick (region and strategy), their preflight's lines and
the plan's together (:func:`short_lines`, the unchecked items, the errors): one preflight, not two.
Exit status of ``vtp plan``: 0 a plan that fits, 2 a problem (bad input, nothing fits, over budget, a check
failed or, with ``--require-checks``, was not made).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

from jobs.cloud import custom_job, tuning_job
from jobs.cloud.project import CloudProject
from jobs.spec import job_spec, placement, validate
from jobs.spec.command_line import shown
from jobs.spec.hardware import prices
from jobs.spec.image_reference import BuildError
from jobs.spec.job_image import build_repository
from jobs.spec.placement import Finding, Option, Project
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
        report = _named_by(report, placement.region_field(cfg, option))
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


def _named_by(report, field: str):
    """``report`` with its ``topology.region`` problems named by ``field`` (where the option's region comes from)."""
    def named(problems):
        return [dataclasses.replace(p, field=field) if p.field == "topology.region" else p for p in problems]
    return dataclasses.replace(report, errors=named(report.errors), warnings=named(report.warnings))


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
