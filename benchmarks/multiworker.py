"""Multi-replica figures: one device vs MirroredStrategy (2 logical CPUs) vs 2-worker MWMS vs parameter-server
training with 1 and 2 workers, measured here, then a PROJECTION for the cloud presets (all-reduce bytes per
step vs step time at published GPU rates; for the parameter-server preset, variable traffic per worker and per
parameter server vs a CPU worker's step).

    python benchmarks/multiworker.py [--per-class 120] [--image-size 96] [--epochs 3] [--rounds 2]
                                     [--arms one_device,mirrored,multi_worker,ps1,ps2]
    python benchmarks/multiworker.py --projection-only

Measured (the real trainer, per-replica batch 32, the seed CNN, precision auto, best epoch; MWMS and
parameter-server jobs run as processes on loopback through the local launcher, exactly as
``pipelines/run.py`` runs them: ``psN`` = chief + N workers + 1 parameter server, each step one worker's
batch of 32, asynchronous). On a 2-core machine the replicas share the same 2 cores, so more replicas cannot
be faster: these runs prove the multi-replica code paths (sharding, all-reduce, coordinator, checkpoints)
and show their overhead here, not speed-up.

Projection (printed as such; nothing is measured): per step each replica computes ``flops/example x
per-replica batch`` and the all-reduce moves the float32 gradients, ring all-reduce sending
``2 (N-1)/N x gradient bytes`` per replica. Step compute time = FLOPs / (GPU peak x utilisation); the
all-reduce time = bytes / link bandwidth. Sources: NVIDIA T4 datasheet (65 TFLOP/s fp16 tensor core,
8.1 fp32); GCP VPC docs (egress of an N1 VM: 2 Gbit/s per vCPU, so 16 Gbit/s for n1-standard-8); T4s
in one N1 VM talk over PCIe 3.0 x16 (~12 GB/s measured by NCCL tests is typical, we assume 10 GB/s bus
bandwidth). Utilisation: 12% of the T4's fp16 peak, derived from NVIDIA's published ResNet-50 v1.5
TensorFlow figure for one T4 with mixed precision, batch 32: 972 images/s inference (NVIDIA
DeepLearningExamples, TensorFlow/Classification/ConvNets/resnet50v1.5/README.md) x 8.2 GFLOP per image
= 8 TFLOP/s of 65. Training at batch 32 is unlikely to do better, so compute times are if anything
optimistic, and the communication share pessimistic only by as much.

Parameter-server projection (the ``parameter-server`` preset: CPU workers): a worker's step = its compute
(training FLOPs x batch at an n1-standard-8's float32 peak -- 4 physical Skylake cores x 16 lanes x 2 FMA x 2
x 2.0 GHz = 512 GFLOP/s -- times the fraction of peak the one-device run reached HERE) plus pulling every
variable and pushing every gradient through its 2 GB/s NIC, with no overlap (pessimistic); a parameter server
serves at most 2 GB/s / (2 x the bytes it holds) steps/s, variables placed whole and round-robin as TF does
without a partitioner. Compared with the same machines under MWMS, where the chief computes too. Stragglers
and preempted workers, where asynchronous training gains most, are not modelled.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

T4_FP16_TFLOPS, T4_FP32_TFLOPS = 65.0, 8.1
ASSUMED_UTILISATION = 0.12  # see the module doc: NVIDIA's T4 ResNet-50 AMP figure
PRESET_LINKS = {  # preset -> (link between replicas, bytes/s)
    "gpu-1x4": ("PCIe 3.0 inside one n1-standard-16 (assumed 10 GB/s NCCL bus bandwidth)", 10e9),
    "multiworker": ("VM network, n1-standard-8 egress 16 Gbit/s (GCP: 2 Gbit/s per vCPU)", 16e9 / 8),
}


ARMS = {"one_device": ("one_device", 0), "mirrored": ("mirrored", 0), "multi_worker": ("multi_worker", 1),
        "ps1": ("parameter_server", 1), "ps2": ("parameter_server", 2)}  # arm -> (strategy, workers)


def _doc(data: str, out: str, epochs: int, strategy: str, workers: int = 0) -> dict:
    doc = {"name": "bench-mw", "data": {"source": "tfrecord", "path": data, "shuffle_buffer": 1000},
           "training": {"epochs": epochs, "per_replica_batch_size": 32, "log_every_steps": 1000},
           "checkpoint": {"every_steps": 0}, "output": {"base_dir": out},
           "topology": {"strategy": strategy, "chief": {"replica_count": 1, "machine_type": "n1-standard-4"}}}
    if strategy == "mirrored":
        doc["topology"]["chief"]["accelerator_count"] = 2  # locally: 2 logical CPU devices
    if workers:
        doc["topology"]["worker"] = {"replica_count": workers, "machine_type": "n1-standard-4"}
    if strategy == "parameter_server":
        doc["topology"]["parameter_server"] = {"replica_count": 1, "machine_type": "n1-highmem-8"}
    return doc


def measure(kind: str, data: str, out: str, epochs: int) -> dict:
    from jobfile import config as config_lib

    strategy, workers = ARMS[kind]
    cfg = config_lib.from_dict(_doc(data, out, epochs, strategy, workers))
    if workers:
        from jobs.run_records import records
        from jobs.steps import calls as steps

        lines: list[str] = []
        result = steps.run_local(cfg, timeout_s=900, log=lines.append)
        if result.returncode != 0:
            raise RuntimeError("\n".join(lines[-20:]))
        metrics = records.read_metrics(cfg)
    else:
        cmd = [sys.executable, __file__, "--child", json.dumps(cfg.to_dict()), str(Path(out) / "result.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        metrics = json.loads((Path(out) / "result.json").read_text())
    return {"rates": metrics["epoch_examples_per_second"], "replicas": metrics["replicas"],
            "global_batch": metrics["global_batch_size"], "strategy": metrics["strategy"],
            "workers": metrics.get("workers")}


def projection() -> None:
    from machine import training_flops_per_example
    from jobfile import config as config_lib
    from trainers.models import build_model

    print("\nPROJECTION for the cloud presets (computed, not measured; see the module doc for sources)")
    print(f"{'preset':<12} {'model':<13} {'replicas':>8} {'grad MB':>8} {'ring MB/replica':>16} {'GFLOP/step':>11} "
          f"{'compute ms':>11} {'all-reduce ms':>14} {'comm/compute':>13}")
    for preset, (link, bandwidth) in PRESET_LINKS.items():
        cfg = config_lib.load(preset)
        model = build_model(cfg.model.name, cfg.data.image_size, 5)
        params = sum(int(w.numpy().size) for w in model.trainable_weights)
        grad_bytes = params * 4  # float32 gradients (variables stay float32 under mixed precision)
        pools = [cfg.topology.chief] + ([cfg.topology.worker] * cfg.topology.worker.replica_count)
        replicas = sum(max(1, p.accelerator_count) for p in pools)
        ring = 2 * (replicas - 1) / replicas * grad_bytes
        flops = training_flops_per_example(model)[1] * cfg.training.per_replica_batch_size
        compute_s = flops / (T4_FP16_TFLOPS * 1e12 * ASSUMED_UTILISATION)
        comm_s = ring / bandwidth
        print(f"{preset:<12} {cfg.model.name:<13} {replicas:>8} {grad_bytes / 1e6:>8.1f} {ring / 1e6:>16.1f} "
              f"{flops / 1e9:>11.1f} {compute_s * 1e3:>11.1f} {comm_s * 1e3:>14.1f} {comm_s / compute_s:>12.2f}x")
        print(f"{'':<12} link: {link}; T4 {T4_FP16_TFLOPS:.0f} TFLOP/s fp16 x {ASSUMED_UTILISATION:.0%} (from NVIDIA's T4 ResNet-50 figure)")


# n1-standard-8 (the parameter-server preset's workers): 8 vCPUs = 4 physical cores of an Intel Xeon Scalable
# (Skylake, N1's newest platform; GCP CPU platforms page: 2.0 GHz base), AVX-512 with 2 FMA units.
N1_STANDARD_8_FP32_GFLOPS = 4 * 16 * 2 * 2 * 2.0
N1_EGRESS_BYTES_S = 16e9 / 8  # 8 vCPUs x 2 Gbit/s (GCP VPC egress per vCPU), n1-standard-8 and n1-highmem-8


def _utilisation_here(examples_per_s: float, image_size: int) -> float:
    """Fraction of this CPU's float32 peak that the one-device run reached (the seed CNN at ``image_size``)."""
    from machine import peak, training_flops_per_example
    from trainers.models import build_model

    flops = training_flops_per_example(build_model("small_cnn", image_size, 5))[1]
    used = examples_per_s * flops / (peak()["fp32_gflops"] * 1e9)
    print(f"one device here: {used:.0%} of this CPU's float32 peak ({peak()['how']})")
    return used


def ps_projection(utilisation: float | None = None) -> None:
    """The parameter-server preset: per step each worker pulls every variable and pushes every gradient (float32,
    whole variables placed round-robin: the parameter server holding the largest variable is the hottest), vs
    the same 5 machines under MultiWorkerMirroredStrategy (ring all-reduce). Compute time from the CPU's peak
    at ``utilisation`` (default: measured here, the one-device step of the seed CNN vs this CPU's peak)."""
    from machine import training_flops_per_example
    from jobfile import config as config_lib
    from trainers.models import build_model

    cfg = config_lib.load("parameter-server")
    model = build_model(cfg.model.name, cfg.data.image_size, 5)
    sizes = [int(w.numpy().size) * 4 for w in model.trainable_weights]
    ps_count, workers, batch = cfg.topology.parameter_server.replica_count, cfg.topology.worker.replica_count, \
        cfg.training.per_replica_batch_size
    per_ps = [sum(sizes[i::ps_count]) for i in range(ps_count)]  # round-robin in creation order
    total = sum(sizes)
    if utilisation is None:
        utilisation, source = UTILISATION_HERE
    else:
        source = "given"
    flops = training_flops_per_example(model)[1] * batch
    compute_s = flops / (N1_STANDARD_8_FP32_GFLOPS * 1e9 * utilisation)
    worker_comm_s = 2 * total / N1_EGRESS_BYTES_S  # pull variables + push gradients through the worker's NIC
    worker_rate = 1 / (compute_s + worker_comm_s)  # steps/s of one worker, no overlap (pessimistic)
    hot_rate = N1_EGRESS_BYTES_S / (2 * max(per_ps))  # steps/s the hottest parameter server can serve, all workers
    ps_steps = min(workers * worker_rate, hot_rate)
    n = workers + 1  # MWMS: the chief computes too
    ring_s = 2 * (n - 1) / n * total / N1_EGRESS_BYTES_S
    mwms_steps = 1 / (compute_s + ring_s)  # synchronous: n replicas per step
    print(f"\nPROJECTION for the parameter-server preset (computed, not measured): {cfg.model.name} "
          f"{cfg.data.image_size}x{cfg.data.image_size}, {total / 1e6:.1f} MB of float32 variables, batch {batch}/step/worker")
    print(f"  worker n1-standard-8: {flops / 1e9:.1f} GFLOP/step at {N1_STANDARD_8_FP32_GFLOPS:.0f} GFLOP/s x "
          f"{utilisation:.0%} ({source}) = {compute_s * 1e3:.0f} ms compute + {worker_comm_s * 1e3:.0f} ms pulling variables and "
          f"pushing gradients at {N1_EGRESS_BYTES_S / 1e9:.0f} GB/s -> {worker_rate:.2f} steps/s")
    print(f"  {ps_count} parameter servers (n1-highmem-8), whole variables round-robin: "
          f"{', '.join(f'{b / 1e6:.1f} MB' for b in per_ps)}; the hottest serves at most {hot_rate:.1f} steps/s")
    print(f"  {workers} workers: {ps_steps:.2f} steps/s = {ps_steps * batch:.0f} examples/s "
          f"({'worker-bound' if workers * worker_rate < hot_rate else 'parameter-server-bound'})")
    print(f"  same {n} machines under MultiWorkerMirroredStrategy (ring all-reduce {ring_s * 1e3:.0f} ms/step): "
          f"{mwms_steps * n * batch:.0f} examples/s -> parameter servers {ps_steps * batch / (mwms_steps * n * batch):.2f}x")


#: fraction of a CPU's float32 peak a training step reaches: measured when the one_device arm runs (main)
UTILISATION_HERE = (0.35, "assumed: run the one_device arm to measure it here")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-class", type=int, default=120)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--projection-only", action="store_true")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    parser.add_argument("--rounds", type=int, default=2,
                        help="run every arm this many times, alternating the order; each arm's best epoch counts")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.child:
        from jobfile import config as config_lib
        from trainers.train import train_and_evaluate

        res = train_and_evaluate(config_lib.from_dict(json.loads(args.child[0])), env={})
        Path(args.child[1]).write_text(json.dumps(res))
        return 0
    if not args.projection_only:
        with tempfile.TemporaryDirectory(prefix="mw-") as tmp:
            from trainers.prepare import prepare_tfrecords
            from trainers.synthetic import synthesize_image_folder

            images, data = f"{tmp}/images", f"{tmp}/records"
            synthesize_image_folder(images, 5, args.per_class, args.image_size, seed=0)
            m = prepare_tfrecords(images, data, args.image_size, num_shards=8, validation_fraction=0.0)
            print(f"{m['num_examples']['train']} examples {args.image_size}x{args.image_size}, per-replica batch 32, "
                  f"{args.epochs} epochs, {os.cpu_count()} CPUs; figure: best epoch, global examples/s")
            rows = {}
            arms = [a for a in args.arms.split(",") if a]
            for kind in arms:
                if kind not in ARMS:
                    parser.error(f"unknown arm {kind!r}; arms: {', '.join(ARMS)}")
            for r in range(max(1, args.rounds)):  # alternating order: a drift in load hits every arm alike
                for kind in (arms if r % 2 == 0 else arms[::-1]):
                    res = measure(kind, data, f"{tmp}/{kind}-{r}", args.epochs)
                    if kind in rows:
                        res["rates"] = rows[kind]["rates"] + res["rates"]
                    rows[kind] = res
                    workers = f" workers {res['workers']}" if res.get("workers") else ""
                    print(f"round {r + 1} {kind:<13} {res['strategy']:<28} replicas {res['replicas']}{workers} "
                          f"global batch {res['global_batch']:>3}  epochs {' '.join(f'{x:.0f}' for x in res['rates'])}"
                          f"  best {max(res['rates']):.0f} ex/s", flush=True)
            if "one_device" in rows:
                base = max(rows["one_device"]["rates"])
                global UTILISATION_HERE
                UTILISATION_HERE = (_utilisation_here(base, args.image_size), "measured here, one device")
                for kind, res in rows.items():
                    if kind != "one_device":
                        print(f"{kind}: {max(res['rates']) / base:.2f}x one device (same {os.cpu_count()} cores "
                              "shared by every replica)")
            if "ps1" in rows and "ps2" in rows:
                print(f"parameter servers, 1 -> 2 workers: {max(rows['ps2']['rates']) / max(rows['ps1']['rates']):.2f}x "
                      f"(same {os.cpu_count()} cores)")
    projection()
    ps_projection()
    return 0


if __name__ == "__main__":
    sys.exit(main())
