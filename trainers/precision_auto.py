"""``training.precision: auto`` on this machine: what the device's kind says, a decision measured earlier, or a
measurement where the run is long enough for one to repay itself (:func:`decide_auto`).

Where the device offers two candidates (``trainers.precision.candidates``), in this order:

1. **A decision measured earlier** on this machine for the same job shape (``trainers.precision.cache_dirs``:
   this user's cache folder, so every project and every later run starts with it; beside a bucket output folder
   too), keyed by what changes the answer (``trainers.precision.cache_key``). Costs nothing.
2. **A measurement, where it is worth its cost by expected gain** (:func:`worth_measuring`): measuring costs about
   :func:`measuring_steps` steps of the run (each candidate built and traced, :data:`WARMUP_STEPS` untimed and
   :data:`MEASURE_STEPS` timed steps on the job's own model and batch, :func:`time_steps`); it gains only where
   the choice it replaces is wrong, by what running the slower candidate costs. Where the device's kind has
   figures (``trainers.precision_priors``) they are wrong with a small probability (:data:`PRIOR_DOUBT`); where
   it has none, either candidate is as likely to win (:data:`UNKNOWN_DOUBT`); what the wrong one costs is the
   spread seen between the kinds measured (``precision_priors.spread``: about 35 % of a float32 run). With the
   seed CNN's two candidates (46 steps of measuring): an unknown kind measures from ~260 steps, a known kind is
   confirmed from ~1,300. The fastest measured is kept (:func:`pick`) and cached.
3. **Otherwise the kind's figures** (``trainers.precision.prior_choice``): the faster policy seen on it, or
   float32 (the safe choice) where nothing is known. A 182-step run on AMD Zen 4 thus takes bf16 on its first
   start, measuring nothing.

Why the measuring steps are not training steps: the Keras policy fixes each layer's compute dtype when the
model is built, so a measured candidate is a model of its own; training it on the run's batches would make the
trained model depend on whether this run measured or read the cache, and a seeded run would no longer end
bitwise equal to its resumed twin. A measurement costs its steps once per machine and job shape instead.

Under multi-worker training only the chief decides and every replica takes its decision (``trainers.train``: one
all-reduce). The console line says what was decided and from what.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable, Mapping, Sequence

from trainers import precision as precision_lib, precision_priors
from trainers.precision import SHORT, Choice, Device, choice_of, choose, prior_choice

#: per candidate: untimed steps first (tracing, oneDNN's kernel selection, allocator warm-up), then timed ones
WARMUP_STEPS, MEASURE_STEPS = 3, 10
#: what building and tracing a candidate's model and step cost, counted in steps of it, for the seed CNN at
#: :data:`SETUP_IMAGE_SIZE` (``benchmarks/precision_auto.py``, 2026-11-27: 180x180 call 125 s of which 109 s the 13
#: steps; 64x64 11.4 s of which 5.1 s the steps); a bigger model's trace grows with it, its steps too
SETUP_STEPS, SETUP_IMAGE_SIZE = 10, 180
#: another precision is kept only when it beats float32 by this factor: a 10-step figure moves by a few
#: percent between identical runs, and float32 is the safe choice (no rounding, no loss scaling)
MARGIN = 1.05
#: how likely a kind's figures are wrong for this machine (another hypervisor, microcode, TensorFlow version or
#: model): a judgement, not a measurement; with it a known kind is confirmed by measuring only on runs about
#: five times longer than those an unknown kind measures on
PRIOR_DOUBT = 0.1
#: a kind of which nothing is known: either candidate as likely to be the faster
UNKNOWN_DOUBT = 0.5


def setup_steps(image_size: int) -> int:
    """:data:`SETUP_STEPS` at ``image_size``: building and tracing take about the same seconds at any input size
    while a convolution's step shrinks with its pixels, so at 32x32 (the default job) they are ~30x as many steps
    (2026-11-29, Zen 4: 4-6 s a candidate under load 10 against 28-48 ms steps)."""
    return max(SETUP_STEPS, math.ceil(SETUP_STEPS * (SETUP_IMAGE_SIZE / max(1, image_size)) ** 2))


def measuring_steps(n_candidates: int, setup: int = SETUP_STEPS) -> int:
    """What measuring ``n_candidates`` costs, in steps: build and trace (``setup``), warm-up, timed steps, each."""
    return n_candidates * (setup + WARMUP_STEPS + MEASURE_STEPS)


def expected_gain(total_steps: int, known: bool) -> float:
    """The steps a measurement is expected to save a ``total_steps`` run: the chance that the choice it replaces
    is the slower one, times what the slower one costs (``precision_priors.spread``)."""
    return total_steps * (PRIOR_DOUBT if known else UNKNOWN_DOUBT) * precision_priors.spread()


def worth_measuring(total_steps: int, n_candidates: int, known: bool, setup: int = SETUP_STEPS) -> bool:
    return expected_gain(total_steps, known) > measuring_steps(n_candidates, setup)


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


def measured_reason(policy: str, rates: Mapping[str, float], device: Device, seconds: float,
                    cached: str | None = None, why: str = "") -> str:
    """``auto: float32 247 ex/s vs bf16 191 ex/s on this CPU (...)``: the kept one first."""
    others = " vs ".join(f"{SHORT[p]} {rates[p]:.0f} ex/s" for p in sorted(rates, key=lambda p: -rates[p])
                         if p != policy)
    where = f"this {device.kind.upper()}" + (f", {device.name}" if device.name else "")
    how = (f"measured earlier, cached in {cached}" if cached else
           f"measured on the job's model and batch, {WARMUP_STEPS}+{MEASURE_STEPS} steps each, {seconds:.1f} s"
           + (f"; {why}" if why else ""))
    note = f"; within {MARGIN:.2f}x of float32: the safe choice" if (
        policy == "float32" and max(rates.values()) > rates.get("float32", 0)) else ""
    return f"auto: {SHORT[policy]} {rates[policy]:.0f} ex/s vs {others} on {where} ({how}{note})"


def _not_measured(device: Device, total_steps: int, cands: tuple[str, ...], known: bool, setup: int) -> Choice:
    static = prior_choice(device)
    gain = expected_gain(total_steps, known)
    return choice_of(static.policy, f"{static.reason}; not measured: a {total_steps}-step run would gain about "
                                    f"{gain:.0f} step{'' if round(gain) == 1 else 's'} from measuring {' and '.join(SHORT[p] for p in cands)}, "
                                    f"which costs about {measuring_steps(len(cands), setup)}")


def decide_auto(device: Device, total_steps: int, measure: Callable[[str], float], fields: Mapping[str, Any],
                directory: str | Sequence[str] | None, clock: Callable[[], float] = time.perf_counter,
                setup: int = SETUP_STEPS) -> Choice:
    """``auto`` on ``device`` for a run of ``total_steps`` (module doc): the static choice where there is one
    candidate, else a decision cached in ``directory`` (one folder or several, read in order; None: no cache),
    else a measurement where :func:`worth_measuring` (``measure(policy)`` -> examples/s: it applies the policy and
    times the job's own step), cached in every folder, else the kind's figures. ``fields``: the cache key's fields
    (the machine's are added); ``setup``: building and tracing a candidate, in its steps (:func:`setup_steps`)."""
    cands = precision_lib.candidates(device)
    if len(cands) < 2:
        return choose("auto", device)
    directories = (directory,) if isinstance(directory, str) else tuple(directory or ())
    fields = {**precision_lib.machine_fields(device), **fields, "candidates": list(cands)}
    for folder in directories:
        cached = precision_lib.read_cached(folder, fields, cands)
        if cached:
            measured = {"rates": cached["rates"], "seconds": 0.0, "steps": cached.get("steps"),
                        "cached": cached["path"], "measured_at": cached.get("measured_at")}
            return choice_of(cached["policy"], measured_reason(cached["policy"], cached["rates"], device, 0.0,
                                                               cached["path"]), measured)
    known = precision_lib.prior_for(device) is not None
    if not worth_measuring(total_steps, len(cands), known, setup):
        return _not_measured(device, total_steps, cands, known, setup)
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
    written = precision_lib.write_cached(directories, fields, entry)
    why = (f"the figures for this kind said {SHORT[prior_choice(device).policy]}; a {total_steps}-step run repays "
           "confirming them" if known else f"no figures for this kind; a {total_steps}-step run repays measuring")
    measured = {"rates": rates, "seconds": round(seconds, 3), "steps": entry["steps"], "cached": None,
                "measured_at": entry["measured_at"], "written": written}
    return choice_of(policy, measured_reason(policy, rates, device, seconds, why=why), measured)
