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

The table above is what ``auto`` falls back to, not what it trusts: a flag says what an instruction set
has, not what oneDNN makes of it on one chip, hypervisor and model (an Intel Xeon with ``avx512_bf16`` and
no AMX ran the seed CNN's step at 247-281 ex/s in float32 and 89-196 in bf16; AMD Zen 5 ran bf16 1.9x
faster). So where there is more than one candidate (:func:`candidates`: a CPU with bf16 -> float32 and
bf16; an Ampere+ GPU -> float32 and bf16; a pre-Ampere GPU with fast float16 -> float32 and float16)
``auto`` **measures** (:func:`decide_auto`): the job's own model and per-replica batch, each candidate
:data:`WARMUP_STEPS` steps then :data:`MEASURE_STEPS` timed ones (:func:`time_steps`), and keeps the
fastest; float32 is kept unless another beats it by :data:`MARGIN`. The decision and its figures are
cached (:func:`cache_dir`, keyed by :func:`cache_key` over what changes the answer: the machine, the
TensorFlow version, the model and its input, the batch, the strategy, the thread settings), so a rerun or
the next trial pays nothing. A run too short for measuring to pay (:func:`too_short`: measuring would cost
more than :data:`MAX_MEASURE_SHARE` of its steps) keeps the safe choice, float32. An explicit
``training.precision`` is never measured nor overridden. Under multi-worker training only the chief
measures and every replica takes its decision (``trainers.train``: one all-reduce), never its own.

The static choice (:func:`choose`) is a pure function of a :class:`Device` description so it is unit
tested for every device type without the device; :func:`detect` builds that description from this
machine (``/proc/cpuinfo`` flags, ``tf.config.experimental.get_device_details`` compute capability) with
the pool's ``accelerator_type`` as the fallback when the driver does not report a compute capability.

Variables stay float32 under every mixed policy (Keras keeps float32 master weights), the model's last
layer is a float32 softmax, and the exported model is rebuilt under float32 (see ``trainers.train``), so
serving signatures are float32 in and float32 out whatever was used for training.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from typing import Any, Callable, Iterable, Literal, Mapping
from trainers import fileio, record_reader
from trainers.paths import join

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
    #: what the machine is, for the measurement cache's key: the CPU's model name or the GPU's device name
    name: str = ""
    #: CPU cores this process may use (0 = unknown)
    cores: int = 0


@dataclasses.dataclass(frozen=True)
class Choice:
    #: Keras global policy name: float32, mixed_bfloat16 or mixed_float16.
    policy: str
    #: wrap the optimizer in a LossScaleOptimizer (float16 only).
    loss_scaling: bool
    reason: str
    #: what ``auto`` measured (:func:`decide_auto`): ``rates`` (policy -> examples/s), ``seconds`` (what measuring
    #: cost), ``steps`` (warm-up + timed, per candidate), ``cached`` (the cache file it came from, or None).
    #: Empty when nothing was measured. Kept in ``metrics.json`` (``precision_auto``), hence ``run.json``.
    measured: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False)

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
    wins (``jobs.spec.validate`` rejects the contradictory ``mixed_precision: true`` + ``precision: float32``)."""
    if not mixed_precision:
        return precision, None
    return precision, ("training.mixed_precision is deprecated and ignored: use training.precision "
                       f"(auto|float32|bfloat16|float16); running with training.precision={precision}")


def _cpuinfo_field(names: tuple[str, ...], path: str) -> str | None:
    """The first processor's value of the first of ``names`` found in ``path`` (None where there is none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in names:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags of the first processor listed in ``path`` (empty where there is none)."""
    return frozenset((_cpuinfo_field(("flags", "Features"), path) or "").split())  # x86 / arm64


def cpu_name(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (``AMD EPYC``, ``Intel(R) Xeon(R) Processor``...; empty where unknown)."""
    return _cpuinfo_field(("model name", "Model", "CPU part"), path) or ""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def detect(strategy: str, accelerator_type: str = "") -> Device:
    """Describe this machine's training device (imports TensorFlow; call after the strategy exists)."""
    if strategy == "tpu":
        return Device("tpu", accelerator_type=accelerator_type)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        cc, name = None, ""
        try:
            details = tf.config.experimental.get_device_details(gpus[0])
            cc, name = details.get("compute_capability"), details.get("device_name", "")
        except (ValueError, RuntimeError):
            pass
        return Device("gpu", compute_capability=tuple(cc) if cc else None, accelerator_type=accelerator_type,
                      name=f"{name} x{len(gpus)}" if name else "")
    return Device("cpu", cpu_flags=cpu_flags(), onednn=os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0",
                  name=cpu_name(), cores=usable_cores())


def apply(choice: Choice) -> None:
    """Set the Keras global policy (before the model is built)."""
    import keras

    keras.mixed_precision.set_global_policy(choice.policy)


def setup(training: Any, device: Device, auto: Callable[[Device], Choice] | None = None) -> Choice:
    """Resolve ``training.precision`` for ``device``, apply the policy (before the model is built) and print the
    one line that says what was chosen and why; returns the choice. ``training`` is the config's section.
    ``auto``: how ``auto`` is decided here (``trainers.train``: :func:`decide_auto` on the job's own model);
    None: the static choice (:func:`choose`). An explicit precision never reaches it."""
    requested, deprecation = resolve(training.precision, training.mixed_precision)
    if deprecation:
        print(f"warning: {deprecation}", flush=True)
    choice = auto(device) if (auto is not None and requested == "auto") else choose(requested, device)
    apply(choice)
    print(choice.line(requested), flush=True)
    return choice


# -- auto by measuring --------------------------------------------------------------------------------------

#: the policies auto may measure, in a fixed order: the code replicas agree on is an index into it
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
SHORT = {"float32": "float32", "mixed_bfloat16": "bf16", "mixed_float16": "float16"}
#: per candidate: untimed steps first (tracing, oneDNN's kernel selection, allocator warm-up), then timed ones
WARMUP_STEPS, MEASURE_STEPS = 3, 10
#: measuring may cost at most this share of the run's steps; a shorter run keeps float32 unmeasured
MAX_MEASURE_SHARE = 0.10
#: what building and tracing a candidate's model and step cost, counted in steps of it: 2-16 for the seed CNN
#: (``benchmarks/precision_auto.py``, 2026-11-27: 180x180 call 125 s of which 109 s the 13 steps; 64x64 11.4 s
#: of which 5.1 s the steps); a bigger model's trace grows with it, its steps too
SETUP_STEPS = 10
#: another precision is kept only when it beats float32 by this factor: a 10-step figure moves by a few
#: percent between identical runs, and float32 is the safe choice (no rounding, no loss scaling)
MARGIN = 1.05
#: bumped when what a cache entry means changes: older entries are then never read
CACHE_VERSION = 1


def candidates(device: Device) -> tuple[str, ...]:
    """The policies worth measuring on ``device`` (float32 first); fewer than two: nothing to measure.

    A CPU: float32, and bf16 where it has ``avx512_bf16``/``amx_bf16`` with oneDNN on (without those bf16 is
    emulated: tens of times slower, not worth a measurement). A GPU from Ampere on: float32 and bf16 (float16
    runs at bf16's rate there and needs loss scaling). A GPU with fast float16 (6.0, 7.x): float32 and
    float16. A GPU with no fast half precision, one of unknown generation, a TPU: :func:`choose` decides."""
    if device.kind == "cpu":
        return ("float32", "mixed_bfloat16") if cpu_has_bf16(device.cpu_flags) and device.onednn else ("float32",)
    if device.kind == "gpu":
        cc, _ = _gpu_capability(device)
        if cc is None:
            return ()
        if cc >= AMPERE:
            return ("float32", "mixed_bfloat16")
        return ("float32", "mixed_float16") if fast_float16(cc) else ("float32",)
    return ()


def measuring_steps(n_candidates: int) -> int:
    """What measuring ``n_candidates`` costs, in steps: build and trace, warm-up, timed steps, each."""
    return n_candidates * (SETUP_STEPS + WARMUP_STEPS + MEASURE_STEPS)


def too_short(total_steps: int, n_candidates: int) -> bool:
    """Measuring would cost more than :data:`MAX_MEASURE_SHARE` of the run: it cannot pay for itself (even
    a 2x faster precision saves at most half of the run, and a run this short is mostly start-up anyway)."""
    return measuring_steps(n_candidates) > MAX_MEASURE_SHARE * total_steps


def time_steps(step: Callable[[], Any], examples_per_step: int, warmup: int = WARMUP_STEPS,
               steps: int = MEASURE_STEPS, clock: Callable[[], float] = time.perf_counter) -> float:
    """Examples/s of ``step`` (which must return only once its work is done: ``.numpy()`` its result): ``warmup``
    untimed calls, then ``steps`` timed ones. ``clock`` is injectable so the decision is tested with a fake one."""
    for _ in range(warmup):
        step()
    started = clock()
    for _ in range(steps):
        step()
    elapsed = clock() - started
    return examples_per_step * steps / elapsed if elapsed > 0 else float("inf")


def pick(rates: Mapping[str, float]) -> str:
    """The fastest policy; float32 unless another beats it by :data:`MARGIN`."""
    best = max(rates, key=lambda p: rates[p])
    if "float32" in rates and best != "float32" and rates[best] < MARGIN * rates["float32"]:
        return "float32"
    return best


def choice_of(policy: str, reason: str, measured: Mapping[str, Any] | None = None) -> Choice:
    return Choice(policy, policy == "mixed_float16", reason, dict(measured or {}))


def measured_reason(policy: str, rates: Mapping[str, float], device: Device, seconds: float,
                    cached: str | None = None) -> str:
    """``auto: float32 247 ex/s vs bf16 191 ex/s on this CPU (...)``: the kept one first."""
    others = " vs ".join(f"{SHORT[p]} {rates[p]:.0f} ex/s" for p in sorted(rates, key=lambda p: -rates[p])
                         if p != policy)
    where = f"this {device.kind.upper()}" + (f", {device.name}" if device.name else "")
    how = (f"measured earlier, cached in {cached}" if cached else
           f"measured on the job's model and batch, {WARMUP_STEPS}+{MEASURE_STEPS} steps each, {seconds:.1f} s")
    note = f"; within {MARGIN:.2f}x of float32: the safe choice" if (
        policy == "float32" and max(rates.values()) > rates.get("float32", 0)) else ""
    return f"auto: {SHORT[policy]} {rates[policy]:.0f} ex/s vs {others} on {where} ({how}{note})"


def machine_fields(device: Device) -> dict[str, Any]:
    """What of the machine changes the answer (for :func:`cache_key`)."""
    if device.kind == "cpu":
        return {"kind": "cpu", "cpu": device.name, "cores": device.cores, "onednn": device.onednn,
                "flags": hashlib.sha256(" ".join(sorted(device.cpu_flags)).encode()).hexdigest()[:16]}
    return {"kind": device.kind, "name": device.name, "accelerator_type": device.accelerator_type,
            "compute_capability": list(device.compute_capability or ())}


#: the most examples a second a cached rate may say (no machine trains a model a billion examples a second)
MAX_RATE = 1e9


def cache_key(fields: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps({**fields, "cache_version": CACHE_VERSION}, sort_keys=True,
                                     default=str).encode()).hexdigest()[:20]


def cache_dir(base_dir: str) -> str:
    """Beside the job's output folder, not in it: ``<parent of output.base_dir>/.vtp-cache/precision``. A rerun
    (``--fresh`` moves the old folder aside), the trials of a study (``<base>/<trial>/``), every replica of a job
    and the next job under the same parent (``runs/``, a bucket's folder) find it; on Vertex it is the
    bucket, which every replica sees."""
    parent, _ = fileio.split_parent(base_dir)
    if parent.endswith(":") or "/" not in parent:  # gs://bucket itself, or a bare relative name: inside it
        parent = base_dir.rstrip("/")
    return join(parent, ".vtp-cache", "precision")


def read_cached(directory: str, fields: Mapping[str, Any], cands: tuple[str, ...]) -> dict[str, Any] | None:
    """The cached decision for ``fields`` or None (none, unreadable, another key's, or not a decision among
    ``cands``: such an entry is measured again and replaced). Read by THE record reader
    (``trainers.record_reader``: a damaged entry, too deep, a 400-digit rate, a pipe, is measured again, never a
    failed train step); each rate a number of examples a second a machine can do."""
    path = join(directory, cache_key(fields) + ".json")
    try:
        entry = record_reader.read(path, types={"policy": str, "rates": dict, "fields": dict}, required=("policy", "rates"),
                                   limit=1 << 20)
    except record_reader.Unreadable as exc:
        print(f"warning: the cached precision measurement is damaged ({exc.why}); measuring again", flush=True)
        return None
    if entry is None or entry.get("fields") != json.loads(json.dumps(fields, default=str)):
        return None
    rates = entry["rates"]
    if (entry["policy"] not in cands or set(rates) != set(cands)
            or not all(record_reader.is_a(v, (int, float)) and 0 < v < MAX_RATE for v in rates.values())):
        return None
    return {**entry, "path": path}


def write_cached(directory: str, fields: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """Write the decision atomically; a cache that cannot be written is one ``warning:`` line (the next run
    measures again), never a failed job. Returns the path, or None."""
    path = join(directory, cache_key(fields) + ".json")
    try:
        fileio.makedirs(directory)
        fileio.write_json_atomic(path, {**entry, "fields": fields, "cache_version": CACHE_VERSION})
    except Exception as exc:  # OSError locally, tf.errors.OpError on gs://
        print(f"warning: the precision measurement was not cached ({path}: {exc}); the next run measures again",
              flush=True)
        return None
    return path


def decide_auto(device: Device, total_steps: int, measure: Callable[[str], float], fields: Mapping[str, Any],
                directory: str | None, clock: Callable[[], float] = time.perf_counter) -> Choice:
    """``auto`` on ``device`` for a run of ``total_steps``: the static choice where there is nothing to measure,
    the cached decision where there is one, float32 where the run is too short to measure, else each candidate
    measured (``measure(policy)`` -> examples/s; it applies the policy and times the job's own step) and the
    fastest kept (:func:`pick`), then cached. ``fields``: the cache key's fields (the machine's are added);
    ``directory``: the cache (None: no cache)."""
    cands = candidates(device)
    if len(cands) < 2:
        return choose("auto", device)
    fields = {**machine_fields(device), **fields, "candidates": list(cands)}
    cached = read_cached(directory, fields, cands) if directory else None
    if cached:
        measured = {"rates": cached["rates"], "seconds": 0.0, "steps": cached.get("steps"), "cached": cached["path"],
                    "measured_at": cached.get("measured_at")}
        return choice_of(cached["policy"], measured_reason(cached["policy"], cached["rates"], device, 0.0,
                                                           cached["path"]), measured)
    if too_short(total_steps, len(cands)):
        return choice_of("float32", f"auto: a {total_steps}-step run is too short to measure "
                                    f"{' and '.join(SHORT[p] for p in cands)} on this {device.kind.upper()} "
                                    f"({measuring_steps(len(cands))} steps of measuring, more than "
                                    f"{MAX_MEASURE_SHARE:.0%} of the run): float32, the safe choice")
    started = clock()
    rates = {}
    for policy in cands:
        try:
            rates[policy] = float(measure(policy))
        except Exception as exc:  # e.g. out of memory under one policy: not a candidate; float32's own is fatal
            if policy == "float32":
                raise
            print(f"warning: precision auto: {SHORT[policy]} could not be measured ({type(exc).__name__}: "
                  f"{' '.join(str(exc).split())[:200]}); not a candidate", flush=True)
    seconds = clock() - started
    if len(rates) < 2:  # nothing left to compare: float32, not cached (the failure may be passing)
        return choice_of("float32", f"auto: float32 {rates['float32']:.0f} ex/s; the other candidates could not "
                                    "be measured: float32, the safe choice", {"rates": rates, "seconds": seconds})
    policy = pick(rates)
    entry = {"policy": policy, "rates": rates, "seconds": round(seconds, 3), "steps": WARMUP_STEPS + MEASURE_STEPS,
             "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if directory:
        write_cached(directory, fields, entry)
    measured = {"rates": rates, "seconds": round(seconds, 3), "steps": entry["steps"], "cached": None,
                "measured_at": entry["measured_at"]}
    return choice_of(policy, measured_reason(policy, rates, device, seconds), measured)
