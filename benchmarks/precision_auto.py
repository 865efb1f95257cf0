"""What ``training.precision: auto`` measures here, and what measuring costs (issue 42).

    python benchmarks/precision_auto.py                         # the seed CNN, 180x180, batch 32: this CPU's candidates
    python benchmarks/precision_auto.py --candidates float32,mixed_bfloat16   # force the list (bf16 emulated
                                                                # on a CPU without avx512_bf16: slow, but it runs)
    python benchmarks/precision_auto.py --rounds 3 --image-size 96 --batch 64

Per candidate, in this one process and in alternating rounds: the job's own train step alone
(``trainers.train.measure_precision``: the model, its fused optimizer, one real batch of prepared data;
``trainers.precision_auto.WARMUP_STEPS`` untimed steps, then ``MEASURE_STEPS`` timed ones), its examples/s, and the
wall time of the whole call (model build, tracing, warm-up, timed steps: what ``auto`` pays per candidate on a
run's first start). Then what ``decide_auto`` would keep from the best round, what the priors say of this CPU's
kind (``trainers/precision_priors.yaml``), and the run length from which ``auto`` measures here. The examples/s of the step alone is the ceiling an end-to-end epoch of the
trainer approaches (``benchmarks/reference_vs_ours.py`` gives those). Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidates", help="comma list of Keras policies (default: what auto measures here)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=180)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--model", default="small_cnn")
    args = parser.parse_args(argv)

    from jobfile import config as config_lib
    from jobfile.config_files import apply_overrides
    from trainers import precision as p, precision_auto as a, precision_priors
    from trainers import train
    from trainers.training_plan import make_plan
    from trainers.prepare import prepare_tfrecords
    from trainers.synthetic import synthesize_image_folder

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import machine

    device = p.detect("one_device")
    candidates = tuple(args.candidates.split(",")) if args.candidates else p.candidates(device)
    unknown = [c for c in candidates if c not in precision_priors.POLICIES]
    if unknown:
        print(f"error: --candidates: {', '.join(unknown)} not among {', '.join(precision_priors.POLICIES)}")
        return 2
    print(f"machine: {machine.describe(machine.cpuinfo())}; {p.usable_cores()} cores; load "
          f"{os.getloadavg()[0]:.1f}")
    print(f"auto's candidates here: {', '.join(p.candidates(device)) or '(none: static choice)'}; measured: "
          f"{', '.join(candidates)}")
    with tempfile.TemporaryDirectory(prefix="precision-bench-") as tmp:
        images, records = os.path.join(tmp, "images"), os.path.join(tmp, "records")
        synthesize_image_folder(images, 3, max(2 * args.batch // 3 + 2, 24), args.image_size, seed=0, shape="flowers")
        prepare_tfrecords(images, records, image_size=args.image_size, num_shards=2, validation_fraction=0.2, seed=0)
        cfg = config_lib.from_dict(apply_overrides({}, [
            "data.source=tfrecord", f"data.path={records}", f"model.name={args.model}",
            f"training.per_replica_batch_size={args.batch}", "topology.strategy=one_device",
            "topology.worker.replica_count=0", f"output.base_dir={tmp}/out"]))
        plan = make_plan(cfg, 1)
        rates: dict[str, list[float]] = {c: [] for c in candidates}
        walls: dict[str, list[float]] = {c: [] for c in candidates}
        for r in range(args.rounds):
            for policy in (candidates if r % 2 == 0 else tuple(reversed(candidates))):
                started = time.monotonic()
                rate = train.measure_precision(cfg, plan, policy)
                walls[policy].append(time.monotonic() - started)
                rates[policy].append(rate)
                print(f"round {r + 1} {policy:<15} {rate:8.1f} ex/s  (the call: {walls[policy][-1]:.1f} s)", flush=True)
        p.apply(p.choose("float32", device))
    best = {c: max(v) for c, v in rates.items()}
    print(f"\n{args.model} {args.image_size}x{args.image_size}, batch {args.batch}; "
          f"{a.WARMUP_STEPS} warm-up + {a.MEASURE_STEPS} timed steps per candidate")
    print("| policy | step alone ex/s (best of rounds) | all rounds | measuring one candidate, s (median) |")
    print("|---|---:|---|---:|")
    for c in candidates:
        print(f"| {c} | {best[c]:.0f} | {' / '.join(f'{x:.0f}' for x in rates[c])} | "
              f"{statistics.median(walls[c]):.1f} |")
    if len(candidates) > 1:
        kept = a.pick(best)
        print(f"decide_auto would keep: {kept} ({a.measured_reason(kept, best, device, 0.0).split(' (')[0]})")
    cost = sum(statistics.median(walls[c]) for c in candidates)
    prior = p.prior_for(device)
    print(f"this CPU's kind ({p.kind_text(device)}): " + (f"{prior.name}, {p.SHORT[prior.policy]} faster "
          f"({prior.seen})" if prior else "no figures in trainers/precision_priors.yaml"))
    n = len(p.candidates(device))
    if n > 1:
        doubt = a.PRIOR_DOUBT if prior else a.UNKNOWN_DOUBT
        print(f"measuring cost on a run's first start: {cost:.1f} s for {len(candidates)} candidate(s) (a later run "
              f"reads the cache: 0 s); auto measures here from "
              f"{a.measuring_steps(n) / (doubt * precision_priors.spread()):.0f} steps, shorter runs take "
              f"{p.SHORT[p.prior_choice(device).policy]} unmeasured")
    else:
        print(f"measuring cost on a run's first start: {cost:.1f} s; auto never measures here (one candidate)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
