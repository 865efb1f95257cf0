"""The price table and the budget (jobs/rules/hardware/prices.py, jobs/rules/ranking.py, issue 49): every figure with its
source, seen or recalled; a user's price file over the table, shown as theirs; a budget that refuses an unknown price
naming the missing figures, and offers only fixes that fit."""
from __future__ import annotations

import pytest
import yaml

from jobs.cloud import planning
from jobs.rules import ranking
from jobs.rules.hardware import prices
from jobs.rules.hardware.catalog import load_catalog
from tests.test_plan import A3, H200_JOB, IMAGE, JOB, FakeProject, _run
from jobfile import config as config_lib


# ---- the price table ---------------------------------------------------------------------------

def test_every_family_gpu_and_tpu_of_the_catalog_has_a_figure_or_an_explicit_unknown():
    table, cat = prices.load_prices(), load_catalog()
    assert set(cat.families) <= set(table["families"])
    assert set(cat.gpus) <= set(table["gpus"])
    assert set(cat.tpu_generations) <= set(table["tpus"])
    assert {t.replace("_POD", "") for t in cat.tpu_cores} <= set(table["tpus"])
    for section, keys in (("families", ("vcpu", "gb")), ("gpus", ("hour",)), ("tpus", ("chip_hour",))):
        for name, entry in table[section].items():
            for k in keys:
                assert k in entry, (section, name, k)  # a figure or an explicit null
                assert entry[k] is None or entry[k] > 0, (section, name)
            if any(entry[k] is None for k in keys):
                assert entry.get("note"), (section, name)  # unknown says why
            else:
                assert entry["source"] in table["sources"], (section, name)
    for key, src in table["sources"].items():
        assert src.get("what") and src.get("read"), key
    assert table["prices"]["date"]


def test_the_cost_figures_are_the_tables():
    table = prices.load_prices()
    n1, t4 = table["families"]["n1"], table["gpus"]["NVIDIA_TESLA_T4"]["hour"]
    cfg = config_lib.load("multiworker", JOB)  # chief + 3 workers, n1-standard-8 (8 vCPU, 30 GB) + 2 T4, 24 h
    replica = 8 * n1["vcpu"] + 30 * n1["gb"] + 2 * t4
    c = prices.cost(cfg)
    assert c.job.per_hour == pytest.approx(4 * replica, rel=1e-6)
    assert c.per_hour == pytest.approx(4 * replica, rel=1e-6) and c.most == pytest.approx(4 * replica * 24, rel=1e-6)
    assert any("SPOT at the on-demand price" in m for m in c.job.marks)  # no Spot figure is known
    there = prices.cost(cfg, "europe-west4", "STANDARD")
    assert there.per_hour == pytest.approx(4 * replica * table["regions"]["europe-west4"]["factor"], rel=1e-6)
    assert not there.job.marks
    nowhere = prices.cost(cfg, "asia-northeast1", "STANDARD")
    assert nowhere.per_hour == pytest.approx(4 * replica) and "no figures for asia-northeast1" in nowhere.job.marks[0]
    tpu = prices.cost(config_lib.load("tpu"))  # cloud-tpu TPU_V3 x 8 cores = 4 chips
    assert tpu.job.per_hour == pytest.approx(4 * table["tpus"]["TPU_V3"]["chip_hour"])


def test_a_studys_cost_is_its_parallel_trials_and_the_baseline_per_hour_and_every_trial_at_most():
    cfg = config_lib.load("tuning")  # 4 trials, 2 at once, a baseline, chief + 1 worker n1-standard-4, 3600 s
    n1 = prices.load_prices()["families"]["n1"]
    job = 2 * (4 * n1["vcpu"] + 15 * n1["gb"])
    c = prices.cost(cfg)
    assert c.per_hour == pytest.approx(job * 3, rel=1e-6)  # 2 trials at once + the baseline
    assert c.most == pytest.approx(job * 1 * 5, rel=1e-6)  # 4 trials + the baseline, 1 h each
    alone = prices.cost(cfg.with_overrides(["tuning.baseline=false"]))
    assert alone.per_hour == pytest.approx(job * 2, rel=1e-6) and alone.most == pytest.approx(job * 4, rel=1e-6)


def test_an_unknown_figure_is_unknown_not_a_guess():
    cfg = config_lib.load(H200_JOB)
    c = prices.cost(cfg)
    assert c.per_hour is None and c.most is None and "NVIDIA_H200_141GB" in c.job.unknown
    assert "gpus.NVIDIA_H200_141GB.hour" in c.job.missing  # the key a price file gives it by


def test_every_source_says_whether_its_figures_were_seen_or_recalled_and_the_h100_figure_is_the_seen_one():
    table = prices.load_prices()
    for key, src in table["sources"].items():
        assert src.get("status") in ("seen", "recalled") and src.get("url") and src.get("read"), key
    h100 = table["gpus"]["NVIDIA_H100_80GB"]
    assert h100["hour"] == 9.79655057 and table["sources"][h100["source"]]["status"] == "seen"
    n1 = table["families"]["n1"]
    assert 4 * n1["vcpu"] + 15 * n1["gb"] == pytest.approx(0.21849885, abs=1e-6)  # n1-standard-4, seen
    for gpu in ("NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200", "NVIDIA_GB200", "NVIDIA_L4",
                "NVIDIA_RTX_PRO_6000"):
        assert table["gpus"][gpu]["hour"] is None and "searched" in table["gpus"][gpu]["note"]  # never invented


# ---- the budget --------------------------------------------------------------------------------

def test_the_budget_refuses_a_plan_above_it_naming_the_bar_the_figure_and_what_fits():
    cfg = config_lib.load("multiworker", [*JOB, "budget.max_per_hour=2", "budget.max_total=50"])
    c = prices.cost(cfg)
    price = ranking.Priced.of(c)
    bars = ranking.Bars.of(cfg)
    why = ranking.budget_verdict(price, bars)
    assert why.startswith("over budget: budget.max_per_hour: ") and prices.money(c.per_hour) in why and "$2.00" in why
    total = ranking.budget_verdict(price, ranking.Bars.of(cfg.with_overrides(["budget.max_per_hour=0"])))
    assert total.startswith("over budget: budget.max_total: up to ") and prices.money(c.most) in total
    assert ranking.budget_verdict(price, ranking.Bars.of(cfg.with_overrides(["budget.max_per_hour=0",
                                                                            "budget.max_total=0"]))) == ""
    flag = ranking.Bars.of(cfg.with_overrides(["budget.max_per_hour=0"]), max_cost=10)
    assert ranking.budget_verdict(price, flag).startswith("over budget: --max-cost: ")


def test_remedies_are_only_what_would_fit_never_a_strategy_priced_the_same():
    """Over --max-cost 50 the multiworker preset (SPOT, no Spot figure: priced as on-demand) is told a shorter timeout
    and fewer workers, each checked to fit; never [SPOT, STANDARD, FLEX_START], all priced alike."""
    cfg = config_lib.load("multiworker", JOB)
    plan = planning.decide(cfg, "acme-ml", project=FakeProject(), max_cost=50)
    (error,) = plan.errors
    assert "placement.strategies" not in error
    fixes = error.split("valid choices: ", 1)[1].split(", ")
    timeout = next(f for f in fixes if f.startswith("scheduling.timeout="))
    shorter = cfg.with_overrides([timeout])
    assert prices.cost(shorter).most <= 50 < prices.cost(cfg).most
    workers = next((f for f in fixes if f.startswith("topology.worker.replica_count=")), None)
    if workers:
        fewer = cfg.with_overrides([workers])
        assert prices.cost(fewer).most <= 50 and fewer.topology.worker.replica_count < cfg.topology.worker.replica_count
    assert fixes[-1].startswith("--max-cost ")  # the bar itself, last


def test_a_study_over_the_hourly_bar_is_told_how_many_trials_at_once_fit():
    cfg = config_lib.load("tuning", ["tuning.max_trials=8", "tuning.parallel_trials=4"])
    job = prices.cost(cfg).job.per_hour
    over = cfg.with_overrides([f"budget.max_per_hour={job * 3.5}"])  # room for 3 jobs: 2 trials + the baseline
    plan = planning.decide(over, "acme-ml", project=FakeProject())
    (error,) = plan.errors
    assert "over budget: budget.max_per_hour" in error and "tuning.parallel_trials=2" in error


def test_a_studys_budget_counts_every_trial_and_the_baseline():
    cfg = config_lib.load("tuning")  # 4 trials + the baseline, 1 h each
    c = prices.cost(cfg)
    trials_only = c.job.per_hour * c.hours * 4
    between = cfg.with_overrides([f"budget.max_total={trials_only + c.job.per_hour * 0.5}"])
    plan = planning.decide(between, "acme-ml", project=FakeProject())
    assert plan.pick is None and "4 trials + the baseline" in plan.errors[0]


def test_an_unpriced_job_under_a_budget_is_refused_naming_the_missing_figures_and_the_price_file(tmp_path):
    """The issue's jobs: a chief + 1 worker a3-highgpu-8g (16 H100s, SPOT) under budget.max_per_hour=1, and 8 H100s
    under --max-cost 100: exit 2, nothing fits, the missing figures and how to give them named."""
    a3 = tmp_path / "a3.yaml"
    a3.write_text(yaml.safe_dump({
        "name": "a3-demo", "topology": {"strategy": "multi_worker", "chief": {"replica_count": 1, **A3},
                                        "worker": {"replica_count": 1, **A3}},
        "scheduling": {"strategy": "SPOT", "restart_job_on_worker_restart": True}, "budget": {"max_per_hour": 1},
        "container": {"image_uri": IMAGE}, "output": {"base_dir": "gs://acme-runs/a3"},
        "data": {"path": "gs://acme-data/f"}}))
    proc = _run("--config", str(a3), "--project", "acme-ml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (error,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert error.startswith("error: budget.max_per_hour: the price of this job cannot be computed")
    assert "families.a3.vcpu, families.a3.gb" in error and "budget.prices" in error and "--prices FILE" in error
    assert "not checked" not in error
    one = _run("--config", str(a3), "--set", "topology.worker.replica_count=0", "--set", "budget.max_per_hour=0",
               "--set", "topology.strategy=one_device", "--max-cost", "100", "--project", "acme-ml")
    assert one.returncode == 2
    (error,) = [ln for ln in one.stderr.splitlines() if ln.startswith("error: ")]
    assert error.startswith("error: --max-cost: the price of this job cannot be computed")


def test_a_user_price_file_wins_over_the_table_and_is_shown_as_theirs(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("families:\n  a3: {vcpu: 0.04, gb: 0.005}\ngpus:\n  NVIDIA_H100_80GB: {hour: 7.5}\n")
    cfg = config_lib.from_dict({"topology": {"strategy": "one_device", "chief": {"replica_count": 1, **A3}},
                                "budget": {"prices": str(mine)}})
    table = prices.price_table(str(mine))
    c = prices.cost(cfg, table=table)
    assert c.job.per_hour == pytest.approx(208 * 0.04 + 1872 * 0.005 + 8 * 7.5)
    assert c.job.theirs == ("a3 vCPUs", "a3 memory", "NVIDIA_H100_80GB")
    assert prices.cost(cfg).job.unknown == ("a3 vCPUs", "a3 memory")  # the table alone: unknown
    proc = _run("--config", "multiworker", *[a for s in JOB for a in ("--set", s)], "--project", "acme-ml",
                "--prices", str(mine), "--set", "topology.chief.machine_type=a3-highgpu-8g",
                "--set", "topology.chief.accelerator_type=NVIDIA_H100_80GB", "--set", "topology.chief.accelerator_count=8",
                "--set", "topology.worker.machine_type=a3-highgpu-8g",
                "--set", "topology.worker.accelerator_type=NVIDIA_H100_80GB",
                "--set", "topology.worker.accelerator_count=8")
    assert proc.returncode == 0, proc.stderr
    assert f"yours: a3 vCPUs, a3 memory, NVIDIA_H100_80GB at your figures (your price file ({mine}" in proc.stdout


@pytest.mark.parametrize("text,field", [
    ("gpus:\n  NVIDIA_H100_80GB: {hour: -1}\n", "--prices: gpus.NVIDIA_H100_80GB.hour"),
    ("gpus:\n  NVIDIA_H100: {hour: 9}\n", "--prices: gpus.NVIDIA_H100"),
    ("machines:\n  a3-highgpu-8g: 9\n", "--prices: machines"),
    ("families: [1, 2]\n", "--prices: families"),
    ("[", "--prices"),
])
def test_a_malformed_price_file_is_one_error_naming_the_key(tmp_path, text, field):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    proc = _run("--config", "multiworker", *[a for s in JOB for a in ("--set", s)], "--prices", str(bad))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (error,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert error.startswith(f"error: {field}"), error


def test_a_job_files_price_file_is_relative_to_it_and_checked_with_the_job(tmp_path):
    from jobs.rules import validate

    (tmp_path / "prices.yaml").write_text("gpus:\n  NVIDIA_L4: {hour: 0.7}\n")
    (tmp_path / "job.yaml").write_text("budget: {prices: prices.yaml}\n")
    cfg = config_lib.load(str(tmp_path / "job.yaml"))
    assert cfg.budget.prices == str(tmp_path / "prices.yaml") and cfg.for_vertex().budget.prices == ""
    assert validate.price_file_problems(cfg) == []
    (tmp_path / "prices.yaml").write_text("gpus:\n  NVIDIA_L4: {hour: lots}\n")
    (problem,) = validate.price_file_problems(cfg)
    assert problem.field == "budget.prices: gpus.NVIDIA_L4.hour" and "not a price in US dollars" in problem.message
