"""Telling a typo from hardware the catalog has not heard of yet: the names of machine and accelerator types.

The catalog is a snapshot (``catalog.date``); Vertex adds machine families and GPUs between snapshots. So a
name the catalog does not know is judged by its form:

* a **near miss** of a known name is a typo: an error with "did you mean". Near: the same name but for case,
  ``-``/``_`` or spaces; within one or two edits of a known name where the edits touch letters or
  separators (``n1-standrd-8``, ``NVIDA_L4``); a machine type whose class word is misspelt
  (``e2-stadnard-8``: the words are ``standard``, ``highmem``, ``highgpu``, ...);
* a **well-formed** name is new hardware: ``SERIES-CLASS-SIZE`` for machine types (``a5-highgpu-8g``,
  ``n4-standard-8``: a series such as ``e2``/``c3d``/``ct5lp``, known class words, a size such as ``8``/``8g``/
  ``4t``), ``NVIDIA_...``/``TPU_...`` for accelerators, where two names that differ only in digits
  (``NVIDIA_B300`` beside ``NVIDIA_B200``) are two generations, not a typo. One warning, "Vertex decides";
  ``strict`` turns it into an error;
* anything else is not a name Vertex could accept: an error describing the form.

Why hand-written and not ``difflib`` alone: ``difflib`` ratios call ``a5-highgpu-8g`` a near miss of
``a4-highgpu-8g``; the distinction needed here (digits = a generation, letters = a typo) is an edit distance
that knows which characters changed, a dozen lines.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Iterable

from trainers.resource_names import REGION_RE, fits

#: Class words of Compute Engine machine type names (``n2-highmem-8``, ``a3-megagpu-8g``, ``ct5lp-hightpu-4t``).
CLASS_WORDS = ("standard", "highmem", "highcpu", "highgpu", "megagpu", "ultragpu", "edgegpu", "hightpu", "ultramem",
               "megamem", "hypermem", "highlssd", "standardlssd", "micro", "small", "medium")
SERIES_RE = re.compile(r"^[a-z]{1,3}\d{1,2}[a-z]{0,3}$")
SIZE_RE = re.compile(r"^\d{1,4}[a-z]?$")
ACCELERATOR_RE = re.compile(r"^(NVIDIA|TPU|AMD|INTEL|GOOGLE)(_[A-Z0-9]+)+$")
#: A Compute Engine region's form (``us-central1``, ``europe-west4``, ``northamerica-northeast2``).


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a name the catalog does not know is: ``near`` (a typo: ``suggest`` says of what), ``new``
    (well-formed: hardware the catalog has not heard of) or ``malformed``."""
    kind: str
    suggest: tuple[str, ...] = ()
    hint: str = ""


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", "-", name.strip().lower())


def edits(a: str, b: str) -> tuple[int, bool]:
    """(Levenshtein distance, whether every edit is a digit replaced by a digit)."""
    prev = [(j, True) for j in range(len(b) + 1)]
    for i, ca in enumerate(a, 1):
        cur = [(i, False)]
        for j, cb in enumerate(b, 1):
            if ca == cb:
                best = prev[j - 1]
            else:
                digit = ca.isdigit() and cb.isdigit()
                sub = (prev[j - 1][0] + 1, prev[j - 1][1] and digit)
                best = min(sub, (prev[j][0] + 1, False), (cur[j - 1][0] + 1, False), key=lambda x: (x[0], not x[1]))
            cur.append(best)
        prev = cur
    return prev[-1][0], prev[-1][0] > 0 and prev[-1][1]


def near_misses(name: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """Known names that ``name`` is a typo of: equal but for case and separators, or within two edits of
    which at least one touches a letter or separator."""
    known = list(known)
    same = [k for k in known if _norm(k) == _norm(name)]
    if same:
        return same[:limit]
    scored = []
    for k in known:
        distance, digits_only = edits(name.lower(), k.lower())
        if distance <= 2 and not digits_only:
            scored.append((distance, k))
    return [k for _, k in sorted(scored)[:limit]]


def machine_verdict(name: str, known: Iterable[str], not_listed: Iterable[str] = ()) -> Verdict:
    """Judge a machine type name absent from the catalog (see the module doc)."""
    known = list(known)
    parts = name.split("-")
    series, words, size = parts[0], parts[1:-1], parts[-1]
    if len(parts) >= 3 and SERIES_RE.fullmatch(series) and SIZE_RE.fullmatch(size):
        wrong = [w for w in words if w not in CLASS_WORDS]
        if not wrong:
            family = [k for k in known if k.split("-", 1)[0] == series]
            prefix = "-".join(parts[:-1]) + "-"
            if series in set(not_listed) or f"{series}-{'-'.join(words)}" in set(not_listed):
                hint = f"{series} is a Compute Engine machine series that Vertex's list of training machine types does not name"
            elif family:
                sizes = [k for k in family if k.startswith(prefix)] or family
                hint = f"the catalog knows these {series} types: {', '.join(sizes[:8])}"
            else:
                hint = f"the catalog knows no {series} machine series"
            return Verdict("new", tuple(near_misses(name, family)[:3]), hint)
        fixed = []
        for w in words:
            close = [c for c in CLASS_WORDS if edits(w, c)[0] <= 2]
            fixed.append(close[0] if w not in CLASS_WORDS and close else w)
        if fixed != words:
            guess = "-".join([series, *fixed, size])
            return Verdict("near", tuple(dict.fromkeys([guess, *near_misses(guess, known)]))[:3])
    near = near_misses(name, known)
    if near:
        return Verdict("near", tuple(near))
    return Verdict("malformed")


def accelerator_verdict(name: str, known: Iterable[str]) -> Verdict:
    """Judge an accelerator type name absent from the catalog (see the module doc)."""
    known = list(known)
    generation = [k for k in known if edits(name, k)[1]]  # NVIDIA_B300 beside NVIDIA_B200
    if ACCELERATOR_RE.fullmatch(name) and generation:
        return Verdict("new", tuple(generation[:3]), f"a generation beside {generation[0]}")
    near = near_misses(name, known)
    if near:
        return Verdict("near", tuple(near))
    if ACCELERATOR_RE.fullmatch(name):
        return Verdict("new")
    return Verdict("malformed")


def region_verdict(name: str, known: Iterable[str]) -> Verdict:
    """Judge a region name before anything is looked up by it: ``known`` (listed), ``malformed`` (not of a region's
    form: upper case, a space, no number: ``US-CENTRAL1``, ``us-central``, ``'us-central1 '``; ``suggest`` says what
    was meant where it can tell), ``near`` (well-formed, but a letter or two from a listed region: ``us-centrl1``)
    or ``new`` (well-formed and near none: a region the list does not have yet; ``us-east2`` beside ``us-east1`` is
    another region, not a typo, as digits are generations in :func:`near_misses`)."""
    known = list(known)
    if name in known:
        return Verdict("known")
    if not fits(REGION_RE, name):
        return Verdict("malformed", tuple(near_misses(name, known) or near_misses(_norm(name), known)))
    near = near_misses(name, known)
    return Verdict("near", tuple(near)) if near else Verdict("new")
