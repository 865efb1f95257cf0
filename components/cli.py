"""``python pipelines/run.py components --image REPO@sha256:... --out DIR``: the component YAMLs for an image.

Writes ``DIR/<name>/component.yaml`` for every component (``components.NAMES``), each running in
``--image``: your pushed trainer image, pinned by digest (``run.py build`` prints it). Load one into any
KFP pipeline with ``kfp.components.load_component_from_file``. Exit 0 written; 2 bad input (one ``error:``
line).
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python pipelines/run.py components", description=__doc__.split("\n")[0])
    p.add_argument("--image", required=True, help="the trainer image by digest, REPO[:TAG]@sha256:<64 hex>")
    p.add_argument("--out", required=True, help="folder to write <name>/component.yaml into")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from jobs.build_context import BuildError
    from jobs.images import parse_reference

    try:
        pinned = parse_reference(args.image).pinned
    except BuildError as exc:
        print(f"error: --image: {exc}", file=sys.stderr)
        return 2
    if not pinned:
        print(f"error: --image: {args.image} names no digest; components must run exactly the image you pushed: "
              "give REPO:TAG@sha256:<64 hex> (the last line of python pipelines/run.py build)", file=sys.stderr)
        return 2
    import components

    for path in components.write_yamls(args.out, args.image):
        print(path)
    return 0
