"""Multi-replica figures: one device vs MirroredStrategy (2 logical CPUs) vs 2-worker MWMS, measured here,
then a PROJECTION for the cloud presets (all-reduce bytes per step vs step time at published GPU rates).

    python benchmarks/multiworker.py [--per-class 120] [--image-size 96] [--epochs 3]
    python benchmarks/multiworker.py --projection-only

Measured (the real trainer, per-replica batch 32, the seed CNN, precision auto, best epoch; MWMS runs as
two processes on loopback through the local launcher, exactly as ``pipelines/run.py`` runs the local preset).
On a 2-core machine the replicas share the same 2 cores, so more replicas cannot be faster: these runs
prove the multi-replica code paths (sharding, all-reduce, checkpoints), not speed-up.

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


def _doc(data: str, out: str, epochs: int, strategy: str) -> dict:
    doc = {"name": "bench-mw", "data": {"source": "tfrecord", "path": data, "shuffle_buffer": 1000},
           "training": {"epochs": epochs, "per_replica_batch_size": 32, "log_every_steps": 1000},
           "checkpoint": {"every_steps": 0}, "output": {"base_dir": out},
           "topology": {"strategy": strategy, "chief": {"replica_count": 1, "machine_type": "n1-standard-4"}}}
    if strategy == "mirrored":
        doc["topology"]["chief"]["accelerator_count"] = 2  # locally: 2 logical CPU devices
    if strategy == "multi_worker":
        doc["topology"]["worker"] = {"replica_count": 1, "machine_type": "n1-standard-4"}
    return doc


def measure(kind: str, data: str, out: str, epochs: int) -> dict:
    from trainers import config as config_lib

    cfg = config_lib.from_dict(_doc(data, out, epochs, kind))
    if kind == "multi_worker":
        from jobs import stages

        lines: list[str] = []
        result = stages.run_local(cfg, timeout_s=900, log=lines.append)
        if result.returncode != 0:
            raise RuntimeError("\n".join(lines[-20:]))
        metrics = stages.read_metrics(cfg)
    else:
        cmd = [sys.executable, __file__, "--child", json.dumps(cfg.to_dict()), str(Path(out) / "result.json")]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                              env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        metrics = json.loads((Path(out) / "result.json").read_text())
    return {"rates": metrics["epoch_examples_per_second"], "replicas": metrics["replicas"],
            "global_batch": metrics["global_batch_size"], "strategy": metrics["strategy"]}


def projection() -> None:
    from machine import training_flops_per_example
    from trainers import config as config_lib
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-class", type=int, default=120)
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--projection-only", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.child:
        from trainers import config as config_lib
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
            rows = []
            for kind in ("one_device", "mirrored", "multi_worker"):
                res = measure(kind, data, f"{tmp}/{kind}", args.epochs)
                rows.append((kind, res))
                print(f"{kind:<13} {res['strategy']:<32} replicas {res['replicas']} global batch {res['global_batch']:>3}  "
                      f"epochs {' '.join(f'{x:.0f}' for x in res['rates'])}  best {max(res['rates']):.0f} ex/s", flush=True)
            base = max(rows[0][1]["rates"])
            for kind, res in rows[1:]:
                print(f"{kind}: {max(res['rates']) / base:.2f}x one device (same 2 cores shared by every replica)")
    projection()
    return 0


if __name__ == "__main__":
    sys.exit(main())
