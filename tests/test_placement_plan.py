"""Issue 49: the plan is the contract. One placement procedure (jobs/rules/ranking.py) ranks the options for ``vtp plan``
and for the training step's fall-over; the fall-over never creates a job in an option the plan refused, re-checks the
budget at that option's price, says why each option it passes over was skipped, and with none left creates nothing.
The Vertex side is the strict stand-in (tests/standins/vertex.py): every create decoded as an ``aiplatform_v1`` message.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.cloud import planning
from jobs.rules import labels, ranking
from jobs.rules.errors import CloudError
from jobs.rules.placement import Finding, Option, Project
from tests.standins.cloud_logging import LoggingStandIn
from tests.standins.vertex import VertexStandIn
from jobfile import config as config_lib

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "us-central1-docker.pkg.dev/acme-ml/training/tf-trainer-gpu:ctx-1@sha256:" + "b" * 64
A3 = {"machine_type": "a3-highgpu-8g", "accelerator_type": "NVIDIA_H100_80GB", "accelerator_count": 8}
REGIONS = ["us-central1", "us-east4", "europe-west4"]
STOCKOUT = "Resources are insufficient in region: {}. Please try a different region."


def a3_job(tmp_path: Path, **budget) -> config_lib.JobConfig:
    """A chief + 1 worker ``a3-highgpu-8g`` (16 H100s) SPOT job over three regions, with a price file for the A3 host
    (the table has no figure for it)."""
    prices_file = tmp_path / "my-prices.yaml"
    prices_file.write_text("families:\n  a3: {vcpu: 0.04, gb: 0.005}\n")
    return config_lib.from_dict({
        "name": "a3-demo", "topology": {"strategy": "multi_worker", "region": "us-central1",
                                        "chief": {"replica_count": 1, **A3}, "worker": {"replica_count": 1, **A3}},
        "scheduling": {"strategy": "SPOT", "timeout": "7200s", "restart_job_on_worker_restart": True},
        "placement": {"regions": REGIONS}, "budget": {**budget, "prices": str(prices_file)},
        "container": {"image_uri": IMAGE}, "output": {"base_dir": "gs://acme-runs/a3"},
        "data": {"path": "gs://acme-data/flowers"}})


class Quotas(Project):
    """H100 quota per region (preemptible for SPOT): ``limits[region]`` GPUs; None: not readable."""

    def __init__(self, limits=None):
        self.limits = limits or {}

    def quota(self, cfg, option):
        limit = self.limits.get(option.region, 64)
        name = "custom_model_training_" + ("preemptible_" if option.strategy == "SPOT" else "") + "nvidia_h100_gpus"
        if limit is None:
            return [Finding(f"quota {name}", None, f"quota {name} in {option.region}: no permission")]
        return [Finding(f"quota {name}", 16 <= limit, f"quota {name} in {option.region}: need 16, limit {limit}")]

    def bucket_location(self, uri):
        return "US", []

    def setup(self, cfg, option):
        return []


def _plan(tmp_path, limits=None, **budget) -> planning.Plan:
    return planning.decide(a3_job(tmp_path, **budget), "acme-ml", project=Quotas(limits))


# ---- the procedure ----------------------------------------------------------------------------------------------

def _judged(region, strategy="SPOT", per_hour=10.0, refused="", hours=2.0, runs=1, at_once=1):
    return ranking.Judged(Option(region, strategy), ranking.Priced(per_hour, at_once, runs, hours), refused)


def test_one_procedure_ranks_what_fits_cheapest_first_and_says_why_the_rest_was_skipped():
    judged = [_judged("a", per_hour=12), _judged("b", refused="quota in b: need 16, limit 0"), _judged("c", per_hour=9),
              _judged("d", per_hour=None), _judged("e", per_hour=9)]
    r = ranking.rank(judged)
    assert [str(j.option) for j in r.order] == ["c SPOT", "e SPOT", "a SPOT", "d SPOT"]  # ties: the user's order
    assert r.why(Option("b", "SPOT")) == "quota in b: need 16, limit 0"
    # a failure blocks the option; the same function, asked again, answers the next one
    again = ranking.rank(judged, blocked={Option("c", "SPOT"): "stockout"})
    assert again.pick.option == Option("e", "SPOT") and again.why(Option("c", "SPOT")) == "it failed already: stockout"
    # a bar: over it, or an unknown price under it, does not fit (never fails open)
    barred = ranking.rank(judged, ranking.Bars(max_per_hour=10))
    assert [str(j.option) for j in barred.order] == ["c SPOT", "e SPOT"]
    assert barred.why(Option("a", "SPOT")).startswith("over budget: budget.max_per_hour: $12.00 an hour")
    assert barred.why(Option("d", "SPOT")).startswith("price unknown under budget.max_per_hour")
    # the total bar over what is left of the timeout: 9/h x 2 h = 18 > 15; over the hour left, 9 fits
    total = ranking.Bars(max_total=15)
    assert ranking.rank(judged, total).pick is None
    assert ranking.rank(judged, total, hours_left=1.0).pick.option == Option("c", "SPOT")


def test_the_judgement_travels_as_json_and_reads_back_the_same():
    judged = [_judged("us-central1", per_hour=192.1), _judged("us-east4", per_hour=None, refused="quota")]
    bars = ranking.Bars(max_per_hour=500, max_total=1000, total_field="--max-cost")
    doc = json.loads(json.dumps(ranking.to_doc(judged, bars, ranking.rank(judged, bars))))
    assert ranking.doc_problems(doc) == ""
    back, bars_back = ranking.from_doc(doc)
    assert back == judged and bars_back == bars
    # the list earlier pipelines carried ({region, strategy}) still reads: fits, price unknown
    old = ranking.carried([{"region": "europe-west4", "strategy": "STANDARD"}], "us-central1", "SPOT")
    assert old == [ranking.Judged(Option("europe-west4", "STANDARD"), ranking.Priced(None))]
    assert ranking.carried([], "us-central1", "SPOT")[0].option == Option("us-central1", "SPOT")
    assert "strategy 'CHEAP'" in ranking.doc_problems({"options": [{"region": "x", "strategy": "CHEAP"}]})


def test_the_plan_is_the_procedures_ranking_and_the_pipeline_gets_it(tmp_path):
    plan = _plan(tmp_path, {"us-east4": 0})
    assert plan.option == Option("us-central1", "SPOT")
    by = {str(v.option): v for v in plan.verdicts}
    assert by["us-east4 SPOT"].why == "quota custom_model_training_preemptible_nvidia_h100_gpus in us-east4: need 16, limit 0"
    assert by["europe-west4 SPOT"].fits and by["europe-west4 SPOT"].cost.per_hour > by["us-central1 SPOT"].cost.per_hour
    doc = plan.placement_doc()
    assert [(o["region"], o["refused"] != "") for o in doc["options"]] == [
        ("us-central1", False), ("europe-west4", False), ("us-east4", True)]  # ranked, the refused one last
    assert doc["options"][0]["price"]["job_per_hour"] == pytest.approx(by["us-central1 SPOT"].cost.job.per_hour)
    assert by["us-central1 SPOT"].cost.job.theirs == ("a3 vCPUs", "a3 memory")  # the user's figures, named


# ---- the fall-over in the training step ---------------------------------------------------------------------------

def _pools():
    from tests.test_custom_job import _pools as pools

    return pools()


def _run(vertex, tmp_path, doc, *, log, **extra):
    from jobs.cloud.vertex_jobs import custom_job

    return custom_job.run(display_name="a3-demo", worker_pool_specs=_pools(), project="acme-ml",
                          location="us-central1", scheduling_strategy="SPOT", timeout="7200s",
                          gcp_resources=str(tmp_path / "gcp_resources"), api_endpoint=vertex.url,
                          logging_endpoint="http://127.0.0.1:9", placement=doc["options"], budget=doc["bars"],
                          base_output_directory=str(tmp_path / "run"), log=log, sleep=lambda s: None, **extra)


def test_a_stockout_falls_over_past_the_option_the_plan_refused_as_vertex_runs_the_step(tmp_path):
    """The compiled custom-training-job step, given the plan's judgement: the pick stocks out; us-east4 (no quota) is
    passed over with its reason; the job is created again in europe-west4 at its price; every create is labelled."""
    from tests.test_custom_job import _compiled, _inputs, run_executor

    doc = _plan(tmp_path, {"us-east4": 0}).placement_doc()
    job_labels = labels.for_job(a3_job(tmp_path), "a3-demo-20261129030000-ab12", "none")
    with VertexStandIn(custom_by_location={"us-central1": (("FAILED",), STOCKOUT.format("us-central1"))}) as vertex, \
            LoggingStandIn() as logging:
        proc = run_executor(_compiled(tmp_path), _inputs(
            _pools(), vertex.url, logging_endpoint=logging.url, location="us-central1", scheduling_strategy="SPOT",
            placement=doc["options"], budget=doc["bars"], labels=job_labels,
            base_output_directory=str(tmp_path / "run")), tmp_path)
        creates = vertex.calls("POST", r"/customJobs$")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [c.path.split("/")[5] for c in creates] == ["us-central1", "europe-west4"]  # never us-east4
    assert [c.json()["jobSpec"]["scheduling"]["strategy"] for c in creates] == [4, 4]  # SPOT, as the REST transport sends it
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("fall-over:")]
    assert lines[0] == ("fall-over: skipped us-east4 SPOT: quota custom_model_training_preemptible_nvidia_h100_gpus in "
                        "us-east4: need 16, limit 0")
    assert lines[1].startswith("fall-over: CustomJob 1000 in us-central1 SPOT ended for no capacity (stockout) in the "
                               "region; creating it again in europe-west4 SPOT ($211.32 an hour) with the same output")
    for c in creates:
        sent = c.json()["labels"]
        assert sent == job_labels and labels.problems(sent) == []
    attempts = json.loads((tmp_path / "run" / "vertex_jobs.json").read_text())["attempts"]
    assert [(a["region"], a["state"], round(a["per_hour"], 2)) for a in attempts] == [
        ("us-central1", "FAILED", 192.1), ("europe-west4", "SUCCEEDED", 211.32)]
    assert attempts[1]["start_time"].startswith("2026-11-22T08:01:00") and attempts[1]["end_time"]
    print("\n".join(lines))


def test_the_fall_over_rechecks_the_budget_at_that_options_own_price_and_with_none_left_creates_nothing(tmp_path):
    """Under budget.max_per_hour=200 the plan's pick (us-central1, $192.10) fits and europe-west4 ($211.32) does not:
    after a stockout there is nothing to fall over to: one error line, one create in all."""
    doc = _plan(tmp_path, {"us-east4": 0}, max_per_hour=200).placement_doc()
    said: list[str] = []
    with VertexStandIn(custom_by_location={"us-central1": (("FAILED",), STOCKOUT.format("us-central1"))}) as vertex:
        with pytest.raises(CloudError) as err:
            _run(vertex, tmp_path, doc, log=said.append)
        assert len(vertex.calls("POST", r"/customJobs$")) == 1
    line = str(err.value)
    assert "\n" not in line and "no placement option is left to fall over to" in line
    assert "europe-west4 SPOT: over budget: budget.max_per_hour: $211.32 an hour" in line
    assert "us-east4 SPOT: quota" in line
    assert [ln.split(":")[1].strip() for ln in said if ln.startswith("fall-over: skipped")] == [
        "skipped us-east4 SPOT", "skipped europe-west4 SPOT"]


def test_an_unknown_price_under_a_budget_never_gets_a_job(tmp_path):
    """The judgement carries no price (the figures are missing): under a bar the step creates nothing at all."""
    judged = [ranking.Judged(Option(r, "SPOT"), ranking.Priced(None, unknown=("a3 vCPUs",), missing=("families.a3.vcpu",)))
              for r in REGIONS]
    doc = ranking.to_doc(judged, ranking.Bars(max_total=100, total_field="--max-cost"))
    with VertexStandIn() as vertex:
        with pytest.raises(CloudError, match=r"^placement: no option is left to create the CustomJob in \(us-central1 "
                                             r"SPOT: price unknown under --max-cost: no figure for a3 vCPUs"):
            _run(vertex, tmp_path, doc, log=lambda s: None)
        assert vertex.calls("POST", r"/customJobs$") == []


def test_the_tuning_job_is_created_only_where_the_plan_says(tmp_path):
    """A study does not fall over, but is created in the option ranked first, never in one the plan refused."""
    from jobs.cloud.vertex_jobs import tuning_job
    from jobs.rules import job_spec

    cfg = config_lib.load("tuning", [f"container.image_uri={IMAGE.replace('-gpu', '')}",
                                     "output.base_dir=gs://acme-runs/t", "data.path=gs://acme-data/f"])
    spec = job_spec.custom_job_spec(cfg.for_vertex())
    refused = ranking.to_doc([_judged("us-central1", "STANDARD", refused="quota in us-central1: need 2, limit 0"),
                              _judged("europe-west4", "STANDARD", per_hour=1.0)], ranking.Bars())
    trials = [{"id": "1", "parameters": {"training.learning_rate": 0.001, "training.optimizer": "adam",
                                         "training.per_replica_batch_size": 8}, "metric": 0.5}]
    said: list[str] = []
    with VertexStandIn(tuning_trials=trials) as vertex:
        tuning_job.run(project="acme-ml", location="us-central1", gcp_resources=str(tmp_path / "g"),
                       display_name="t", tuning=tuning_job.study_of(cfg.tuning), trial_job_spec=spec,
                       api_endpoint=vertex.url, labels=labels.for_job(cfg, "run-1", "study"),
                       placement=refused["options"], budget=refused["bars"], log=said.append, sleep=lambda s: None)
        (create,) = vertex.calls("POST", r"/hyperparameterTuningJobs$")
        nothing = ranking.to_doc([_judged("us-central1", "STANDARD", refused="quota")], ranking.Bars())
        with pytest.raises(CloudError, match="^placement: no option fits the study, nothing was created"):
            tuning_job.run(project="acme-ml", location="us-central1", gcp_resources=str(tmp_path / "h"),
                           display_name="t", tuning=tuning_job.study_of(cfg.tuning), trial_job_spec=spec,
                           api_endpoint=vertex.url, placement=nothing["options"], log=said.append,
                           sleep=lambda s: None)
        assert len(vertex.calls("POST", r"/hyperparameterTuningJobs$")) == 1
    assert create.path.split("/")[5] == "europe-west4" and "placement: the study runs in europe-west4 STANDARD" in said[0]
    sent = create.json()["labels"]
    assert sent[labels.TRIAL] == "study" and sent[labels.RUN] == "run-1" and labels.problems(sent) == []


# ---- labels -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [("a3-demo-20261129030000-ab12", "a3-demo-20261129030000-ab12"),
                                           ("My Run/1", "my-run-1")])
def test_label_values_follow_vertex_rules(text, expected):
    assert labels.value(text) == expected
    long = labels.value("x" * 200)
    assert len(long) == 63 and labels.LABEL_VALUE_RE.match(long) and long != labels.value("x" * 199)


def test_the_config_hash_is_the_same_under_every_option_and_differs_with_the_config(tmp_path):
    cfg = a3_job(tmp_path)
    from jobs.rules.placement import with_option

    same = {labels.config_hash(with_option(cfg, Option(r, s))) for r in REGIONS for s in ("SPOT", "STANDARD")}
    assert len(same) == 1 and labels.config_hash(cfg.with_overrides(["training.epochs=3"])) not in same
    assert labels.problems({**labels.for_job(cfg, "run", "baseline"), "Bad Key": "x"}) == [
        "label key 'Bad Key': a lowercase letter first, then lowercase letters, digits, '_' or '-', at most 63 "
        "characters"]
