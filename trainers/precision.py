"""Numeric precision per device: ``training.precision: auto | float32 | bfloat16 | float16``.

Why per device: the same config runs on a laptop CPU, a T4, an A100 and a TPU, and the fastest *safe*
precision differs on each:

* **CPUs with AVX512_BF16 or AMX** (Intel Cooper Lake / Sapphire Rapids and newer, AMD Zen 4/5): oneDNN
  runs bf16 convolutions and matmuls natively (``vdpbf16ps``, AMX tiles) at about twice the float32 rate;
  the seed CNN's train step measured 1.9x here. bf16 has float32's exponent range: no loss scaling.
* **CPUs without them**: bf16 is emulated and slower than float32, float16 has no CPU kernels worth
  using -> float32.
* **GPUs before Ampere with fast float16** (V100 7.0, T4 7.5: tensor cores; P100 6.0: float16 at twice the
  float32 rate): ``mixed_float16`` with dynamic loss scaling (float16's small range underflows gradients
  otherwise). bf16 has no fast path there.
* **GPUs without fast float16** (K80 3.7: no float16 arithmetic; P4 6.1: float16 at 1/64 of the float32
  rate, NVIDIA's Pascal tuning guide): float16 would be *slower*, so ``float32`` -- TensorFlow's own mixed
  precision guide asks for compute capability 7.0+ for the same reason.
* **GPUs from Ampere on** (compute capability >= 8.0: A100, L4, H100, ...): bf16 tensor cores at the same
  rate as float16 and no loss scaling -> ``mixed_bfloat16``.
* **TPUs**: the MXU is bf16 -> ``mixed_bfloat16``.

The choice itself (:func:`choose`) is a pure function of a :class:`Device` description so it is unit
tested for every device type without the device; :func:`detect` builds that description from this
machine (``/proc/cpuinfo`` flags, ``tf.config.experimental.get_device_details`` compute capability) with
the pool's ``accelerator_type`` as the fallback when the driver does not report a compute capability.

Variables stay float32 under every mixed policy (Keras keeps float32 master weights), the model's last
layer is a float32 softmax, and the exported model is rebuilt under float32 (see ``trainers.train``), so
serving signatures are float32 in and float32 out whatever was used for training.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Iterable, Literal

log = logging.getLogger(__name__)

Precision = Literal["auto", "float32", "bfloat16", "float16"]
PRECISIONS = ("auto", "float32", "bfloat16", "float16")
F_PRECISION = "training.precision"

#: CPU flags (as in /proc/cpuinfo) that mean native bf16 arithmetic in oneDNN.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")

#: Vertex accelerator types -> CUDA compute capability (NVIDIA's published table,
#: https://developer.nvidia.com/cuda-gpus). Used only when TensorFlow cannot tell us.
GPU_COMPUTE_CAPABILITY = {
    "NVIDIA_TESLA_K80": (3, 7),
    "NVIDIA_TESLA_P4": (6, 1),
    "NVIDIA_TESLA_P100": (6, 0),
    "NVIDIA_TESLA_V100": (7, 0),
    "NVIDIA_TESLA_T4": (7, 5),
    "NVIDIA_TESLA_A100": (8, 0),
    "NVIDIA_A100_80GB": (8, 0),
    "NVIDIA_L4": (8, 9),
    "NVIDIA_H100_80GB": (9, 0),
    "NVIDIA_H100_MEGA_80GB": (9, 0),
    "NVIDIA_H200_141GB": (9, 0),
    "NVIDIA_B200": (10, 0),
    "NVIDIA_GB200": (10, 0),
}
AMPERE = (8, 0)


def fast_float16(cc: tuple[int, int]) -> bool:
    """Tensor cores (7.x) or Pascal GP100's double-rate float16 (6.0)."""
    return cc == (6, 0) or (7, 0) <= cc < AMPERE


@dataclasses.dataclass(frozen=True)
class Device:
    """What the precision choice depends on. ``kind``: ``cpu``, ``gpu`` or ``tpu``."""
    kind: Literal["cpu", "gpu", "tpu"]
    cpu_flags: frozenset[str] = frozenset()
    #: as reported by TensorFlow for the first GPU; None when unknown.
    compute_capability: tuple[int, int] | None = None
    #: the pool's Vertex accelerator type (e.g. NVIDIA_TESLA_T4), the fallback for the GPU generation.
    accelerator_type: str = ""
    #: TensorFlow's oneDNN CPU kernels are on (``TF_ENABLE_ONEDNN_OPTS`` not 0). Without them bf16 runs on
    #: Eigen's reference kernels: the seed CNN measured ~50x slower than with oneDNN.
    onednn: bool = True


@dataclasses.dataclass(frozen=True)
class Choice:
    #: Keras global policy name: float32, mixed_bfloat16 or mixed_float16.
    policy: str
    #: wrap the optimizer in a LossScaleOptimizer (float16 only).
    loss_scaling: bool
    reason: str

    def line(self, requested: str) -> str:
        return f"precision: {self.policy} (training.precision={requested}; {self.reason})"


def _gpu_capability(device: Device) -> tuple[tuple[int, int] | None, str]:
    if device.compute_capability:
        cc = tuple(device.compute_capability)
        return cc, f"compute capability {cc[0]}.{cc[1]}"
    cc = GPU_COMPUTE_CAPABILITY.get(device.accelerator_type.upper())
    if cc:
        return cc, f"{device.accelerator_type} (compute capability {cc[0]}.{cc[1]}, from the pool's accelerator_type)"
    return None, "an unknown GPU generation (no compute capability reported, accelerator_type " \
                 f"{device.accelerator_type or 'unset'})"


def cpu_has_bf16(flags: Iterable[str]) -> bool:
    flags = set(flags)
    return any(f in flags for f in BF16_CPU_FLAGS)


def choose(precision: str, device: Device) -> Choice:
    """The policy for ``precision`` on ``device``. Pure: no TensorFlow, no device needed.

    ``auto`` picks by device (module doc). An explicit value is honoured, with the reason saying when it
    is likely slower than ``auto`` here (bf16 without bf16 hardware, float16 on a CPU)."""
    if precision not in PRECISIONS:
        raise ValueError(f"{F_PRECISION}: {precision!r} is not one of {', '.join(PRECISIONS)}")
    if precision == "float32":
        return Choice("float32", False, "asked for explicitly")
    if precision == "float16":
        note = "" if device.kind == "gpu" else f"; note: a {device.kind.upper()} has no fast float16 path"
        return Choice("mixed_float16", True, "asked for explicitly, with dynamic loss scaling" + note)
    if precision == "bfloat16":
        note = ""
        if device.kind == "cpu" and not cpu_has_bf16(device.cpu_flags):
            note = "; note: this CPU lacks avx512_bf16/amx_bf16, bf16 is emulated and slower than float32"
        elif device.kind == "gpu":
            cc, what = _gpu_capability(device)
            if cc is not None and cc < AMPERE:
                note = f"; note: {what} is pre-Ampere, bf16 has no tensor-core path there"
        return Choice("mixed_bfloat16", False, "asked for explicitly" + note)
    # auto
    if device.kind == "tpu":
        return Choice("mixed_bfloat16", False, "auto: TPU matrix units compute in bf16")
    if device.kind == "gpu":
        cc, what = _gpu_capability(device)
        if cc is None:
            return Choice("mixed_float16", True, f"auto: {what}; float16 with loss scaling works on every "
                                                 "GPU generation")
        if cc >= AMPERE:
            return Choice("mixed_bfloat16", False, f"auto: {what} is Ampere or newer: bf16 tensor cores, "
                                                   "no loss scaling needed")
        if fast_float16(cc):
            return Choice("mixed_float16", True, f"auto: {what} is pre-Ampere with fast float16: float16 "
                                                 "with dynamic loss scaling")
        return Choice("float32", False, f"auto: {what} has no fast float16 (float16 would run slower than "
                                        "float32) and no bf16")
    present = sorted(f for f in BF16_CPU_FLAGS if f in device.cpu_flags)
    if present and not device.onednn:
        return Choice("float32", False, f"auto: CPU has {'/'.join(present)} but TF_ENABLE_ONEDNN_OPTS=0 turns "
                                        "oneDNN off, and bf16 without it is far slower than float32")
    if present:
        return Choice("mixed_bfloat16", False, f"auto: CPU has {'/'.join(present)}: native bf16 in oneDNN")
    return Choice("float32", False, "auto: CPU without avx512_bf16/amx_bf16: bf16 would be emulated")


def resolve(precision: str, mixed_precision: bool) -> tuple[str, str | None]:
    """Map the deprecated ``training.mixed_precision`` onto ``training.precision``.

    Returns (precision to use, deprecation note or None). ``mixed_precision: true`` meant "mixed where the
    device supports it", which is what ``auto`` does; with an explicit ``precision`` the explicit field
    wins (``jobs.validate`` rejects the contradictory ``mixed_precision: true`` + ``precision: float32``)."""
    if not mixed_precision:
        return precision, None
    return precision, ("training.mixed_precision is deprecated and ignored: use training.precision "
                       f"(auto|float32|bfloat16|float16); running with training.precision={precision}")


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags of the first processor listed in ``path`` (empty where there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("flags", "Features"):  # x86 / arm64
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def detect(strategy: str, accelerator_type: str = "") -> Device:
    """Describe this machine's training device (imports TensorFlow; call after the strategy exists)."""
    if strategy == "tpu":
        return Device("tpu", accelerator_type=accelerator_type)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        cc = None
        try:
            details = tf.config.experimental.get_device_details(gpus[0])
            cc = details.get("compute_capability")
        except (ValueError, RuntimeError):
            pass
        return Device("gpu", compute_capability=tuple(cc) if cc else None, accelerator_type=accelerator_type)
    return Device("cpu", cpu_flags=cpu_flags(), onednn=os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0")


def apply(choice: Choice) -> None:
    """Set the Keras global policy (before the model is built)."""
    import keras

    keras.mixed_precision.set_global_policy(choice.policy)


def setup(training: Any, device: Device) -> Choice:
    """Resolve ``training.precision`` for ``device``, apply the policy (before the model is built) and print the
    one line that says what was chosen and why; returns the choice. ``training`` is the config's section."""
    requested, deprecation = resolve(training.precision, training.mixed_precision)
    if deprecation:
        print(f"warning: {deprecation}", flush=True)
    choice = choose(requested, device)
    apply(choice)
    print(choice.line(requested), flush=True)
    return choice
