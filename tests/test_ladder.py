"""Issue 53, item 1: ``placement.hardware``, an ordered ladder of hardware alternatives.

The ladder is one more field of THE placement procedure's option (``jobs.spec.placement.Option.rung``): every rung is
judged in every region and strategy as one option is (catalog, quota, price, budget: ``jobs.spec.ranking``), ranked
rung by rung (the user's preference; the price within a rung), carried to the pipeline in the plan's judgement, and
created by the training step with the rung's worker pools (THE spec builder, ``jobs.spec.job_spec``, applied to the
job on that rung). The Vertex side is the strict stand-in (tests/standins/vertex.py); the trainer's side is the
built-in trainer resuming a checkpoint of one topology on another (the integration test at the end).
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import components
from jobs.cloud import custom_job, plan as planning
from jobs.spec import job_spec, labels, ladder, placement, ranking, records, validate
from jobs.spec.errors import CloudError
from jobs.spec.placement import Finding, Option, Project
from tests.standins.cloud_logging import LoggingStandIn
from tests.standins.vertex import VertexStandIn
from tests.vertex_steps import task_inputs
from trainers import config as config_lib
from trainers.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gpu-ladder" / "job.yaml"
STOCKOUT = "Resources are insufficient in region: {}. Please try a different region."
SPOT_GONE = "The Spot VMs of the job were preempted: Spot capacity is unavailable in the region."
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
    assert by[f"{REGION2} STANDARD on {A100}"].why.startswith("the hardware catalog: topology.region: us-east4 does not "
                                                             "offer NVIDIA_TESLA_A100")
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
    from jobs.cloud.plan_cli import document

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


# ---- the fall-over in the training step -------------------------------------------------------------------------------

def _config_of(job) -> dict:
    """The job config a CustomJob's chief runs (the built-in trainer's ``--config-json``)."""
    args = list(job.job_spec.worker_pool_specs[0].container_spec.args)
    return json.loads(args[args.index("--config-json") + 1])


def _trainer(base: Path, seen: list):
    """What the stand-in's jobs "run": a trainer that resumes from the latest ``ckpt-<step>.index`` in
    ``<base>/checkpoints`` and checkpoints 40 steps further while RUNNING; ``seen`` gets (machine, resumed step,
    the global batch its config keeps, its replicas' share)."""
    def on_state(job, state):
        if state != "RUNNING":
            return
        folder = base / "checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        resumed = max([int(p.name[5:-6]) for p in folder.glob("ckpt-*.index")], default=0)
        spec = job.job_spec.worker_pool_specs
        replicas = sum(p.replica_count * max(1, p.machine_spec.accelerator_count) for p in spec[:2])
        batch = _config_of(job)["training"]["global_batch_size"]
        seen.append((spec[0].machine_spec.machine_type, resumed, batch, batch // replicas))
        (folder / f"ckpt-{resumed + 40}.index").write_text("")
    return on_state


def _out_of(*gpus: str, error: str = STOCKOUT.format("us-central1")):
    """The stand-in's answer for a job: these GPUs are stocked out everywhere, the rest run."""
    return lambda job: ((("RUNNING", "FAILED"), error) if job.job_spec.worker_pool_specs[0].machine_spec
                        .accelerator_type.name in gpus else None)


def _validated(tmp_path, cfg, plan):
    """The compiled pipeline (the plan's judgement as ``placement_plan``'s default) and its validate-config step's
    outputs as Vertex computes them when the run starts with its defaults."""
    from pipelines.training_pipeline import compile_pipeline

    compiled = yaml.safe_load(Path(compile_pipeline(plan.submitted.for_vertex(), str(tmp_path / "p.yaml"),
                                                    placement=plan.placement_doc())).read_text())
    params = {k: v.get("defaultValue") for k, v in compiled["root"]["inputDefinitions"]["parameters"].items()}
    validated = components.definition("validate_config").python_func(
        config_json=params["config_json"], image_uri=cfg.container.image_uri, location=params["location"],
        placement_plan=params["placement_plan"])
    return compiled, validated


def test_a_stocked_out_h100_falls_over_to_the_h200_under_flex_start_on_its_own_pools(tmp_path):
    """The compiled custom-training-job step, given validate-config's outputs: the H100 SPOT pick stocks out after its
    trainer checkpointed step 40; us-east4's H100 (no quota) is passed over with its reason; the job is created again
    on the H200 rung under FLEX_START, with the H200's pools (THE spec of the job on that rung) and the same output
    folder: its trainer resumes from step 40 with the global batch of 256 kept (8 x 32). Never in an option the plan
    refused (us-east4's H100: quota; us-east4's A100: the catalog)."""
    from tests.test_custom_job import run_executor

    cfg = ladder_job(tmp_path)
    plan = _plan(cfg)
    compiled, validated = _validated(tmp_path, cfg, plan)
    carried = compiled["root"]["inputDefinitions"]["parameters"]["placement_plan"]["defaultValue"]["options"]
    assert [(o["region"], o["rung"]) for o in carried][:3] == [("us-central1", 0), ("us-central1", 1), (REGION2, 1)]
    assert [len(pools) for pools in validated.hardware] == [4, 4, 4] and validated.baseline_hardware == []
    base = tmp_path / "run"
    seen: list = []
    with VertexStandIn(custom_by_job=_out_of("NVIDIA_H100_80GB"), on_custom_state=_trainer(base, seen)) as vertex, \
            LoggingStandIn() as logging:
        inputs = task_inputs(compiled, "custom-training-job", validated, vertex.url, "acme-ml")
        proc = run_executor(compiled, {**inputs, "logging_endpoint": logging.url}, tmp_path)
        creates = vertex.calls("POST", r"/customJobs$")
        sent = list(vertex.custom_jobs.values())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [(c.path.split("/")[5], c.json()["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"])
            for c in creates] == [("us-central1", "a3-highgpu-8g"), ("us-central1", "a3-ultragpu-8g")]
    h200 = creates[1].json()["jobSpec"]
    assert h200["scheduling"]["strategy"] == 6 and h200["scheduling"]["maxWaitDuration"] == "7200s"  # FLEX_START
    assert creates[0].json()["jobSpec"]["scheduling"]["strategy"] == 4 and "maxWaitDuration" not in \
        creates[0].json()["jobSpec"]["scheduling"]  # SPOT, no wait
    assert h200["workerPoolSpecs"][0]["diskSpec"] == {"bootDiskType": "hyperdisk-balanced", "bootDiskSizeGb": 500}
    assert {c.json()["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] for c in creates} == {str(base)}
    assert seen == [("a3-highgpu-8g", 0, 256, 32), ("a3-ultragpu-8g", 40, 256, 32)]
    ran = _config_of(sent[1])
    assert ran["topology"]["chief"]["machine_type"] == "a3-ultragpu-8g" and ran["placement"]["hardware"] == []
    assert ran["model"] == _config_of(sent[0])["model"] and ran["output"] == _config_of(sent[0])["output"]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("fall-over:")]
    assert lines == [
        f"fall-over: skipped {REGION2} SPOT on {H100}: quota custom_model_training_preemptible_nvidia_h100_80gb in "
        "us-east4: need 8, limit 0",
        f"fall-over: skipped us-east4 STANDARD on {A100}: the hardware catalog: topology.region: us-east4 does not offer "
        "NVIDIA_TESLA_A100",
        f"fall-over: CustomJob 1000 in us-central1 SPOT on {H100} ended for no capacity (stockout) in the region; "
        f"creating it again in us-central1 FLEX_START on {H200} ($119.72 an hour) with the same output directory: the "
        "trainer resumes from checkpoint step 40"]
    attempts = json.loads((base / "vertex_jobs.json").read_text())["attempts"]
    assert [(a["region"], a["strategy"], a.get("rung"), a.get("hardware"), a["state"]) for a in attempts] == [
        ("us-central1", "SPOT", 0, H100, "FAILED"), ("us-central1", "FLEX_START", 1, H200, "SUCCEEDED")]
    print("\n".join(lines))


def _run_step(vertex, tmp_path, validated, **extra):
    return custom_job.run(
        display_name="gpu-ladder", worker_pool_specs=validated.worker_pool_specs, project="acme-ml",
        location="us-central1", scheduling_strategy=validated.scheduling_strategy, timeout=validated.timeout,
        max_wait_duration=validated.max_wait_duration, gcp_resources=str(tmp_path / "gcp_resources"),
        api_endpoint=vertex.url, logging_endpoint="http://127.0.0.1:9", placement=validated.placement,
        budget=validated.budget, hardware=validated.hardware,
        base_output_directory=validated.base_output_directory, sleep=lambda s: None, **extra)


def test_the_fall_over_rechecks_the_budget_on_each_rung_at_its_own_price(tmp_path):
    """Under budget.max_per_hour=100 the H200 ($119.72 an hour) does not fit: after the H100 stocks out, the step
    passes over it and creates the job on the A100 rung, two A2 machines (multi_worker), the batch 256 = 16 x 16."""
    cfg = ladder_job(tmp_path, "budget.max_per_hour=100")
    plan = _plan(cfg)
    _, validated = _validated(tmp_path, cfg, plan)
    said: list[str] = []
    with VertexStandIn(custom_by_job=_out_of("NVIDIA_H100_80GB")) as vertex:
        _run_step(vertex, tmp_path, validated, log=said.append)
        sent = list(vertex.custom_jobs.values())
    assert [j.job_spec.worker_pool_specs[0].machine_spec.machine_type for j in sent] == ["a3-highgpu-8g",
                                                                                          "a2-highgpu-8g"]
    a100 = sent[1].job_spec.worker_pool_specs
    assert [(p.replica_count, p.machine_spec.accelerator_count) for p in a100] == [(1, 8), (1, 8)]
    assert _config_of(sent[1])["topology"]["strategy"] == "multi_worker"
    assert _config_of(sent[1])["training"]["global_batch_size"] == 256
    skipped = [ln for ln in said if ln.startswith("fall-over: skipped")]
    assert f"fall-over: skipped us-central1 FLEX_START on {H200}: over budget: budget.max_per_hour: $119.72 an hour " \
           "(one CustomJob), over the bar of $100.00" in skipped


def test_with_no_rung_left_one_error_line_and_no_create_and_the_message_says_why(tmp_path):
    """Every GPU stocks out: each fitting option is tried once (the plan's refusals never), then one error line; the
    failure record the run's end message reads names the ladder's options."""
    from jobs.steps import notify_message
    from tests.test_custom_job import run_executor

    cfg = ladder_job(tmp_path)
    plan = _plan(cfg)
    compiled, validated = _validated(tmp_path, cfg, plan)
    with VertexStandIn(custom_by_job=_out_of("NVIDIA_H100_80GB", "NVIDIA_H200_141GB", "NVIDIA_TESLA_A100")) as vertex, \
            LoggingStandIn() as logging:
        inputs = task_inputs(compiled, "custom-training-job", validated, vertex.url, "acme-ml")
        proc = run_executor(compiled, {**inputs, "logging_endpoint": logging.url}, tmp_path)
        creates = vertex.calls("POST", r"/customJobs$")
    assert proc.returncode == 1
    assert [(c.path.split("/")[5], c.json()["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"])
            for c in creates] == [("us-central1", "a3-highgpu-8g"), ("us-central1", "a3-ultragpu-8g"),
                                  (REGION2, "a3-ultragpu-8g"), ("us-central1", "a2-highgpu-8g")]
    (error,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "no placement option is left to fall over to" in error
    assert f"{REGION2} SPOT on {H100}: quota" in error and f"{REGION2} STANDARD on {A100}: the hardware catalog" in error
    record = records.read_at(str(tmp_path / "run"), records.FAILURE_RECORD)
    assert record["step"] == "custom-training-job" and "no placement option is left" in record["error"]
    msg = notify_message.message(cfg, "FAILED", run_id="uuid", run_created="2020-01-01T00:00:00Z", on_vertex=True)
    assert f"{REGION2} STANDARD on {A100}: the hardware catalog" in msg["text"]


def test_a_rung_the_step_has_no_pools_for_creates_nothing():
    spec = {"worker_pool_specs": [{"replica_count": 1}], "scheduling_strategy": "SPOT", "max_wait_duration": "60s"}
    with pytest.raises(CloudError, match=r"^placement: us-central1 FLEX_START on h200 is on rung 2 of the hardware "
                                         r"ladder, and the step was given the worker pools of 0 rung\(s\)"):
        custom_job.rung_spec(spec, Option("us-central1", "FLEX_START", 1, "h200"), [])
    assert custom_job.rung_spec(spec, Option("r", "SPOT"), [])["max_wait_duration"] == ""
    assert custom_job.rung_spec(spec, Option("r", "FLEX_START"), [])["max_wait_duration"] == "60s"


def test_a_study_runs_its_trials_on_the_rung_the_plan_picks(tmp_path):
    """A study does not fall over, but is created on the first option that fits: on the H200 rung (no H100 quota),
    every trial on the H200's pools; the baseline beside it is THE baseline spec on each rung."""
    from jobs.cloud import tuning_job

    cfg = ladder_job(tmp_path, "tuning.metric=val_accuracy", "tuning.goal=maximize", "tuning.max_trials=2",
                     "tuning.parameters={training.learning_rate: {type: double, min: 0.001, max: 0.01}}")
    _, plan = _h200_first(tmp_path)
    plan = planning.decide(cfg, "acme-ml", project=Quotas({("us-central1", "NVIDIA_H100_80GB"): 0,
                                                           (REGION2, "NVIDIA_H100_80GB"): 0}))
    _, validated = _validated(tmp_path, cfg, plan)
    assert len(validated.baseline_hardware) == 3
    baseline_env = validated.baseline_hardware[1][0]["container_spec"]["env"]
    assert any(e["name"] == job_spec.METRIC_FILE_ENV for e in baseline_env)
    said: list[str] = []
    with VertexStandIn(tuning_trials=[{"id": "1", "parameters": {"training.learning_rate": 0.002}, "metric": 0.5}]) \
            as vertex:
        tuning_job.run(display_name="gpu-ladder", tuning=tuning_job.study_of(validated.tuning),
                       trial_job_spec=validated.custom_job_spec, project="acme-ml", location="us-central1",
                       gcp_resources=str(tmp_path / "g"), api_endpoint=vertex.url, placement=validated.placement,
                       budget=validated.budget, hardware=validated.hardware, log=said.append, sleep=lambda s: None)
        (study,) = vertex.tuning_jobs.values()
    trial = study.trial_job_spec
    assert trial.worker_pool_specs[0].machine_spec.machine_type == "a3-ultragpu-8g"
    assert trial.scheduling.strategy.name == "FLEX_START"
    assert f"placement: the study runs in us-central1 FLEX_START on {H200} (the plan's ranking)" in said


# ---- the trainer resumes on another topology --------------------------------------------------------------------------

STEPS = 12


class CpuQuota(Project):
    """Plenty of quota, except for n1-standard-16 machines (the middle rung): the plan refuses that rung."""

    def quota(self, cfg, option):
        big = any(p.machine_type == "n1-standard-16" for p in (cfg.topology.chief, cfg.topology.worker)
                  if p.replica_count)
        return [Finding("quota custom_model_training_cpus", not big,
                        f"quota custom_model_training_cpus in {option.region}: need {32 if big else 8}, limit 16")]

    def bucket_location(self, uri):
        return "US", []

    def setup(self, cfg, option):
        return []


def _cpu_ladder(base: Path, data: str) -> config_lib.JobConfig:
    """Two CPU workers (MultiWorkerMirroredStrategy) on Spot, global batch 8 = 2 x 4; then two bigger machines (no
    quota); then one machine alone (one replica: 8 = 1 x 8)."""
    from tests.conftest import job_config

    cfg = job_config(base, data, f"training.steps={STEPS}", "checkpoint.every_steps=2", "training.log_every_steps=1",
                     "training.global_batch_size=8", "placement.strategies=[SPOT]", "scheduling.timeout=7200s",
                     "scheduling.max_restarts=0")  # Vertex ends the job: no restart here
    doc = cfg.to_dict()
    doc["placement"]["hardware"] = [
        {"name": "two-n1-16", "strategies": ["STANDARD"], "chief": {"machine_type": "n1-standard-16"},
         "worker": {"machine_type": "n1-standard-16"}},
        {"name": "one-machine", "strategy": "one_device", "strategies": ["STANDARD"],
         "chief": {"machine_type": "n1-standard-8"}, "worker": {"replica_count": 0}}]
    return config_lib.from_dict(doc)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_the_built_in_trainer_resumes_on_the_next_rung_from_the_same_step_with_the_same_global_batch(
        tmp_path, prepared_data):
    """Real training against the stand-in. The step creates the job on two CPU workers under SPOT; its replicas (the
    job's own pools, run here as Vertex runs them) train until Spot takes the machines back (SIGTERM: a checkpoint at
    the next step, exit 42) and Vertex ends the job for Spot capacity; the step passes over the rung the plan refused
    (quota) and creates the job on one machine with that rung's pools, same output folder: the trainer resumes from the
    step it saved, one replica now takes the whole global batch of 8, and trains on to the same last step."""
    from jobs.local.launch.outcome import JobFailed
    from jobs.steps import calls as steps
    from tests.conftest import Killer, assert_no_processes_left

    base = tmp_path / "run"
    cfg = _cpu_ladder(base, prepared_data)
    assert validate.validate(cfg, check_data=False).errors == []
    plan = planning.decide(cfg, "acme-ml", project=CpuQuota())
    doc = plan.placement_doc()
    hardware = job_spec.rung_pools(cfg)
    runs: list[dict] = []

    def run_replicas(vertex) -> None:
        """The job Vertex says is RUNNING runs now: its chief's config, as the create call sent it."""
        job_id, job = max(vertex.custom_jobs.items())
        if any(r["job"] == job_id for r in runs):
            return
        ran = config_lib.from_dict(_config_of(job))
        lines: list[str] = []
        log = Killer(str(base), "workerpool1", "[worker-0] step 5/", signal.SIGTERM, echo=False) if not runs \
            else lines.append
        try:
            result = steps.run_local(ran, timeout_s=300, log=log)
        except JobFailed as failed:  # Spot took the machines: the job ends, Vertex says why (below)
            result = failed.result
        runs.append({"job": job_id, "config": ran, "lines": getattr(log, "lines", lines), "result": result,
                     "metrics": json.loads((base / "metrics.json").read_text()) if (base / "metrics.json").exists()
                     else None})

    said: list[str] = []
    try:
        with VertexStandIn(custom_by_job=lambda job: (("RUNNING", "FAILED"), SPOT_GONE) if job.name.endswith("/1000")
                           else None) as vertex, LoggingStandIn() as logging:
            name = custom_job.run(
                display_name="cpu-ladder", worker_pool_specs=hardware[0], project="acme-ml", location="us-central1",
                scheduling_strategy="SPOT", timeout="7200s", gcp_resources=str(tmp_path / "gcp_resources"),
                api_endpoint=vertex.url, logging_endpoint=logging.url, placement=doc["options"], budget=doc["bars"],
                hardware=hardware, base_output_directory=str(base), log=said.append,
                sleep=lambda s: run_replicas(vertex))
            creates = vertex.calls("POST", r"/customJobs$")
    finally:
        assert_no_processes_left(str(base))
    assert name.endswith("/customJobs/1001")
    assert [len(c.json()["jobSpec"]["workerPoolSpecs"]) for c in creates] == [2, 1]  # never the refused rung
    assert all(c.json()["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] != "n1-standard-16"
               for c in creates)
    first, second = runs
    assert first["result"].returncode != 0 and first["config"].topology.strategy == "multi_worker"
    preempted = [int(m.group(1)) for ln in first["lines"]
                 if (m := re.match(r"^\[chief-0\] preempted: checkpoint \S+ at step (\d+); exiting 42$", ln))]
    assert len(preempted) == 1 and 5 <= preempted[0] < STEPS, first["lines"][-30:]
    n = preempted[0]
    assert f"[chief-0] strategy=CollectiveAllReduceStrategy replicas=2 global_batch=8 steps={STEPS} (from 0) " \
           "classes=3" in first["lines"], [ln for ln in first["lines"] if "strategy=" in ln]
    assert second["result"].returncode == 0, second["lines"][-30:]
    assert second["config"].topology.strategy == "one_device" and second["config"].training.global_batch_size == 8
    assert any(re.match(rf"^\[chief-0\] strategy=\S+ replicas=1 global_batch=8 steps={STEPS} \(from {n}\) ", ln)
               for ln in second["lines"]), [ln for ln in second["lines"] if "strategy=" in ln]
    resumed = [ln for ln in second["lines"] if "resumed from step" in ln]
    assert resumed and resumed[0].startswith(f"[chief-0] resumed from step {n} ({base}/checkpoints/ckpt-{n})"), resumed
    trained = [int(m.group(1)) for ln in second["lines"] if (m := re.match(r"^\[chief-0\] step (\d+)/", ln))]
    assert trained == list(range(n + 1, STEPS + 1))
    metrics = second["metrics"]
    assert (metrics["resumed_from_step"], metrics["steps"], metrics["global_batch_size"], metrics["replicas"]) == (
        n, STEPS, 8, 1)
    fell = [ln for ln in said if ln.startswith("fall-over:")]
    assert fell[0] == ("fall-over: skipped us-central1 STANDARD on two-n1-16: quota custom_model_training_cpus in "
                       "us-central1: need 32, limit 16")
    assert fell[1].endswith(f"creating it again in us-central1 STANDARD on one-machine with the same output directory: "
                            f"the trainer resumes from checkpoint step {n}") or \
        f"the trainer resumes from checkpoint step {n}" in fell[1], fell
    print("\n".join(fell))
