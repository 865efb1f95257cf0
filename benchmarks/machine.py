"""What the benchmarks say about the machine and the model: CPU model/flags, theoretical peak GFLOP/s,
and FLOPs per training example counted layer by layer.

Peak = cores x (vector bits / 32) float32 lanes x FMA units per core x 2 (an FMA is 2 FLOPs) x clock.

* cores: ``os.sched_getaffinity`` (what this process may use);
* vector bits: 512 with ``avx512f`` in /proc/cpuinfo, 256 with ``avx2``/``avx``, else 128;
* FMA units per core: not readable from the OS, so from the vendor's documentation by CPU family:
  AMD family 0x1A (Zen 5) two 512-bit FMA pipes; AMD 0x19 (Zen 3/4) two 256-bit pipes (Zen 4 runs AVX-512
  as 2x256, so 1 "512-bit unit"); Intel Xeon Scalable with AVX-512 two (Gold/Platinum; some Silver/Bronze
  have one -- the figure is then an upper bound); anything else 2;
* clock: ``cpu MHz`` in /proc/cpuinfo (the nominal/TSC clock in a VM; turbo is not counted);
* bf16 peak: 2x the float32 peak where ``avx512_bf16`` exists (``vdpbf16ps`` does 2 bf16 products per
  float32 lane); AMX is not modelled.
"""
from __future__ import annotations

import os
import platform


def cpuinfo() -> dict:
    info: dict = {"model": platform.processor() or "unknown", "flags": set(), "mhz": 0.0, "vendor": "", "family": -1}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and not info.get("_model_seen"):
                    info["model"], info["_model_seen"] = value, True
                elif key == "flags" and not info["flags"]:
                    info["flags"] = set(value.split())
                elif key == "cpu MHz" and not info["mhz"]:
                    info["mhz"] = float(value)
                elif key == "vendor_id":
                    info["vendor"] = value
                elif key == "cpu family" and info["family"] < 0:
                    info["family"] = int(value)
    except OSError:
        pass
    return info


def fma_units(vendor: str, family: int, vector_bits: int) -> tuple[int, str]:
    """(FMA units of ``vector_bits`` per core, where the number comes from)."""
    if vendor == "AuthenticAMD" and family == 0x1A:
        return 2, "AMD family 0x1A (Zen 5): 2 x 512-bit FMA (AMD Zen 5 optimization guide)"
    if vendor == "AuthenticAMD" and family == 0x19 and vector_bits == 512:
        return 1, "AMD family 0x19 (Zen 4): AVX-512 on 2 x 256-bit FMA = 1 x 512-bit"
    if vendor == "AuthenticAMD":
        return 2, f"AMD family {family:#x}: 2 x {vector_bits}-bit FMA assumed"
    if vendor == "GenuineIntel":
        return 2, f"Intel: 2 x {vector_bits}-bit FMA assumed (Xeon Gold/Platinum; an upper bound on 1-unit SKUs)"
    return 2, "2 FMA units assumed (unknown vendor)"


def peak(info: dict | None = None) -> dict:
    info = info or cpuinfo()
    flags = info["flags"]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    bits = 512 if "avx512f" in flags else 256 if ("avx2" in flags or "avx" in flags) else 128
    units, source = fma_units(info["vendor"], info["family"], bits)
    ghz = info["mhz"] / 1000.0
    fp32 = cores * (bits // 32) * units * 2 * ghz
    bf16 = fp32 * 2 if "avx512_bf16" in flags else None
    return {"cores": cores, "vector_bits": bits, "fma_units": units, "fma_source": source, "ghz": ghz,
            "fp32_gflops": fp32, "bf16_gflops": bf16,
            "how": f"{cores} cores x {bits // 32} fp32 lanes ({bits}-bit) x {units} FMA units x 2 x {ghz:.2f} GHz"}


def describe(info: dict | None = None) -> str:
    info = info or cpuinfo()
    keys = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
            if f in info["flags"]]
    return f"{info['model']} ({info['vendor']} family {info['family']:#x}), {info['mhz']:.0f} MHz, flags: {' '.join(keys)}"


def training_flops_per_example(model) -> tuple[float, float]:
    """(forward FLOPs, training FLOPs) per example, counted over Conv2D and Dense layers.

    Forward: 2 x MACs. Training = forward + backward, the backward being the weight gradient (same MACs
    as forward) plus the input gradient (same again) for every layer except the first, whose input (the
    image) needs no gradient: 3 x forward - first layer's forward. Pooling, activations, bias and the
    optimizer update are left out (< 2% for these models), so the figure slightly understates the work."""
    forward, first = 0.0, None
    for layer in _leaf_layers(model):
        kind = type(layer).__name__
        if kind in ("Conv2D", "Dense"):
            out = layer.output.shape
            w = layer.kernel.shape
            if kind == "Conv2D":
                macs = out[1] * out[2] * w[0] * w[1] * w[2] * w[3] / max(1, getattr(layer, "groups", 1))
            else:
                macs = w[0] * w[1]
            flops = 2.0 * macs
            forward += flops
            if first is None:
                first = flops
        elif kind == "DepthwiseConv2D":
            out = layer.output.shape
            w = layer.kernel.shape
            flops = 2.0 * out[1] * out[2] * w[0] * w[1] * w[2] * w[3]
            forward += flops
            first = first if first is not None else flops
    return forward, 3 * forward - (first or 0.0)


def _leaf_layers(model):
    for layer in model.layers:
        if hasattr(layer, "layers") and layer.layers:
            yield from _leaf_layers(layer)
        else:
            yield layer
