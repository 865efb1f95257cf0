"""What is known of each device kind's half precision against float32: ``precision_priors.yaml``, data with its
source and date, read and matched here (``trainers.precision.prior_for`` describes the device, this module knows
nothing of TensorFlow or of ``trainers.precision``).

A kind is matched by what the machine reports, not by its marketing name: a CPU by ``/proc/cpuinfo``'s vendor,
family (and model, where an entry names one) and flags (a hypervisor often shows only ``AMD EPYC`` as the model
name); a GPU by its compute capability. The first entry that matches is the device's prior.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

PRIORS_FILE = Path(__file__).with_name("precision_priors.yaml")
#: the policies ``auto`` chooses among, in a fixed order (replicas agree on an index into it: ``trainers.train``)
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class Prior:
    """One entry of :data:`PRIORS_FILE`: on devices of kind ``name``, ``policy`` was the faster candidate."""
    name: str
    device: str
    match: Mapping[str, Any]
    policy: str
    #: the other candidate's examples/s over float32's, where measured (None: read, not measured)
    ratio: float | None
    seen: str
    source: str


def _capability(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


@functools.cache
def priors(path: str = str(PRIORS_FILE)) -> tuple[Prior, ...]:
    """The entries of ``path``, checked: a malformed entry is a ValueError naming it (the shipped file is tested)."""
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or {}
    names = [f.name for f in dataclasses.fields(Prior)]
    entries = []
    for i, raw in enumerate(doc.get("priors") or []):
        where = f"{path}: priors[{i}]"
        if not isinstance(raw, dict) or set(raw) != set(names):
            raise ValueError(f"{where}: needs exactly the fields {', '.join(names)}")
        entry = Prior(**raw)
        cc = entry.match.get("compute_capability") if isinstance(entry.match, dict) else None
        if (entry.device not in ("cpu", "gpu") or entry.policy not in POLICIES or not entry.source or not entry.seen
                or not isinstance(entry.match, dict) or (entry.device == "gpu" and not isinstance(cc, list))):
            raise ValueError(f"{where} ({entry.name}): device cpu|gpu (a gpu matched by compute_capability "
                             f"[from, below]), policy one of {', '.join(POLICIES)}, a source and when it was seen")
        if not (entry.ratio is None or (isinstance(entry.ratio, (int, float)) and entry.ratio > 0)):
            raise ValueError(f"{where} ({entry.name}): ratio must be a positive number or null")
        entries.append(entry)
    return tuple(entries)


def _matches(entry: Prior, kind: str, vendor: str, family: int | None, model: int | None, flags: frozenset[str],
             capability: tuple[int, int] | None) -> bool:
    m = entry.match
    if entry.device != kind:
        return False
    if kind == "gpu":
        low, high = (_capability(x) for x in m["compute_capability"])
        return capability is not None and (low is None or capability >= low) and (high is None or capability < high)
    return (m.get("vendor", vendor) == vendor and m.get("family", family) == family and m.get("model", model) == model
            and all(f in flags for f in m.get("flags", ())) and not any(f in flags for f in m.get("without", ())))


def lookup(kind: str, *, vendor: str = "", family: int | None = None, model: int | None = None,
           flags: Iterable[str] = (), capability: tuple[int, int] | None = None) -> Prior | None:
    """The first entry of :data:`PRIORS_FILE` for a device of ``kind`` (cpu/gpu) so described, or None."""
    flags = frozenset(flags)
    return next((e for e in priors() if _matches(e, kind, vendor, family, model, flags, capability)), None)


def spread() -> float:
    """The share of a run's float32 time lost by running the slower of two candidates, averaged over the kinds
    measured (``|1/ratio - 1|``: Zen 4 0.41, Zen 5 0.38, the Xeon without AMX 0.27): what choosing wrongly is
    expected to cost on a kind of which nothing is known (``trainers.precision_auto``)."""
    losses = [abs(1.0 / e.ratio - 1.0) for e in priors() if e.ratio]
    return sum(losses) / len(losses) if losses else 0.0
