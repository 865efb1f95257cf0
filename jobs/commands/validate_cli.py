"""``vtp validate FILE.yaml [--set KEY=VALUE ...]``: a job checked before anything is spent.

What it checks depends on the file:

- a job config of this project (a preset's name or a YAML file, ``--set`` applied): the whole document, with the
  validation every ``vtp`` command runs (``jobs.rules.validate.validate_document``): the schema (unknown fields, wrong
  types), every section's values (training, checkpoint, data, output, scheduling, trainer, serving with its gate
  and held-out data, tuning, placement, the vertex section), the data folder, a user trainer's files and the
  sample request, and the hardware catalog's rules (machine x accelerator counts, vCPUs and memory, regions and
  zones, TPU rules, strategy vs topology, retired hardware);
- an AI Platform Training config (``trainingInput``, with ``gcloud ai-platform jobs submit training``-style flags):
  translated to this project's topology (``jobs.rules.aiplatform.legacy``) and checked against the hardware rules, each
  problem named by the legacy field or flag that set it.

Valid: exit 0; the warnings, a summary line, the Vertex worker pools as a table and as ``worker_pool_specs``
JSON (THE job spec's, ``jobs.rules.job_spec``), and for a job config the ``vtp plan`` line. Invalid: exit 2, one
``error:`` line per problem on stderr. Bad input (missing file, YAML syntax error, an unknown flag) is one clear
line and exit 2, never a traceback. No TensorFlow, no kfp, no cloud client.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence, TextIO

from jobs.rules import job_spec, placement
from jobs.rules.aiplatform.config_file import load_yaml
from jobs.rules.aiplatform.gcloud_flags import ParsedFlags, parse_flags
from jobs.rules.aiplatform.legacy import import_legacy, is_legacy
from jobs.rules.command_line import plan_hint, shown
from jobs.commands.hardware_cli import main as hardware_main
from jobs.rules.hardware.rules import Report, num_replicas
from jobs.rules.validate import validate_document
from jobfile import config as config_lib
from jobfile.config_files import PRESET_DIR, is_preset, load_document
from jobfile.errors import ConfigError, Problem

USAGE = """usage: python pipelines/run.py validate FILE.yaml [--set KEY=VALUE ...]      (a job config of this project)
       python pipelines/run.py validate FILE.yaml [gcloud-style flags] [-- USER_ARGS]  (an AI Platform config)

Checks a job before anything is spent, with every rule a run applies (the config's fields and values,
the data folder, a user trainer's files, the hardware catalog's machine, accelerator, region and strategy
rules), and prints the Vertex worker pools the job would get (chief 0, workers 1, parameter servers 2,
evaluator 3). One `error:` line per problem, naming the field, the rule and valid choices; exit 0 valid,
2 invalid.

  FILE.yaml              a job file or preset name; or an AI Platform `trainingInput` config (legacy), which
                         is translated to this project's topology
  --set KEY=VALUE        override a field of a job config, e.g. --set training.steps=50 (repeatable)
  --strict               refuse what the hardware catalog does not know (a machine or accelerator type it has
                         never seen, a region without data) instead of warning; as validation.strict: true
  --list                 what the hardware catalog knows (as python pipelines/run.py hardware)
  gcloud-style flags     for an AI Platform config, as `gcloud ai-platform jobs submit training` takes them:
                         --scale-tier, --master-machine-type, --worker-count 4, --worker-machine-type, ...
  -- USER_ARGS           the trainer's own arguments (AI Platform config)

examples:
  python pipelines/run.py validate my-project/job.yaml
  python pipelines/run.py validate gpu-1x4 --set topology.chief.accelerator_count=2
  python pipelines/run.py validate legacy-config.yaml --worker-count 4"""
ROLE_NAMES = ("chief", "worker", "parameter_server", "evaluator")


def _accelerator(pool: Mapping[str, Any]) -> str:
    spec = pool.get("machine_spec", {})
    if spec.get("accelerator_count"):
        return f"{spec['accelerator_count']} x {spec['accelerator_type']}"
    return "-"


def format_pools(pools: Sequence[Mapping[str, Any]]) -> str:
    rows = [("pool", "role", "replicas", "machine_type", "accelerator", "tpu_topology")]
    for index, (role, pool) in enumerate(zip(ROLE_NAMES, pools)):
        if pool:
            spec = pool["machine_spec"]
            rows.append((str(index), role, str(pool["replica_count"]), spec["machine_type"],
                         _accelerator(pool), spec.get("tpu_topology", "-")))
        else:
            rows.append((str(index), role, "0", "-", "-", "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def _print_problems(kind: str, problems: Sequence[Problem], stream: TextIO) -> None:
    for p in problems:
        print(f"{kind}: {p}", file=stream)


def _split_sets(argv: list[str]) -> tuple[list[str], list[str], list[Problem]]:
    """(argv without ``--set``, the ``KEY=VALUE`` overrides, problems) -- only before a bare ``--``."""
    rest, sets, problems = [], [], []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            rest += argv[i:]
            break
        if token == "--set" or token.startswith("--set="):
            value = token[len("--set="):] if token.startswith("--set=") else (argv[i + 1] if i + 1 < len(argv) else "")
            i += 1 if token.startswith("--set=") else 2
            if "=" not in value:
                problems.append(Problem("--set", f"{value!r} is not KEY=VALUE", ["training.steps=50"]))
            sets.append(value)
            continue
        rest.append(token)
        i += 1
    return rest, sets, problems


class Checked(NamedTuple):
    """A file checked: the job (this project's form), every problem, the worker pools, what kind of file it was."""

    job: Mapping[str, Any]
    report: Report
    pools: list
    source: str


def validate_main(argv: Sequence[str]) -> int:
    """Entry point of ``validate``; returns the exit status (0 valid, 2 invalid or bad input)."""
    argv = [str(a) for a in argv]
    if argv and argv[0] == "validate":
        argv = argv[1:]
    own = argv[: argv.index("--")] if "--" in argv else argv
    if any(a in ("-h", "--help") for a in own):
        print(shown(USAGE))
        return 0
    if "--list" in own:
        return hardware_main([a for a in own if a != "--list"])
    if "--strict" in own:  # the job file's validation.strict: true, said on the command line
        cut = argv.index("--") if "--" in argv else len(argv)
        argv = [a for a in argv[:cut] if a != "--strict"] + ["--set", "validation.strict=true"] + argv[cut:]
    try:
        argv, sets, parsed, path, doc = _read(argv)
        legacy = doc is None or is_legacy(doc)
        unknown = _unknown_flags(parsed, legacy)
        checked = _check_legacy(doc, argv, sets, unknown) if legacy else _check_job(path, sets, parsed, unknown)
    except ConfigError as exc:
        _print_problems("error", exc.problems, sys.stderr)
        return 2
    return _show(checked, None if legacy else path)


def _read(argv: list[str]) -> tuple[list[str], list[str], ParsedFlags, str | None, Any]:
    """The command line's parts: argv without ``--set``, the overrides, the parsed flags, the file (a preset's
    name made its path) and its document (None without a file). Raises ConfigError."""
    argv, sets, set_problems = _split_sets(argv)
    if set_problems:
        raise ConfigError(set_problems)
    parsed = parse_flags(argv)
    files = parsed.positionals
    if files[:1] == ["gcloud"]:  # a pasted `gcloud [beta] ai-platform jobs submit training JOB ...`
        files = files[files.index("training") + 2:] if "training" in files else []
    if len(files) > 1:
        raise ConfigError(f"expected one FILE.yaml, got {len(files)}: {' '.join(files)}", field="validate")
    if files and parsed.config and parsed.config != files[0]:
        raise ConfigError(f"two config files: {files[0]} and --config {parsed.config}", field="validate")
    path = files[0] if files else parsed.config
    if path is None and not parsed.overrides:
        raise ConfigError(shown("give a job file or preset (python pipelines/run.py validate FILE.yaml); --help "
                                "says more"), field="validate")
    if path and not Path(path).exists():  # a preset's name (`validate gpu-1x4`), as --config takes one
        if is_preset(path):
            path = str(PRESET_DIR / f"{path}.yaml")
        elif not Path(path).suffix:  # a mistyped preset: the presets, and the one it is closest to
            load_document(path)
    doc = load_yaml(path) if path else None
    if path and not isinstance(doc, Mapping):
        raise ConfigError(f"expected a mapping of config sections, got {type(doc).__name__}", field=path)
    return argv, sets, parsed, path, doc


def _unknown_flags(parsed: ParsedFlags, legacy: bool) -> list[Problem]:
    if legacy:
        return [Problem(f, "unknown flag", ["--worker-count 2", "--set KEY=VALUE (job configs)"]) for f in parsed.unknown]
    return [Problem(f, "unknown flag; gcloud-style flags apply only to AI Platform configs (trainingInput), and this "
                       "is a job config of this project", ["--set KEY=VALUE"]) for f in parsed.unknown]


def _check_legacy(doc: Any, argv: list[str], sets: list[str], unknown: list[Problem]) -> Checked:
    """An AI Platform config: translated and checked against the hardware rules (``jobs.rules.aiplatform.legacy``)."""
    result = import_legacy(doc, argv)
    result.report.errors.extend(unknown)
    if sets:
        result.report.errors.append(Problem("--set", "applies to this project's job configs; an AI Platform config "
                                                     "takes gcloud-style flags", ["--worker-count 2"]))
    return Checked(result.job, result.report, result.pools, "AI Platform trainingInput")


def _check_job(path: str | None, sets: list[str], parsed: ParsedFlags, unknown: list[Problem]) -> Checked:
    """The project's own format: the full validation every ``vtp`` command runs (schema, values, data folder, a
    user trainer's files, hardware rules), then the worker pools the pipeline would submit. Raises ConfigError
    when the file cannot be read as a job document."""
    doc = load_document(path, sets)  # relative paths against the file, --set applied
    cfg, report = validate_document(doc)
    report.errors.extend(unknown)
    report.errors.extend(Problem(f, "gcloud-style flags apply only to AI Platform configs (trainingInput); set this "
                                    "in the file's topology section") for f in sorted(set(parsed.sources.values())))
    pools = job_spec.parts(job_spec.custom_job_spec(cfg))["worker_pool_specs"] if cfg and report.ok else []
    return Checked(cfg.to_dict() if cfg else doc, report, pools, "project job config")


def _show(checked: Checked, job_file: str | None) -> int:
    """The warnings, then the errors (exit 2) or the summary, the pools and, for a job config (``job_file``),
    the ``vtp plan`` line (exit 0)."""
    _print_problems("warning", checked.report.warnings, sys.stdout)
    if not checked.report.ok:
        _print_problems("error", checked.report.errors, sys.stderr)
        return 2
    topology = checked.job.get("topology", {})
    print(f"valid {checked.source}: strategy {topology.get('strategy', 'multi_worker')}, "
          f"{num_replicas(checked.job)} replica(s) in sync, region {topology.get('region', 'us-central1')}")
    print(format_pools(checked.pools))
    print("worker_pool_specs:")
    print(json.dumps(checked.pools, indent=2))
    for line in ladder_lines(checked.job):
        print(line)
    if job_file is not None:
        print(plan_hint(job_file))
    return 0


def ladder_lines(job: Mapping[str, Any]) -> list[str]:
    """A job's hardware ladder (``placement.hardware``), one line a rung after ``topology``: what ``vtp plan`` checks,
    prices and ranks, and the training step falls over to."""
    if not ((job.get("placement") or {}).get("hardware")):
        return []
    cfg = config_lib.from_dict(dict(job))
    ladder = cfg.placement.hardware
    out = [f"hardware ladder (placement.hardware): {len(ladder)} more way(s) to run it after topology, in this order "
           "(vtp plan checks and prices each; a stockout falls over to the next that fits):"]
    for k, h in enumerate(ladder, 1):
        job_k = placement.on_rung(cfg, k)
        out.append(f"  {k + 1}. {placement.rung_name(cfg, k)}: {placement.hardware_label(job_k.topology)}, "
                   f"{job_k.topology.strategy}, {', '.join(job_k.placement.strategies or [cfg.scheduling.strategy])}")
    return out


def main() -> None:  # pragma: no cover - console entry
    sys.exit(validate_main(sys.argv[1:]))


if __name__ == "__main__":  # pragma: no cover
    main()
