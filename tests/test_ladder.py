"""Issue 53, item 1: ``placement.hardware``, an ordered ladder of hardware alternatives.

The ladder is one more field of THE placement procedure's option (``jobs.rules.placement.Option.rung``): every rung is
judged in every region and strategy as one option is (catalog, quota, price, budget: ``jobs.rules.ranking``), ranked
rung by rung (the user's preference; the price within a rung), carried to the pipeline in the plan's judgement, and
created by the training step with the rung's worker pools (THE spec builder, ``jobs.rules.job_spec``, applied to the
job on that rung). The Vertex side is the strict stand-in (tests/standins/vertex.py). The fall-over after a stockout,
and the built-in trainer resuming on another topology: tests/test_ladder_fallover.py.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs.cloud import planning
from jobs.rules import labels, placement, ranking, validate
from jobs.run_records import records
from jobs.rules.placement import Finding, Option, Project
from tests.standins.vertex import VertexStandIn
from jobfile import config as config_lib
from jobfile.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpu-ladder" / "job.yaml"
STOCKOUT = "Resources are insufficient in region: {}. Please try a different region."
H100, H200, A100 = "8x NVIDIA_H100_80GB (a3-highgpu-8g)", "h200-flex", "a100-16"
REGION2 = "us-east4"


def ladder_job(tmp_path: Path, *sets: str) -> config_lib.JobConfig:
    """The example job (8 H100 SPOT -> 8 H200 FLEX_START -> 16 A100 STANDARD), over us-central1 and
    us-east4 (where the catalog knows there are no A100), writing into ``tmp_path/run``, with a price file
    for the A3 hosts and the H200 (the table has no figure for them)."""
    prices_file = tmp_path / "my-prices.yaml"
    prices_file.write_text("families:\n  a3: {vcpu: 0.04, gb: 0.005}\ngpus:\n  NVIDIA_H200_141GB: {hour: 12.0}\n")
    return config_lib.load(str(EXAMPLE), [f"output.base_dir={tmp_path / 'run'}", f"budget.prices={prices_file}",
                                          f"placement.regions=[us-central1, {REGION2}]", *sets])


class Quotas(Project):
    """GPU quota per (region, GPU): ``limits``, else plenty; what the job under an option needs."""

    def __init__(self, limits=None):
        self.limits = limits or {}
        self.asked: list[Option] = []

    def quota(self, cfg, option):
        self.asked.append(option)
        pools = [p for p in (cfg.topology.chief, cfg.topology.worker) if p.replica_count and p.accelerator_count]
        need = sum(p.replica_count * p.accelerator_count for p in pools)
        gpu = pools[0].accelerator_type if pools else "cpus"
        name = f"custom_model_training_{'preemptible_' if option.strategy != 'STANDARD' else ''}{gpu.lower()}"
        limit = self.limits.get((option.region, gpu), 64)
        return [Finding(f"quota {name}", need <= limit, f"quota {name} in {option.region}: need {need}, limit {limit}")]

    def bucket_location(self, uri):
        return "US", []

    def setup(self, cfg, option):
        return []


NO_H100_THERE = {(REGION2, "NVIDIA_H100_80GB"): 0}


def _plan(cfg, limits=NO_H100_THERE) -> planning.Plan:
    return planning.decide(cfg, "acme-ml", project=Quotas(limits))


# ---- the ladder as options -------------------------------------------------------------------------------------------

def test_options_go_rung_by_rung_and_each_rung_is_applied_with_the_global_batch_kept(tmp_path):
    cfg = ladder_job(tmp_path)
    assert [str(o) for o in placement.options(cfg)] == [
        f"us-central1 SPOT on {H100}", f"{REGION2} SPOT on {H100}", f"us-central1 FLEX_START on {H200}",
        f"{REGION2} FLEX_START on {H200}", f"us-central1 STANDARD on {A100}", f"{REGION2} STANDARD on {A100}"]
    assert [o.rung for o in placement.options(cfg)] == [0, 0, 1, 1, 2, 2]
    h200 = placement.with_option(cfg, Option(REGION2, "FLEX_START", 1, H200))
    chief = h200.topology.chief
    assert (chief.machine_type, chief.accelerator_type, chief.accelerator_count) == ("a3-ultragpu-8g",
                                                                                     "NVIDIA_H200_141GB", 8)
    assert chief.disk_spec == config_lib.DiskSpec("hyperdisk-balanced", 500) and h200.topology.strategy == "mirrored"
    assert (h200.topology.region, h200.scheduling.strategy, h200.scheduling.max_wait_duration) == (
        REGION2, "FLEX_START", "7200s")
    assert h200.training.global_batch_size == 256 and h200.placement.hardware == []  # no ladder of its own
    a100 = placement.with_option(cfg, Option("us-central1", "STANDARD", 2, A100))
    assert a100.topology.strategy == "multi_worker" and a100.scheduling.max_wait_duration == ""  # FLEX_START's only
    assert [(p.replica_count, p.machine_type, p.accelerator_count) for p in (a100.topology.chief, a100.topology.worker)] \
        == [(1, "a2-highgpu-8g", 8), (1, "a2-highgpu-8g", 8)]
    # the global batch of a job that derives it (per-replica x replicas) is pinned on a later rung: 8 x 32 = 256
    derived = ladder_job(tmp_path, "training.global_batch_size=0", "training.per_replica_batch_size=32")
    assert placement.on_rung(derived, 2).training.global_batch_size == 256 and placement.global_batch(derived) == 256
    # the submission carries the job as written when the pick is on a later rung (the training step applies it)
    assert placement.submitted(cfg, Option(REGION2, "FLEX_START", 1, H200)) is cfg
    assert placement.submitted(cfg, Option(REGION2, "SPOT", 0, H100)).topology.region == REGION2


def test_one_procedure_ranks_a_rung_before_the_next_and_the_cheapest_first_within_a_rung():
    def judged(region, rung, per_hour, refused=""):
        return ranking.Judged(Option(region, "SPOT", rung, f"rung{rung}"), ranking.Priced(per_hour, hours=2.0), refused)

    options = [judged("a", 0, 100), judged("b", 0, 90), judged("a", 1, 10), judged("b", 1, None),
               judged("c", 0, 80, refused="quota in c: need 8, limit 0"), judged("a", 2, 5)]
    r = ranking.rank(options)
    # the cheaper later rungs wait for the first: the ladder is the user's preference, the price orders within a rung
    assert [(j.option.region, j.option.rung) for j in r.order] == [("b", 0), ("a", 0), ("a", 1), ("b", 1), ("a", 2)]
    assert r.why(Option("c", "SPOT", 0, "rung0")).startswith("quota in c")
    blocked = {j.option: "stockout" for j in r.order[:2]}
    assert ranking.rank(options, blocked=blocked).pick.option == Option("a", "SPOT", 1, "rung1")
    # a bar applies to every rung at its own price; an unknown price under a bar never fits
    barred = ranking.rank(options, ranking.Bars(max_per_hour=50), blocked=blocked)
    assert [(j.option.region, j.option.rung) for j in barred.order] == [("a", 1), ("a", 2)]
    # the judgement travels as JSON with the rung and reads back the same
    doc = json.loads(json.dumps(ranking.to_doc(options, ranking.Bars())))
    assert ranking.doc_problems(doc) == "" and ranking.from_doc(doc)[0] == options
    assert "not a rung" in ranking.doc_problems({"options": [{"region": "a", "strategy": "SPOT", "rung": -1}]})


# ---- validation: one error line per rule ------------------------------------------------------------------------------

def _rung(tmp_path, i: int, change: dict, *, top: dict | None = None, drop: bool = False) -> list[str]:
    """``vtp validate`` of the example with rung ``i`` changed (``drop``: replaced by ``change``) and ``top`` merged
    into the document: its ``error:`` and ``warning:`` lines."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    rung = doc["placement"]["hardware"][i]
    doc["placement"]["hardware"][i] = change if drop else {**rung, **change}
    for key, value in (top or {}).items():
        section, _, name = key.partition(".")
        doc.setdefault(section, {})[name] = value
    path = tmp_path / f"job-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    try:
        validate.load(str(path), [], check_data=False)
    except ConfigError as exc:
        return [f"error: {p}" for p in exc.problems]
    return []


RULES = [
    # the same model and checkpoint: a strategy of the topology's family
    ((1, {"strategy": "parameter_server"}), r"^error: placement\.hardware\[1\]\.strategy: parameter_server is not of "
     r"the topology's family \(mirrored: all-reduce\): .*; valid choices: one_device, mirrored, multi_worker$"),
    ((1, {"strategy": "tpu"}), r"^error: placement\.hardware\[1\]\.strategy: tpu is not of the topology's family"),
    ((1, {"strategy": "mirored"}), r"^error: placement\.hardware\[1\]\.strategy: 'mirored' is not a strategy; valid "
     r"choices: one_device, mirrored, multi_worker$"),
    # the global batch the new replicas divide (256 over 24 replicas does not)
    ((1, {"worker": {"replica_count": 2, "machine_type": "a2-highgpu-8g", "accelerator_type": "NVIDIA_TESLA_A100",
                     "accelerator_count": 8}}),
     r"^error: placement\.hardware\[1\]: its 24 replicas in sync do not divide the global batch of 256 "
     r"\(training\.global_batch_size\): .*; valid choices: training\.global_batch_size=264 \(every rung's replicas "
     r"divide it\), a rung of 16 replicas in sync, a rung of 32 replicas in sync$"),
    # the same image: no accelerator where topology has GPUs
    ((1, {"name": "cpu", "strategies": ["STANDARD"], "chief": {"machine_type": "n1-standard-8", "accelerator_count": 0}},
      True), r"^error: placement\.hardware\[1\]: runs on no accelerator, topology on GPUs: the job has one image"),
    # something to run: not topology again, not a rung twice, not a rung no option can run
    ((1, {"chief": {"machine_type": "a3-highgpu-8g"}, "strategies": ["SPOT"], "name": ""}, True),
     r"^error: placement\.hardware\[1\]: changes nothing: the same hardware and scheduling strategies as topology"),
    ((1, {"name": "again", "strategy": "", "strategies": ["FLEX_START"], "worker": None,
          "chief": {"machine_type": "a3-ultragpu-8g", "accelerator_type": "NVIDIA_H200_141GB",
                    "disk_spec": {"boot_disk_type": "hyperdisk-balanced", "boot_disk_size_gb": 500}}}),
     r"^error: placement\.hardware\[1\]: is the same hardware and strategies as placement\.hardware\[0\]"),
    ((0, {"chief": {"accelerator_count": 4}}),  # an A3 Ultra comes with 8 H200, not 4
     r"^error: placement\.hardware\[0\]\.chief\.accelerator_count: no option can run it \(us-central1 FLEX_START on "
     r"h200-flex\): "),
    ((0, {"chief": {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_T4", "disk_spec": None}}),
     r"^error: placement\.hardware\[0\]\.chief\.accelerator_type: no option can run it \(us-central1 FLEX_START on "
     r"h200-flex\): FLEX_START \(Dynamic Workload Scheduler\) runs training on L4, A100, H100, H200 or B200 GPUs, "
     r"not NVIDIA_TESLA_T4; valid choices: NVIDIA_L4, "),
    ((1, {"name": "h200-flex"}), r"^error: placement\.hardware\[1\]\.name: 'h200-flex' names an earlier rung too; "
     r"valid choices: h200-flex-2$"),
    ((1, {"strategies": ["STANDARD", "STANDARD"]}), r"^error: placement\.hardware\[1\]\.strategies\[1\]: STANDARD is "
     r"listed twice"),
    ((1, {"chief": {"machine_typ": "a2-highgpu-8g"}}), r"^error: placement\.hardware\[1\]\.chief\.machine_typ: unknown "
     r"field; did you mean 'machine_type'\?"),
    ((1, {"strategies": ["CHEAP"]}), r"^error: placement\.hardware\[1\]\.strategies\[0\]: 'CHEAP' is not allowed"),
    # FLEX_START's wait is the job's, for whichever option runs under FLEX_START: without one, it is refused
    ((0, {"strategies": ["STANDARD"]}), r"^error: scheduling\.max_wait_duration: applies to FLEX_START only, and "
     r"neither scheduling\.strategy \(SPOT\) nor any strategy of placement is FLEX_START"),
]


@pytest.mark.parametrize("change,expected", RULES, ids=[f"rule-{i}" for i in range(len(RULES))])
def test_each_rule_of_a_rung_is_one_error_naming_it_with_a_valid_alternative(tmp_path, change, expected):
    said = _rung(tmp_path, *change[:2], drop=len(change) > 2 and change[2])
    assert len(said) == 1 and re.search(expected, said[0]), said


def test_the_example_is_valid_and_a_users_trainer_is_told_what_it_must_keep(tmp_path):
    assert validate.validate(ladder_job(tmp_path)).errors == []
    user = ladder_job(tmp_path, "trainer.module=trainer.task", "data.source=none")
    warned = [str(w) for w in validate.validate(user, check_data=False).warnings]
    assert any(w.startswith("placement.hardware: your trainer decides its own batch: keep its global batch the same "
                            "on every rung") for w in warned), warned
    proc = subprocess.run([sys.executable, "pipelines/run.py", "validate", str(EXAMPLE), "--set",
                           "training.global_batch_size=200"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: placement.hardware[1]: its 16 replicas in sync do not divide the global batch of "
                           "200")


# ---- the plan -------------------------------------------------------------------------------------------------------

def test_the_plan_judges_every_rung_everywhere_and_vtp_plan_prints_the_ladder(tmp_path):
    cfg = ladder_job(tmp_path, "budget.max_per_hour=150")
    plan = _plan(cfg)
    assert plan.option == Option("us-central1", "SPOT", 0, H100)
    by = {str(v.option): v for v in plan.verdicts}
    assert by[f"{REGION2} SPOT on {H100}"].why.startswith("quota custom_model_training_preemptible_nvidia_h100_80gb in "
                                                         "us-east4: need 8, limit 0")
    assert by[f"{REGION2} STANDARD on {A100}"].why.startswith("the hardware catalog: placement.regions[1]: us-east4 does "
                                                             "not offer NVIDIA_TESLA_A100")
    assert [v.order for v in plan.verdicts] == [1, 0, 2, 3, 4, 0]  # the order the training step tries them
    assert plan.pick.why == "rung 1 (topology) is the first that fits; its only option"
    # each rung is priced as that rung: 8 H100 on an A3 High, 8 H200 on an A3 Ultra, 16 A100 on two A2 High
    assert [round(by[o].cost.per_hour, 2) for o in (f"us-central1 SPOT on {H100}", f"us-central1 FLEX_START on {H200}",
                                                    f"us-central1 STANDARD on {A100}")] == [96.05, 119.72, 67.59]
    assert len(plan.written.placement.hardware) == 2 and plan.submitted.topology.chief.machine_type == "a3-highgpu-8g"

    proc = subprocess.run([sys.executable, "pipelines/run.py", "plan", "--config", str(EXAMPLE)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    start = out.index(next(ln for ln in out if ln.startswith("ladder (placement.hardware)")))
    assert out[start] == ("ladder (placement.hardware): a rung is tried before the next, the cheapest of its options "
                          "first; the global batch is kept on every rung")
    assert [ln.split()[:2] for ln in out[start + 2:start + 5]] == [["1", "topology"], ["2", "placement.hardware[0]"],
                                                                    ["3", "placement.hardware[1]"]]
    assert out[start + 2].endswith("8x NVIDIA_H100_80GB (a3-highgpu-8g)                mirrored      SPOT        "
                                   "256 = 8 x 32")
    assert "h200-flex: 8x NVIDIA_H200_141GB (a3-ultragpu-8g)" in out[start + 3] and out[start + 3].endswith(
        "mirrored      FLEX_START  256 = 8 x 32")
    assert out[start + 4].endswith("multi_worker  STANDARD    256 = 16 x 16")
    assert out[start + 5] == "options (placement, in the order the training step tries them):"
    rows = out[start + 7:start + 13]
    assert [r.split()[0] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert "taken: rung 1 (topology) is the first that fits; its first option (price unknown)" in rows[0]
    assert "us-central1 STANDARD on a100-16" in rows[4]
    print("\n".join(out[start:start + 13]))


def _h200_first(tmp_path):
    """A plan whose pick is on the second rung: no H100 quota anywhere."""
    cfg = ladder_job(tmp_path)
    plan = _plan(cfg, {("us-central1", "NVIDIA_H100_80GB"): 0, (REGION2, "NVIDIA_H100_80GB"): 0})
    assert plan.option == Option("us-central1", "FLEX_START", 1, H200), plan.option
    return cfg, plan


def test_a_pick_on_a_later_rung_is_sent_as_the_job_as_written_with_that_rungs_request(tmp_path):
    from jobs.commands.plan_cli import document

    cfg, plan = _h200_first(tmp_path)
    assert plan.submitted is plan.written and plan.cfg.topology.chief.machine_type == "a3-ultragpu-8g"
    (request,) = planning.requests(plan.cfg, run_id="gpu-ladder-1", labelled=plan.submitted)
    body = request.body()["jobSpec"]
    assert body["workerPoolSpecs"][0]["machineSpec"] == {"machineType": "a3-ultragpu-8g",
                                                         "acceleratorType": "NVIDIA_H200_141GB", "acceleratorCount": 8}
    assert body["scheduling"]["strategy"] == "FLEX_START" and body["scheduling"]["maxWaitDuration"] == "7200s"
    # the labels name the config the pipeline carries (as validate_config labels every create)
    assert request.body()["labels"] == labels.for_job(plan.submitted.for_vertex(), "gpu-ladder-1", "none")
    doc = document(plan, [request])
    assert (doc["pick"], doc["rung"], doc["hardware"]) == (f"us-central1 FLEX_START on {H200}", 1, H200)
    assert json.loads(doc["config_json"])["placement"]["hardware"][0]["name"] == H200  # the ladder travels whole


def test_submit_sends_the_job_as_written_and_the_judgement_whose_first_option_is_the_h200(tmp_path, monkeypatch, capsys):
    from pipelines.run import main

    cfg, plan = _h200_first(tmp_path)
    monkeypatch.setattr(planning, "PROJECT_FACTORY", lambda *a: Quotas({("us-central1", "NVIDIA_H100_80GB"): 0,
                                                                       (REGION2, "NVIDIA_H100_80GB"): 0}))
    with VertexStandIn() as vertex:
        code = main(["--config", str(EXAMPLE), "--set", f"budget.prices={cfg.budget.prices}", "--set",
                     f"placement.regions=[us-central1, {REGION2}]", "--project", "acme-ml",
                     "--pipeline-root", "gs://acme-ml-runs/root", "--api-endpoint", vertex.url, "--no-wait"])
        err = capsys.readouterr().err
        assert code == 0, err
        (create,) = vertex.calls("POST", "/pipelineJobs$")
    assert create.path == "/v1/projects/acme-ml/locations/us-central1/pipelineJobs"
    params = create.json()["runtimeConfig"]["parameterValues"]
    sent = json.loads(params["config_json"])
    assert sent["topology"]["chief"]["machine_type"] == "a3-highgpu-8g" and len(sent["placement"]["hardware"]) == 2
    first = params["placement_plan"]["options"][0]
    assert (first["region"], first["strategy"], first["rung"], first["hardware"]) == ("us-central1", "FLEX_START", 1,
                                                                                       H200)
    assert f"plan: us-central1 FLEX_START on {H200} taken (rung 2 (placement.hardware[0]) is the first that fits; " \
           "its cheapest option)" in err


def test_the_pipelines_plan_check_judges_the_ladder_again(tmp_path, monkeypatch):
    from jobs.steps import calls as steps

    cfg = ladder_job(tmp_path)
    said: list[str] = []
    monkeypatch.setattr(planning, "PROJECT_FACTORY", lambda *a: Quotas(NO_H100_THERE))
    assert steps.check_plan(cfg, "acme-ml", "us-central1", run_id="r1", log=said.append) == []
    assert said[-1] == f"the plan's checks passed: us-central1 SPOT on {H100}"
    assert f"plan: {REGION2} SPOT on {H100} skipped: quota custom_model_training_preemptible_nvidia_h100_80gb in " \
           "us-east4: need 8, limit 0" in said
    # quota gone on every rung: the run stops before anything is created, the reason recorded for its message
    monkeypatch.setattr(planning, "PROJECT_FACTORY", lambda *a: Quotas({(r, g): 0 for r in ("us-central1", REGION2)
                                                                       for g in ("NVIDIA_H100_80GB", "NVIDIA_H200_141GB",
                                                                                 "NVIDIA_TESLA_A100")}))
    errors = steps.check_plan(cfg, "acme-ml", "us-central1", run_id="r2", log=said.append)
    assert len(errors) == 1 and errors[0].startswith("placement: no option fits (us-central1 SPOT on ")
    assert f"us-central1 STANDARD on {A100}: quota" in errors[0]
    assert records.read_failure(config_lib.resolved_base_dir(cfg), "r2")["step"] == "check-plan"
