"""The default job under both local runners, side by side: ``--runner process`` against ``--runner docker``
on an engine with ``overlay2`` storage and one with ``vfs``.

    python benchmarks/runners.py                         # overlay2 and vfs, 2 rounds each
    python benchmarks/runners.py --storage overlay2 --rounds 3

Needs root, dockerd and debootstrap (as the engine tests: ``.ci/run`` installs them). For each storage
driver it starts a private engine (benchmarks/engine.py, as the tests do) and a registry, builds the trainer image
into the first engine exactly as the tests do (debootstrapped base, wheels from the cache; minutes the first time)
and moves it to the others with ``docker save | docker load``. Each round then runs, alternating so that a
drift of the machine hits both alike, ``python pipelines/run.py --set output.base_dir=<fresh>`` and the same
with ``--runner docker --image <the image>``, and times ``docker create`` + ``rm`` of one container of the
image (what every step and replica pays before its own work).

Printed: per runner and driver, the median wall of the run and every step's; the docker/process ratio;
the create + remove time. Nothing is asserted (figures move with the machine: quote ratios from one run).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))


def run_job(args: list[str], base: Path, env: dict[str, str]) -> tuple[float, dict[str, float]]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(HERE / "pipelines" / "run.py"), *args, "--set", f"output.base_dir={base}"],
                          cwd=HERE, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"error: run.py {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-800:]}")
    steps = json.loads((base / "run.json").read_text())["summary"].get("steps") or []
    return wall, {s["name"]: s["seconds"] for s in steps}


def create_remove_s(dockerd, image: str) -> float:
    client = dockerd.client(timeout_s=900)
    try:
        started = time.monotonic()
        container = client.create_container(image, command=["true"], network_disabled=True)
        client.remove_container(container, force=True)
        return time.monotonic() - started
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--storage", default="overlay2,vfs", help="engine storage drivers, comma-separated")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("error: dockerd needs root; run as root (as the engine tests do)", file=sys.stderr)
        return 2
    from benchmarks.engine import (DEBOOTSTRAP, DOCKERD, REGISTRY, Dockerd, Registry, build_trainer_image,
                                   missing_binaries)
    from benchmarks.machine import cpuinfo

    missing = missing_binaries(DOCKERD, REGISTRY, DEBOOTSTRAP)
    if missing:
        print(f"error: needs {', '.join(missing)} (apt-get install docker.io docker-registry debootstrap)",
              file=sys.stderr)
        return 2

    drivers = [d.strip() for d in args.storage.split(",") if d.strip()]
    results: dict[str, list[tuple[float, dict[str, float]]]] = {}
    create: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-runners-") as tmp:
        tmp = Path(tmp)
        registry = Registry(tmp / "registry").start()
        engines, image, saved, built = [], "", tmp / "image.tar", None
        try:
            for driver in drivers:
                os.environ["VTP_DOCKER_STORAGE"] = driver
                (tmp / f"dockerd-{driver}").mkdir()
                engine = Dockerd(tmp / f"dockerd-{driver}").start()
                engines.append(engine)
                if engine.storage_driver != driver:
                    raise SystemExit(f"error: storage driver {driver} did not start here")
                t0 = time.monotonic()
                if not image:
                    (tmp / "image").mkdir()
                    built = build_trainer_image(print, engine, registry, tmp / "image")
                    image = next(built)["reference"]
                    client = engine.client(timeout_s=3600)
                    with open(saved, "wb") as f:
                        for chunk in client.get_image(image.split("@")[0]):
                            f.write(chunk)
                    client.close()
                    print(f"{driver}: built the trainer image in {time.monotonic() - t0:.0f} s: {image}")
                else:
                    client = engine.client(timeout_s=3600)
                    with open(saved, "rb") as f:
                        client.load_image(f)
                    client.close()
                    print(f"{driver}: docker load of the image in {time.monotonic() - t0:.0f} s")
            # the image is in the engines by tag; the docker runner finds it there by tag
            local_image = image.split("@")[0]
            for round_ in range(args.rounds):
                env = dict(os.environ, PYTHONPATH=str(HERE))
                results.setdefault("process", []).append(run_job([], tmp / f"process-{round_}", env))
                for engine in engines:
                    name = f"docker ({engine.storage_driver})"
                    denv = dict(env, DOCKER_HOST=engine.host)
                    results.setdefault(name, []).append(
                        run_job(["--runner", "docker", "--image", local_image], tmp / f"{name[8:-1]}-{round_}", denv))
                    create.setdefault(engine.storage_driver, []).append(create_remove_s(engine, local_image))
                print(f"round {round_ + 1}/{args.rounds} done", flush=True)
        finally:
            if built is not None:
                built.close()  # removes the image while its engine still runs
            for engine in engines:
                engine.stop()
            registry.stop()

    cpu = cpuinfo()
    print(f"\nmachine: {cpu['model']}, {len(os.sched_getaffinity(0))} cores, {platform.python_version()}; "
          f"median of {args.rounds} rounds (default job: prepare, 2 replicas x 30 steps, verify, report)")
    process_wall = statistics.median(w for w, _ in results["process"])
    for name, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        steps = {k: statistics.median(r[1].get(k, 0.0) for r in runs) for k in runs[0][1]}
        ratio = "" if name == "process" else f"  ({wall / process_wall:.2f}x the process runner)"
        print(f"  {name:18s} run {wall:6.1f} s{ratio}")
        print("  " + " " * 18 + " " + ", ".join(f"{k} {v:.1f} s" for k, v in steps.items()))
    for driver, seconds in create.items():
        print(f"  docker create + rm of one container of the image on {driver}: {statistics.median(seconds):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
