"""Issue 53, item 1, after a stockout: the training step falls over along the hardware ladder.

The compiled pipeline carries the plan's judgement (every option with its rung) and validate-config's worker pools of
every rung (THE spec builder on the job on that rung); the CustomJob step creates the job on the next option that
fits with that rung's pools, never in one the plan refused, and the trainer resumes from the same checkpoint with the
global batch kept. The Vertex side is the strict stand-in; the last test runs the built-in trainer for real.
"""
from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
import yaml

import components
from jobs.cloud import planning
from jobs.cloud.vertex_jobs import custom_job
from jobs.rules import job_spec, validate
from jobs.run_records import records
from jobs.rules.errors import CloudError
from jobs.rules.placement import Finding, Option, Project
from tests.standins.cloud_logging import LoggingStandIn
from tests.standins.vertex import VertexStandIn
from tests.test_ladder import A100, H100, H200, REGION2, STOCKOUT, Quotas, _plan, ladder_job
from tests.vertex_steps import task_inputs
from jobfile import config as config_lib

SPOT_GONE = "The Spot VMs of the job were preempted: Spot capacity is unavailable in the region."


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
        f"fall-over: skipped us-east4 STANDARD on {A100}: the hardware catalog: placement.regions[1]: us-east4 does not "
        "offer NVIDIA_TESLA_A100",
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
    from jobs.cloud.vertex_jobs import tuning_job

    cfg = ladder_job(tmp_path, "tuning.metric=val_accuracy", "tuning.goal=maximize", "tuning.max_trials=2",
                     "tuning.parameters={training.learning_rate: {type: double, min: 0.001, max: 0.01}}")
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
    shown = [ln for ln in first["lines"] + second["lines"] if ln.startswith("[chief-0] ")
             and re.search(r"strategy=|resumed from|preempted|step (1|12)/", ln)]
    print("\n".join(fell + shown))
