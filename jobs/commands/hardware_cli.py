"""``vtp hardware [--region R] [--accelerator A] [--family F] [--sources]``: what the hardware catalog knows.

Machine types by family (vCPUs, memory, built-in GPUs), the GPUs that attach to N1, TPU VM generations with their
topologies and hosts, the regions the catalog has data for, the catalog's date and its sources: what a user
reads to see why a job was refused (or warned about) before asking. ``--region`` keeps the accelerators the
catalog says that region offers (and says when it has no data for it); ``--accelerator`` keeps the machine types
that carry or take it. Filters that match no machine type say so in one line, with what there is instead (the
regions that offer the accelerator, what the family takes). A region is checked by its name first
(``jobs.rules.hardware.shared.region_problems``). Exit 0; 2 on a bad argument (one ``error:`` line).
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from jobs.rules.command_line import plain, shown
from jobs.rules.hardware.catalog import CLOUD_TPU, load_catalog
from jobs.rules.hardware.shared import region_problems


def _gpu_text(cat, machine: str) -> str:
    row = cat.gpus_for(machine) if machine in cat.gpu_table else {}
    return ", ".join(f"{'/'.join(map(str, c))} x {g}" for g, c in row.items())


def _region_offers(cat, region: str) -> set[str] | None:
    """Accelerators the catalog says ``region`` offers; None when it has no data for the region."""
    offered: set[str] = set()
    known = False
    if region in cat.zones:
        known = True
        for types in cat.zones[region].values():
            offered |= set(types)
    if region in cat.tpu_regions:
        known = True
        offered |= set(cat.tpu_cores)
    for g in cat.tpu_generations.values():
        if region in g.regions:
            known = True
            offered.add(g.name)
    return offered if known else None


def _offered(cat, accelerator: str, offers: set[str] | None) -> bool:
    """Whether the region whose accelerators are ``offers`` has ``accelerator`` (True when it has no data)."""
    if offers is None or not accelerator:
        return True
    generations = {g.name for g in cat.tpu_generations.values() if g.accelerator_type == accelerator}
    if accelerator in cat.gpus and not cat.regions_offering(accelerator):
        return True  # no region data for it anywhere: unknown, not "not offered" (a job there gets a warning)
    if generations and not any(g.regions for g in cat.tpu_generations.values() if g.name in generations):
        return True
    return accelerator in offers or bool(generations & offers)


def _nothing(cat, region: str, accelerator: str, family: str, offers: set[str] | None) -> str:
    """The line that says a filter matched no machine type, and what there is instead."""
    asked = " ".join(f"--{k} {v}" for k, v in (("region", region), ("accelerator", accelerator), ("family", family))
                     if v)
    if accelerator and not _offered(cat, accelerator, offers):
        where = sorted(r for r in cat.known_regions if _offered(cat, accelerator, _region_offers(cat, r) or set()))
        return (f"nothing matches {asked}: the catalog says {region} does not offer {accelerator}; regions that do: "
                f"{', '.join(where) or 'none the catalog has data for'}")
    if family and accelerator:
        takes = sorted({a for m in cat.machines if cat.family_of(m) == family for a in _takes(cat, m)})
        carriers = sorted({cat.family_of(m) or CLOUD_TPU for m in cat.machines if accelerator in _takes(cat, m)})
        return (f"nothing matches {asked}: {family} machine types take {', '.join(takes) or 'no accelerator'}; "
                f"{accelerator} comes with {', '.join(carriers) or 'no machine type the catalog knows'}")
    if family and region:
        return (f"nothing matches {asked}: the catalog says {region} offers none of {family}'s accelerators; it "
                f"offers {', '.join(sorted(offers or ())) or 'no accelerators'}")
    return f"nothing matches {asked}; without the filters the catalog lists {len(cat.machines)} machine types"


def _takes(cat, machine: str) -> set[str]:
    m = cat.machines[machine]
    takes = set(cat.gpus_for(machine)) | ({m.tpu_type} if m.tpu_type else set())
    return takes | set(cat.tpu_cores) if machine == CLOUD_TPU else takes


def lines(region: str = "", accelerator: str = "", family: str = "", sources: bool = False) -> list[str]:
    cat = load_catalog()
    out = [f"hardware catalog of {cat.date}: {cat.raw['catalog']['what']}",
           "  a name it does not know is one warning (Vertex decides); --strict or validation.strict: true refuses it"]
    offers = _region_offers(cat, region) if region else None
    if region and offers is None:
        out.append(f"  {region}: the catalog has no region data for it (a job there gets a warning, not a refusal)")
    elif region:
        out.append(f"  {region} offers (as the catalog knows): {', '.join(sorted(offers)) or 'no accelerators'}")
    if accelerator and accelerator in cat.gpus and not cat.regions_offering(accelerator):
        out.append(f"  {accelerator}: the catalog has no region data for it (no region list it was read from names "
                   "it)" + (f": whether {region} offers it is not known" if region else "")
                   + "; a job with it gets a warning, not a refusal")

    def wanted(machine: str) -> bool:
        m = cat.machines[machine]
        takes = _takes(cat, machine)
        if accelerator and (accelerator not in takes or not _offered(cat, accelerator, offers)):
            return False
        if family and cat.family_of(machine) != family:
            return False
        if region and offers is not None and m.tpu == "vm" and m.family not in offers:
            return False
        if region and offers is not None and takes and not m.tpu and not any(_offered(cat, a, offers) for a in takes):
            return False
        return True

    by_family: dict[str, list[str]] = {}
    for name in cat.machines:
        if wanted(name):
            by_family.setdefault(cat.family_of(name) or "cloud-tpu", []).append(name)
    if not by_family:
        out.append(_nothing(cat, region, accelerator, family, offers))
    for key, names in by_family.items():
        info = cat.families.get(key) or {}
        generation = cat.tpu_generations.get(key)
        label = info.get("label") or (f"TPU {key}" if generation else "TPU v2/v3 (cloud-tpu, seeds)")
        source = info.get("vertex") or info.get("source") or (generation.source if generation else "tpu_de")
        out.append(f"{label}  [{source}]")
        for name in names:
            m = cat.machines[name]
            size = f"{m.vcpus:g} vCPUs, {m.memory_gb:g} GB" if m.vcpus else "remote TPU"
            extra = _gpu_text(cat, name)
            if m.tpu == "vm":
                multi = [t for t in m.topologies if t not in m.single_host_topologies]
                extra = (f"{m.chips} chips per host; topologies {', '.join(m.single_host_topologies)} (one host)"
                         + (f", {', '.join(multi)} (multi-host)" if multi else ""))
            elif name == CLOUD_TPU:
                extra = ", ".join(f"{t} x {'/'.join(map(str, c))} cores" for t, c in cat.tpu_cores.items())
            out.append(f"  {name:<20} {size:<24} {extra}".rstrip())
        if generation and not generation.tensorflow:
            out.append(f"  TensorFlow: no. {generation.tensorflow_note}")
    n1 = [g for g in sorted(cat.n1_gpus) if (not accelerator or g == accelerator) and _offered(cat, g, offers)]
    if n1 and family in ("", "n1"):
        out.append("GPUs that attach to N1: " + ", ".join(f"{g} ({cat.gpus[g].status})" for g in n1))
    out.append("accelerators: " + ", ".join(
        f"{a}{' (retired)' if a in cat.gpus and cat.gpus[a].status == 'retired' else ''}"
        for a in cat.accelerator_types if not accelerator or a == accelerator))
    out.append("regions with data: " + ", ".join(sorted(set(cat.gpu_regions) | set(cat.tpu_regions)
                                                      | {r for g in cat.tpu_generations.values() for r in g.regions})))
    if sources:
        out.append("sources:")
        out += [f"  {key}: {cat.source_line(key)}" for key in cat.sources]
    else:
        out.append("sources: --sources lists each with its URL and the date it was read")
    return out


def main(argv: Sequence[str]) -> int:
    cat = load_catalog()
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py hardware"), description=plain(__doc__.split("\n\n")[0]))
    p.add_argument("--region", default="", help="keep what this region offers, as the catalog knows")
    p.add_argument("--accelerator", default="", help="keep the machine types that carry or take this accelerator")
    p.add_argument("--family", default="", help="keep one machine family (e2, n1, a3, v5e, ...)")
    p.add_argument("--sources", action="store_true", help="list every source with its URL and read date")
    try:
        args = p.parse_args(list(argv))
    except SystemExit as exc:
        return 0 if exc.code == 0 else 2
    if args.accelerator and args.accelerator not in cat.accelerator_types:
        near = cat.suggest(args.accelerator, cat.accelerator_types)
        print(f"error: --accelerator: {args.accelerator!r} is not an accelerator the catalog knows; valid choices: "
              f"{', '.join(near or cat.accelerator_types)}", file=sys.stderr)
        return 2
    if args.region:
        bad = region_problems("--region", args.region)
        if not bad and args.region not in cat.known_regions:  # well-formed, and no list the catalog has names it
            bad = [f"--region: {args.region!r} is not a region Vertex AI serves as the catalog of {cat.date} and the "
                   "installed google-cloud-aiplatform list them: there is nothing to list for it; valid choices: "
                   + ", ".join(sorted(cat.known_regions))]
        if bad:
            print(f"error: {bad[0]}", file=sys.stderr)
            return 2
    families = set(cat.families) | set(cat.tpu_generations)
    if args.family and args.family not in families:
        print(f"error: --family: {args.family!r} is not a family the catalog knows; valid choices: "
              f"{', '.join(sorted(families))}", file=sys.stderr)
        return 2
    print("\n".join(lines(args.region, args.accelerator, args.family, args.sources)))
    return 0
