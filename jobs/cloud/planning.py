"""The plan of a Vertex job (``vtp plan`` says it: ``jobs.commands.plan_cli``): the request(s) the pipeline's training
step will send, the price, the options of ``placement`` with why each was taken or skipped, and the checks of the
project, decided before anything is sent.

* The request is built by the step's own code: THE spec (``jobs.rules.job_spec.custom_job_spec``, its parts as the
  ``validate_config`` step outputs them) parsed into the installed client's message by the step's own converter
  (``jobs.cloud.vertex_jobs.custom_job.custom_job``; a study: ``jobs.cloud.vertex_jobs.tuning_job.tuning_job`` and the baseline CustomJob
  from ``jobs.rules.job_spec.baseline_job_spec``), shown as the client's JSON (``to_json``: camelCase; enums by name,
  where the REST transport sends their numbers). The built-in trainer's ``--config-json`` argument is shown
  shortened in the request and decoded beside it (the fields that differ from the defaults); ``--out`` writes
  the whole request, unshortened, atomically. Vertex AI Pipelines adds the run's system labels at run time.
* The options (``jobs.rules.placement.options``: every rung of the hardware ladder in every region and strategy),
  judged and ranked by THE placement procedure (``jobs.rules.ranking``: the hardware catalog's rules in that region and
  strategy, the project's quota there (``Project.quota``), the price (``jobs.rules.hardware.prices``, the user's price
  file over the table) and the budget, which refuses an unknown price); the bucket's continent against the region's
  (another continent: a warning naming egress and latency). The first that fits is taken: the first rung of the
  ladder that has one, the cheapest option of it (the user's order breaks ties and orders unknown prices). The
  judgement travels to the pipeline (:meth:`Plan.placement_doc`), whose training step falls over along the same
  ranking.
* The project (``Project``, ``jobs.rules.placement``): through :data:`PROJECT_FACTORY`. A finding that could not be
  checked (no credentials, no permission) is one ``warning: not checked`` line and the plan goes on;
  ``--require-checks`` makes each an error (for CI).

Submit (``jobs.commands.submit``), ``upload-template`` (``jobs.commands.templates``) and so the Cloud Build trigger's
submit step run :func:`decide` first and check and send its pick (region and strategy), their preflight's lines and
the plan's together (:func:`short_lines`, the unchecked items, the errors): one preflight, not two.
Exit status of ``vtp plan``: 0 a plan that fits, 2 a problem (bad input, nothing fits, over budget, a check
failed or, with ``--require-checks``, was not made).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

from jobs.cloud.vertex_jobs import custom_job, tuning_job
from jobs.cloud.apis.project import CloudProject
from jobs.rules import job_spec, ladder, labels, placement, ranking
from jobs.rules.command_line import shown
from jobs.rules.hardware import prices
from jobs.rules.image_reference import BuildError
from jobs.rules.job_image import build_repository
from jobs.rules.placement import Finding, Option, Project
from jobfile import config as config_lib
from jobfile.errors import Problem, problem

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
    libraries (``jobs.cloud.apis.project``: Cloud Quotas, Service Usage, Cloud Storage, Artifact Registry, IAM, Compute);
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
    except BuildError:  # its remedies are vtp build's (--image there is the repository): the plan's are these
        given = cfg.container.image_repository
        why = (f"container.image_repository {given} still names the presets' placeholder project" if given else
               "no container.image_repository either")
        return "", problem("container.image_uri", f"is empty and nothing builds an image ({why}); plan's --image is "
                                                  "the pipeline components' image, not the one the replicas run",
                           [f"--set container.image_repository={cfg.topology.region}-docker.pkg.dev/PROJECT/training/"
                            "tf-trainer (the plan then shows the image vtp build makes there)",
                            shown("python pipelines/run.py build --config JOB --image REPO, then "
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


def requests(cfg: config_lib.JobConfig, *, image: str = "", service_account: str = "", network: str = "",
             run_id: str = "", labelled: config_lib.JobConfig | None = None) -> list[Request]:
    """The request(s) the compiled pipeline's training step sends for ``cfg`` started with its defaults: the
    config as the pipeline carries it (``JobConfig.for_vertex``), the image the build step hands on, the spec's
    parts as ``validate_config`` outputs them, converted by the step's own code, with the run's labels
    (``jobs.rules.labels``: ``run_id`` is the pipeline job's id, which a saved plan names; ``labelled``: the config the
    pipeline carries, whose hash they name, when ``cfg`` is the job on a later rung of its hardware ladder)."""
    cfg = cfg.for_vertex().with_image(image) if image else cfg.for_vertex()
    named = (labelled or cfg).for_vertex()  # the image does not change the hash (jobs.rules.labels.config_hash)
    spec = job_spec.custom_job_spec(cfg, service_account=service_account, network=network)
    if not cfg.tuning.enabled:
        return [Request("CustomJob", "customJobs", custom_job.custom_job(
            display_name=cfg.name, labels=labels.for_job(named, run_id, "none"), **job_spec.parts(spec)))]
    out = [Request("HyperparameterTuningJob", "hyperparameterTuningJobs", tuning_job.tuning_job(
        display_name=cfg.name, tuning=tuning_job.study_of(cfg.tuning), trial_job_spec=spec,
        labels=labels.for_job(named, run_id, "study")))]
    if cfg.tuning.baseline:  # named as validate_config names it
        base = job_spec.parts(job_spec.baseline_job_spec(cfg, service_account=service_account, network=network))
        parts = {**job_spec.parts(spec), "worker_pool_specs": base["worker_pool_specs"],
                 "base_output_directory": base["base_output_directory"]}
        out.append(Request("CustomJob (the baseline beside the study)", "customJobs", custom_job.custom_job(
            display_name=f"{cfg.name}-baseline", labels=labels.for_job(named, run_id, "baseline"), **parts)))
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
    """One option as the plan shows it (the ranking's judgement with its price and why)."""
    option: Option
    cost: prices.Cost
    fits: bool = True
    why: str = ""  # why skipped, or the notes of a fitting option
    taken: bool = False
    findings: list[Finding] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    #: its place in the ranking, the order the training step tries the options in (1: the pick); 0: skipped
    order: int = 0


@dataclasses.dataclass
class Plan:
    cfg: config_lib.JobConfig  # the job under the pick (its region, strategy and rung of the hardware ladder)
    project: str
    verdicts: list[Verdict]
    pick: Verdict | None
    findings: list[Finding]  # the pick's project checks (quota, bucket, set-up)
    errors: list[str]
    warnings: list[str]
    unchecked: list[str]
    judged: list[ranking.Judged] = dataclasses.field(default_factory=list)
    bars: ranking.Bars = dataclasses.field(default_factory=ranking.Bars)
    table: Any = None  # the price table the figures came from (the user's file laid over the built-in one)
    #: the job as written (its hardware ladder whole); None: :attr:`cfg`
    job: config_lib.JobConfig | None = None

    @property
    def written(self) -> config_lib.JobConfig:
        return self.job if self.job is not None else self.cfg

    @property
    def submitted(self) -> config_lib.JobConfig:
        """The config a submission sends as the pipeline's ``config_json`` (``jobs.rules.placement.submitted``): the job
        under the pick on the topology's rung, the job as written when the pick is on a later rung of its hardware
        ladder (the training step applies the rung from the judgement)."""
        return placement.submitted(self.written, self.pick.option) if self.pick else self.cfg

    @property
    def option(self) -> Option | None:
        return self.pick.option if self.pick else None

    def placement_doc(self) -> dict[str, Any]:
        """What the pipeline's ``placement_plan`` parameter carries: every option judged, ranked, with its price; the
        bars (``jobs.rules.ranking.to_doc``)."""
        table = self.table or prices.load_prices()
        return ranking.to_doc(self.judged, self.bars, ranking.rank(self.judged, self.bars),
                              source=f"vtp plan of project {self.project}, prices {prices.table_version(table)}")


def _bucket_warning(region: str, location: str | None, uri: str) -> str:
    where, there = continent(region), continent(location or "")
    if location and where and there and where != there:
        return (f"output.base_dir: the bucket of {uri} is in {location} ({there}) and the job in {region} ({where}): "
                "every checkpoint, log and model crosses continents (inter-continental egress charges, slower "
                f"reads and writes); use a bucket in {region}")
    return ""


def decide(cfg: config_lib.JobConfig, project_id: str | None = None, region: str = "", *, project: Project | None = None,
           max_cost: float | None = None, require_checks: bool = False, api_endpoint: str = "",
           price_file: str = "") -> Plan:
    """Every option of ``cfg`` judged (the catalog, the project's quota, the price) and ranked by THE placement
    procedure (``jobs.rules.ranking.rank``): the first that fits is taken; the pick's project checks. ``project``: the
    :class:`Project` to ask (default: :data:`PROJECT_FACTORY`). ``price_file``: the user's figures over the table
    (default: ``budget.prices``); a file that cannot be read or is not in the table's form is a ConfigError."""
    table = prices.price_table(price_file or cfg.budget.prices, "--prices" if price_file else "budget.prices")
    project = project if project is not None else PROJECT_FACTORY(project_id, api_endpoint)
    errors: list[str] = []
    warnings: list[str] = []
    unchecked: list[str] = []
    uri = cfg.output.base_dir
    location, bucket_findings = (project.bucket_location(uri) if uri.startswith("gs://") else (None, []))
    judged = ranking.judge_options(cfg, region, table, quota=project.quota)
    bars = ranking.Bars.of(cfg, max_cost)
    ranked = ranking.rank(judged, bars, table_date=table["prices"]["date"])
    verdicts: list[Verdict] = []
    for j in judged:
        job = placement.with_option(cfg, j.option)
        why = ranked.why(j.option)
        v = Verdict(j.option, prices.cost(job, j.option.region, j.option.strategy, table), fits=not why, why=why,
                    findings=list(j.findings), warnings=list(j.warnings))
        far = _bucket_warning(j.option.region, location, uri)
        if far:
            v.warnings.append(far)
        verdicts.append(v)
    by_option = {v.option: v for v in verdicts}
    fitting = [by_option[j.option] for j in ranked.order]
    for n, v in enumerate(fitting, 1):
        v.order = n
    pick = fitting[0] if fitting else None
    findings: list[Finding] = []
    if pick is None:
        errors.append(_nothing_fits(cfg, verdicts, judged, bars, region, table))
        chosen = cfg
    else:
        pick.taken = True
        mine = [v for v in fitting if v.option.rung == pick.option.rung]
        known = [v for v in mine if v.cost.most is not None]
        pick.why = ("the only one that fits" if len(fitting) == 1 else "the cheapest that fits" if known
                    else "the first that fits (price unknown)")
        if cfg.placement.hardware:  # the first rung that has an option that fits, then the price within it
            pick.why = (f"rung {pick.option.rung + 1} ({ladder_rung(pick.option.rung)}) is the first that fits; "
                        + ("its only option" if len(mine) == 1 else "its cheapest option" if known
                           else "its first option (price unknown)"))
        chosen = placement.with_option(cfg, pick.option)
        warnings += pick.warnings
        findings = [*pick.findings, *bucket_findings, *project.setup(chosen, pick.option)]
    for f in findings:
        line = f.line + (f"; fix: {f.fix}" if f.fix else "")
        if f.ok is None:
            (errors if require_checks else unchecked).append(
                f"not checked: {line}" + (" (--require-checks)" if require_checks else ""))
        elif f.ok is False:
            (errors if f.severity == "error" else warnings).append(line)
    return Plan(chosen, project_id or PROJECT_PLACEHOLDER, verdicts, pick, findings, errors, warnings, unchecked,
                judged, bars, table, cfg)


def ladder_rung(rung: int) -> str:
    """A rung as the plan names it, in the job file's terms: ``topology``, ``placement.hardware[0]``..."""
    return ladder.field(rung) if rung else "topology"


def _nothing_fits(cfg: config_lib.JobConfig, verdicts: list[Verdict], judged: list[ranking.Judged],
                  bars: ranking.Bars, region: str, table) -> str:
    """The one error when no option fits: why each was skipped, and what would fit (``jobs.rules.ranking.remedies``,
    the quota's own fix, another region for the catalog)."""
    fixes = ranking.remedies(cfg, bars, judged, region, table)
    fixes += list(dict.fromkeys(f.fix for v in verdicts for f in v.findings if f.ok is False and f.fix))
    if any("hardware catalog" in v.why for v in verdicts):
        fixes.append("another region in placement.regions (vtp hardware --accelerator TYPE lists where the catalog "
                     "offers it)")
    unpriced = [v for v in verdicts if v.why.startswith("price unknown")]
    refused = [v for v in verdicts if v not in unpriced and not v.why.startswith("over budget")]
    if unpriced and len(unpriced) + len(refused) == len(verdicts):  # a budget over a price nobody can compute
        first = next(j for j in judged if j.option == unpriced[0].option)
        others = "".join(f"; {v.option}: {ranking.brief(v.why)}" for v in refused)
        return str(problem(" and ".join(bars.named()), (
            f"the price of this job cannot be computed, so the budget cannot be checked and nothing is sent: "
            f"{unpriced[0].why.split(': ', 1)[1]} ({', '.join(str(v.option) for v in unpriced)}); "
            f"{ranking.supply_line(first.price)}{others}"), fixes))
    reasons = "; ".join(f"{v.option}: {v.why}" for v in verdicts)
    return str(problem("placement", f"no option fits ({reasons})", fixes))


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
            lines.append(f"{PREFIX}{v.option} skipped: {ranking.brief(v.why)}")
    return lines
