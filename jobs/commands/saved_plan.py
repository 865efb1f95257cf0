"""A saved plan, applied exactly: ``vtp plan --out plan.json`` then ``vtp apply plan.json`` (Terraform's ``plan -out``
and ``apply PLANFILE``).

``vtp plan --out plan.json`` (``jobs.commands.plan_cli``, its ``save`` this module's :func:`save`) records the request(s)
as they will be sent (the run's labels included: the plan names the pipeline job's id it will be submitted under),
every option ranked with its price and verdict, the checks, the placement judgement the pipeline's training step
receives, and what all of it was computed from (:func:`inputs`): the job's config (its source, the overrides, the
SHA-256 of the config they load to), the user trainer's code (``jobs.images.user_code.trainer_version``: the SHA-256 of
the files its image holds), the image and the digest its tag pointed at, the project, the quota findings of every
option, the hardware catalog's and the price table's versions (a price file's figures included), and the time.

``vtp apply plan.json --pipeline-root gs://BUCKET/PATH`` (:func:`apply_main`) reads it back (:func:`read_plan`, the
one reader), computes those inputs again and refuses a stale plan with one line naming what changed
(:func:`changes`): the code, the config (the fields), the image's digest, a quota finding, the catalog or the
prices, or its age beyond :data:`MAX_AGE_S` (24 hours: quotas and capacity move within a day; a plan older than that
was reviewed against a project that may no longer exist as it was). A fresh plan is submitted as it is
(``jobs.commands.submit`` with the plan's decision: no new plan): the same config under the same pick, the same
placement judgement as the pipeline's ``placement_plan``, under the plan's pipeline job id, so the CustomJob the
training step creates is the recorded request field for field. What cannot be checked again (no credentials, no
registry access) is one ``warning: not checked`` line each, as in the plan; ``--require-checks`` (recorded from the
plan, or given to apply) makes them errors. Submitting without a saved plan keeps working: it plans first.

The file is written by one call (:func:`write_plan`: a temporary file beside it, renamed over it) and carries the
SHA-256 of its content: a plan edited by hand is refused, since what was reviewed is no longer what it holds.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import Any

from jobs.cloud import planning
from jobs.commands import output_file, plan_cli, submit
from jobs.rules import placement, preflight, ranking, validate
from jobs.cloud.apis.lines import run_command
from jobs.images.user_code import trainer_version
from jobs.local.run.folder import config_diff
from jobs.run_records import own_outputs
from jobs.rules.command_line import shown
from jobs.rules.hardware import prices
from jobs.rules.hardware.catalog import CATALOG_PATH, load_catalog
from trainers import record_reader
from jobfile import config as config_lib
from jobfile.config_files import is_preset
from jobfile.errors import ConfigError, problem

KIND, VERSION = own_outputs.SAVED_PLAN_KIND, 1
#: a saved plan older than this is stale (quotas and capacity move within a day)
MAX_AGE_S = 24 * 3600
#: the clock a plan's age is read by (a test moves it)
CLOCK = time.time


# --------------------------------------------------------------------------------------------------
# Writing and reading a plan file


def _checksum(doc: dict[str, Any]) -> str:
    body = {k: v for k, v in doc.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_plan(path: str, doc: dict[str, Any], inputs: tuple[str, ...] = ()) -> None:
    """THE write of a plan file: ``doc`` with its checksum, under THE output rule (``jobs.commands.output_file``: a
    temporary file beside ``path`` renamed over it, never over one of ``inputs`` (the job file) or a file that is not a
    saved plan, never through a link); ``output_file.OutputRefused`` (one line) otherwise."""
    doc = {**doc, "sha256": _checksum(doc)}
    output_file.write_output(path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"), "--out", plan_cli.WRITER,
                             inputs=inputs, ours=own_outputs.is_saved_plan)


def read_plan(path: str, field: str = "PLAN") -> dict[str, Any]:
    """THE read of a plan file: a ConfigError with one line when it cannot be read, is not a saved plan of this
    version, or was edited after it was written."""
    fix = shown("python pipelines/run.py plan --config JOB --project P --out plan.json")
    try:  # THE reader: size, depth, a pipe or a folder refused at once
        doc = record_reader.read(path)
    except record_reader.Unreadable as exc:
        raise ConfigError([problem(field, f"{exc}", [fix])]) from None
    if doc is None:
        raise ConfigError([problem(field, f"cannot read {path}: there is no such file", [fix])])
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ConfigError([problem(field, f"{path} is not a plan saved by vtp plan --out", [fix])])
    if doc.get("version") != VERSION:
        raise ConfigError([problem(field, f"{path} is a version {doc.get('version')!r} plan; this vtp applies version "
                                          f"{VERSION}: make it again", [fix])])
    if doc.get("sha256") != _checksum(doc):
        raise ConfigError([problem(field, f"{path} was edited after vtp plan wrote it: what was reviewed is not what "
                                          "it holds; make it again", [fix])])
    return doc


# --------------------------------------------------------------------------------------------------
# What a plan was computed from


def _sha(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def catalog_version() -> str:
    """The hardware catalog's date and the SHA-256 of its file."""
    return f"{load_catalog().date} sha256:{_sha(CATALOG_PATH.read_bytes())[:16]}"


def code_of(cfg: config_lib.JobConfig) -> dict[str, Any]:
    """The user trainer's code as its image will hold it (``trainer_version``: the content hash of those files); the
    built-in trainer's is the image's (its digest stands for it)."""
    version = trainer_version(cfg)
    if version is None:
        return {"content_sha256": None, "text": "the built-in trainer (the image's code)"}
    return {"content_sha256": version.get("content_sha256"), "text": version.get("text")}


def quota_of(verdicts) -> list[dict[str, Any]]:
    """Every option's quota findings as the plan saw them (ok, line)."""
    return [{"option": str(v.option), "findings": [{"ok": f.ok, "line": f.line} for f in v.findings]}
            for v in verdicts if not v.why.startswith("the hardware catalog")]


def inputs(args: argparse.Namespace, loaded: config_lib.JobConfig, plan: planning.Plan,
           project: placement.Project | None = None) -> dict[str, Any]:
    """What the plan was computed from (module docstring)."""
    image = plan.cfg.container.image_uri
    digest, why = (project.image_digest(image) if project is not None and image else (None, "no image named"))
    price_file = args.prices or loaded.budget.prices
    return {
        "config": {"source": args.config if is_preset(args.config) else os.path.abspath(args.config),
                   "overrides": list(args.overrides), "region": args.region,
                   "sha256": _sha(loaded.to_json()), "document": json.loads(loaded.to_json())},
        "code": code_of(loaded),
        "image": {"reference": image, "digest": digest, "why": why},
        "project": plan.project,
        "quota": quota_of(plan.verdicts),
        "catalog": catalog_version(),
        "prices": prices.table_version(plan.table),
        "price_file": {"path": os.path.abspath(price_file) if price_file else "",
                       "flag": bool(args.prices)},
        "made_s": CLOCK(),
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(CLOCK())),
    }


def save(args: argparse.Namespace, loaded: config_lib.JobConfig, plan: planning.Plan, doc: dict[str, Any]) -> str:
    """``vtp plan --out``: the plan's document with what it was computed from and the submission's settings,
    written by :func:`write_plan`; returns the line that says so."""
    project = planning.PROJECT_FACTORY(args.project, args.api_endpoint)
    saved = {"kind": KIND, "version": VERSION, **doc, "inputs": inputs(args, loaded, plan, project),
             "submission": {"service_account": args.service_account, "network": args.network, "image": args.image,
                            "max_cost": args.max_cost, "require_checks": bool(args.require_checks),
                            "checks_endpoint": args.api_endpoint}}
    write_plan(args.out, saved, inputs=(args.config,))
    return (f"plan saved to {args.out} (run {doc['job_id']}): apply it within {MAX_AGE_S // 3600} h with "
            + shown(f"python pipelines/run.py apply {args.out} --pipeline-root gs://BUCKET/PATH"))


# --------------------------------------------------------------------------------------------------
# Applying it


def _age(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def changes(doc: dict[str, Any], project: placement.Project, require_checks: bool = False
            ) -> tuple[list[str], list[str], config_lib.JobConfig | None]:
    """(what changed since the plan, one item per input; what could not be checked again; the job as it loads now).
    Every input of :func:`inputs` computed again and compared."""
    recorded = doc["inputs"]
    changed: list[str] = []
    unchecked: list[str] = []
    age = CLOCK() - float(recorded.get("made_s") or 0)
    if age > MAX_AGE_S or age < -300:
        changed.append(f"age: made {recorded.get('made')}, {_age(max(age, 0))} ago (a plan is applied within "
                       f"{MAX_AGE_S // 3600} h: quotas and capacity move)" if age >= 0 else
                       f"age: made {recorded.get('made')}, in the future by this machine's clock")
    source = recorded["config"]
    try:
        now = validate.load(source["source"], source["overrides"], region=source.get("region"), check_data=False)
    except ConfigError as exc:
        return [*changed, f"config: {source['source']} no longer loads ({exc.problems[0]})"], unchecked, None
    if _sha(now.to_json()) != source["sha256"]:
        diff = config_diff(source.get("document"), json.loads(now.to_json()))
        named = ", ".join(f"{d['key']} {json.dumps(d['a'])} -> {json.dumps(d['b'])}" for d in diff[:3])
        more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
        changed.append(f"config: {source['source']} changed ({named or 'its content'}{more})")
    code = code_of(now)
    if code["content_sha256"] != recorded["code"].get("content_sha256"):
        changed.append(f"code: the trainer's files changed ({recorded['code'].get('text')} -> {code['text']})")
    image = recorded["image"]
    if image.get("reference"):
        digest, why = project.image_digest(image["reference"])
        if digest is None:
            unchecked.append(f"the digest of {image['reference']} not checked again: {why}")
        elif image.get("digest") and digest != image["digest"]:
            changed.append(f"image digest: {image['reference'].split('@')[0]} now points at {digest}, the plan was "
                           f"made with {image['digest']}")
        elif not image.get("digest"):
            unchecked.append(f"the digest of {image['reference']} was not known when the plan was made: nothing to "
                             "compare")
    changed += _quota_changes(recorded.get("quota") or [], now, project, unchecked)
    catalog = catalog_version()
    if catalog != recorded.get("catalog"):
        changed.append(f"hardware catalog: {recorded.get('catalog')} -> {catalog}")
    price_file = recorded.get("price_file") or {}
    try:
        table = prices.price_table(price_file.get("path") or "", "--prices" if price_file.get("flag") else
                                   "budget.prices")
        version = prices.table_version(table)
    except ConfigError as exc:
        version = f"unreadable ({exc.problems[0]})"
    if version != recorded.get("prices"):
        changed.append(f"prices: {recorded.get('prices')} -> {version}"
                       + (f" (your price file {price_file['path']})" if price_file.get("path") else ""))
    return changed, unchecked, now


def _quota_changes(recorded: list[dict[str, Any]], now: config_lib.JobConfig, project: placement.Project,
                   unchecked: list[str]) -> list[str]:
    """Each option's quota findings asked again: a verdict that is not the plan's (a quota that covered the job and
    no longer does, or the other way round) makes it stale; the same verdict at another limit does not change the
    plan. A finding that cannot be asked again is said as not checked."""
    out = []
    for entry in recorded:
        option = next((o for o in placement.options(now) if str(o) == entry["option"]), None)
        if option is None:  # an option the job no longer has: its config changed, which changes() says
            continue
        then = [(f.get("ok"), f.get("line") or "") for f in entry.get("findings") or []]
        again = [(f.ok, f.line) for f in project.quota(placement.with_option(now, option), option)]
        if again and all(ok is None for ok, _ in again) and any(ok is not None for ok, _ in then):
            unchecked.append(f"quota in {option} not checked again: {ranking.brief(again[0][1])}")
            continue
        if [ok for ok, _ in again] != [ok for ok, _ in then]:
            new = [ranking.brief(line) for (ok, line), (was, _) in zip(again, then + [(None, "")] * len(again))
                   if ok != was] or ["no finding"]
            old = [ranking.brief(line) for ok, line in then if (ok, line) not in again] or ["no finding"]
            out.append(f"quota in {option}: now {'; '.join(new)} (the plan saw {'; '.join(old)})")
    return out


def apply_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py apply"),
                                description="submit a saved plan (vtp plan --out) exactly, or refuse it as stale")
    p.add_argument("plan", metavar="PLAN", help="the plan file vtp plan --out wrote")
    p.add_argument("--pipeline-root", required=True, help="gs://BUCKET/PATH where Vertex keeps the pipeline's artifacts")
    p.add_argument("--labels", nargs="+", metavar="KEY=VALUE", help="more labels of the pipeline job")
    p.add_argument("--no-wait", action="store_true", help="print the job's name and link, do not follow it")
    p.add_argument("--no-cache", action="store_true", help="run every step again")
    p.add_argument("--api-endpoint", help="Vertex AI endpoint (e.g. a local stand-in http://127.0.0.1:PORT)")
    p.add_argument("--poll-seconds", type=float, help="longest interval between state checks (default 20)")
    p.add_argument("--require-checks", action="store_true", help="what cannot be checked again is an error")
    return p


def apply_main(argv: list[str], compile_pipeline) -> int:
    """``vtp apply PLAN --pipeline-root gs://...``: exit 0 submitted (and succeeded, unless ``--no-wait``), 1 the job
    failed, 2 a stale or unreadable plan or a preflight problem (nothing sent)."""
    return run_command(lambda a: _apply(a, compile_pipeline), argv)


def _apply(argv: list[str], compile_pipeline) -> int:
    args = apply_parser().parse_args(argv)
    try:
        doc = read_plan(args.plan)
    except ConfigError as exc:
        return _fail([str(p) for p in exc.problems])
    sub = doc.get("submission") or {}
    project = planning.PROJECT_FACTORY(doc["project"], sub.get("checks_endpoint") or "")
    changed, unchecked, now = changes(doc, project)
    if changed:
        return _fail([f"{args.plan} is stale, nothing was sent: " + "; ".join(changed) + "; make it again: "
                      + shown(f"python pipelines/run.py plan ... --out {args.plan}")])
    strict = bool(args.require_checks or sub.get("require_checks"))
    pick = placement.Option(doc["region"], doc["strategy"], int(doc.get("rung") or 0), str(doc.get("hardware") or ""))
    cfg = placement.submitted(preflight.placeholder_free(now), pick)
    if cfg.for_vertex().to_json() != doc["config_json"]:  # the same inputs must give the same request
        return _fail([f"{args.plan}: the job loads to another config than the plan's under its pick {pick}: make it "
                      "again"])
    made = doc["inputs"].get("made")
    decision = submit.Decision(
        cfg, pick.region, doc["placement_plan"], job_id=doc["job_id"],
        lines=[f"plan: applying {args.plan} (made {made}, {_age(max(CLOCK() - doc['inputs']['made_s'], 0))} ago; "
               f"run {doc['job_id']})", *(doc.get("lines") or [])],
        errors=[f"not checked: {u} (--require-checks)" for u in unchecked] if strict else [],
        warnings=[f"not checked: {u}" for u in unchecked] + list(doc.get("warnings") or []))
    ns = argparse.Namespace(
        project=doc["project"], region=None, pipeline_root=args.pipeline_root,  # the pick's, as the plan made it
        service_account=sub.get("service_account") or None, network=sub.get("network") or None, labels=args.labels,
        no_wait=args.no_wait, no_cache=args.no_cache, api_endpoint=args.api_endpoint, template=None,
        poll_seconds=args.poll_seconds, image=sub.get("image") or None, max_cost=sub.get("max_cost"),
        require_checks=strict, prices=None)
    return submit.submit(cfg, ns, compile_pipeline, decision=decision)


def plan_main(argv: list[str]) -> int:
    """``vtp plan``: ``jobs.commands.plan_cli`` with ``--out`` saved here (:func:`save`)."""
    return plan_cli.main(argv, save=save)


def _fail(lines) -> int:
    sys.stdout.flush()
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2

