"""A run's end as a message (``notify:``): built from what the run left in its folder, sent by ``jobs.cloud.apis.notify``.

The pipeline's exit handler (``components/notify``: here through ``kfp.local``, on Vertex AI Pipelines the same task)
calls :func:`notify_run_end` with the run's final state (KFP's ``PipelineTaskFinalStatus``); a run on this machine
stopped with Ctrl-C, which ends before any exit handler, calls it from the local run with ``CANCELLED``. The message
(:func:`message`) holds:

* the run: the job, its final state, where it ran, the pipeline job and the run's folder;
* the cause of a failure: the failure record of this run (``jobs.run_records.records.FAILURE_RECORD``, written by the step
  that failed and knows why: the local train step with its replica's error line and ``hint:``
  (``jobs.local.launch.hints``), the Vertex CustomJob step with the cause ``jobs.rules.vertex_failures`` classified
  and the failing replica's last lines from Cloud Logging, the in-pipeline plan check with the checks that failed);
  without one, the final state's own error message (on Vertex it names the failed tasks);
* the model and its verdict: the verification record (the held-out figures), the gate's verdict;
* the cost: :func:`estimated_cost`;
* links: the pipeline run in the console (Vertex), the run report, the failed job's page.

Every part is bounded (:data:`TEXT_MAX` characters of text, the failure record's lines already bounded): Slack and
Google Chat take a message of a few thousand characters. Nothing here prints or stores the webhook's URL.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable

from jobs.cloud.apis import notify as sender
from jobs.cloud.apis.job_logs import console_url as job_console_url
from jobs.cloud.apis.vertex import console_url
from jobs.local.run.summary import eval_text, gate_line
from jobs.run_records import records
from jobs.rules.hardware import prices
from jobfile import config as config_lib
from trainers.cluster import output_dirs
from jobfile.paths import readable

#: the message's text is cut to this many characters (Google Chat's limit for a text message is 4,096)
TEXT_MAX = 3500
STATES = ("SUCCEEDED", "FAILED", "CANCELLED")
VERTEX_JOB_RE = re.compile(r"^projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/pipelineJobs/(?P<job>[^/]+)$")


def final_state(state: str) -> str:
    """KFP's final state as the message names it: ``SUCCEEDED``, ``FAILED`` or ``CANCELLED`` (Vertex's
    ``PIPELINE_STATE_*`` / ``CANCELLING`` forms folded in; anything else is a failure of its own name)."""
    name = str(state or "").upper().replace("PIPELINE_STATE_", "").replace("TASK_STATE_", "")
    if name in ("CANCELLING", "CANCELED"):
        return "CANCELLED"
    return name if name in STATES else (name or "FAILED")


def end_of(state: str) -> str:
    """``notify.on``'s word for a final state: succeeded, failed, cancelled."""
    return {"SUCCEEDED": "succeeded", "CANCELLED": "cancelled"}.get(final_state(state), "failed")


def _readable_here(base: str) -> bool:
    """Whether the run's folder can be read by this process without TensorFlow (a local folder, or ``gs://``
    through Vertex's ``/gcs`` mount)."""
    return "://" not in readable(base)


def _record(base: str, name: str) -> dict[str, Any]:
    return records.read_at(base, name) if _readable_here(base) else {}


def report_link(base: str) -> str:
    """Where a person opens the run report: the authenticated Cloud Storage URL of ``gs://.../report.html``, else
    the local path."""
    page = f"{base.rstrip('/')}/{records.REPORT_PAGE}"
    return "https://storage.cloud.google.com/" + page[len("gs://"):] if page.startswith("gs://") else page


def estimated_cost(cfg: config_lib.JobConfig, base: str, on_vertex: bool) -> dict[str, Any] | None:
    """THE slot for the run's estimated cost: the estimate the run's records carry (``estimated_cost`` in
    ``training.json`` or ``vertex_jobs.json``: where the run's own estimate, its option's price x the time it ran,
    is to be recorded) when present; else the plan's price of the job (``jobs.rules.hardware.prices.cost``: per hour
    and the most at ``scheduling.timeout``, list prices), said as such. None when neither is known."""
    for name in (records.TRAINING_RECORD, records.VERTEX_JOBS_RECORD):
        recorded = _record(base, name).get("estimated_cost")
        if isinstance(recorded, dict):
            return {**recorded, "basis": f"the run's estimate ({name})"}
    try:
        c = prices.cost(cfg)
    except Exception:  # a price table that cannot be read: the message goes without a figure
        return None
    if c.per_hour is None:
        return None
    where = "" if on_vertex else "on Vertex: "
    return {"per_hour_usd": round(c.per_hour, 4), "at_most_usd": None if c.most is None else round(c.most, 2),
            "basis": f"{where}the plan's list price ({c.note}); the run's own estimate is not recorded"}


def _verdict(verification: dict[str, Any], gate: dict[str, Any]) -> str:
    parts = []
    if "accuracy" in verification:  # the built-in classifier's held-out split
        accuracy = verification.get("accuracy")
        shown = f"{accuracy:.3f}" if isinstance(accuracy, (int, float)) else "n/a"
        parts.append(f"accuracy {shown} on {verification.get('examples', '?')} {verification.get('split', '')} "
                     "examples".replace("  ", " "))
    held_out = eval_text(verification.get("eval")).lstrip("; ")
    if held_out:
        parts.append(held_out)
    if not parts:
        parts.append(f"loads and serves ({verification.get('signature', '?')} on {verification.get('instances', '?')} "
                     "instances); no held-out verdict (serving.eval_data)")
    if gate:
        parts.append(f"gate {gate_line(gate)}")
    return "; ".join(parts)


def message(cfg: config_lib.JobConfig, state: str, *, error: str = "", run_id: str = "", run_created: str = "",
            pipeline_job: str = "", on_vertex: bool = False) -> dict[str, Any]:
    """The run's end as a message: ``{"text", "run", "cause", "model", "cost", "links"}`` (module docstring);
    ``cfg`` the run's config (its ``output.base_dir`` the run's folder), ``error`` the final state's own message."""
    state = final_state(state)
    base = config_lib.resolved_base_dir(cfg)
    vertex = VERTEX_JOB_RE.match(pipeline_job or "")
    where = "on Vertex AI" if on_vertex else "on this machine"
    run = {"job": cfg.name, "state": state, "where": where, "folder": base,  # kfp.local names no pipeline job
           "pipeline_job": (pipeline_job or None) if on_vertex else None, "run_id": run_id or None}
    links: dict[str, Any] = {"console": console_url(vertex["project"], vertex["location"], vertex["job"])
                             if vertex else None, "job": None, "report": None}
    cause = None
    if state != "SUCCEEDED":
        failure = records.read_failure(base, run_id, run_created) if _readable_here(base) else {}
        if failure:
            found = failure.get("cause") if isinstance(failure.get("cause"), dict) else {}
            cause = {"step": failure.get("step"), "error": failure.get("error"), "kind": found.get("kind"),
                     "what": found.get("what"), "hint": found.get("hint"), "replica": failure.get("replica"),
                     "last_lines": [str(x) for x in failure.get("last_lines") or []][-records.FAILURE_LINES:]}
            if re.match(r"^projects/[^/]+/locations/[^/]+/[A-Za-z]+/[^/]+$", str(failure.get("job") or "")):
                links["job"] = job_console_url(failure["job"])
        elif state == "FAILED":
            cause = {"step": None, "error": " ".join(str(error or "").split())[:1000] or
                     "no step recorded why (see the run's log)", "kind": None, "what": None, "hint": None,
                     "replica": None, "last_lines": []}
    verification = {k: v for k, v in _record(base, records.VERIFICATION_RECORD).items() if k != "gallery"}
    gate = _record(base, records.GATE_RECORD) if records.is_gated(cfg) else {}
    # the report step writes its page right after the verify step: a folder not readable here is judged by that
    written = os.path.exists(os.path.join(readable(base), records.REPORT_PAGE)) if _readable_here(base) else False
    if written or (not _readable_here(base) and verification) or (base.startswith("gs://") and state == "SUCCEEDED"):
        links["report"] = report_link(base)
    model = None
    if verification:
        model = {"dir": verification.get("model_dir") or output_dirs(None, base)["model"],
                 "verdict": _verdict(verification, gate), "gate_passed": gate.get("passed") if gate else None}
    msg = {"kind": "vtp-run-end", "run": run, "cause": cause, "model": model,
           "cost": estimated_cost(cfg, base, on_vertex), "links": links}
    msg["text"] = text(msg)
    return msg


def text(msg: dict[str, Any]) -> str:
    """The message as a person reads it (Slack's and Google Chat's ``text``), at most :data:`TEXT_MAX` characters:
    the failing replica's oldest lines go first when it is longer."""
    run, cause, model, cost, links = msg["run"], msg.get("cause"), msg.get("model"), msg.get("cost"), msg["links"]
    head = [f"vtp: {run['job']} {run['state']} {run['where']}"
            + (f" (pipeline job {run['pipeline_job'].rsplit('/', 1)[-1]})" if run.get("pipeline_job") else "")]
    if cause:
        step = f" in step {cause['step']}" if cause.get("step") else ""
        head.append(f"cause{step}: " + (f"{cause['what']}: " if cause.get("what") else "") + str(cause.get("error") or ""))
        if cause.get("hint"):
            head.append(f"hint: {cause['hint']}")
    tail = []
    if model:
        tail.append(f"model: {model['dir']}; verdict: {model['verdict']}")
    elif run["state"] != "CANCELLED":
        tail.append("model: none verified (the run ended before the verify step)" if run["state"] != "SUCCEEDED"
                    else "model: no verification record was found in the run's folder")
    if cost:
        figures = (f"${cost['per_hour_usd']:,.2f} an hour" if isinstance(cost.get("per_hour_usd"), (int, float))
                   else "")
        if isinstance(cost.get("at_most_usd"), (int, float)):
            figures += f", at most ${cost['at_most_usd']:,.2f}"
        if isinstance(cost.get("usd"), (int, float)):
            figures = f"${cost['usd']:,.2f}"
        tail.append(f"cost: {figures} ({cost.get('basis', '')})")
    tail += [f"{name}: {url}" for name, url in (("console", links.get("console")), ("job", links.get("job")),
                                                 ("report", links.get("report"))) if url]
    lines = list((cause or {}).get("last_lines") or [])
    who = (cause or {}).get("replica") or f"step {(cause or {}).get('step') or '?'}"
    while True:
        body = [f"last {len(lines)} lines of {who}:", *(f"  {x}" for x in lines)] if lines else []
        out = "\n".join(head + body + tail)
        if len(out) <= TEXT_MAX or not lines:
            return out if len(out) <= TEXT_MAX else out[:TEXT_MAX - 3] + "..."
        lines = lines[1:]


def notify_run_end(cfg: config_lib.JobConfig, state: str, *, error: str = "", run_id: str = "",
                   run_created: str = "", pipeline_job: str = "", on_vertex: bool = False, api_endpoint: str = "",
                   say: Callable[[str], None] | None = None) -> bool:
    """Send the run's end where ``notify:`` says, when ``notify.on`` names it; True when it was sent. Never raises
    and never fails the run: whatever goes wrong is one ``warning:`` line (``say``, default stderr)."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    n = cfg.notify
    webhook = n.webhook.url_env or n.webhook.url_secret
    if not webhook or end_of(state) not in n.on:
        return False
    try:
        msg = message(cfg, state, error=error, run_id=run_id, run_created=run_created, pipeline_job=pipeline_job,
                      on_vertex=on_vertex)
    except Exception as exc:  # a record that cannot be read must not cost the message: send what is certain
        msg = {"kind": "vtp-run-end", "run": {"job": cfg.name, "state": final_state(state)}, "cause": None,
               "model": None, "cost": None, "links": {},
               "text": f"vtp: {cfg.name} {final_state(state)} (the run's records could not be read: "
                       f"{type(exc).__name__})"}
    return sender.send(n.webhook, msg, api_endpoint=api_endpoint, say=say)
