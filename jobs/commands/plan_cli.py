"""``vtp plan``: the Vertex job you will pay for, where it runs and whether your project can run it, before anything
is sent. Like ``terraform plan``: every field of the request(s) the pipeline's training step will send, the price,
the options of ``placement`` with why each was taken or skipped, and one line per check of the project.

``vtp plan [--config JOB] [--project P] [--region R] [--out plan.json]`` says the plan ``jobs.cloud.planning``
decides: the request(s) as the client's JSON, the options of ``placement`` with why each was taken or
skipped, the cost, one line per check of the project; ``--out`` saves it (``jobs.commands.saved_plan``: with what it was
computed from, for ``vtp apply plan.json``, which submits exactly it or refuses it as stale), atomically, under THE
output rule (``jobs.commands.output_file``: never over the job file or anything ``vtp plan`` did not write, never
through a link). A flag that overrides the job file says which wins (``jobs.commands.flag_file``). Exit status:
0 a plan that fits, 2 a problem (bad input, nothing fits, over budget, a check failed or, with
``--require-checks``, was not made).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, Callable

from jobs.commands import output_file
from jobs.rules import placement, ranking, validate
from jobs.run_records import own_outputs
from jobs.rules.hardware.rules import num_replicas
from jobs.rules.command_line import add_job_arguments, job_of, plain, shown
from jobs.commands.flag_file import empty_flag_problems, flag_file_warnings, max_cost_problems
from jobs.rules.hardware.vertex_rules import identity_problems
from jobs.rules import preflight as checks
from jobs.cloud.apis.credentials import endpoint_problem
from jobs.cloud.apis.lines import run_command
from jobs.cloud.planning import (PROJECT_PLACEHOLDER, Plan, Request, config_argument, config_changes, decide,
                             image_problem, ladder_rung, requests, short_lines, shortened)
from jobs.commands.submit import job_id_for
from jobs.rules.hardware import prices
from jobfile.errors import ConfigError, problem


def options_table(plan: Plan) -> list[str]:
    """One row per option with its price and verdict. With a hardware ladder, in the order the training step tries
    them (``try``: 1 the pick, then where a stockout falls over to; ``-`` skipped), the skipped ones after."""
    ladder = bool(plan.written.placement.hardware)
    verdicts = sorted(plan.verdicts, key=lambda v: (not v.order, v.order)) if ladder else plan.verdicts
    rows = [("try",) * ladder + ("option", "per hour", "at most", "")]
    for v in verdicts:
        verdict = f"taken: {v.why}" if v.taken else ("fits" if v.fits else f"skipped: {ranking.brief(v.why)}")
        rows.append((str(v.order or "-"),) * ladder + (str(v.option), prices.money(v.cost.per_hour),
                                                       prices.money(v.cost.most), verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        cells = [f"{c:<{w}}" if i < len(widths) - 2 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(row, widths))]
        out.append(("  " + "  ".join(cells) + "  " + row[-1]).rstrip())
    return out


def ladder_lines(plan: Plan, cfg) -> list[str]:
    """The hardware ladder (``placement.hardware``) as the plan ranks it: each rung in the user's order with its
    hardware, strategy, scheduling strategies and global batch (replicas x per-replica batch), and how preference
    and price combine (``jobs.rules.ranking``)."""
    if not cfg.placement.hardware:
        return []
    rows = [("rung", "job file", "hardware", "strategy", "scheduling", "global batch")]
    batch = placement.global_batch(cfg)
    for k in range(len(cfg.placement.hardware) + 1):
        job = placement.on_rung(cfg, k)
        name = placement.rung_name(cfg, k)
        label = placement.hardware_label(job.topology)
        shown_as = f"{name}: {label}" if name != label else label
        strategies = ", ".join(job.placement.strategies or [cfg.scheduling.strategy]) if k else \
            ", ".join(cfg.placement.strategies or [cfg.scheduling.strategy])
        n = num_replicas(job.to_dict())
        share = "your trainer's" if cfg.user_trainer else f"{batch} = {n} x {batch // n}"
        rows.append((str(k + 1), ladder_rung(k), shown_as, job.topology.strategy,
                     strategies, share))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["ladder (placement.hardware): a rung is tried before the next, the cheapest of its options first; the "
             "global batch is kept on every rung"]
    for row in rows:
        lines.append(("  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths)) + "  " + row[-1]).rstrip())
    return lines


def cost_lines(plan: Plan) -> list[str]:
    if plan.pick is None:
        return []
    c = plan.pick.cost
    table = plan.table or prices.load_prices()
    pools = ", ".join(f"{p.pool} {p.what} {prices.money(p.per_replica)} x {p.replicas}" for p in c.job.pools)
    lines = [f"cost: {prices.money(c.per_hour)} an hour, at most {prices.money(c.most)} ({c.note})",
             f"  one job: {prices.money(c.job.per_hour)} an hour in {c.job.region} {c.job.strategy}: {pools}"]
    if c.job.unknown:
        lines.append(f"  unknown: no figure for {', '.join(c.job.unknown)} in the price table")
    if c.job.theirs:
        lines.append(f"  yours: {', '.join(c.job.theirs)} at your figures ({prices.source_line(prices.YOURS, table)})")
    lines += [f"  assumes: {m}" for m in c.job.marks]
    used = list(dict.fromkeys(src for src in _sources_used(plan, table) if src != prices.YOURS))
    lines.append(f"  prices: jobs/rules/hardware/prices.yaml of {table['prices']['date']}, list prices in USD before "
                 "discounts and taxes; " + "; ".join(_source(k, table) for k in used))
    return lines


def _source(key: str, table) -> str:
    """``key: URL [seen|recalled, read DATE]``: where the figures of a source key came from."""
    src = table["sources"].get(key) or {}
    return f"{key}: {src.get('url', '?')} [{src.get('status', '?')}, read {src.get('read', '?')}]"


def _sources_used(plan: Plan, table) -> list[str]:
    """The source keys of the figures the pick's price is made of."""
    cfg, out = plan.cfg, []
    for name in ("chief", "worker", "parameter_server", "evaluator"):
        pool = getattr(cfg.topology, name)
        if not pool.replica_count:
            continue
        family = prices.load_catalog().family_of(pool.machine_type)
        for section, key in (("families", family), ("gpus", pool.accelerator_type), ("tpus", family),
                             ("tpus", pool.accelerator_type.replace("_POD", ""))):
            src = (table[section].get(key) or {}).get("source")
            if src:
                out.append(src)
    src = (table["regions"].get(cfg.topology.region) or {}).get("source")
    return out + ([src] if src else [])


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
    for line in ladder_lines(plan, plan.written):
        out(line)
    out("options (placement, in the order the training step tries them):" if plan.written.placement.hardware
        else "options (placement):")
    for line in options_table(plan):
        out(line)
    for line in cost_lines(plan):
        out(line)
    ok = [f for f in plan.findings if f.ok]
    if ok:
        out("checks:")
        for f in ok:
            out(f"  ok: {f.line}")


#: the command that writes ``--out`` (THE output rule names it)
WRITER = "vtp plan"


def document(plan: Plan, reqs: list[Request]) -> dict[str, Any]:
    """What the plan decided, as a saved plan records it (``jobs.commands.saved_plan`` adds what it was computed
    from): the whole requests, every option with its verdict and price, the cost, the checks, the placement
    judgement the pipeline receives, the lines a submission says."""
    pick = plan.pick
    region = pick.option.region if pick else plan.cfg.topology.region
    table = plan.table or prices.load_prices()
    return {"project": plan.project, "pick": str(pick.option) if pick else None,
            "region": pick.option.region if pick else None, "strategy": pick.option.strategy if pick else None,
            "rung": pick.option.rung if pick else None, "hardware": pick.option.hardware if pick else None,
            "requests": [{"title": r.title, "url": r.url(plan.project, region), "body": r.body()} for r in reqs],
            "options": [{"option": str(v.option), "fits": v.fits, "taken": v.taken, "why": v.why,
                         "per_hour": v.cost.per_hour, "at_most": v.cost.most} for v in plan.verdicts],
            "cost": ({"per_hour": pick.cost.per_hour, "at_most": pick.cost.most, "note": pick.cost.note,
                      "unknown": list(pick.cost.job.unknown), "assumes": list(pick.cost.job.marks),
                      "yours": list(pick.cost.job.theirs), "prices_date": table["prices"]["date"]} if pick else None),
            "checks": [dataclasses.asdict(f) for f in plan.findings],
            "quota": [{"option": str(v.option), "findings": [dataclasses.asdict(f) for f in v.findings]}
                      for v in plan.verdicts],
            "placement_plan": plan.placement_doc() if pick else None,
            "lines": short_lines(plan),
            "config_json": plan.submitted.for_vertex().to_json(),
            "errors": plan.errors, "warnings": plan.warnings, "unchecked": plan.unchecked}


def verdict_lines(plan: Plan, err) -> bool:
    """Unchecked items and warnings as ``warning:`` lines, errors as ``error:`` lines; True when there is an error."""
    sys.stdout.flush()
    for line in plan.unchecked + plan.warnings:
        err(f"warning: {line}")
    for line in plan.errors:
        err(f"error: {line}")
    return bool(plan.errors)


def main(argv: list[str], save: Callable[..., str] | None = None) -> int:
    """``vtp plan ARGV``; ``save(args, loaded config, plan, document)`` writes ``--out`` and returns the line that
    says so (``jobs.commands.saved_plan``: a saved plan records what it was computed from)."""
    return run_command(lambda a: _main(a, save), argv)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py plan"), description=plain(__doc__.split("\n\n")[0]))
    add_job_arguments(p)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--project", help="the Google Cloud project (default: PROJECT, and no project check)")
    p.add_argument("--region", help="the submission's region (default: topology.region; placement.regions wins)")
    p.add_argument("--out", metavar="plan.json", help="save the plan (whole requests, options, cost, checks, and what "
                                                     "they were computed from) for vtp apply plan.json")
    p.add_argument("--max-cost", type=float, metavar="USD", help="refuse a plan that can cost more (as budget.max_total)")
    p.add_argument("--prices", default="", metavar="FILE", help="your own price file (the form of "
                                                                "jobs/rules/hardware/prices.yaml): its figures win over "
                                                                "the table's (as budget.prices)")
    p.add_argument("--require-checks", action="store_true", help="what could not be checked is an error (for CI)")
    p.add_argument("--service-account", default=None, help="as submit's --service-account")
    p.add_argument("--network", default=None, help="as submit's --network")
    p.add_argument("--image", default="", help="the components' image, as submit's --image")
    p.add_argument("--api-endpoint", default="", help="the project checks' endpoint (a local stand-in)")
    return p


def _main(argv: list[str], save) -> int:
    p = parser()
    args = p.parse_args(argv)
    args.config = job_of(p, args)
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
        refused = output_file.output_problem(args.out, "--out", WRITER, inputs=inputs, ours=own_outputs.is_saved_plan)
        problems += [refused] if refused else []
        if save is None:
            problems.append(problem("--out", "this command cannot save a plan", ["vtp plan --out plan.json"]))
    if problems:
        return _fail(problems)
    said: list[str] = []
    try:
        loaded = validate.load(args.config, args.overrides, region=args.region, check_data=False, warn=said.append)
    except ConfigError as exc:
        for line in said:
            print(f"warning: {line}", file=sys.stderr)
        return _fail(exc.problems)
    cfg = loaded
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
    try:
        plan = decide(cfg, args.project, region, max_cost=args.max_cost, require_checks=args.require_checks,
                      api_endpoint=args.api_endpoint, price_file=args.prices)
    except ConfigError as exc:
        return _fail(exc.problems)
    run_id = job_id_for(plan.cfg.name) if args.out else ""  # a saved plan names the run it will be
    reqs = requests(plan.cfg, image=image or "<no image: see the error on container.image_uri>",
                    service_account=args.service_account or "", network=args.network or "", run_id=run_id,
                    labelled=plan.submitted)
    say(plan, reqs)
    overridden = flag_file_warnings(cfg, args.region or "", args.service_account, args.network, args.max_cost)
    plan.warnings = list(dict.fromkeys(str(w) for w in [*overridden, *said, *warnings, *plan.warnings]))
    plan.errors = [str(e) for e in errors] + plan.errors
    if args.out and plan.errors:
        print(f"plan not saved to {args.out}: it has errors (below); nothing to apply")
    elif args.out:
        try:
            print(save(args, loaded, plan, {**document(plan, reqs), "job_id": run_id}))
        except output_file.OutputRefused as exc:  # the file changed since it was checked: said, nothing written
            plan.errors.append(str(exc))
    return 2 if verdict_lines(plan, lambda line: print(line, file=sys.stderr)) else 0


def _fail(problems) -> int:
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 2
