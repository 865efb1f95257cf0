"""Thread and oneDNN settings for the trainer on this CPU: which one wins, measured side by side.

    python benchmarks/threads.py [--per-class 200] [--epochs 3] [--rounds 2] [--only default,intra2-inter1]

Every setting runs the real trainer (``trainers.train.train_and_evaluate``, one device, batch 32, the
seed CNN at 180x180, the defaults otherwise) in its own process on the same prepared TFRecords; the
settings alternate within a round and the order flips every round. The figure is the best epoch's
examples/s (the first epoch also pays for tracing). Only settings TensorFlow 2.21 reads are tried: the
names were checked in its shared libraries (``strings``): ``TF_NUM_INTRAOP_THREADS``/
``TF_NUM_INTEROP_THREADS`` (= ``training.intra_op_threads``/``inter_op_threads``), ``TF_ENABLE_ONEDNN_OPTS``,
``TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD``, ``TF_ONEDNN_USE_SYSTEM_ALLOCATOR``, and oneDNN's own
``ONEDNN_DEFAULT_FPMATH_MODE`` (``TF_ONEDNN_ASSOC`` does not exist in this build).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: name -> (config overrides, environment)
SETTINGS = {
    "default": ([], {}),
    "intra2-inter1": (["training.intra_op_threads=2", "training.inter_op_threads=1"], {}),
    "intra2-inter2": (["training.intra_op_threads=2", "training.inter_op_threads=2"], {}),
    "intra1-inter2": (["training.intra_op_threads=1", "training.inter_op_threads=2"], {}),
    "inter1-caller": (["training.inter_op_threads=1"], {"TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD": "1"}),
    "nondeterministic": (["training.deterministic=false"], {}),
    "caller-thread": ([], {"TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD": "1"}),
    "system-allocator": ([], {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1"}),
    "onednn-off": ([], {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    "fp32": (["training.precision=float32"], {}),
    "fp32-fpmath-bf16": (["training.precision=float32"], {"ONEDNN_DEFAULT_FPMATH_MODE": "BF16"}),
}


def child(data: str, out: str, epochs: int, overrides: list[str], result: str) -> None:
    from jobfile import config as config_lib
    from jobfile.config_files import apply_overrides
    from trainers.train import train_and_evaluate

    doc = {"name": "bench-threads", "data": {"source": "tfrecord", "path": data, "image_size": 180, "shuffle_buffer": 1000},
           "training": {"epochs": epochs, "per_replica_batch_size": 32, "log_every_steps": 1000},
           "checkpoint": {"every_steps": 0},
           "topology": {"strategy": "one_device", "chief": {"replica_count": 1, "machine_type": "n1-standard-4"}},
           "output": {"base_dir": out}}
    cfg = config_lib.from_dict(apply_overrides(doc, overrides))
    res = train_and_evaluate(cfg, env={})
    Path(result).write_text(json.dumps({"rates": res["epoch_examples_per_second"], "policy": res["precision"]}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-class", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", help="comma list of settings: " + ", ".join(SETTINGS))
    parser.add_argument("--workdir")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.child:
        data, out, epochs, result = args.child
        child(data, out, int(epochs), args.set, result)
        return 0
    names = [n for n in (args.only.split(",") if args.only else SETTINGS)]
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="threads-")
    work = Path(args.workdir or tmp.name).resolve()
    try:
        from trainers.prepare import prepare_tfrecords
        from trainers.synthetic import synthesize_image_folder

        images, data = str(work / f"flowers-{args.per_class}"), str(work / f"records-{args.per_class}")
        synthesize_image_folder(images, 5, args.per_class, 180, seed=0, shape="flowers")
        manifest = prepare_tfrecords(images, data, 180, num_shards=8, validation_fraction=0.0)
        print(f"{manifest['num_examples']['train']} train examples, 180x180, batch 32, {args.epochs} epochs, "
              f"{args.rounds} rounds, {os.cpu_count()} CPUs; figure: best epoch examples/s", flush=True)
        best: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            for name in (names if r % 2 == 0 else list(reversed(names))):
                overrides, env = SETTINGS[name]
                result = work / f"{name}-{r}.json"
                shutil.rmtree(work / f"{name}-{r}", ignore_errors=True)  # a kept checkpoint would resume
                cmd = [sys.executable, __file__, "--child", data, str(work / f"{name}-{r}"), str(args.epochs),
                       str(result)] + [f"--set={o}" for o in overrides]
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                                      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env})
                if proc.returncode != 0:
                    print(f"{name}: failed\n" + "\n".join(proc.stderr.splitlines()[-8:]))
                    continue
                res = json.loads(result.read_text())
                best[name].append(max(res["rates"]))
                print(f"round {r + 1} {name:<18} epochs {' '.join(f'{x:.0f}' for x in res['rates'])} ({res['policy']})",
                      flush=True)
        base = max(best.get("default") or [1.0])
        print(f"\n{'setting':<18} {'best ex/s':>10} {'vs default':>11}")
        for name in names:
            if best[name]:
                print(f"{name:<18} {max(best[name]):>10.0f} {max(best[name]) / base:>10.2f}x")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
