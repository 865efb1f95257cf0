"""What each trainer image variant installs, before and after a pyproject change: wheels and installed size.

    python benchmarks/image_sizes.py                       # cpu, gpu, tpu; before = pyproject.toml at c02af78
    python benchmarks/image_sizes.py --variants cpu --before HEAD~3 --work /tmp/sizes

For each variant and each pyproject.toml (``--before`` REV's, and the working tree's), the list the image
installs is taken from pyproject alone (containers/requirements.py: dependencies + the variant's extra,
plus the ``--no-deps`` list), then:

* *wheels*: ``pip download`` of that list for this Python and platform (cached in ``--work``), summed;
* *installed*: ``pip install --no-index --target DIR`` from those wheels, then the bytes under DIR (``du``
  apparent size, like ``docker image inspect``'s Size counts files) — what the venv layer holds, less
  pip/setuptools of the venv itself (~15 MB).

The image is that + the base image + the sources (~3 MB). This is how the gpu and tpu images are measured
here (their wheels are several GB; no GPU/TPU needed to install them); the cpu image is also built for
real in the engine test (tests/test_trainer_image.py prints its size and layers), which checks the method.
Printed, never asserted. Needs the network (PyPI) once; everything is cached in ``--work``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "containers"))

import requirements as image_requirements  # containers/requirements.py

BEFORE = "c02af78"  # the Dockerfile with one COPY + one RUN; tensorflow-cpu and apache-beam in every image


def _lists(pyproject_text: str, variant: str, old_style: bool) -> tuple[list[str], list[str]]:
    doc = tomllib.loads(pyproject_text)
    project = doc["project"]
    if old_style:  # the old image ran `pip install /app[VARIANT]`: dependencies + the extra, nothing else
        return image_requirements.requirements(project, variant, []), []
    no_deps = ((doc.get("tool") or {}).get("vertex-tf-pipelines") or {}).get("no-deps") or {}
    return image_requirements.requirements(project, variant, []), list(no_deps.get(variant) or [])


def _pip(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True, timeout=timeout)


def _du(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _resolve(req_file: Path, wheels: Path, report: Path, *flags: str) -> list[Path]:
    """The wheel files pip would install for ``req_file`` into an empty environment, downloaded into
    ``wheels`` when missing."""
    import json
    from urllib.parse import unquote, urlparse

    resolve = ["install", "-q", "--dry-run", "--ignore-installed", *flags, "--report", str(report), "--find-links",
               str(wheels), "-r", str(req_file)]
    if _pip(*resolve[:2], "--no-index", *resolve[2:]).returncode != 0:
        done = _pip("download", "-q", *flags, "-d", str(wheels), "--find-links", str(wheels), "-r", str(req_file))
        if done.returncode != 0:
            raise SystemExit(f"pip download -r {req_file} failed: {done.stderr.strip()[-300:]}")
        done = _pip(*resolve[:2], "--no-index", *resolve[2:])
        if done.returncode != 0:
            raise SystemExit(f"pip cannot resolve {req_file} from {wheels}: {done.stderr.strip()[-300:]}")
    return [Path(unquote(urlparse(i["download_info"]["url"]).path)) for i in json.loads(report.read_text())["install"]]


def measure(name: str, reqs: list[str], no_deps: list[str], work: Path) -> dict:
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    lists = work / "lists"
    lists.mkdir(exist_ok=True)
    req_file, nodeps_file = lists / f"{name}.txt", lists / f"{name}-no-deps.txt"
    req_file.write_text("".join(f"{r}\n" for r in reqs))
    nodeps_file.write_text("".join(f"{r}\n" for r in no_deps))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        files = _resolve(req_file, wheels, Path(tmp) / "report.json")
        if no_deps:
            files += _resolve(nodeps_file, wheels, Path(tmp) / "report-no-deps.json", "--no-deps")
        target = Path(tmp) / "target"
        for listed, flags in ((req_file, ()), (nodeps_file, ("--no-deps",))):
            if not listed.read_text().strip():
                continue
            done = _pip("install", "-q", "--no-index", *flags, "--find-links", str(wheels), "--target", str(target),
                        "-r", str(listed), timeout=5400)
            if done.returncode != 0:
                raise SystemExit(f"pip install --target for {name} failed: {done.stderr.strip()[-300:]}")
        installed = _du(target)
        biggest = sorted(((_du(p), p.name) for p in target.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")),
                         reverse=True)[:4]
    return {"name": name, "packages": len(files), "wheels": sum(p.stat().st_size for p in files),
            "installed": installed, "biggest": biggest, "seconds": time.monotonic() - started}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="cpu,gpu,tpu")
    p.add_argument("--before", default=BEFORE, help="git revision whose pyproject.toml is 'before'")
    p.add_argument("--work", default=str(Path.home() / ".cache" / "vertex-tf-pipelines" / "image-sizes"),
                   help="wheel cache and scratch space (several GB for gpu)")
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    before_text = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.before}:pyproject.toml"], check=True,
                                 capture_output=True, text=True).stdout
    after_text = (ROOT / "pyproject.toml").read_text()
    mib = 2 ** 20
    rows = []
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        for when, text, old in (("before", before_text, True), ("after", after_text, False)):
            reqs, no_deps = _lists(text, variant, old)
            result = measure(f"{variant}-{when}", reqs, no_deps, work)
            rows.append((variant, when, result))
            big = ", ".join(f"{name} {size / mib:.0f}" for size, name in result["biggest"])
            print(f"{variant:4} {when:6} {result['packages']:4d} packages  wheels {result['wheels'] / mib:7.0f} MiB  "
                  f"installed {result['installed'] / mib:7.0f} MiB  (largest, MiB: {big}; {result['seconds']:.0f} s)",
                  flush=True)
    print("\nvariant  installed before -> after (MiB)   wheels before -> after (MiB)")
    by = {(v, w): r for v, w, r in rows}
    for variant in dict.fromkeys(v for v, _, _ in rows):
        b, a = by[(variant, "before")], by[(variant, "after")]
        print(f"{variant:7}  {b['installed'] / mib:8.0f} -> {a['installed'] / mib:6.0f} ({(a['installed'] - b['installed']) / mib:+.0f})"
              f"        {b['wheels'] / mib:7.0f} -> {a['wheels'] / mib:6.0f} ({(a['wheels'] - b['wheels']) / mib:+.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
