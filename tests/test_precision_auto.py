"""``training.precision: auto``'s rule (``trainers.precision_auto``): what is known of the device's kind, a decision
measured earlier (the user's cache folder), a measurement where its expected gain repays it; with a fake clock,
nothing timed (the figures live in ``benchmarks/``)."""
from __future__ import annotations

import pytest

from tests.test_precision import AMX_CPU, BF16_CPU, PLAIN_CPU, XEON_NO_AMX, ZEN4, ZEN5
from trainers import precision as p, precision_auto as a, precision_priors


# -- auto by measuring (trainers.precision.decide_auto): a fake clock, no TensorFlow ------------------------

class FakeClock:
    """A clock that moves only when a fake step runs: a step of ``batch`` examples at ``rate`` ex/s takes
    batch/rate seconds of it."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fake_measure(clock: FakeClock, rates: dict, calls: list, batch: int = 32):
    """``measure(policy)`` as ``trainers.train.measure_precision`` is: ``time_steps`` over a step; here each step
    advances the fake clock by what the rate says, so the figures come out of the real timing code."""
    def measure(policy):
        calls.append(policy)

        def step():
            clock.now += batch / rates[policy]

        return a.time_steps(step, batch, clock=clock)

    return measure


FIELDS = {"tensorflow": "2.21.0", "model": "small_cnn", "input": [180, 180, 3], "per_replica_batch": 32,
          "strategy": "one_device"}
LONG_RUN = 1000


def decide(tmp_path, rates, device=BF16_CPU, steps=LONG_RUN, fields=FIELDS, directory="cache"):
    clock, calls = FakeClock(), []
    choice = a.decide_auto(device, steps, fake_measure(clock, rates, calls), fields,
                           str(tmp_path / directory) if directory else None, clock=clock)
    return choice, calls


def test_time_steps_times_only_the_steps_after_warm_up():
    clock, seen = FakeClock(), []

    def step():
        seen.append(clock.now)
        clock.now += 0.5 if len(seen) <= a.WARMUP_STEPS else 0.1  # the warm-up steps are slow (tracing)

    rate = a.time_steps(step, 32, clock=clock)
    assert len(seen) == a.WARMUP_STEPS + a.MEASURE_STEPS
    assert rate == pytest.approx(320.0)  # 32 examples / 0.1 s: the slow warm-up left out


@pytest.mark.parametrize("device,cands", [
    (BF16_CPU, ("float32", "mixed_bfloat16")),
    (AMX_CPU, ("float32", "mixed_bfloat16")),
    (PLAIN_CPU, ("float32",)),
    (p.Device("cpu", cpu_flags=frozenset({"avx512_bf16"}), onednn=False), ("float32",)),
    (p.Device("gpu", accelerator_type="NVIDIA_L4"), ("float32", "mixed_bfloat16")),
    (p.Device("gpu", accelerator_type="NVIDIA_TESLA_T4"), ("float32", "mixed_float16")),
    (p.Device("gpu", accelerator_type="NVIDIA_TESLA_K80"), ("float32",)),
    (p.Device("gpu"), ()),
    (p.Device("tpu"), ()),
])
def test_the_candidates_are_what_the_device_allows(device, cands):
    assert p.candidates(device) == cands


def test_a_faster_bf16_is_chosen_with_the_figures_in_its_line(tmp_path):
    choice, calls = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0})
    assert calls == ["float32", "mixed_bfloat16"]
    assert (choice.policy, choice.loss_scaling) == ("mixed_bfloat16", False)
    assert choice.reason.startswith("auto: bf16 412 ex/s vs float32 247 ex/s on this CPU")
    assert choice.measured["rates"] == pytest.approx({"float32": 247.0, "mixed_bfloat16": 412.0})
    assert choice.measured["cached"] is None and choice.measured["seconds"] > 0


def test_a_slower_bf16_is_refused_as_on_the_xeon_of_issue_42(tmp_path):
    choice, _ = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 191.0})
    assert choice.policy == "float32"
    assert choice.reason.startswith("auto: float32 247 ex/s vs bf16 191 ex/s on this CPU")


def test_a_bf16_within_the_noise_margin_keeps_float32(tmp_path):
    choice, _ = decide(tmp_path, {"float32": 250.0, "mixed_bfloat16": 255.0})  # 1.02x: noise of 10 steps
    assert choice.policy == "float32" and "the safe choice" in choice.reason


def test_float16_on_a_pre_ampere_gpu_gets_loss_scaling_when_it_wins(tmp_path):
    t4 = p.Device("gpu", accelerator_type="NVIDIA_TESLA_T4")
    choice, _ = decide(tmp_path, {"float32": 900.0, "mixed_float16": 2400.0}, device=t4, steps=100_000)
    assert (choice.policy, choice.loss_scaling) == ("mixed_float16", True)
    assert "on this GPU" in choice.reason


#: the issue's run: 2 epochs of 2,936 training images at batch 32
SHORT_RUN = 182


def test_a_short_run_where_bf16_is_known_faster_takes_bf16_unmeasured(tmp_path):
    for device in (ZEN4, ZEN5):
        choice, calls = decide(tmp_path, {"float32": 1.0, "mixed_bfloat16": 1.0}, device=device, steps=SHORT_RUN)
        assert calls == [] and (choice.policy, choice.loss_scaling) == ("mixed_bfloat16", False)
        assert not choice.measured and not (tmp_path / "cache").exists()
        assert choice.reason.startswith("auto: bf16, the faster on AMD Zen ")
        assert f"not measured: a {SHORT_RUN}-step run would gain about 6 steps from measuring float32 and bf16, " \
               "which costs about 46" in choice.reason


def test_a_short_run_where_bf16_is_known_slower_keeps_float32_unmeasured(tmp_path):
    choice, calls = decide(tmp_path, {"float32": 1.0, "mixed_bfloat16": 1000.0}, device=XEON_NO_AMX, steps=SHORT_RUN)
    assert calls == [] and choice.policy == "float32" and not choice.measured
    assert choice.reason.startswith("auto: float32, the faster on Intel Xeon with avx512_bf16 and avx512_fp16, no AMX "
                                    "(GenuineIntel family 0x6 model 0x8f, avx512_bf16 avx512_fp16; bf16 0.79x float32")


def test_an_unknown_cpu_kind_measures_when_the_run_repays_it_and_keeps_float32_when_not(tmp_path):
    threshold = a.measuring_steps(2) / (a.UNKNOWN_DOUBT * precision_priors.spread())  # ~260 steps
    choice, calls = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0}, steps=int(threshold) - 1)
    assert calls == [] and choice.policy == "float32" and "the safe choice: no figures for this CPU kind" in choice.reason
    assert "not measured" in choice.reason
    choice, calls = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0}, steps=int(threshold) + 1)
    assert calls == ["float32", "mixed_bfloat16"] and choice.policy == "mixed_bfloat16"
    assert f"no figures for this kind; a {int(threshold) + 1}-step run repays measuring" in choice.reason
    assert SHORT_RUN < threshold < 300


def test_a_known_kind_is_confirmed_by_measuring_only_on_a_long_run_and_the_measurement_wins(tmp_path):
    confirm = a.measuring_steps(2) / (a.PRIOR_DOUBT * precision_priors.spread())  # ~1,300 steps
    _, calls = decide(tmp_path, {"float32": 400.0, "mixed_bfloat16": 200.0}, device=ZEN4, steps=int(confirm) - 1)
    assert calls == []
    # this machine disagrees with its kind's figures: what it measured is kept (and cached for every later run)
    choice, calls = decide(tmp_path, {"float32": 400.0, "mixed_bfloat16": 200.0}, device=ZEN4, steps=int(confirm) + 1)
    assert calls == ["float32", "mixed_bfloat16"] and choice.policy == "float32"
    assert "the figures for this kind said bf16; a" in choice.reason and "repays confirming them" in choice.reason
    again, calls = decide(tmp_path, {}, device=ZEN4, steps=SHORT_RUN)
    assert calls == [] and again.policy == "float32" and "cached in" in again.reason


def test_a_small_input_counts_building_and_tracing_as_more_of_its_cheaper_steps(tmp_path):
    assert a.setup_steps(180) == a.SETUP_STEPS and a.setup_steps(360) == a.SETUP_STEPS
    assert a.setup_steps(32) == 317  # 10 x (180/32)^2: the same seconds of tracing, 32x cheaper steps
    clock, calls = FakeClock(), []
    measure = fake_measure(clock, {"float32": 247.0, "mixed_bfloat16": 412.0}, calls)
    choice = a.decide_auto(BF16_CPU, 1000, measure, FIELDS, None, clock=clock, setup=a.setup_steps(32))
    assert calls == [] and "which costs about 660" in choice.reason  # a 1,000-step run of 32x32 images: not worth it
    a.decide_auto(BF16_CPU, 1000, measure, FIELDS, None, clock=clock, setup=a.setup_steps(180))
    assert calls == ["float32", "mixed_bfloat16"]


@pytest.mark.parametrize("accelerator,policy,loss_scaling", [
    ("NVIDIA_TESLA_A100", "mixed_bfloat16", False), ("NVIDIA_H100_80GB", "mixed_bfloat16", False),
    ("NVIDIA_TESLA_T4", "mixed_float16", True), ("NVIDIA_TESLA_V100", "mixed_float16", True),
    ("NVIDIA_TESLA_P100", "mixed_float16", True)])
def test_gpus_take_the_same_rule_short_runs_their_generations_choice_long_runs_confirm(tmp_path, accelerator, policy,
                                                                                       loss_scaling):
    gpu = p.Device("gpu", accelerator_type=accelerator, name="NVIDIA X x1")
    other = p.candidates(gpu)[1]
    assert other == policy
    choice, calls = decide(tmp_path, {}, device=gpu, steps=SHORT_RUN)
    assert calls == [] and (choice.policy, choice.loss_scaling) == (policy, loss_scaling)
    assert "NVIDIA" in choice.reason and "not measured" in choice.reason
    # where this GPU measures float32 faster (a model too small to use the tensor cores), a long run finds out
    choice, calls = decide(tmp_path, {"float32": 3000.0, other: 2000.0}, device=gpu, steps=100_000)
    assert calls == ["float32", other] and (choice.policy, choice.loss_scaling) == ("float32", False)


def test_the_priors_are_data_with_a_source_and_each_kind_measured_is_recognised():
    entries = precision_priors.priors()
    assert {e.name for e in entries} >= {"AMD Zen 4", "AMD Zen 5", "Intel Xeon with avx512_bf16 and avx512_fp16, no AMX"}
    assert all(e.source and e.seen and e.policy in precision_priors.POLICIES for e in entries)
    assert p.prior_for(ZEN4).ratio == pytest.approx(1.70) and p.prior_for(XEON_NO_AMX).policy == "float32"
    assert p.prior_for(BF16_CPU) is None and p.prior_for(AMX_CPU) is None
    # the same Xeon with AMX passed through is another kind: not known, measured when worth it
    assert p.prior_for(p.Device("cpu", cpu_flags=XEON_NO_AMX.cpu_flags | {"amx_bf16"}, vendor="GenuineIntel")) is None
    assert p.prior_for(p.Device("gpu", compute_capability=(8, 9))).name == "NVIDIA Ampere or newer"
    assert p.prior_for(p.Device("gpu", compute_capability=(6, 1))) is None  # P4: one candidate anyway
    assert 0.3 < precision_priors.spread() < 0.4


def test_a_malformed_priors_file_is_refused_naming_the_entry(tmp_path):
    bad = tmp_path / "priors.yaml"
    bad.write_text("priors:\n  - {name: X, device: cpu, match: {}, policy: bf16, ratio: 2, seen: today, source: me}\n")
    with pytest.raises(ValueError, match=r"priors\[0\] \(X\): .*policy one of float32"):
        precision_priors.priors(str(bad))
    bad.write_text("priors:\n  - {name: X, device: cpu}\n")
    with pytest.raises(ValueError, match=r"priors\[0\]: needs exactly the fields name, device, match"):
        precision_priors.priors(str(bad))


def test_cpu_kind_reads_vendor_family_and_model(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                    "model name\t: AMD EPYC\nflags\t\t: fpu avx512_bf16\n")
    assert p.cpu_kind(str(info)) == ("AuthenticAMD", 0x19, 0x11)
    assert p.cpu_kind(str(tmp_path / "missing")) == ("", None, None)


def test_nothing_is_measured_where_there_is_one_candidate(tmp_path):
    choice, calls = decide(tmp_path, {}, device=PLAIN_CPU)
    assert calls == [] and choice == p.choose("auto", PLAIN_CPU)
    choice, calls = decide(tmp_path, {}, device=p.Device("tpu"))
    assert calls == [] and choice.policy == "mixed_bfloat16"


def test_an_explicit_precision_is_never_measured_nor_overridden(capsys):
    import types

    asked = []

    def auto(device):
        asked.append(device)
        return p.choice_of("mixed_bfloat16", "auto: measured")

    for requested, policy in (("float32", "float32"), ("bfloat16", "mixed_bfloat16"), ("float16", "mixed_float16")):
        training = types.SimpleNamespace(precision=requested, mixed_precision=False)
        assert p.setup(training, BF16_CPU, auto=auto).policy == policy
    assert asked == []
    training = types.SimpleNamespace(precision="auto", mixed_precision=False)
    assert p.setup(training, BF16_CPU, auto=auto).reason == "auto: measured" and asked == [BF16_CPU]
    assert "precision: mixed_bfloat16 (training.precision=auto; auto: measured)" in capsys.readouterr().out
    p.apply(p.choose("float32", PLAIN_CPU))


def test_the_decision_is_cached_and_a_rerun_measures_nothing(tmp_path):
    first, calls = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0})
    assert len(calls) == 2
    [entry] = list((tmp_path / "cache").glob("*.json"))
    saved = __import__("json").loads(entry.read_text())
    assert saved["policy"] == "mixed_bfloat16" and saved["fields"]["model"] == "small_cnn"
    assert saved["fields"]["cpu"] == BF16_CPU.name and saved["rates"]["float32"] == pytest.approx(247.0)
    again, calls = decide(tmp_path, {"float32": 1.0, "mixed_bfloat16": 1.0})
    assert calls == [] and again.policy == "mixed_bfloat16"
    assert again.measured["cached"] == str(entry) and "measured earlier, cached in" in again.reason
    # a short run (a trial, a rerun with fewer steps) takes the cached decision: it costs nothing
    short, calls = decide(tmp_path, {}, steps=10)
    assert calls == [] and short.policy == "mixed_bfloat16"


@pytest.mark.parametrize("changed", [
    {"tensorflow": "2.22.0"}, {"model": "resnet50"}, {"input": [96, 96, 3]}, {"per_replica_batch": 64},
    {"strategy": "mirrored"},
])
def test_the_cache_is_keyed_by_what_changes_the_answer(tmp_path, changed):
    decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0})
    choice, calls = decide(tmp_path, {"float32": 300.0, "mixed_bfloat16": 200.0}, fields={**FIELDS, **changed})
    assert len(calls) == 2 and choice.policy == "float32"
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2


@pytest.mark.parametrize("other", [
    p.Device("cpu", cpu_flags=BF16_CPU.cpu_flags, name="Intel(R) Xeon(R) Processor"),   # another CPU model
    p.Device("cpu", cpu_flags=BF16_CPU.cpu_flags, cores=8),                             # more cores
    AMX_CPU,                                                                            # other flags
])
def test_another_machine_measures_again(tmp_path, other):
    decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0})
    _, calls = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0}, device=other)
    assert len(calls) == 2


def test_a_damaged_or_foreign_cache_entry_is_measured_again_and_replaced(tmp_path):
    decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0})
    [entry] = list((tmp_path / "cache").glob("*.json"))
    for damaged in ("{not json", '{"policy": "mixed_bfloat16"}', entry.read_text().replace('"small_cnn"', '"other"'),
                    entry.read_text().replace('"mixed_bfloat16": 412', '"mixed_bfloat16": -1')):
        entry.write_text(damaged)
        choice, calls = decide(tmp_path, {"float32": 300.0, "mixed_bfloat16": 200.0})
        assert len(calls) == 2 and choice.policy == "float32"
        assert __import__("json").loads(entry.read_text())["policy"] == "float32"


def test_an_unwritable_cache_is_one_warning_and_the_decision_stands(tmp_path, capsys):
    (tmp_path / "cache").write_text("a file where the folder should be")
    choice, calls = decide(tmp_path, {"float32": 247.0, "mixed_bfloat16": 412.0})
    assert choice.policy == "mixed_bfloat16" and len(calls) == 2
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "not cached" in warnings[0]


def test_the_cache_is_the_users_folder_and_beside_a_bucket_output_folder(tmp_path):
    env = {"HOME": "/home/u"}
    assert p.cache_dirs("/work/runs/local", env) == ("/home/u/.cache/vtp/precision",)
    assert p.cache_dirs("runs/local", {**env, "XDG_CACHE_HOME": "/var/cache/u"}) == ("/var/cache/u/vtp/precision",)
    assert p.cache_dirs("x", {**env, "XDG_CACHE_HOME": "relative"}) == ("/home/u/.cache/vtp/precision",)  # XDG: ignored
    assert p.cache_dirs("gs://bucket/jobs/flowers", env) == ("/home/u/.cache/vtp/precision",
                                                             "gs://bucket/jobs/.vtp-cache/precision")
    assert p.cache_dirs("gs://bucket", env)[1] == "gs://bucket/.vtp-cache/precision"
    assert p.cache_dirs("/gcs/bucket/jobs/flowers", env)[1] == "/gcs/bucket/jobs/.vtp-cache/precision"
    # a replica with no home to speak of: no user folder (never a relative "~" folder in the working directory)
    assert p.cache_dirs("/work/runs/local", {"HOME": "~"}) == ()


def test_a_second_project_starts_with_the_decision_the_first_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    first_project, second_project = str(tmp_path / "a" / "runs" / "flowers"), str(tmp_path / "b" / "out")
    clock, calls = FakeClock(), []
    measure = fake_measure(clock, {"float32": 247.0, "mixed_bfloat16": 412.0}, calls)
    first = a.decide_auto(BF16_CPU, LONG_RUN, measure, FIELDS, p.cache_dirs(first_project), clock=clock)
    assert calls == ["float32", "mixed_bfloat16"] and first.policy == "mixed_bfloat16"
    [entry] = list((tmp_path / "xdg" / "vtp" / "precision").glob("*.json"))
    assert first.measured["written"] == [str(entry)]
    # another project, a short run: the measurement of this machine is read, nothing measured
    again = a.decide_auto(BF16_CPU, 30, measure, FIELDS, p.cache_dirs(second_project), clock=clock)
    assert calls == ["float32", "mixed_bfloat16"] and again.policy == "mixed_bfloat16"
    assert again.measured["cached"] == str(entry)
    assert not (tmp_path / "a" / "runs" / ".vtp-cache").exists() and not (tmp_path / "b" / ".vtp-cache").exists()


def test_an_unwritable_cache_folder_decides_without_caching_in_one_warning_line(tmp_path, capsys):
    blocked = tmp_path / "home"
    blocked.write_text("a file where HOME's folder should be")
    dirs = p.cache_dirs(str(tmp_path / "out"), {"HOME": str(blocked)}) + (str(tmp_path / "also-a-file"),)
    (tmp_path / "also-a-file").write_text("x")
    clock, calls = FakeClock(), []
    choice = a.decide_auto(BF16_CPU, LONG_RUN, fake_measure(clock, {"float32": 247.0, "mixed_bfloat16": 412.0}, calls),
                           FIELDS, dirs, clock=clock)
    assert choice.policy == "mixed_bfloat16" and choice.measured["written"] == []
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "not cached" in warnings[0] and "the next run here measures again" in warnings[0]


def test_cpu_name_and_cores_describe_the_machine(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9B45\nflags\t\t: fpu avx2\n")
    assert p.cpu_name(str(info)) == "AMD EPYC 9B45" and p.cpu_name(str(tmp_path / "missing")) == ""
    assert p.usable_cores() >= 1


def test_the_measuring_path_runs_for_real_on_the_jobs_model_and_caches(tmp_path, prepared_data, monkeypatch):
    """The real ``trainers.train.measure_precision`` on the job's model and a real batch of its data, through
    ``decide_precision``: figures for each candidate, the decision cached in the user's cache folder, the next
    decision read from there, and the initial weights after it those of a run that measured nothing. Where the
    CPU has no bf16 there is one candidate, so the list is forced to float32 and bf16 (bf16 emulated: slow,
    but it runs), and the CPU's kind is taken as unknown so that a 100,000-step run measures whatever this machine
    is; which one wins is the machine's business, not asserted."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tests.conftest import job_config
    from trainers import cluster as cluster_lib
    from trainers import train
    from trainers.models import build_model
    from trainers.training_plan import make_plan

    monkeypatch.setattr(p, "candidates", lambda device: ("float32", "mixed_bfloat16"))
    monkeypatch.setattr(p, "prior_for", lambda device: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cfg = job_config(tmp_path / "runs" / "job", prepared_data, "topology.strategy=one_device",
                     "topology.worker.replica_count=0", "training.steps=100000")
    plan = make_plan(cfg, 1)
    info = cluster_lib.read_cluster({})
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    device = p.detect("one_device")
    base = str(tmp_path / "runs" / "job")
    try:
        choice = train.decide_precision(cfg, info, strategy, plan, device, base)
        measured = dict(choice.measured)
        assert set(measured["rates"]) == {"float32", "mixed_bfloat16"} and all(r > 0 for r in measured["rates"].values())
        assert measured["cached"] is None and measured["seconds"] > 0 and choice.policy in measured["rates"]
        assert choice.reason.startswith(f"auto: {p.SHORT[choice.policy]} ")
        [entry] = list((tmp_path / "xdg" / "vtp" / "precision").glob("*.json"))
        p.apply(p.choose("float32", device))
        after = [w.copy() for w in build_model(cfg.model.name, plan.image_size, len(plan.classes)).get_weights()]
        keras.utils.set_random_seed(cfg.training.seed)
        plain = build_model(cfg.model.name, plan.image_size, len(plan.classes)).get_weights()
        assert all(np.array_equal(a, b) for a, b in zip(after, plain)), "measuring changed the initial weights"

        def must_not_measure(*_):
            raise AssertionError("measured although the decision is cached")

        again = train.decide_precision(cfg, info, strategy, plan, device, base, measure=must_not_measure)
        assert again.policy == choice.policy and again.measured["cached"] == str(entry)
    finally:
        p.apply(p.choose("float32", device))


def test_a_candidate_that_fails_to_measure_is_dropped_with_one_warning(tmp_path, capsys):
    clock, calls = FakeClock(), []
    measure = fake_measure(clock, {"float32": 247.0}, calls)

    def failing(policy):
        if policy != "float32":
            raise MemoryError("out of memory under bf16")
        return measure(policy)

    choice = a.decide_auto(BF16_CPU, LONG_RUN, failing, FIELDS, str(tmp_path / "cache"), clock=clock)
    assert choice.policy == "float32" and "could not be measured" in choice.reason
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "bf16 could not be measured (MemoryError" in warnings[0]
    assert not (tmp_path / "cache").exists()  # a passing failure is not cached
