"""Everything that can be checked before a job spends anything, in one call.

``validate(cfg)`` returns a Report with every error and warning at once: value ranges, the job name,
the data folder (exists, has class folders, none empty), and the hardware rules of the catalog
(``jobs.hardware.rules.check_job``: machine x accelerator counts, vCPU/memory, regions, zones, TPU
rules, strategy vs topology, batch divisibility). It runs at the start of every ``run.py`` command and
as the pipeline's first component. No TensorFlow import: it takes well under a second.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from pathlib import Path

from trainers import config as config_lib
from trainers.config_files import RELATIVE_RULE, found_elsewhere
from trainers.errors import ConfigError, Problem, problem
from trainers.fileio import NotARegularFile, open_regular, read_regular
from jobs.evaluation import settings_problems as eval_settings_problems
from jobs.gate_spec import gate_problems
from jobs.hardware.rules import Report, check_job
from jobs.placement import placement_problems
from jobs.tuning_spec import tuning_problems

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
TIMEOUT_RE = re.compile(r"^\d+(\.\d+)?s$")
IMAGE_EXT = {".jpg", ".jpeg", ".png"}


def _positive(problems: list[Problem], field: str, value: float, minimum: float = 1, hint: str = "") -> None:
    if value < minimum:
        problems.append(problem(field, f"must be at least {minimum:g}, got {value!r}{hint}"))


def _value_checks(cfg: config_lib.JobConfig) -> list[Problem]:
    p: list[Problem] = []
    if not NAME_RE.match(cfg.name):
        fixed = re.sub(r"[^a-z0-9-]+", "-", cfg.name.lower()).strip("-")[:128] or "tf-train"
        p.append(problem("name", f"{cfg.name!r} is not a valid Vertex pipeline/job name (lower-case letters, "
                                 "digits and '-', starting with a letter or digit)", [fixed]))
    t = cfg.training
    if t.steps == 0 and t.epochs <= 0:
        p.append(problem("training.steps", "set training.steps or training.epochs to a positive number"))
    if t.steps < 0:
        p.append(problem("training.steps", f"must be 0 (use epochs) or positive, got {t.steps}"))
    _positive(p, "training.per_replica_batch_size", t.per_replica_batch_size)
    if t.global_batch_size < 0:
        p.append(problem("training.global_batch_size", f"must be 0 (derived) or positive, got {t.global_batch_size}"))
    if not t.learning_rate > 0:
        p.append(problem("training.learning_rate", f"must be positive, got {t.learning_rate}"))
    _positive(p, "training.log_every_steps", t.log_every_steps)
    if t.mixed_precision and t.precision == "float32":
        p.append(problem("training.mixed_precision", "is deprecated and contradicts training.precision=float32; "
                                                     "remove it and set training.precision", ["auto", "bfloat16", "float16"]))
    if t.epochs < 0:
        p.append(problem("training.epochs", f"must be 0 (use steps) or positive, got {t.epochs}", [0, 2]))
    if t.seed < 0:
        p.append(problem("training.seed", f"must be 0 or more (NumPy and TensorFlow seeds are unsigned), got {t.seed}",
                         [42]))
    for name in ("intra_op_threads", "inter_op_threads"):
        if getattr(t, name) < 0:
            p.append(problem(f"training.{name}", f"must be 0 (TensorFlow decides) or more, got {getattr(t, name)}",
                             [0, 2]))
    c = cfg.checkpoint
    for name in ("every_steps", "every_seconds"):
        if getattr(c, name) < 0:
            p.append(problem(f"checkpoint.{name}", f"cannot be negative, got {getattr(c, name):g} (0 disables that "
                                                   "trigger)", [0, 20 if name == "every_steps" else 600]))
    _positive(p, "checkpoint.keep", c.keep)
    d = cfg.data
    _positive(p, "data.image_size", d.image_size, 8)
    if cfg.model.name in ("mobilenet_v2", "resnet50") and d.image_size < 32:
        p.append(problem("data.image_size", f"{cfg.model.name} needs images of at least 32x32, got {d.image_size}",
                         [32, 64, 96, 128, 160, 180, 224]))
    _positive(p, "data.num_shards", d.num_shards)
    if not 0 <= d.validation_fraction <= 0.9:
        p.append(problem("data.validation_fraction", f"must be between 0 and 0.9, got {d.validation_fraction}"))
    p += data_value_problems(d)
    if d.source == "synthetic":
        _positive(p, "data.synthetic_classes", d.synthetic_classes, 2)
        _positive(p, "data.synthetic_images_per_class", d.synthetic_images_per_class, 2)
    elif d.source != "none" and not d.path:
        p.append(problem("data.path", f"data.source={d.source} needs a path (local folder, gs://bucket/dir or /gcs/bucket/dir)"))
    if not TIMEOUT_RE.match(cfg.scheduling.timeout):
        p.append(problem("scheduling.timeout", f"{cfg.scheduling.timeout!r} is not a duration in seconds", ["3600s", "86400s"]))
    else:
        p += duration_problems("scheduling.timeout", cfg.scheduling.timeout, ["86400s"])
    if cfg.scheduling.max_restarts < 0:
        p.append(problem("scheduling.max_restarts", f"must be 0 or more, got {cfg.scheduling.max_restarts}"))
    startup = cfg.scheduling.startup_timeout_s
    if not 0 <= startup <= STARTUP_TIMEOUT_MAX_S:
        p.append(problem("scheduling.startup_timeout_s", f"must be between 0 (no bound) and {STARTUP_TIMEOUT_MAX_S:,} s "
                                                         f"(7 days, Vertex's default job timeout), got {startup:g}",
                         [300, 900]))
    for i, pool in enumerate(cfg.topology.pools()):  # used pools' disks: jobs.hardware.vertex_rules
        size = pool.disk_spec.boot_disk_size_gb
        if pool.replica_count <= 0 and size < 0:
            name = ("chief", "worker", "parameter_server", "evaluator")[i]
            p.append(problem(f"topology.{name}.disk_spec.boot_disk_size_gb", f"cannot be negative, got {size} (0: "
                                                                              "Vertex's default)", [0, 100]))
    p += tensorboard_problems(cfg)
    p += scheduling_problems(cfg)
    if not cfg.container.command:
        p.append(problem("container.command", "is empty; the worker command to run", ["python -m trainers.task"]))
    p += trainer_shape_problems(cfg)
    p += gate_problems(cfg)  # serving.gate: jobs/gate.py
    p += eval_settings_problems(cfg.serving)  # serving.eval_*: jobs/evaluation.py
    p += tuning_problems(cfg)  # tuning: jobs/tuning
    return p


MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def trainer_shape_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The ``trainer`` section's rules that need no file system."""
    t, p = cfg.trainer, []
    if t.module and not MODULE_RE.match(t.module):
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


ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def trainer_env_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """``trainer.env``: names a shell and Vertex accept, and none that Vertex (or the local launcher) sets
    for every replica: a declared ``TF_CONFIG`` or ``AIP_MODEL_DIR`` would fight the cluster's own."""
    from jobs.replica_env import is_vertex_variable
    from trainers.cluster import LOCAL_LAUNCHER_ENV

    p = []
    for name in cfg.trainer.env:
        if not ENV_NAME_RE.match(name):
            p.append(problem(f"trainer.env.{name}", "is not an environment variable name (letters, digits and '_', "
                                                    "not starting with a digit)", ["TF_USE_LEGACY_KERAS"]))
        elif is_vertex_variable(name) or name == LOCAL_LAUNCHER_ENV:
            p.append(problem(f"trainer.env.{name}", "is set by Vertex AI (or the local launcher) for every replica: "
                                                    "a declared value would fight the job's own; read it in your "
                                                    "trainer instead, or declare another name", ["MY_SETTING"]))
    return p


#: GPUs that Dynamic Workload Scheduler (``scheduling.strategy: FLEX_START``) serves for Vertex training
#: ("Schedule training jobs based on resource availability": L4, A100, H100, H200, B200).
FLEX_START_GPUS = ("NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB",
                   "NVIDIA_H200_141GB", "NVIDIA_B200")
FLEX_START_MAX_S = 7 * 24 * 3600
#: A bound on a replica's start-up (``scheduling.startup_timeout_s``): Vertex's default job timeout (7 days). A longer
#: one is no bound at all, and past ~9.2e9 s Python's own waits overflow (``threading.TIMEOUT_MAX``).
STARTUP_TIMEOUT_MAX_S = 7 * 24 * 3600
PERSISTENT_RESOURCE_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
RESERVATION_RE = re.compile(r"^projects/[^/]+/zones/([a-z]+-[a-z]+[0-9]+)-[a-z]/reservations/[a-z]([-a-z0-9]*[a-z0-9])?$")


def scheduling_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The CustomJob's scheduling extras, as Vertex documents them: ``max_wait_duration`` only for
    ``FLEX_START`` (Dynamic Workload Scheduler: its GPUs, a timeout of at most 7 days, the same machine in
    every pool); the persistent resource id's form; the reservation affinity's type, key and values (a
    specific reservation is named by ``compute.googleapis.com/reservation-name`` and its full resource name,
    in a zone of the job's region)."""
    s, p = cfg.scheduling, []
    if s.max_wait_duration:
        if not TIMEOUT_RE.match(s.max_wait_duration):
            p.append(problem("scheduling.max_wait_duration", f"{s.max_wait_duration!r} is not a duration in seconds "
                                                             "(\"0s\": wait indefinitely)", ["1800s", "0s"]))
        else:
            p += duration_problems("scheduling.max_wait_duration", s.max_wait_duration, ["86400s", "0s"])
        if s.strategy != "FLEX_START":
            p.append(problem("scheduling.max_wait_duration", f"applies to scheduling.strategy FLEX_START only, not "
                                                             f"{s.strategy}: set the strategy or remove it", ["FLEX_START"]))
    if s.strategy == "FLEX_START":
        used = [(name, pool) for name, pool in zip(("chief", "worker", "parameter_server", "evaluator"),
                                                   cfg.topology.pools()) if pool.replica_count > 0]
        for name, pool in used:
            if pool.accelerator_type not in FLEX_START_GPUS or pool.accelerator_count <= 0:
                p.append(problem(f"topology.{name}.accelerator_type", f"FLEX_START (Dynamic Workload Scheduler) runs "
                                                                      "training on L4, A100, H100, H200 or B200 GPUs, "
                                                                      f"not {pool.accelerator_type or 'no GPU'}",
                                 FLEX_START_GPUS))
        shapes = {(pool.machine_type, pool.accelerator_type, pool.accelerator_count) for _, pool in used}
        if len(shapes) > 1:
            p.append(problem("scheduling.strategy", "FLEX_START needs the same machine (type, GPU type and count) in "
                                                    "every worker pool; the pools differ", ["STANDARD", "SPOT"]))
        if TIMEOUT_RE.match(s.timeout) and float(s.timeout[:-1]) > FLEX_START_MAX_S:
            p.append(problem("scheduling.timeout", f"{s.timeout} is over FLEX_START's 7 days", [f"{FLEX_START_MAX_S}s"]))
    if s.persistent_resource_id and not PERSISTENT_RESOURCE_RE.match(s.persistent_resource_id):
        p.append(problem("scheduling.persistent_resource_id", f"{s.persistent_resource_id!r} is not a persistent "
                                                              "resource id (1-63 lower-case letters, digits and '-', "
                                                              "starting with a letter)", ["my-training-cluster"]))
    r = s.reservation_affinity
    field = "scheduling.reservation_affinity"
    if not r.reservation_affinity_type and (r.key or r.values):
        p.append(problem(f"{field}.reservation_affinity_type", "is empty but key/values are set",
                         ["SPECIFIC_RESERVATION"]))
    elif r.reservation_affinity_type in ("ANY_RESERVATION", "NO_RESERVATION") and (r.key or r.values):
        p.append(problem(f"{field}.key", f"key and values name a reservation, which only SPECIFIC_RESERVATION takes, "
                                         f"not {r.reservation_affinity_type}", ["SPECIFIC_RESERVATION"]))
    elif r.reservation_affinity_type == "SPECIFIC_RESERVATION":
        if r.key != RESERVATION_KEY:
            p.append(problem(f"{field}.key", f"{r.key or 'empty'}: a specific reservation is named by its name label",
                             [RESERVATION_KEY]))
        if not r.values:
            p.append(problem(f"{field}.values", "names no reservation",
                             [f"projects/PROJECT/zones/{cfg.topology.region}-a/reservations/NAME"]))
        for value in r.values:
            m = RESERVATION_RE.match(value)
            if not m:
                p.append(problem(f"{field}.values", f"{value!r} is not a reservation's full resource name",
                                 [f"projects/PROJECT/zones/{cfg.topology.region}-a/reservations/NAME"]))
            elif m.group(1) != cfg.topology.region:
                p.append(problem(f"{field}.values", f"{value} is in {m.group(1)}, the job runs in "
                                                    f"{cfg.topology.region}: a reservation serves its own zone only",
                                 [f"projects/PROJECT/zones/{cfg.topology.region}-a/reservations/NAME"]))
    return p


def duration_problems(field: str, text: str, valid: list[str]) -> list[Problem]:
    """A duration the API can carry: ``google.protobuf.Duration`` (the type of ``Scheduling.timeout`` and
    ``max_wait_duration``) holds at most 315,576,000,000 s (10,000 years); the installed protobuf library says
    so itself, and a longer one is refused when the job is created, after the pipeline ran up to it. Vertex
    documents no lower cap of its own (its defaults: 7 days for ``timeout``, 24 hours for ``max_wait_duration``;
    FLEX_START's 7-day timeout is checked with FLEX_START)."""
    from google.protobuf import duration_pb2

    try:
        duration_pb2.Duration().FromJsonString(text)
    except ValueError as exc:
        limit = re.search(r"range \[(-?\d+), (\d+)\]", str(exc))
        most = f"{int(limit.group(2)):,} s" if limit else "the protobuf Duration range"
        return [problem(field, f"{text} is longer than a duration the Vertex API can carry (google.protobuf.Duration: "
                               f"at most {most})", valid)]
    return []


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


def tuned_range_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The built-in trainer takes a tuning parameter as an override of its own config field: every value the study
    can try (a range's ends, the listed values) must pass that field's own rules (:func:`_value_checks` and the
    hardware rules: a positive learning rate, a batch that divides by the replicas...)."""
    if cfg.user_trainer or not cfg.tuning.enabled:
        return []
    from jobs.tuning_spec import flag_value

    out: list[Problem] = []
    for name, param in cfg.tuning.parameters.items():
        listed = param.type in ("categorical", "discrete")
        candidates = list(param.values) if listed else [param.min, param.max]
        for i, value in enumerate(candidates):
            if value is None or (isinstance(value, float) and not math.isfinite(value)):
                continue
            try:
                tried = cfg.with_overrides([f"{name}={flag_value(param, value)}"])
            except (ConfigError, TypeError, ValueError):
                continue  # not a value of the field's type: tuning_problems says so
            there = [q for q in _field_rules(tried) if q.field == name]
            if there:
                section, _, key = name.partition(".")
                own = getattr(getattr(cfg, section), key)  # the job's own value passes the field's rules
                where = f"values without {value!r}" if listed else f"{('min', 'max')[i]}: {own}"
                out.append(problem(f"tuning.parameters.{name}", f"the study would try {flag_value(param, value)}, "
                                                                f"which {name} refuses: {there[0].message}",
                                   [where, *there[0].valid]))
                break
    return out


def _field_rules(cfg: config_lib.JobConfig) -> list[Problem]:
    """The config's own field rules (values and hardware), without the tuning section's."""
    no_study = dataclasses.replace(cfg, tuning=config_lib.Tuning())
    return _value_checks(no_study) + list(check_job(no_study.to_dict()).errors)


def _value_warnings(cfg: config_lib.JobConfig) -> list[Problem]:
    warnings = []
    if cfg.trainer.module and cfg.data.source != "none":
        warnings.append(problem("data.source", f"{cfg.data.source} makes the pipeline prepare TFRecords in "
                                               f"{config_lib.prepared_data_dir(cfg)}, which your trainer reads only if "
                                               "it knows that folder; set none when it reads its own data", ["none"]))
    return warnings


def _modules_in(root: Path, limit: int = 200) -> list[str]:
    """Modules under ``root`` (up to 4 levels, names ``python -m`` takes) that look runnable (``if __name__ ==
    "__main__"``), for a did-you-mean. Hidden folders, runs, builds and virtual environments are never walked:
    ``trainer.source_dir`` may be a big folder."""
    import os

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
    import difflib

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
    module in it, the requirements file, the sample request."""
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
    if cfg.serving.sample_request:
        p += sample_request_problems(cfg.serving.sample_request)
    if cfg.serving.eval_data:  # jobs/evaluation.py: exists, JSON Lines, instance and label, the sample's shape
        from jobs.evaluation import eval_data_problems

        p += eval_data_problems(cfg.serving.eval_data, cfg.serving.sample_request, cfg.serving.eval_task,
                                (t.source_dir,) if t.module and t.source_dir else ())
    return p


def sample_request_problems(path: str) -> list[Problem]:
    """``serving.sample_request``: a JSON file ``{"instances": [...]}`` (Vertex online prediction's body)."""
    import json

    example = ['{"instances": [[0.1, 0.2], [0.3, 0.4]]}']
    try:
        with open_regular(path, "serving.sample_request") as f:
            doc = json.load(f)
    except NotARegularFile as exc:
        return list(exc.problems)
    except FileNotFoundError:
        return [problem("serving.sample_request", f"{path} does not exist ({RELATIVE_RULE})",
                        found_elsewhere(path, [os.getcwd()]) or example)]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [problem("serving.sample_request", f"{path} is not valid JSON ({' '.join(str(exc).split())})", example)]
    if not isinstance(doc, dict) or not isinstance(doc.get("instances"), list) or not doc["instances"]:
        return [problem("serving.sample_request", f"{path} must be an object with a non-empty \"instances\" list, as "
                                                  "Vertex online prediction takes", example)]
    return []


TENSORBOARD_RE = re.compile(r"^projects/([^/]+)/locations/([a-z0-9-]+)/tensorboards/(\d+)$")


def tensorboard_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """``output.tensorboard``: a Vertex TensorBoard resource name in the job's region (Vertex refuses a
    custom job whose TensorBoard is in another region). The service account it also needs is given at
    submission (``run.py --service-account``) and checked there."""
    tb = cfg.output.tensorboard
    if not tb:
        return []
    region = cfg.topology.region
    m = TENSORBOARD_RE.match(tb)
    if not m:
        return [problem("output.tensorboard", f"{tb!r} is not a Vertex TensorBoard resource name",
                        [f"projects/PROJECT/locations/{region}/tensorboards/1234567890"])]
    if m.group(2) != region:
        return [problem("output.tensorboard", f"TensorBoard {tb!r} is in {m.group(2)}, the job runs in {region}: "
                                              "Vertex needs both in one region",
                        [f"projects/{m.group(1)}/locations/{region}/tensorboards/ID"])]
    return []


def data_value_problems(d: config_lib.Data) -> list[Problem]:
    """Encoding, cache budget and the prepare runner (Dataflow options: ``trainers.prepare_beam``)."""
    p: list[Problem] = []
    if not 1 <= d.jpeg_quality <= 100:
        p.append(problem("data.jpeg_quality", f"must be between 1 and 100, got {d.jpeg_quality}", [90, 95]))
    if d.shuffle_buffer < 0:
        p.append(problem("data.shuffle_buffer", f"must be 0 (no shuffling) or more, got {d.shuffle_buffer}", [1024]))
    if d.cache_budget_mb < -1:
        p.append(problem("data.cache_budget_mb", f"must be -1 (derived from memory), 0 (never cache) or a size in "
                                                 f"MB, got {d.cache_budget_mb}"))
    if d.source in ("images", "synthetic"):  # the pipeline prepares: the runner must be installed
        from trainers.prepare_beam import beam_missing_problems

        p += beam_missing_problems(d.prepare_runner)
    if d.prepare_runner == "dataflow":
        from trainers.prepare_beam import dataflow_problems

        p += dataflow_problems(d.dataflow)
    return p


def data_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The input folder, checked where it can be seen from here (``gs://`` is checked by the job)."""
    d = cfg.data
    if d.source in ("synthetic", "none") or not d.path or d.path.startswith("gs://"):
        return []
    root = Path(d.path)
    if not root.exists():
        layout = "<path>/<class>/*.jpg" if d.source == "images" else "a folder written by python -m trainers.prepare"
        where = (" (a Cloud Storage mount: it exists only on Vertex)" if d.path.startswith("/gcs/") else "")
        return [problem("data.path", f"{d.path} does not exist here{where}; expected {layout}; to run the job "
                                     "here without your data, generate a small image set",
                        ["--set data.source=synthetic", "--set data.path=LOCAL_FOLDER"])]
    if not root.is_dir():
        return [problem("data.path", f"{d.path} is not a folder")]
    if d.source == "tfrecord":
        if not (root / "manifest.json").exists():
            return [problem("data.path", f"{d.path} has no manifest.json; prepare it with "
                                         "python -m trainers.prepare --images IMAGES --out DIR, or use data.source=images")]
        return []
    classes = sorted(c for c in root.iterdir() if c.is_dir() and not c.name.startswith("."))
    if len(classes) < 2:
        return [problem("data.path", f"{d.path} must hold one sub-folder per class (<path>/<class>/*.jpg) and at least "
                                     f"2 classes; found {len(classes)}")]
    out = []
    for c in classes:
        if not any(f.suffix.lower() in IMAGE_EXT for f in c.iterdir() if f.is_file()):
            out.append(problem("data.path", f"class folder {c} has no .jpg/.jpeg/.png images; add images or remove the folder"))
    return out


def validate(cfg: config_lib.JobConfig, check_data: bool = True) -> Report:
    from jobs.hardware.today import retired_problems
    from jobs.hardware.vertex_rules import vertex_problems

    report = check_job(cfg.to_dict())
    vertex_errors, vertex_warnings = vertex_problems(cfg)  # disk_spec, nfs_mounts, the vertex section
    errors = (_value_checks(cfg) + list(report.errors) + retired_problems(cfg.to_dict()) + vertex_errors
              + tuned_range_problems(cfg) + placement_problems(cfg))
    if check_data:
        errors += data_problems(cfg) + trainer_file_problems(cfg)
    return Report(errors=errors, warnings=list(report.warnings) + _value_warnings(cfg) + vertex_warnings)


def _with_defaults(defaults: dict, doc: dict) -> dict:
    merged = dict(defaults)
    for key, value in doc.items():
        merged[key] = _with_defaults(defaults[key], value) if isinstance(value, dict) and isinstance(defaults.get(key), dict) else value
    return merged


def validate_document(doc: dict, check_data: bool = True) -> tuple[config_lib.JobConfig | None, Report]:
    """Validate a plain config document, reporting every problem at once: when its shape is wrong
    (unknown field, wrong type) the hardware rules still run on the raw document, so a bad field does
    not hide a bad machine type. Returns the typed config (None when the shape is wrong) and the report."""
    try:
        cfg = config_lib.from_dict(doc)
    except ConfigError as exc:
        shape = list(exc.problems)
        seen = {p.field for p in shape}
        raw = check_job(_with_defaults(config_lib.JobConfig().to_dict(), doc))
        return None, Report(errors=shape + [p for p in raw.errors if p.field not in seen], warnings=list(raw.warnings))
    return cfg, validate(cfg, check_data)


def load(config: str, overrides: list[str], region: str | None = None, check_data: bool = True,
         warn=lambda line: None) -> config_lib.JobConfig:
    """The job a command line names, validated: a preset or job file (``--config``), its ``--set`` overrides
    and, for a job submitted to ``--region``, that region (its machines and accelerators are checked there;
    a malformed region is left to the submit preflight to report). Each warning goes to ``warn`` first,
    errors or not; raises :class:`ConfigError` with every problem at once."""
    from jobs.hardware.rules import REGION_RE

    region_set = [f"topology.region={region}"] if region and REGION_RE.match(region) else []
    cfg, report = validate_document(config_lib.load_document(config, list(overrides) + region_set), check_data)
    for warning in report.warnings:
        warn(warning)
    if report.errors:
        raise ConfigError(report.errors)
    return cfg


def validate_or_raise(cfg: config_lib.JobConfig, check_data: bool = True) -> Report:
    report = validate(cfg, check_data)
    if report.errors:
        raise ConfigError(report.errors)
    return report


def running_locally_note(cfg: config_lib.JobConfig) -> str | None:
    """What a local run does differently from Vertex for this topology (said, not hidden). Only for the
    built-in trainer: a user's trainer makes its own strategy, and nothing here knows what it does."""
    if cfg.user_trainer:
        return None
    acc = cfg.topology.chief.accelerator_count
    if cfg.topology.strategy == "mirrored" and acc > 1:
        return (f"locally, MirroredStrategy uses this machine's GPUs, or {acc} logical CPU devices when it has "
                f"none; on Vertex it uses the {acc} x {cfg.topology.chief.accelerator_type or 'GPU'} of the config")
    if cfg.topology.strategy == "tpu":
        return "TPUStrategy needs a TPU: locally the training step stops with a clear message"
    return None
