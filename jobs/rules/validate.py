"""Everything that can be checked before a job spends anything, in one call.

``validate(cfg)`` returns a Report with every error and warning at once: value ranges, the job name,
the data folder (exists, has class folders, none empty), and the hardware rules of the catalog
(``jobs.rules.hardware.rules.check_job``: machine x accelerator counts, vCPU/memory, regions, zones, TPU
rules, strategy vs topology, batch divisibility). It runs at the start of every ``run.py`` command and
as the pipeline's first component. No TensorFlow import: it takes well under a second.

The sections with rules of their own have their own spec modules, called from here: ``jobs.rules.scheduling_section``,
``jobs.rules.trainer_section``, ``jobs.rules.tuning_section``, ``jobs.rules.gate_section``, ``jobs.rules.placement`` (and its
hardware ladder, ``jobs.rules.ladder``), ``jobs.rules.notify_section``,
``jobs.evaluation.examples_file`` (serving's held-out data) and the hardware rules (``jobs.rules.hardware``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path

from jobfile import config as config_lib
from jobfile.config_files import RELATIVE_RULE, found_elsewhere, load_document
from jobfile.errors import ConfigError, Problem, problem
from jobfile.regular_file import NotARegularFile, open_regular
from trainers.prepare_beam import beam_missing_problems, dataflow_problems
from trainers.resource_names import REGION_RE, fits
from jobs.evaluation.examples_file import eval_data_problems, settings_problems as eval_settings_problems
from jobs.rules.gate_section import gate_problems
from jobs.rules.hardware.rules import Report, check_job
from jobs.rules.hardware import prices
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.hardware.today import retired_problems
from jobs.rules.hardware.vertex_rules import vertex_problems
from jobs.rules.notify_section import notify_problems, notify_warnings
from jobs.rules.ladder import ladder_problems, ladder_warnings
from jobs.rules.placement import SCHEDULING_STRATEGIES, placement_problems
from jobs.rules.scheduling_section import scheduling_problems
from jobs.rules.trainer_section import builtin_only_problems, trainer_file_problems, trainer_shape_problems
from jobs.rules.tuning_section import flag_value, tuning_problems, tuning_warnings

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
IMAGE_EXT = {".jpg", ".jpeg", ".png"}


def _positive(problems: list[Problem], field: str, value: float, minimum: float = 1, hint: str = "") -> None:
    if value < minimum:
        problems.append(problem(field, f"must be at least {minimum:g}, got {value!r}{hint}"))


def _value_checks(cfg: config_lib.JobConfig) -> list[Problem]:
    p: list[Problem] = []
    if not NAME_RE.fullmatch(cfg.name):
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
    p += scheduling_problems(cfg)  # scheduling: jobs/rules/scheduling_section.py
    for i, pool in enumerate(cfg.topology.pools()):  # used pools' disks: jobs.rules.hardware.vertex_rules
        size = pool.disk_spec.boot_disk_size_gb
        if pool.replica_count <= 0 and size < 0:
            name = ("chief", "worker", "parameter_server", "evaluator")[i]
            p.append(problem(f"topology.{name}.disk_spec.boot_disk_size_gb", f"cannot be negative, got {size} (0: "
                                                                              "Vertex's default)", [0, 100]))
    p += tensorboard_problems(cfg)
    if not cfg.container.command:
        p.append(problem("container.command", "is empty; the worker command to run", ["python -m trainers.task"]))
    p += trainer_shape_problems(cfg)  # trainer: jobs/rules/trainer_section.py
    p += gate_problems(cfg)  # serving.gate: jobs/steps/gate.py
    p += eval_settings_problems(cfg.serving)  # serving.eval_*: jobs/evaluation/examples_file.py
    p += tuning_problems(cfg)  # tuning: jobs/tuning
    return p


def tuned_range_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The built-in trainer takes a tuning parameter as an override of its own config field: every value the study
    can try (a range's ends, the listed values) must pass that field's own rules (:func:`_value_checks` and the
    hardware rules: a positive learning rate, a batch that divides by the replicas...)."""
    if cfg.user_trainer or not cfg.tuning.enabled:
        return []
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
    return _value_checks(no_study) + list(check_job(no_study).errors)


def _value_warnings(cfg: config_lib.JobConfig) -> list[Problem]:
    warnings = []
    if cfg.trainer.module and cfg.data.source != "none":
        warnings.append(problem("data.source", f"{cfg.data.source} makes the pipeline prepare TFRecords in "
                                               f"{config_lib.prepared_data_dir(cfg)}, which your trainer reads only if "
                                               "it knows that folder; set none when it reads its own data", ["none"]))
    return warnings


def sample_request_problems(path: str) -> list[Problem]:
    """``serving.sample_request``: a JSON file ``{"instances": [...]}`` (Vertex online prediction's body)."""
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
    m = TENSORBOARD_RE.fullmatch(tb)
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
        p += beam_missing_problems(d.prepare_runner)
    if d.prepare_runner == "dataflow":
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


def serving_file_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """The serving section's files, checked on this machine: the sample request, the held-out data
    (``jobs.evaluation.examples_file``: exists, JSON Lines, instance and label, the sample's shape)."""
    s, t, p = cfg.serving, cfg.trainer, []
    if s.sample_request:
        p += sample_request_problems(s.sample_request)
    if s.eval_data:
        p += eval_data_problems(s.eval_data, s.sample_request, s.eval_task,
                                (t.source_dir,) if t.module and t.source_dir else ())
    return p


def price_file_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """``budget.prices``, read on this machine: in the price table's form (``jobs.rules.hardware.prices``)."""
    if not cfg.budget.prices:
        return []
    try:
        prices.read_price_file(cfg.budget.prices)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def list_limit_problems(cfg: config_lib.JobConfig) -> list[Problem]:
    """One problem per list of the job file longer than Vertex could ever use, said with the limit: ``placement.regions``
    at most the regions Vertex AI serves (each at most once), ``placement.strategies`` its three scheduling
    strategies. Checked before the lists' entries are (a 1,000-region list is one line at once, not 1,000 checks per
    option of a plan)."""
    from_catalog = len(load_catalog().known_regions)
    out = []
    for field, items, limit, why in (
            ("placement.regions", cfg.placement.regions, from_catalog,
             f"the {from_catalog} regions Vertex AI serves (the hardware catalog), each at most once"),
            ("placement.strategies", cfg.placement.strategies, len(SCHEDULING_STRATEGIES),
             f"Vertex's {len(SCHEDULING_STRATEGIES)} scheduling strategies ({', '.join(SCHEDULING_STRATEGIES)}), each at most once")):
        if len(items) > limit:
            out.append(problem(field, f"lists {len(items):,} entries, more than {why}: at most {limit}",
                               list(SCHEDULING_STRATEGIES) if field == "placement.strategies" else ["us-central1", "europe-west4"]))
    return out


def validate(cfg: config_lib.JobConfig, check_data: bool = True) -> Report:
    limits = list_limit_problems(cfg)
    if limits:  # nothing else is checked of a list no job could use: it is one line, at once
        return Report(errors=limits, warnings=[])
    report = check_job(cfg)
    vertex_errors, vertex_warnings = vertex_problems(cfg)  # disk_spec, nfs_mounts, the vertex section
    errors = (_value_checks(cfg) + list(report.errors) + retired_problems(cfg.to_dict()) + vertex_errors
              + tuned_range_problems(cfg) + placement_problems(cfg) + notify_problems(cfg))
    if cfg.placement.hardware and not errors:  # each rung judged as this job is (jobs.rules.ladder)
        errors += ladder_problems(cfg, lambda job: validate(job, check_data=False))
    if check_data:
        errors += data_problems(cfg) + trainer_file_problems(cfg) + serving_file_problems(cfg) + price_file_problems(cfg)
    return Report(errors=errors, warnings=list(report.warnings) + _value_warnings(cfg) + vertex_warnings
                  + notify_warnings(cfg) + tuning_warnings(cfg) + ladder_warnings(cfg))


def validate_document(doc: dict, check_data: bool = True) -> tuple[config_lib.JobConfig | None, Report]:
    """Validate a plain config document, reporting every problem at once: when its shape is wrong
    (unknown field, wrong type) the hardware rules still run on the raw document, so a bad field does
    not hide a bad machine type. Returns the typed config (None when the shape is wrong) and the report."""
    try:
        cfg = config_lib.from_dict(doc)
    except ConfigError as exc:
        shape = list(exc.problems)
        seen = {p.field for p in shape}
        raw = check_job(doc)  # the same parser, its problems of shape already said above
        return None, Report(errors=shape + [p for p in raw.errors if p.field not in seen], warnings=list(raw.warnings))
    report = validate(cfg, check_data)
    return cfg, Report(errors=report.errors, warnings=[*report.warnings, *builtin_only_problems(doc, cfg)])


def load(config: str, overrides: list[str], region: str | None = None, check_data: bool = True,
         warn=lambda line: None) -> config_lib.JobConfig:
    """The job a command line names, validated: a preset or job file (``--config``), its ``--set`` overrides
    and, for a job submitted to ``--region``, that region (its machines and accelerators are checked there;
    a malformed region is left to the submit preflight to report). Each warning goes to ``warn`` first,
    errors or not; raises :class:`ConfigError` with every problem at once."""
    region_set = [f"topology.region={region}"] if region and fits(REGION_RE, region) else []
    cfg, report = validate_document(load_document(config, list(overrides) + region_set), check_data)
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
