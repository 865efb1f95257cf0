"""Compiled pipeline files: writing one without losing anything (telling one from anything else is
``jobs.run_records.own_outputs.is_compiled_pipeline``).

``run.py --compile-only OUT`` writes through here: a path that is the job file itself, or any existing file
that is not a compiled pipeline, is refused unless ``--overwrite`` says so (a job file overwritten by its
own pipeline YAML was seen: the next ``validate`` said ``components: unknown field``); the YAML is written to
a temporary file beside ``OUT`` and renamed over it, so ``OUT`` is either the old file or the whole new one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from jobs.rules import preflight
from jobs.rules.preflight import placeholder_free, say
from jobs.rules.command_line import plan_hint
from jobs.run_records.own_outputs import is_compiled_pipeline
from jobfile.errors import Problem, problem


def output_problems(out: str, config_source: str, overwrite: bool = False) -> list[Problem]:
    """Why ``out`` must not be written (empty: it may be). ``config_source``: the ``--config`` value (a
    preset name or a file)."""
    target = Path(out)
    if target.is_dir():
        return [problem("--compile-only", f"{out} is a folder; give the YAML file to write",
                        [str(target / "pipeline.yaml")])]
    if not target.parent.is_dir():
        return [problem("--compile-only", f"the folder {target.parent} does not exist", ["pipeline.yaml"])]
    if overwrite or not target.exists():
        return []
    config = Path(config_source)
    if config.is_file() and target.resolve() == config.resolve():
        return [problem("--compile-only", f"{out} is the job file given to --config: writing the pipeline there would "
                                          "replace your job; give another path (or --overwrite)",
                        [f"{target.stem}.pipeline.yaml"])]
    if not is_compiled_pipeline(target):
        return [problem("--compile-only", f"{out} exists and is not a compiled pipeline: it would be lost; give another "
                                          "path (or --overwrite)", [f"{target.stem}.pipeline.yaml"])]
    return []


def compile_only(cfg, out: str, compile_pipeline: Callable[..., object], *, config_source: str, target: str = "vertex",
                 overwrite: bool = False, image: str = "") -> int:
    """``run.py --compile-only OUT``: for Vertex (the default target), what submit would refuse is refused here
    too, by the same preflight (images pinned by digest, no placeholders, gs:// paths, the region's machines),
    and the YAML carries no path of this machine (``JobConfig.for_vertex``); ``--target local``: the pipeline
    kfp.local runs, unchecked. ``OUT`` is written as :func:`output_problems` allows. Returns the exit status
    (2: one ``error:`` line per problem)."""
    import json

    problems = output_problems(out, config_source, overwrite)
    warnings: list[str] = []
    if target == "vertex":
        errors, warnings = preflight.job_problems(cfg, "PROJECT", cfg.topology.region, components_image=image)
        problems += errors

    if say(problems, warnings):
        return 2
    if target == "vertex":
        cfg = placeholder_free(cfg)  # no placeholder anywhere in what is compiled
    write(lambda path: compile_pipeline(cfg, path, target, base_image=image or None), out)
    print(f"compiled pipeline {cfg.name!r} for {target} to {out}")
    parameters = {"config_json": "(the config)", "location": cfg.topology.region,
                  "sample_request": "(the serving.sample_request JSON, when set)",
                  "eval_data": cfg.serving.eval_data or "(serving.eval_data: a gs:// JSON Lines file, when set)"}
    if target == "vertex":
        parameters.update({"build_context_uri": "(optional) gs://B/PATH/ctx-<hash>.tgz: build the image with Cloud "
                                                "Build first", "service_account": "(optional)", "network": "(optional)"})
    print(json.dumps({"parameters": parameters}, indent=1))
    if target == "vertex":
        print(plan_hint(config_source))
    return 0


def write(compile_to: Callable[[str], object], out: str) -> str:
    """``compile_to(path)`` into a temporary file beside ``out``, then renamed over ``out``."""
    target = Path(out)
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.yaml")  # kfp's compiler wants a .yaml name
    try:
        compile_to(str(tmp))
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out
