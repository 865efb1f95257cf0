"""``python pipelines/run.py components --image REPO@sha256:... --out DIR [--host KFP_REPO --tag T ...]``.

Writes ``DIR/<name>/component.yaml`` for every component (``components.NAMES``), each running in
``--image``: your pushed trainer image, pinned by digest (``run.py build`` prints it). Load one into any KFP
pipeline with ``kfp.components.load_component_from_file``. With ``--host``
(``https://REGION-kfp.pkg.dev/PROJECT/REPO``, an Artifact Registry Kubeflow Pipelines repository) each is also
published there, beside the pipeline templates, through the same upload as ``upload-template``
(``jobs.commands.templates.upload``: the request ``kfp.registry.RegistryClient`` sends, under the client policy);
one ``<component>/sha256:<hex>`` line each. Exit 0 written (and published); 2 bad input (one ``error:`` line);
1 an upload failed; 130 Ctrl-C.
"""
from __future__ import annotations

import argparse
import sys
import components
from jobs.commands import templates
from jobs.cloud.apis.lines import run_command
from jobs.rules.command_line import plain, shown
from jobs.rules.image_reference import BuildError, parse_reference


def main(argv: list[str]) -> int:
    return run_command(_main, argv)


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=shown("python pipelines/run.py components"), description=plain(__doc__.split("\n\n")[0]))
    p.add_argument("--image", required=True, help="the trainer image by digest, REPO[:TAG]@sha256:<64 hex>")
    p.add_argument("--out", required=True, help="folder to write <name>/component.yaml into")
    p.add_argument("--host", help="also publish them to this KFP repository: https://REGION-kfp.pkg.dev/PROJECT/REPO")
    p.add_argument("--tag", dest="tags", action="append", default=[], help="tag of the published versions (repeatable)")
    try:
        args = p.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)

    problems = []
    try:
        if not parse_reference(args.image).pinned:
            problems.append(shown(f"--image: {args.image} names no digest; components must run exactly the image you "
                                  "pushed: give REPO:TAG@sha256:<64 hex> (the last line of python pipelines/run.py "
                                  "build)"))
    except BuildError as exc:
        problems.append(f"--image: {exc}")
    if args.host and templates.host_problem(args.host):
        problems.append(templates.host_problem(args.host))
    problems += [f"--tag: {t!r} is not a tag (letters, digits, '.', '_', '-'); valid choices: latest, v1"
                 for t in args.tags if not templates.TAG_RE.match(t)]
    if args.tags and not args.host:
        problems.append("--tag: tags the published versions; add --host https://REGION-kfp.pkg.dev/PROJECT/REPO")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return 2

    for path in components.write_yamls(args.out, args.image):
        print(path)
        if args.host:
            package, version = templates.upload(str(path), args.host, args.tags)
            print(f"  published {package}/{version}")
    return 0
