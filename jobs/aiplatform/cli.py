"""``validate FILE.yaml [gcloud-style flags] [-- user args]``: check hardware before anything is spent.

Auto-detects an AI Platform config (``trainingInput``; flags override the file) or this project's job
config (only topology/training/checkpoint/scheduling are checked here; other sections are accepted and
ignored, the full schema is checked elsewhere).  Valid: exit 0, print the worker pools as a table and
as ``worker_pool_specs`` JSON, plus warnings.  Invalid: exit 2, one ``error:`` line per violation on
stderr.  Bad input (missing file, YAML syntax error) is one clear line and exit 2, never a traceback.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence, TextIO

import yaml

from trainers.errors import ConfigError, Problem
from jobs.aiplatform.gcloud_flags import parse_flags
from jobs.aiplatform.legacy import import_legacy, is_legacy
from jobs.hardware.rules import num_replicas

USAGE = """usage: python pipelines/run.py validate FILE.yaml [--set KEY=VALUE ...]      (a job config of this project)
       python pipelines/run.py validate FILE.yaml [gcloud-style flags] [-- USER_ARGS]  (an AI Platform config)

Checks a job before anything is spent, with every rule `run.py` applies (the config's fields and values,
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


class _VersionFloat(float):
    """A YAML float that remembers its text, so ``runtimeVersion: 2.10`` stays "2.10"."""

    text = ""


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    value = _VersionFloat(loader.construct_yaml_float(node))
    value.text = str(node.value)
    return value


_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def load_yaml(path: str) -> Any:
    """Parse a YAML file; raises ConfigError with one clear line for a missing file or bad YAML."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such file: {path}", field=path) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a YAML file", field=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", field=path) from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"YAML syntax error{where}: {what}", field=path) from None


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


def validate_main(argv: Sequence[str]) -> int:
    """Entry point of ``validate``; returns the exit status (0 valid, 2 invalid or bad input)."""
    argv = [str(a) for a in argv]
    if argv and argv[0] == "validate":
        argv = argv[1:]
    own = argv[: argv.index("--")] if "--" in argv else argv
    from jobs.cli import shown

    if any(a in ("-h", "--help") for a in own):
        print(shown(USAGE))
        return 0
    if "--list" in own:
        from jobs.hardware.listing import main as hardware_main

        return hardware_main([a for a in own if a != "--list"])
    if "--strict" in own:  # the job file's validation.strict: true, said on the command line
        cut = argv.index("--") if "--" in argv else len(argv)
        argv = [a for a in argv[:cut] if a != "--strict"] + ["--set", "validation.strict=true"] + argv[cut:]
    try:
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
            from trainers import config as config_lib

            if config_lib.is_preset(path):
                path = str(config_lib.PRESET_DIR / f"{path}.yaml")
            elif not Path(path).suffix:  # a mistyped preset: the presets, and the one it is closest to
                config_lib.load_document(path)
        doc = load_yaml(path) if path else None
        if path and not isinstance(doc, Mapping):
            raise ConfigError(f"expected a mapping of config sections, got {type(doc).__name__}", field=path)
    except ConfigError as exc:
        _print_problems("error", exc.problems, sys.stderr)
        return 2

    legacy = doc is None or is_legacy(doc)
    unknown = [Problem(f, "unknown flag" + ("; gcloud-style flags apply only to AI Platform configs (trainingInput), "
                                             "and this is a job config of this project" if not legacy else ""),
                       ["--set KEY=VALUE"] if not legacy else ["--worker-count 2", "--set KEY=VALUE (job configs)"])
               for f in parsed.unknown]
    if legacy:
        result = import_legacy(doc, argv)
        job, report, pools = result.job, result.report, result.pools
        source = "AI Platform trainingInput"
        report.errors.extend(unknown)
        if sets:
            report.errors.append(Problem("--set", "applies to this project's job configs; an AI Platform config takes "
                                                  "gcloud-style flags", ["--worker-count 2"]))
    else:
        # The project's own format: the full validation every run.py command runs (schema, values, data
        # folder, a user trainer's files, hardware rules), then the worker pools the pipeline would submit.
        from jobs import job_spec
        from jobs import validate as validate_lib
        from trainers import config as config_lib

        source = "project job config"
        flags = sorted(set(parsed.sources.values()))
        try:
            doc = config_lib.load_document(path, sets)  # relative paths against the file, --set applied
        except ConfigError as exc:
            _print_problems("error", exc.problems, sys.stderr)
            return 2
        cfg, report = validate_lib.validate_document(doc)
        job = cfg.to_dict() if cfg else doc
        report.errors.extend(unknown)
        report.errors.extend(Problem(f, "gcloud-style flags apply only to AI Platform configs (trainingInput); "
                                        "set this in the file's topology section") for f in flags)
        pools = job_spec.parts(job_spec.custom_job_spec(cfg))["worker_pool_specs"] if cfg and report.ok else []

    _print_problems("warning", report.warnings, sys.stdout)
    if not report.ok:
        _print_problems("error", report.errors, sys.stderr)
        return 2
    topology = job.get("topology", {})
    print(f"valid {source}: strategy {topology.get('strategy', 'multi_worker')}, "
          f"{num_replicas(job)} replica(s) in sync, region {topology.get('region', 'us-central1')}")
    print(format_pools(pools))
    print("worker_pool_specs:")
    print(json.dumps(pools, indent=2))
    if not legacy:
        from jobs.cli import plan_hint

        print(plan_hint(path or "JOB"))
    return 0


def main() -> None:  # pragma: no cover - console entry
    sys.exit(validate_main(sys.argv[1:]))


if __name__ == "__main__":  # pragma: no cover
    main()
