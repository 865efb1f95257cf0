"""The trainer section's spec: ``trainer:`` (a user's own trainer) and the container command, checked before
anything is spent.

:func:`trainer_shape_problems` needs no file system (the module's name, command vs module, arguments, the
environment's names and size); :func:`trainer_file_problems` reads this machine (the source folder, the module
in it, the requirements file and its pins against the image, ``jobs.rules.image_requirements``), as ``jobs.rules.validate`` does with ``check_data`` and ``vtp build`` does before it
writes a build context. No TensorFlow, no cloud client.
"""
from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

from jobs.rules.image_requirements import image_pin_problems, read_text
from jobs.rules.job_image import variant_for
from jobs.rules.replica_env import is_vertex_variable
from jobfile import config as config_lib
from trainers.cluster import LOCAL_LAUNCHER_ENV
from jobfile.config_files import RELATIVE_RULE, found_elsewhere
from jobfile.errors import Problem, problem
from jobfile.regular_file import NotARegularFile, read_regular

MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def trainer_shape_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The ``trainer`` section's rules that need no file system."""
    t, p = cfg.trainer, []
    if t.module and not MODULE_RE.fullmatch(t.module):
        p.append(problem("trainer.module", f"{t.module!r} is not a Python module name (python -m MODULE)",
                         ["trainer.task"]))
    if t.module and list(cfg.container.command) != config_lib.BUILTIN_COMMAND:
        p.append(problem("container.command", "is set together with trainer.module; trainer.module runs "
                                              "python -m MODULE, container.command is for a trainer that is not a "
                                              "Python module: keep one", ["remove container.command"]))
    if t.module and cfg.container.args:
        p.append(problem("container.args", "is set together with trainer.module; give the arguments as "
                                           "trainer.args", [f"trainer.args: {list(cfg.container.args)}"]))
    if (t.args or t.requirements) and not t.module:
        field = "trainer.args" if t.args else "trainer.requirements"
        p.append(problem(field, "needs trainer.module (the module every replica runs)", ["trainer.module: trainer.task"]))
    p += trainer_env_problems(cfg)
    p += env_size_problems(cfg.trainer.env)
    if cfg.data.source == "none" and not cfg.user_trainer:
        p.append(problem("data.source", "none means the trainer reads its own data, but the built-in trainer "
                                        "needs images or TFRecords; set trainer.module to your own trainer",
                         ["synthetic", "images", "tfrecord"]))
    return p


#: the sections only the built-in trainer reads (``trainers.task``): with a user's trainer they change nothing
BUILTIN_ONLY = ("training", "model", "checkpoint")


def reads_nothing(dotted: str, config: dict) -> bool:
    """Whether the dotted config key ``dotted`` is read by nothing in a job of ``config`` (a resolved config as a
    dict) that runs a user's own trainer: a field of :data:`BUILTIN_ONLY`, or of ``data`` when the trainer reads its
    own data (``data.source: none``). A run's folder is not compared by such keys (``jobs.local.run.folder``)."""
    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    data = config.get("data") if isinstance(config.get("data"), dict) else {}
    if not trainer.get("module"):
        return False
    section = dotted.split(".", 1)[0]
    return section in BUILTIN_ONLY or (section == "data" and data.get("source") == "none" and dotted != "data.source")


def builtin_only_problems(doc: dict, cfg: config_lib.JobConfig) -> list[Problem]:
    """Fields the job sets (``doc``: the job file with its ``--set`` overrides, before defaults) that only the
    built-in trainer reads, in a job that runs a user's own trainer: each a warning naming the field and where
    the trainer's own flags go (``trainer.args``), with ``trainer.args`` as it would be with all of them given as
    flags. Not said: ``training.seed`` where a study or the prepare step reads it; ``data.*`` where the pipeline
    prepares data (``data.source`` other than ``none``: its own warning, ``jobs.rules.validate``)."""
    if not cfg.user_trainer:
        return []
    fields = []  # (dotted, key, value)
    for section in (*BUILTIN_ONLY, "data"):
        given = doc.get(section) if isinstance(doc.get(section), dict) else {}
        for key, value in given.items():
            dotted = f"{section}.{key}"
            if section == "data" and (cfg.data.source != "none" or key == "source"):
                continue
            if dotted == "training.seed" and (cfg.tuning.enabled or cfg.data.source != "none"):
                continue
            if not isinstance(value, dict):
                fields.append((dotted, key, value))
    if not fields:
        return []
    args = list(cfg.trainer.args)
    for _, key, value in fields:
        flag, text = f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)
        if flag in args and args.index(flag) + 1 < len(args):
            args[args.index(flag) + 1] = text
        else:
            args = [a for a in args if not a.startswith(flag + "=")] + [flag, text]
    suggestion = "--set 'trainer.args=" + json.dumps(args, separators=(",", ":")) + "'"  # one choice: no ", "
    out = []
    for dotted, _, _ in fields:
        reader = "the built-in trainer's data preparation" if dotted.startswith("data.") else "the built-in trainer"
        out.append(problem(dotted, f"only {reader} reads it, and this job runs your trainer (python -m "
                                   f"{cfg.trainer.module}): it changes nothing; your trainer's own flags go in "
                                   "trainer.args", [suggestion]))
    return out


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def trainer_env_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """``trainer.env``: names a shell and Vertex accept, and none that Vertex (or the local launcher) sets
    for every replica: a declared ``TF_CONFIG`` or ``AIP_MODEL_DIR`` would fight the cluster's own."""
    p = []
    for name in cfg.trainer.env:
        if not ENV_NAME_RE.fullmatch(name):
            p.append(problem(f"trainer.env.{name}", "is not an environment variable name (letters, digits and '_', "
                                                    "not starting with a digit)", ["TF_USE_LEGACY_KERAS"]))
        elif is_vertex_variable(name) or name == LOCAL_LAUNCHER_ENV:
            p.append(problem(f"trainer.env.{name}", "is set by Vertex AI (or the local launcher) for every replica: "
                                                    "a declared value would fight the job's own; read it in your "
                                                    "trainer instead, or declare another name", ["MY_SETTING"]))
    return p

#: Linux refuses to start a process with an environment (or argument) string longer than this, NAME= and the
#: terminating NUL included (MAX_ARG_STRLEN = 32 pages of 4 KiB: "Argument list too long", E2BIG); seen here:
#: ``X=`` + 131,069 characters starts, + 131,070 does not.
MAX_ARG_STRLEN = 131072
#: ... and whose arguments and environment together (strings and their pointers) exceed ARG_MAX, a quarter of the
#: stack limit: 2 MiB with the usual 8 MiB stack. What is left beside trainer.env (the command, Vertex's and the
#: launcher's variables) is kept free: ENV_BUDGET is what trainer.env may take.
ARG_MAX = 2 * 1024 * 1024
ENV_BUDGET = ARG_MAX - 256 * 1024


def env_size_problems(env: dict[str, str]) -> list[Problem]:
    """``trainer.env`` values no replica could start with (see :data:`MAX_ARG_STRLEN`, :data:`ENV_BUDGET`)."""
    p = []
    total = 0
    for name, value in env.items():
        size = len(f"{name}={value}".encode("utf-8", "surrogatepass")) + 1
        total += size + 8
        if size > MAX_ARG_STRLEN:
            p.append(problem(f"trainer.env.{name}", f"{size - len(name) - 2:,} bytes: Linux starts no process with an "
                                                    f"environment string of {MAX_ARG_STRLEN // 1024} KiB or more "
                                                    "(NAME=value); put the content in a file of your trainer's source "
                                                    "and pass its path", [f"{name}: path/in/source_dir.json"]))
    if not p and total > ENV_BUDGET:
        p.append(problem("trainer.env", f"{total:,} bytes in all: with the command and Vertex's own variables a "
                                        f"process's environment must stay under {ARG_MAX // 1024 // 1024} MiB "
                                        "(ARG_MAX); move the large values into files", ["fewer or shorter values"]))
    return p

def _modules_in(root: Path, limit: int = 200) -> list[str]:
    """Modules under ``root`` (up to 4 levels, names ``python -m`` takes) that look runnable (``if __name__ ==
    "__main__"``), for a did-you-mean. Hidden folders, runs, builds and virtual environments are never walked:
    ``trainer.source_dir`` may be a big folder."""
    found, skip = [], {"runs", "build", "dist", "__pycache__", "node_modules", "site-packages", "venv", "env"}
    for folder, dirs, names in os.walk(root):
        rel_dir = Path(folder).relative_to(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in skip and d.isidentifier()
                         and len(rel_dir.parts) < 3)
        for name in sorted(names):
            if not name.endswith(".py") or not name[:-3].isidentifier():
                continue
            try:  # a named pipe called x.py is never read (trainers.fileio)
                if b"__main__" in read_regular(str(Path(folder) / name), "trainer.source_dir"):
                    found.append(".".join((*rel_dir.parts, name[:-3])))
            except (OSError, NotARegularFile):
                continue
            if len(found) >= limit:
                return found
    return found


def _nearest(name: str, names: list[str], n: int = 5) -> list[str]:
    """The ``names`` like ``name``, the likeliest first (a did-you-mean): none that is merely there (a folder holding
    other projects' scripts, e.g. ``benchmarks.pipeline_steps`` for ``trainer.task``, is no suggestion)."""
    return difflib.get_close_matches(name, names, n=n, cutoff=0.6)


def _folders_holding(root: Path, parts: list[str], depth: int = 3) -> list[str]:
    """Subfolders of ``root`` (a few levels down) from which ``python -m <parts>`` would run: the folder a user
    meant as ``trainer.source_dir`` when they gave its parent (``--set trainer.source_dir=.`` one level up)."""
    found = []
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if not d.is_dir() or d.name.startswith(".") or d.name in ("runs", "build", "__pycache__"):
            continue
        here = d.joinpath(*parts)
        if here.with_suffix(".py").is_file() or (here / "__main__.py").is_file():
            found.append(str(d))
        elif depth > 1:
            found += _folders_holding(d, parts, depth - 1)
        if len(found) >= 3:
            break
    return found


def trainer_file_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """A user trainer's files, checked on this machine before any replica starts: the source folder, the
    module in it, the requirements file."""
    t, p = cfg.trainer, []
    if t.module:
        root = Path(t.source_dir)
        if not root.is_dir():
            return [problem("trainer.source_dir", f"{t.source_dir} is not a folder ({RELATIVE_RULE})",
                            found_elsewhere(t.source_dir, [os.getcwd()]) or ["."])]
        parts = t.module.split(".")
        here = root.joinpath(*parts)
        if not (here.with_suffix(".py").is_file() or (here / "__main__.py").is_file()):
            rel = "/".join(parts)
            inside = _folders_holding(root, parts)
            moved = (f"; {rel}.py is in {inside[0]}: set trainer.source_dir to that folder" if inside else "")
            p.append(problem("trainer.module", f"{t.module} is not importable from trainer.source_dir {root} (no "
                                               f"{rel}.py or {rel}/__main__.py there): every replica runs python -m "
                                               f"{t.module} in that folder{moved}",
                             _nearest(t.module, _modules_in(root))
                             or ([f"trainer.source_dir: {inside[0]}"] if inside else ["trainer.task"])))
            if inside:  # the requirements are looked for in the same wrong folder: one cause, one line
                return p
        if t.requirements and not (root / t.requirements).is_file():
            p.append(problem("trainer.requirements", f"{root / t.requirements} does not exist (the path is relative to "
                                                     "trainer.source_dir)", ["requirements.txt"]))
        elif t.requirements:  # pins the image cannot install, or that would replace its TensorFlow
            p += image_pin_problems(read_text(str(root / t.requirements)), variant_for(cfg))
    return p
