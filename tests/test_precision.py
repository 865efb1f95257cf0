"""Precision per device (``trainers.precision``): the pure choice for every device type, the CPU flag
reader, the deprecated ``mixed_precision`` field, and that mixed precision keeps float32 at the model's
edges (softmax out, exported signatures in and out)."""
from __future__ import annotations

import pytest

from jobfile import config as config_lib
from jobfile.config_files import load_document, presets
from trainers import precision as p

#: a CPU with the bf16 flag of a kind the priors do not know (no vendor, family, model): auto measures when worth it
BF16_CPU = p.Device("cpu", cpu_flags=frozenset({"avx2", "avx512f", "avx512_bf16"}), name="AMD EPYC 9B45", cores=2)
AMX_CPU = p.Device("cpu", cpu_flags=frozenset({"avx2", "avx512f", "amx_bf16", "amx_tile"}))
PLAIN_CPU = p.Device("cpu", cpu_flags=frozenset({"avx2", "fma", "avx512f"}))
#: the CPU kinds measured (trainers/precision_priors.yaml): bf16 faster on AMD Zen 4 and Zen 5, slower on the Xeon
ZEN4 = p.Device("cpu", cpu_flags=frozenset({"avx2", "avx512f", "avx512_bf16"}), name="AMD EPYC", cores=2,
                vendor="AuthenticAMD", family=0x19, model=0x11)
ZEN5 = p.Device("cpu", cpu_flags=frozenset({"avx2", "avx512f", "avx512_bf16"}), name="AMD EPYC", cores=2,
                vendor="AuthenticAMD", family=0x1A, model=0x02)
XEON_NO_AMX = p.Device("cpu", cpu_flags=frozenset({"avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni"}),
                       name="Intel(R) Xeon(R) Processor", cores=2, vendor="GenuineIntel", family=6, model=0x8F)
ZEN3 = p.Device("cpu", cpu_flags=frozenset({"avx2", "fma"}), name="AMD EPYC", cores=2, vendor="AuthenticAMD",
                family=0x19, model=0x01)


@pytest.mark.parametrize("device,policy", [
    (ZEN4, "mixed_bfloat16"),
    (ZEN5, "mixed_bfloat16"),
    (XEON_NO_AMX, "float32"),
    (ZEN3, "float32"),
    (BF16_CPU, "float32"),  # a kind with no figures: the safe choice
    (AMX_CPU, "float32"),
    (PLAIN_CPU, "float32"),
    (p.Device("cpu"), "float32"),
    (p.Device("tpu", accelerator_type="TPU_V3"), "mixed_bfloat16"),
])
def test_auto_on_cpus_and_tpus(device, policy):
    choice = p.choose("auto", device)
    assert (choice.policy, choice.loss_scaling) == (policy, False)
    assert choice.reason.startswith("auto:")


@pytest.mark.parametrize("accelerator", ["NVIDIA_TESLA_P100", "NVIDIA_TESLA_T4", "NVIDIA_TESLA_V100"])
def test_auto_pre_ampere_gpus_with_fast_float16_get_float16_with_loss_scaling(accelerator):
    choice = p.choose("auto", p.Device("gpu", accelerator_type=accelerator))
    assert (choice.policy, choice.loss_scaling) == ("mixed_float16", True)
    assert "pre-Ampere" in choice.reason and accelerator in choice.reason


@pytest.mark.parametrize("accelerator", ["NVIDIA_TESLA_K80", "NVIDIA_TESLA_P4"])
def test_auto_gpus_without_fast_float16_stay_float32(accelerator):
    # K80 has no float16 arithmetic, P4 runs it at 1/64 rate: float16 would be slower than float32
    choice = p.choose("auto", p.Device("gpu", accelerator_type=accelerator))
    assert (choice.policy, choice.loss_scaling) == ("float32", False)
    assert "no fast float16" in choice.reason


def test_every_gpu_of_the_hardware_catalog_has_its_generation_here():
    """One table of compute capabilities (``trainers.gpus``), read by the replica and by the hardware catalog: every
    GPU the catalog lists is known to the precision choice (the RTX PRO 6000 Blackwell, 12.0, was missing)."""
    from jobs.rules.hardware.catalog import load_catalog

    for name, gpu in load_catalog().gpus.items():
        cc, what = p._gpu_capability(p.Device("gpu", accelerator_type=name))
        assert cc == gpu.compute_capability and cc is not None, name
        assert "from the pool's accelerator_type" in what
    rtx = p.Device("gpu", accelerator_type="NVIDIA_RTX_PRO_6000")
    assert p._gpu_capability(rtx)[0] == (12, 0) and p.candidates(rtx) == ("float32", "mixed_bfloat16")


@pytest.mark.parametrize("accelerator", ["NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_L4", "NVIDIA_H100_80GB",
                                         "NVIDIA_RTX_PRO_6000"])
def test_auto_ampere_and_newer_get_bfloat16(accelerator):
    choice = p.choose("auto", p.Device("gpu", accelerator_type=accelerator))
    assert (choice.policy, choice.loss_scaling) == ("mixed_bfloat16", False)


def test_reported_compute_capability_wins_over_the_pools_accelerator_type():
    # the driver says 8.0 (an A100) although the config says T4: the device is what runs
    choice = p.choose("auto", p.Device("gpu", compute_capability=(8, 0), accelerator_type="NVIDIA_TESLA_T4"))
    assert choice.policy == "mixed_bfloat16" and "compute capability 8.0" in choice.reason
    choice = p.choose("auto", p.Device("gpu", compute_capability=(7, 5), accelerator_type="NVIDIA_L4"))
    assert choice.policy == "mixed_float16"


def test_unknown_gpu_generation_falls_back_to_float16_with_loss_scaling():
    choice = p.choose("auto", p.Device("gpu"))
    assert (choice.policy, choice.loss_scaling) == ("mixed_float16", True)
    assert "unknown GPU generation" in choice.reason


def test_explicit_choices_are_honoured_with_a_note_when_likely_slow():
    assert p.choose("float32", BF16_CPU).policy == "float32"
    slow = p.choose("bfloat16", PLAIN_CPU)
    assert slow.policy == "mixed_bfloat16" and "lacks avx512_bf16" in slow.reason
    assert "note" not in p.choose("bfloat16", BF16_CPU).reason
    t4 = p.choose("bfloat16", p.Device("gpu", accelerator_type="NVIDIA_TESLA_T4"))
    assert t4.policy == "mixed_bfloat16" and "pre-Ampere" in t4.reason
    half = p.choose("float16", PLAIN_CPU)
    assert (half.policy, half.loss_scaling) == ("mixed_float16", True) and "CPU has no fast float16" in half.reason
    with pytest.raises(ValueError, match="training.precision"):
        p.choose("fp8", PLAIN_CPU)


def test_auto_stays_float32_on_a_bf16_cpu_when_onednn_is_switched_off():
    import dataclasses

    choice = p.choose("auto", dataclasses.replace(BF16_CPU, onednn=False))
    assert choice.policy == "float32" and "TF_ENABLE_ONEDNN_OPTS=0" in choice.reason


def test_detect_describes_this_machine_as_a_cpu_with_its_flags(monkeypatch):
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: detect describes it instead")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    device = p.detect("one_device")
    assert device.kind == "cpu" and device.cpu_flags == p.cpu_flags() and device.onednn is False
    assert p.detect("tpu", "TPU_V3") == p.Device("tpu", accelerator_type="TPU_V3")


def test_the_log_line_names_policy_request_and_reason():
    line = p.choose("auto", ZEN4).line("auto")
    assert line == ("precision: mixed_bfloat16 (training.precision=auto; auto: bf16, the faster on AMD Zen 4 "
                    "(AuthenticAMD family 0x19 model 0x11, avx512_bf16; bf16 1.70x float32, 2026-11-29: "
                    "precision_priors.yaml))")
    line = p.choose("auto", BF16_CPU).line("auto")
    assert line == ("precision: float32 (training.precision=auto; auto: float32, the safe choice: no figures for "
                    "this CPU kind (unknown vendor, avx512_bf16) say bf16 is faster)")


def test_cpu_flags_reads_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert p.cpu_flags(str(info)) == frozenset({"fpu", "avx2", "avx512_bf16"})
    assert p.cpu_flags(str(tmp_path / "missing")) == frozenset()
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\n")
    assert p.cpu_flags(str(arm)) == frozenset({"fp", "asimd", "bf16"})


def test_auto_is_the_default_and_mixed_precision_is_deprecated_with_the_new_field_named():
    assert config_lib.JobConfig().training.precision == "auto"
    assert p.resolve("auto", False) == ("auto", None)
    precision, note = p.resolve("auto", True)
    assert precision == "auto" and "training.precision" in note and "deprecated" in note
    with pytest.raises(config_lib.ConfigError, match="training.precision"):
        config_lib.load("local", ["training.precision=fp8"])


def test_contradictory_mixed_precision_and_float32_is_a_validation_error():
    from jobs.rules.validate import validate

    cfg = config_lib.load("local", ["training.mixed_precision=true", "training.precision=float32"])
    errors = [str(e) for e in validate(cfg, check_data=False).errors]
    assert any(e.startswith("training.mixed_precision:") and "training.precision" in e for e in errors), errors


def test_presets_use_precision_not_mixed_precision():
    for name in presets():
        doc = load_document(name)
        assert "mixed_precision" not in doc.get("training", {}), name


def test_mixed_bfloat16_model_outputs_float32_and_export_is_float32(tmp_path):
    import keras
    import numpy as np
    import tensorflow as tf

    from trainers.export import export_model
    from trainers.models import build_model

    try:
        p.apply(p.Choice("mixed_bfloat16", False, "test"))
        model = build_model("small_cnn", 32, 3)
        assert model.layers[2].compute_dtype == "bfloat16"  # the convolutions really run in bf16
        out = model(np.zeros((2, 32, 32, 3), np.float32))
        assert out.dtype == "float32"
        p.apply(p.Choice("float32", False, "export"))
        plain = build_model("small_cnn", 32, 3)
        plain.set_weights(model.get_weights())
        export_model(plain, str(tmp_path / "m"), ["a", "b", "c"], 32)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    sig = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_pixels"]
    assert sig.structured_input_signature[1]["image"].dtype == tf.float32
    assert sig(image=tf.zeros([1, 32, 32, 3]))["probabilities"].dtype == tf.float32
