"""The seed lab's reference trainer vs this project's trainer, side by side on the same JPEGs and machine.

    python benchmarks/reference_vs_ours.py                # 3,670 flowers-shaped JPEGs, 2 epochs, 2 rounds
    python benchmarks/reference_vs_ours.py --quick        # 500 JPEGs, 1 round: try it in ~2 minutes
    python benchmarks/reference_vs_ours.py --arms reference,ours,ours-fp32 --rounds 2

Arms (each run in its own process, so thread pools and precision policies never leak between them; the
arms alternate within each round and the order flips every round, so a drift in machine load hits both):

* ``reference``  the Vertex AI distributed-training lab's trainer as the lab writes it:
  ``keras.utils.image_dataset_from_directory`` (validation_split 0.2, seed 123, 180x180, batch 32) ->
  ``cache().shuffle(1000).prefetch(AUTOTUNE)``, the lab's Sequential CNN (Resizing, Rescaling, 3 x
  Conv/MaxPool, Dense 128, Dense softmax), Adam, ``model.fit(validation_data=...)``, then a SavedModel
  export. Run without ``MirroredStrategy`` (the lab wraps it in one; on one CPU that only adds overhead,
  so leaving it out is the reference's best case).
* ``ours``       this project with the defaults a user gets (``training.precision: auto``, default
  threads, ``data.encoding: raw``, deterministic): ``jobs.steps.calls.prepare`` (JPEG folder -> TFRecords) then
  ``trainers.train.train_and_evaluate`` (custom loop, export), one device, batch 32, Adam, shuffle 1000.
* ``ours-fp32``  the same with ``training.precision=float32``: what a CPU without bf16 gets (a proxy: a real
  such CPU may also lack AVX-512).
* ``ours-bf16``  the same with ``training.precision=bfloat16`` (issue 42: ``auto`` against both explicit choices).
  ``ours``' line says what ``auto`` decided and from what (the CPU kind's figures, a measurement, or a decision
  measured earlier); its cache is under the work dir (``XDG_CACHE_HOME``), so round 1 is a first run here.
* ``ours-jpeg``  ``ours`` with ``data.encoding=jpeg`` (shards ~10x smaller, decoded while training).

Printed per arm: examples/s of each epoch (training only, validation excluded), wall time from JPEG
folder to exported model (ours includes the prepare step; the reference includes its per-epoch validation
as the lab runs it), validation accuracy (each on its own 20% split), achieved GFLOP/s of the best epoch
and its share of the machine's peak (``benchmarks/machine.py`` says how both are computed), and the ratio
of each arm's best epoch to the reference's best epoch. Figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
FLOWERS_PER_CLASS = 734  # 5 x 734 = 3,670, the size of the real flower_photos set
IMAGE_SIZE, BATCH = 180, 32
ARM_SETS = {"ours": [], "ours-fp32": ["training.precision=float32"], "ours-bf16": ["training.precision=bfloat16"],
            "ours-jpeg": ["data.encoding=jpeg"]}


# ------------------------------------------------------------------------------------------------ arms
def run_reference(images: str, out: str, epochs: int) -> dict:
    t0 = time.monotonic()
    import keras
    import tensorflow as tf
    from keras import layers

    train_ds = keras.utils.image_dataset_from_directory(images, validation_split=0.2, subset="training", seed=123,
                                                        image_size=(IMAGE_SIZE, IMAGE_SIZE), batch_size=BATCH)
    val_ds = keras.utils.image_dataset_from_directory(images, validation_split=0.2, subset="validation", seed=123,
                                                      image_size=(IMAGE_SIZE, IMAGE_SIZE), batch_size=BATCH)
    n_train, classes = len(train_ds.file_paths), len(train_ds.class_names)
    train_ds = train_ds.cache().shuffle(1000).prefetch(buffer_size=tf.data.AUTOTUNE)
    val_ds = val_ds.cache().prefetch(buffer_size=tf.data.AUTOTUNE)
    model = keras.Sequential([
        keras.Input(shape=(IMAGE_SIZE, IMAGE_SIZE, 3)),
        layers.Resizing(IMAGE_SIZE, IMAGE_SIZE),
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(16, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
        layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(classes, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(), loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy"])

    class EpochTimer(keras.callbacks.Callback):
        """Training time of each epoch: epoch start to its last training batch (validation excluded)."""
        def __init__(self):
            super().__init__()
            self.rates, self.begin, self.last = [], 0.0, 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.begin = time.monotonic()

        def on_train_batch_end(self, batch, logs=None):
            self.last = time.monotonic()

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(n_train / max(1e-9, self.last - self.begin))

    timer = EpochTimer()
    history = model.fit(train_ds, validation_data=val_ds, epochs=epochs, callbacks=[timer], verbose=0)
    model.export(out, verbose=False)
    wall = time.monotonic() - t0
    from machine import training_flops_per_example

    return {"epoch_rates": timer.rates, "wall_s": wall, "val_accuracy": float(history.history["val_accuracy"][-1]),
            "policy": "float32", "flops": training_flops_per_example(model)[1], "train_examples": n_train}


def run_ours(images: str, out: str, epochs: int, overrides: list[str]) -> dict:
    t0 = time.monotonic()
    from jobs.steps import calls as steps
    from jobfile import config as config_lib
    from jobfile.config_files import apply_overrides

    doc = {
        "name": "bench-ours",
        "data": {"source": "images", "path": images, "image_size": IMAGE_SIZE, "num_shards": 8,
                 "validation_fraction": 0.2, "shuffle_buffer": 1000},
        "model": {"name": "small_cnn"},
        "training": {"epochs": epochs, "per_replica_batch_size": BATCH, "optimizer": "adam", "learning_rate": 0.001,
                     "log_every_steps": 1000},
        "checkpoint": {"every_steps": 0},
        "topology": {"strategy": "one_device", "chief": {"replica_count": 1, "machine_type": "n1-standard-4"}},
        "output": {"base_dir": out},
    }
    cfg = config_lib.from_dict(apply_overrides(doc, overrides))
    t_prep = time.monotonic()
    data_dir, manifest = steps.prepare(cfg)
    t_prep = time.monotonic() - t_prep
    from trainers.train import train_and_evaluate

    result = train_and_evaluate(cfg, env={})
    wall = time.monotonic() - t0
    from trainers.export import evaluate_export
    from trainers.models import build_model
    from machine import training_flops_per_example

    accuracy = evaluate_export(result["model_dir"], data_dir)["accuracy"]
    flops = training_flops_per_example(build_model("small_cnn", IMAGE_SIZE, len(manifest["classes"])))[1]
    return {"epoch_rates": result["epoch_examples_per_second"], "wall_s": wall, "prepare_s": t_prep,
            "val_accuracy": accuracy, "policy": result["precision"], "flops": flops,
            "precision_reason": result.get("precision_reason", ""),
            "measuring_s": (result.get("precision_auto") or {}).get("seconds"),
            "train_examples": manifest["num_examples"]["train"]}


# ------------------------------------------------------------------------------------------------ driver
def child(args) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.role == "reference":
        res = run_reference(args.images, args.out, args.epochs)
    else:
        res = run_ours(args.images, args.out, args.epochs, ARM_SETS[args.role] + list(args.set or []))
    Path(args.result).write_text(json.dumps(res))
    return 0


def spawn(role: str, images: str, work: Path, tag: str, epochs: int, extra: list[str]) -> dict:
    result = work / f"{tag}.json"
    shutil.rmtree(work / tag, ignore_errors=True)  # a kept checkpoint (--workdir) would resume, not train
    cmd = [sys.executable, __file__, "--role", role, "--images", images, "--out", str(work / tag),
           "--epochs", str(epochs), "--result", str(result)] + [f"--set={s}" for s in extra]
    # precision: auto's cache in the work dir, not the user's: round 1 of ``ours`` is a first run on this machine
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "XDG_CACHE_HOME": str(work / "cache")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{role} failed ({proc.returncode}):\n" + "\n".join((proc.stdout + proc.stderr).splitlines()[-25:]))
    return json.loads(result.read_text())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 images per class, 1 round")
    parser.add_argument("--per-class", type=int, default=0, help=f"JPEGs per class (default {FLOWERS_PER_CLASS})")
    parser.add_argument("--rounds", type=int, default=0, help="alternating rounds (default 2; --quick 1)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--arms", default="reference,ours", help="comma list: reference, " + ", ".join(ARM_SETS))
    parser.add_argument("--set", action="append", help="extra config override for every 'ours' arm")
    parser.add_argument("--workdir", help="keep images (reused) and outputs here (default: a temp dir)")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--images", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        return child(args)

    import machine

    per_class = args.per_class or (100 if args.quick else FLOWERS_PER_CLASS)
    rounds = args.rounds or (1 if args.quick else 2)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a != "reference" and a not in ARM_SETS]
    if unknown:
        parser.error(f"unknown arm(s) {unknown}; choose from reference, {', '.join(ARM_SETS)}")
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="ref-vs-ours-")
    work = Path(args.workdir or tmp.name).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        from trainers.synthetic import synthesize_image_folder

        images = str(work / f"flowers-{per_class}")
        t = time.monotonic()
        synthesize_image_folder(images, 5, per_class, IMAGE_SIZE, seed=0, shape="flowers")
        mb = sum(p.stat().st_size for p in Path(images).rglob("*.jpg")) / 2**20
        info, peak = machine.cpuinfo(), machine.peak()
        print(f"machine: {machine.describe(info)}; {peak['cores']} cores")
        print(f"peak: {peak['how']} = {peak['fp32_gflops']:.0f} GFLOP/s float32"
              + (f", {peak['bf16_gflops']:.0f} bf16" if peak["bf16_gflops"] else "") + f" ({peak['fma_source']})")
        print(f"data: {5 * per_class} flowers-shaped JPEGs (240-360 x 320-500 px, {mb:.0f} MB) in 5 classes "
              f"({time.monotonic() - t:.0f} s to generate or reuse); {IMAGE_SIZE}x{IMAGE_SIZE}, batch {BATCH}, "
              f"{args.epochs} epochs, {rounds} round(s), arms alternate\n", flush=True)
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        for r in range(rounds):
            order = arms if r % 2 == 0 else list(reversed(arms))
            for arm in order:
                res = spawn(arm, images, work, f"{arm}-{r}", args.epochs, list(args.set or []) if arm != "reference" else [])
                runs[arm].append(res)
                rates = " ".join(f"{x:.0f}" for x in res["epoch_rates"])
                print(f"round {r + 1} {arm:<10} epochs [{rates}] ex/s  wall {res['wall_s']:.1f} s  "
                      f"val acc {res['val_accuracy']:.3f}  ({res['policy']})", flush=True)
                if arm == "ours":
                    print(f"    precision: {res.get('precision_reason')}" + (
                        f"; measuring cost {res['measuring_s']:.1f} s of the {res['wall_s']:.0f} s wall"
                        if res.get("measuring_s") else ""), flush=True)
        _table(runs, arms, peak)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


def _table(runs: dict, arms: list[str], peak: dict) -> None:
    ref_best = max(x for r in runs.get("reference", []) for x in r["epoch_rates"]) if "reference" in runs else None
    print(f"\n{'arm':<10} {'best epoch ex/s':>15} {'all epochs':>22} {'wall s':>12} {'val acc':>8} "
          f"{'GFLOP/s':>8} {'of peak':>8} {'vs ref':>7}")
    for arm in arms:
        rs = runs[arm]
        best = max(x for r in rs for x in r["epoch_rates"])
        flops = rs[0]["flops"]
        gflops = best * flops / 1e9
        top = peak["bf16_gflops"] if "bfloat16" in rs[0]["policy"] and peak["bf16_gflops"] else peak["fp32_gflops"]
        epochs = "/".join(f"{x:.0f}" for r in rs for x in r["epoch_rates"])
        walls = "/".join(f"{r['wall_s']:.0f}" for r in rs)
        acc = statistics.mean(r["val_accuracy"] for r in rs)
        ratio = f"{best / ref_best:.2f}x" if ref_best else "-"
        print(f"{arm:<10} {best:>15.0f} {epochs:>22} {walls:>12} {acc:>8.3f} {gflops:>8.0f} {gflops / top:>8.0%} {ratio:>7}")
    extra = [f"{arm}: prepare {statistics.mean(r['prepare_s'] for r in runs[arm]):.1f} s of the wall time"
             for arm in arms if arm != "reference"]
    print(f"\nFLOPs per training example: {runs[arms[0]][0]['flops'] / 1e6:.0f} M (layer count, see benchmarks/machine.py); "
          "'of peak' uses the bf16 peak for bf16 arms. " + "; ".join(extra))


if __name__ == "__main__":
    sys.exit(main())
