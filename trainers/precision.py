"""Numeric precision per device: ``training.precision: auto | float32 | bfloat16 | float16``.

Why per device: the same config runs on a laptop CPU, a T4, an A100 and a TPU, and the fastest *safe*
precision differs on each. CPUs with AVX512_BF16 or AMX run bf16 natively in oneDNN (float32's exponent range: no
loss scaling), but whether that is faster depends on the chip, not the flag (AMD Zen 4 ran the seed CNN 1.70x
faster in bf16, Zen 5 1.62x, an Intel Xeon with ``avx512_bf16`` and no AMX 0.79x: :data:`PRIORS_FILE`); without
them bf16 is emulated and slower -> float32. GPUs before Ampere with fast float16 (V100, T4: tensor cores; P100:
double-rate float16) -> ``mixed_float16`` with dynamic loss scaling; without fast float16 (K80, P4: none or
1/64-rate, NVIDIA's Pascal tuning guide) -> float32; from Ampere on (compute capability >= 8.0) bf16 tensor cores
at float16's rate and no loss scaling -> ``mixed_bfloat16``. TPUs: the MXU is bf16 -> ``mixed_bfloat16``.

Where a device offers two candidates (:func:`candidates`: a CPU with bf16 and oneDNN -> float32 and bf16; an
Ampere+ GPU -> float32 and bf16; a GPU with fast float16 -> float32 and float16), what is known of its kind is
data with its source and date (:data:`PRIORS_FILE`, :func:`prior_for`): the static choice (:func:`choose`) takes
the faster policy seen on that kind, and a kind with no figures keeps float32, the safe choice.
``trainers.precision_auto.decide_auto`` adds what a run can learn on this machine: a decision measured earlier
(the cache, :func:`cache_dirs`), or a measurement when the run is long enough for one to repay itself.

The static choice is a pure function of a :class:`Device` description so it is unit tested for every device
type without the device; :func:`detect` builds that description from this machine (``/proc/cpuinfo``:
vendor, family, model, flags; ``tf.config.experimental.get_device_details``: compute capability) with the
pool's ``accelerator_type`` as the fallback when the driver does not report a compute capability. An explicit
``training.precision`` is never measured nor overridden.

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
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from trainers import fileio, record_reader
from trainers.gpus import AMPERE, compute_capability, fast_float16
from jobfile.paths import join
from trainers.precision_priors import PRIORS_FILE, Prior, lookup

log = logging.getLogger(__name__)

Precision = Literal["auto", "float32", "bfloat16", "float16"]
PRECISIONS = ("auto", "float32", "bfloat16", "float16")
F_PRECISION = "training.precision"

#: CPU flags (as in /proc/cpuinfo) that mean native bf16 arithmetic in oneDNN.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


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
    #: the CPU kind (``/proc/cpuinfo``: ``vendor_id``, ``cpu family``, ``model``; empty / None where unknown):
    #: what the priors (:data:`PRIORS_FILE`) are keyed by, beside the flags
    vendor: str = ""
    family: int | None = None
    model: int | None = None


@dataclasses.dataclass(frozen=True)
class Choice:
    #: Keras global policy name: float32, mixed_bfloat16 or mixed_float16.
    policy: str
    #: wrap the optimizer in a LossScaleOptimizer (float16 only).
    loss_scaling: bool
    reason: str
    #: what ``auto`` measured (``trainers.precision_auto.decide_auto``): ``rates`` (policy -> examples/s),
    #: ``seconds`` (what measuring cost), ``steps`` (warm-up + timed, per candidate), ``cached`` (the cache file
    #: it came from, or None). Empty when nothing was measured. Kept in ``metrics.json`` (``precision_auto``).
    measured: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False)

    def line(self, requested: str) -> str:
        return f"precision: {self.policy} (training.precision={requested}; {self.reason})"


def choice_of(policy: str, reason: str, measured: Mapping[str, Any] | None = None) -> Choice:
    return Choice(policy, policy == "mixed_float16", reason, dict(measured or {}))


def _gpu_capability(device: Device) -> tuple[tuple[int, int] | None, str]:
    if device.compute_capability:
        cc = tuple(device.compute_capability)
        return cc, f"compute capability {cc[0]}.{cc[1]}"
    cc = compute_capability(device.accelerator_type)
    if cc:
        return cc, f"{device.accelerator_type} (compute capability {cc[0]}.{cc[1]}, from the pool's accelerator_type)"
    return None, "an unknown GPU generation (no compute capability reported, accelerator_type " \
                 f"{device.accelerator_type or 'unset'})"


def cpu_has_bf16(flags: Iterable[str]) -> bool:
    flags = set(flags)
    return any(f in flags for f in BF16_CPU_FLAGS)


def choose(precision: str, device: Device) -> Choice:
    """The policy for ``precision`` on ``device``. Pure: no TensorFlow, no device needed.

    ``auto`` picks by device (module doc): where there are two candidates, the faster one seen on the device's
    kind (:func:`prior_choice`). An explicit value is honoured, with the reason saying when it is likely slower
    than ``auto`` here (bf16 without bf16 hardware, float16 on a CPU)."""
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
    if len(candidates(device)) > 1:
        return prior_choice(device)
    if device.kind == "gpu":
        cc, what = _gpu_capability(device)
        if cc is None:
            return Choice("mixed_float16", True, f"auto: {what}; float16 with loss scaling works on every "
                                                 "GPU generation")
        return Choice("float32", False, f"auto: {what} has no fast float16 (float16 would run slower than "
                                        "float32) and no bf16")
    present = sorted(f for f in BF16_CPU_FLAGS if f in device.cpu_flags)
    if present:  # with oneDNN off: one candidate
        return Choice("float32", False, f"auto: CPU has {'/'.join(present)} but TF_ENABLE_ONEDNN_OPTS=0 turns "
                                        "oneDNN off, and bf16 without it is far slower than float32")
    return Choice("float32", False, "auto: CPU without avx512_bf16/amx_bf16: bf16 would be emulated")


def resolve(precision: str, mixed_precision: bool) -> tuple[str, str | None]:
    """Map the deprecated ``training.mixed_precision`` onto ``training.precision``.

    Returns (precision to use, deprecation note or None). ``mixed_precision: true`` meant "mixed where the
    device supports it", which is what ``auto`` does; with an explicit ``precision`` the explicit field
    wins (``jobs.rules.validate`` rejects the contradictory ``mixed_precision: true`` + ``precision: float32``)."""
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


def cpu_kind(path: str = "/proc/cpuinfo") -> tuple[str, int | None, int | None]:
    """(vendor, family, model) of the first processor (``AuthenticAMD``, 25, 17 on AMD Zen 4 EPYC): what a
    hypervisor passes through where the model name says only ``AMD EPYC``. ("", None, None) where unknown."""
    def number(name: str) -> int | None:
        value = _cpuinfo_field((name,), path)
        try:
            return int(value, 0) if value is not None else None
        except ValueError:
            return None

    return _cpuinfo_field(("vendor_id",), path) or "", number("cpu family"), number("model")


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
    vendor, family, model = cpu_kind()
    return Device("cpu", cpu_flags=cpu_flags(), onednn=os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") != "0",
                  name=cpu_name(), cores=usable_cores(), vendor=vendor, family=family, model=model)


def apply(choice: Choice) -> None:
    """Set the Keras global policy (before the model is built)."""
    import keras

    keras.mixed_precision.set_global_policy(choice.policy)


def setup(training: Any, device: Device, auto: Callable[[Device], Choice] | None = None) -> Choice:
    """Resolve ``training.precision`` for ``device``, apply the policy (before the model is built) and print the
    one line that says what was chosen and why; returns the choice. ``training`` is the config's section.
    ``auto``: how ``auto`` is decided here (``trainers.train``: ``trainers.precision_auto.decide_auto`` on the
    job's own model); None: the static choice (:func:`choose`). An explicit precision never reaches it."""
    requested, deprecation = resolve(training.precision, training.mixed_precision)
    if deprecation:
        print(f"warning: {deprecation}", flush=True)
    choice = auto(device) if (auto is not None and requested == "auto") else choose(requested, device)
    apply(choice)
    print(choice.line(requested), flush=True)
    return choice


SHORT = {"float32": "float32", "mixed_bfloat16": "bf16", "mixed_float16": "float16"}


def candidates(device: Device) -> tuple[str, ...]:
    """The policies worth comparing on ``device`` (float32 first); fewer than two: nothing to decide by kind.

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


# -- what is known of a device's kind (data with its source) ------------------------------------------------

def prior_for(device: Device) -> Prior | None:
    """The first entry of :data:`PRIORS_FILE` that matches ``device``, or None: nothing is known of its kind."""
    if device.kind == "gpu":
        return lookup("gpu", capability=_gpu_capability(device)[0])
    return lookup(device.kind, vendor=device.vendor, family=device.family, model=device.model, flags=device.cpu_flags)


def kind_text(device: Device) -> str:
    """``AuthenticAMD family 0x19 model 0x11, avx512_bf16`` / ``compute capability 8.0``: what the kind was
    recognised (or not) by."""
    if device.kind == "gpu":
        return _gpu_capability(device)[1]
    parts = [device.vendor or "unknown vendor"]
    if device.family is not None:
        parts.append(f"family {device.family:#x}")
    if device.model is not None:
        parts.append(f"model {device.model:#x}")
    flags = sorted(f for f in (*BF16_CPU_FLAGS, "avx512_fp16") if f in device.cpu_flags)
    return " ".join(parts) + (f", {' '.join(flags)}" if flags else "")


def prior_choice(device: Device) -> Choice:
    """The static ``auto`` where ``device`` has two candidates: the faster policy seen on its kind, or float32 (the
    safe choice: no rounding, no loss scaling) where nothing is known of it."""
    prior = prior_for(device)
    if prior is None:
        other = SHORT[candidates(device)[1]]
        return choice_of("float32", f"auto: float32, the safe choice: no figures for this {device.kind.upper()} "
                                    f"kind ({kind_text(device)}) say {other} is faster")
    if prior.ratio is not None:
        other = next(p for p in candidates(device) if p != "float32")
        figure = f"{SHORT[other]} {prior.ratio:.2f}x float32, {prior.seen.split(',')[0]}"
    else:
        figure = prior.seen.split(",")[0]
    how = " with dynamic loss scaling" if prior.policy == "mixed_float16" else ""
    return choice_of(prior.policy, f"auto: {SHORT[prior.policy]}{how}, the faster on {prior.name} "
                                   f"({kind_text(device)}; {figure}: {PRIORS_FILE.name})")


# -- the cache of measured decisions -------------------------------------------------------------------------

#: bumped when what a cache entry means changes: older entries are then never read
CACHE_VERSION = 2


def machine_fields(device: Device) -> dict[str, Any]:
    """What of the machine changes the answer (for :func:`cache_key`)."""
    if device.kind == "cpu":
        return {"kind": "cpu", "cpu": device.name, "vendor": device.vendor, "family": device.family,
                "model": device.model, "cores": device.cores, "onednn": device.onednn,
                "flags": hashlib.sha256(" ".join(sorted(device.cpu_flags)).encode()).hexdigest()[:16]}
    return {"kind": device.kind, "name": device.name, "accelerator_type": device.accelerator_type,
            "compute_capability": list(device.compute_capability or ())}


#: the most examples a second a cached rate may say (no machine trains a model a billion examples a second)
MAX_RATE = 1e9


def cache_key(fields: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps({**fields, "cache_version": CACHE_VERSION}, sort_keys=True,
                                     default=str).encode()).hexdigest()[:20]


def user_cache_dir(env: Mapping[str, str] | None = None) -> str | None:
    """This user's cache folder for vtp: ``$XDG_CACHE_HOME/vtp`` where that is an absolute path, else
    ``$HOME/.cache/vtp`` (the XDG Base Directory rule, which Linux workstations and containers follow; written here
    rather than taking ``platformdirs``, a dependency the project does not otherwise need, for three lines). None
    where neither gives an absolute path (no HOME and no home in the password database)."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "vtp")
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".cache", "vtp") if os.path.isabs(home) else None


def cache_dirs(base_dir: str, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Where measured decisions are kept, read in this order: this user's cache folder on this machine
    (:func:`user_cache_dir` ``/precision``: every project and every later run here starts with it), then, where
    the job's output is in a bucket (``gs://``, Vertex's ``/gcs/`` mount), beside that output folder
    (``<parent of output.base_dir>/.vtp-cache/precision``): a Vertex replica starts in a fresh container, so
    the next job and the trials of a study under the same folder find it there."""
    user = user_cache_dir(env)
    dirs = [join(user, "precision")] if user else []
    if not fileio.is_local(base_dir):
        parent, _ = fileio.split_parent(base_dir)
        if parent.endswith(":") or "/" not in parent:  # gs://bucket itself: inside it
            parent = base_dir.rstrip("/")
        dirs.append(join(parent, ".vtp-cache", "precision"))
    return tuple(dirs)


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


def write_cached(directories: Sequence[str], fields: Mapping[str, Any], entry: Mapping[str, Any]) -> list[str]:
    """Write the decision atomically into each of ``directories``; returns the paths written. A folder that cannot
    be written (no HOME, read-only, a file in the way) leaves the decision uncached there: at most one
    ``warning:`` line for all of them, never a failed job."""
    written, failed = [], []
    for directory in directories:
        path = join(directory, cache_key(fields) + ".json")
        try:
            fileio.makedirs(directory)
            fileio.write_json_atomic(path, {**entry, "fields": fields, "cache_version": CACHE_VERSION})
            written.append(path)
        except Exception as exc:  # OSError locally, tf.errors.OpError on gs://
            failed.append(f"{path}: {' '.join(str(exc).split())[:200]}")
    if failed:
        print(f"warning: the precision measurement was not cached ({'; '.join(failed)}); "
              + ("the next run here measures again" if not written else f"kept in {', '.join(written)}"), flush=True)
    return written
