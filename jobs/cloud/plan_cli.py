"""``vtp plan``: the Vertex job you will pay for, where it runs and whether your project can run it, before anything
is sent. Like ``terraform plan``: every field of the request(s) the pipeline's training step will send, the price,
the options of ``placement`` with why each was taken or skipped, and one line per check of the project.

``vtp plan [--config JOB] [--project P] [--region R] [--out plan.json]`` says the plan ``jobs.cloud.plan``
decides: the request(s) as the client's JSON, the options of ``placement`` with why each was taken or
skipped, the cost, one line per check of the project; ``--out`` writes it all as JSON, atomically, under THE output
rule (``jobs.spec.output_file``: never over the job file or anything ``vtp plan`` did not write, never through a
link). A flag that overrides the job file says which wins (``jobs.spec.flag_file``). Exit status:
0 a plan that fits, 2 a problem (bad input, nothing fits, over budget, a check failed or, with
``--require-checks``, was not made).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from jobs.spec import output_file, validate
from jobs.spec.flag_file import empty_flag_problems, flag_file_warnings, max_cost_problems
from jobs.spec.hardware.vertex_rules import identity_problems
from jobs.spec.command_line import shown
from jobs.cloud import preflight as checks
from jobs.cloud.credentials import endpoint_problem
from jobs.cloud.lines import run_command
from jobs.cloud.plan import (PROJECT_PLACEHOLDER, Plan, Request, config_argument, config_changes, decide,
                             image_problem, requests, shortened)
from jobs.spec.hardware import prices
from trainers.errors import ConfigError, problem


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
    lines.append(f"  prices: jobs/spec/hardware/prices.yaml of {table['prices']['date']}, list prices in USD before "
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


#: what ``--out``'s file says wrote it (THE output rule replaces only a file it names)
WRITER = "vtp plan"


def write_json(plan: Plan, reqs: list[Request], path: str, inputs: tuple[str, ...] = ()) -> None:
    """The plan as JSON, written under THE output rule (``jobs.spec.output_file``: a temporary file beside ``path``
    renamed over it, only where it may be written; :class:`output_file.OutputRefused` otherwise)."""
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
    output_file.write_json_output(path, doc, "--out", WRITER, inputs=inputs)


def verdict_lines(plan: Plan, err) -> bool:
    """Unchecked items and warnings as ``warning:`` lines, errors as ``error:`` lines; True when there is an error."""
    sys.stdout.flush()
    for line in plan.unchecked + plan.warnings:
        err(f"warning: {line}")
    for line in plan.errors:
        err(f"error: {line}")
    return bool(plan.errors)


def main(argv: list[str]) -> int:
    return run_command(_main, argv)


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py plan"), description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="local", help="preset or YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--project", help="the Google Cloud project (default: PROJECT, and no project check)")
    p.add_argument("--region", help="the submission's region (default: topology.region; placement.regions wins)")
    p.add_argument("--out", metavar="plan.json", help="write the plan (whole requests, options, cost, checks) as JSON")
    p.add_argument("--max-cost", type=float, metavar="USD", help="refuse a plan that can cost more (as budget.max_total)")
    p.add_argument("--require-checks", action="store_true", help="what could not be checked is an error (for CI)")
    p.add_argument("--service-account", default=None, help="as submit's --service-account")
    p.add_argument("--network", default=None, help="as submit's --network")
    p.add_argument("--image", default="", help="the components' image, as submit's --image")
    p.add_argument("--api-endpoint", default="", help="the project checks' endpoint (a local stand-in)")
    args = p.parse_args(argv)
    problems: list[Any] = max_cost_problems(args.max_cost) + empty_flag_problems(args)
    problems += identity_problems(args.service_account, args.network, args.project or "")
    if endpoint_problem(args.api_endpoint):
        problems.append(problem("--api-endpoint", endpoint_problem(args.api_endpoint), ["http://127.0.0.1:PORT"]))
    if args.project is not None:
        problems += checks.project_problems("--project", args.project)
    if args.region is not None:
        problems += checks.region_problems("--region", args.region)
    inputs = (args.config,)
    if args.out is not None:
        refused = output_file.output_problem(args.out, "--out", WRITER, inputs=inputs)
        problems += [refused] if refused else []
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
                    service_account=args.service_account or "", network=args.network or "")
    say(plan, reqs)
    if args.out is not None:
        try:
            write_json(plan, reqs, args.out, inputs)
        except output_file.OutputRefused as exc:
            plan.errors.append(str(exc))
        else:
            print(f"plan written to {args.out}")
    overridden = flag_file_warnings(cfg, args.region or "", args.service_account, args.network, args.max_cost)
    plan.warnings = list(dict.fromkeys(str(w) for w in [*overridden, *said, *warnings, *plan.warnings]))
    plan.errors = [str(e) for e in errors] + plan.errors
    return 2 if verdict_lines(plan, lambda line: print(line, file=sys.stderr)) else 0


def _fail(problems) -> int:
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 2

