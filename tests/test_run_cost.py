"""Issue 49: what a run cost (jobs/run_records/run_cost.py), as the run summary, the report and ``vtp runs list`` show it: a
Vertex run's CustomJobs at their own start and end times and prices; a local run as what its option would have cost."""
from __future__ import annotations

import io

import pytest

from jobs.local.history.reader import Run
from jobs.local.history.views import show_list
from jobs.local.run.summary import summary_lines
from jobs.run_records import run_cost
from jobs.rules.hardware import prices
from jobfile import config as config_lib

ATTEMPTS = [
    {"region": "us-central1", "strategy": "SPOT", "per_hour": 192.1, "job": "projects/p/locations/us-central1/customJobs/1000",
     "state": "FAILED", "cause": "capacity", "start_time": "2026-11-22T08:01:00+00:00",
     "end_time": "2026-11-22T08:31:00+00:00"},
    {"region": "europe-west4", "strategy": "SPOT", "per_hour": 211.32,
     "job": "projects/p/locations/europe-west4/customJobs/1001", "state": "SUCCEEDED",
     "start_time": "2026-11-22T08:40:00+00:00", "end_time": "2026-11-22T10:10:00+00:00"}]


def test_a_vertex_runs_cost_is_its_billed_jobs_price_times_their_own_times():
    cost = run_cost.vertex_estimate(ATTEMPTS)
    assert cost["usd"] == pytest.approx(211.32 * 1.5)  # the stockout is not billed (Vertex bills no failed job)
    assert cost["seconds"] == 5400 and "(not billed: it failed)" in cost["jobs"][0]
    assert run_cost.line(cost).startswith("about $316.98: its CustomJobs' price an hour x their own start to end")
    unknown = run_cost.vertex_estimate([{**ATTEMPTS[1], "per_hour": None}])
    assert unknown["usd"] is None and run_cost.line(unknown).startswith("unknown: no price or no times for CustomJob 1001")
    assert run_cost.vertex_estimate([]) is None


def test_a_local_runs_cost_is_what_its_option_would_have_cost_said_as_an_estimate():
    cfg = config_lib.load("multiworker")
    cost = run_cost.local_estimate(cfg, 90.0)
    per_hour = prices.cost(cfg).per_hour
    assert cost["usd"] == pytest.approx(per_hour * 90 / 3600, abs=1e-6) and cost["option"] == "us-central1 SPOT"
    assert "for the 90.0 s it trained here: an estimate" in cost["how"]
    assert run_cost.training_seconds([{"name": "prepare-data", "seconds": 5}, {"name": "train", "seconds": 90.0}]) == 90
    line = next(x for x in summary_lines({"cost": cost}) if x.startswith("  cost "))
    assert line.startswith(f"  cost                about {prices.money(cost['usd'])}: what us-central1 SPOT would have")
    unpriced = run_cost.local_estimate(config_lib.load("examples/h200-flex/job.yaml"), 60.0)
    assert unpriced["usd"] is None and "NVIDIA_H200_141GB" in unpriced["how"]


def _run(name: str, cost) -> Run:
    return Run(name=name, path=f"/r/{name}", job="j", status="finished", note="", archive_of=None, steps=30,
               total_steps=30, metrics={}, wall_s=25.0, when="2026-11-29T04:04:00+00:00", report=None, config=None,
               config_source=None, step_times=[], code_version=None, cost=cost)


def test_runs_list_shows_the_cost_column_when_a_run_has_one():
    out = io.StringIO()
    show_list([_run("local", {"usd": 0.95, "estimate": "local"}), _run("vertex", run_cost.vertex_estimate(ATTEMPTS)),
               _run("old", None)], "runs", False, out)
    text = out.getvalue()
    rows = {line.split()[0]: line for line in text.splitlines() if line.split() and line.split()[0] in ("local", "vertex", "old")}
    assert "~$0.95" in rows["local"] and "$316.98" in rows["vertex"] and " - " in rows["old"]
    assert "cost: a Vertex run's CustomJobs over their own times; ~: what a local run's option would have cost" in text
    bare = io.StringIO()
    show_list([_run("old", None)], "runs", False, bare)
    assert "cost" not in bare.getvalue()
