"""The job config: one typed schema, loaded from YAML presets/files plus ``--set key=value`` overrides.

A job config describes everything needed to run one training job, locally or on Vertex AI:

* ``trainer``    a user's own trainer (``python -m <module> <args>`` in ``source_dir``); empty = the built-in one;
* ``data``       where the images or TFRecord shards are (local path, ``gs://`` or ``/gcs/``), or ``none``;
* ``model``      which architecture (the seed lab's small CNN, or a ``keras.applications`` network);
* ``training``   steps/epochs, per-replica batch (global batch = per-replica x replicas), optimizer;
* ``checkpoint`` how often to save and how many to keep;
* ``topology``   the strategy and the four Vertex worker pools (chief, worker, parameter_server,
  evaluator) with machine type, accelerator type/count and replica count;
* ``container``  the image (and, for a trainer that is not a Python module, the raw container command);
* ``output``     the base output directory (Vertex derives AIP_MODEL_DIR etc. from it);
* ``scheduling`` STANDARD/SPOT, restart on worker restart, timeout, local restarts.
* ``serving``    the Model Registry entry (prediction container, display name, parent model, labels), the
  sample request the verify step sends to the exported model, and the gate before registration.
* ``vertex``     what only Vertex does with the job: service account, network, web access, reserved IP ranges,
  Private Service Connect (per pool: ``topology.<pool>.disk_spec`` and ``nfs_mounts``);
* ``placement``  the regions and scheduling strategies Vertex may run the job in, and a ladder of hardware
  alternatives to ``topology`` (``hardware``), in order (``vtp plan`` picks the first rung that fits, the cheapest
  option of it; a capacity failure falls over to the next);
* ``budget``     the most the job may cost per hour and in all (``vtp plan`` refuses a plan above it);
* ``validation`` ``strict``: what the hardware catalog does not know is an error, not a warning;
* ``tuning``     a hyperparameter study (metric, goal, parameters, algorithm, trial counts); empty = no tuning
  (``jobs.tuning``: trials here, then a Vertex HyperparameterTuningJob).
* ``notify``     where a run's end is sent (a webhook whose URL is read from the environment or Secret Manager,
  Vertex's e-mail), ``jobfile.config_notify``.

Relative paths in a job *file* are relative to that file's folder (``trainer.source_dir``,
``serving.sample_request``, ``serving.eval_data``, ``data.path``, ``data.prepared_dir``, ``output.base_dir``;
``trainer.requirements`` is relative to ``trainer.source_dir``); in a preset and in ``--set`` they are
relative to the current directory. :func:`load` makes them absolute, so the config passed between pipeline
steps never depends on a working directory.

Loading checks the *shape* (unknown fields, wrong types) and reports every problem at once as
``field.path: what is wrong; valid choices: ...``. :func:`validate` then checks the *meaning*
(hardware rules from the catalog, data folder, strategy vs topology) before anything is spent.
This module is the schema (one dataclass per section, :class:`JobConfig` the whole) and the ways in
(:func:`load`, :func:`load_json`, :func:`from_dict`; :func:`read`, the one parser under them all); reading files and presets and applying overrides is
``jobfile.config_files``, turning plain data into the dataclasses with field paths ``jobfile.coerce``; the
sections only Vertex acts on (a pool's disk and NFS mounts, ``scheduling``, ``vertex``, ``placement``, ``budget``)
are ``jobfile.config_vertex``. It never imports TensorFlow.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Literal

from jobfile import coerce
from jobfile.config_files import apply_overrides, load_document
from jobfile.config_notify import Notify
from jobfile.config_vertex import Budget, DiskSpec, NfsMount, Placement, Scheduling, Vertex
from jobfile.errors import ConfigError, Problem, problem
from jobfile.paths import join


Strategy = Literal["one_device", "mirrored", "multi_worker", "parameter_server", "tpu"]
#: Strategies people ask for that this project refuses with the reason (a fact with its source and date), never a
#: bare "not allowed": ``{name: (why, the strategy to use instead)}``.
REFUSED_STRATEGIES = {
    # github.com/horovod/horovod/releases (read 2026-11-27): v0.28.1 "Build fixes (ROCm, GCC 12)" is the latest,
    # its last TensorFlow fixes are for 2.12; socket.dev/pypi/package/horovod lists 0.28.1 as PyPI's latest
    "horovod": ("Horovod's last release, 0.28.1 (2023), does not build for today's TensorFlow (its last "
                "compatibility fixes are for TensorFlow 2.12); MultiWorkerMirroredStrategy does the same synchronous ring all-reduce without it: port the "
                "script with docs/trainer.md's Horovod guide (hvd.init, rank, DistributedOptimizer and the broadcast "
                "each have an equivalent)", "multi_worker"),
}


@dataclasses.dataclass
class Trainer:
    """A user's own trainer. Empty ``module``: the built-in trainer (``python -m trainers.task``)."""
    #: the user's code: the replicas' working directory (and first on their PYTHONPATH) locally, and the
    #: last layer of the image (its WORKDIR) for Vertex; empty = the job file's folder.
    source_dir: str = ""
    #: every replica runs ``python -m <module> <args>``, e.g. ``trainer.task`` (the Vertex labs' layout).
    module: str = ""
    args: list[str] = dataclasses.field(default_factory=list)
    #: a pip requirements file, relative to ``source_dir``: installed in the image before the code.
    requirements: str = ""
    #: environment variables every replica gets, as Vertex's ``container_spec.env`` sets them: in every pool
    #: of the CustomJob, in every replica container (``--runner docker``) and every replica process here.
    #: A replica sees nothing else of the caller's shell (``jobs.rules.replica_env``), so a trainer that
    #: needs ``TF_USE_LEGACY_KERAS=1`` declares it here and gets it on Vertex too.
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Data:
    #: ``none``: the trainer reads its own data (a user's trainer); the pipeline has no prepare step.
    source: Literal["synthetic", "images", "tfrecord", "none"] = "synthetic"
    #: images: ``<path>/<class>/*.jpg``; tfrecord: a folder written by ``python -m trainers.prepare``;
    #: synthetic: where a small generated image folder is written (empty = under output.base_dir).
    path: str = ""
    #: where prepared TFRecords go for ``images``/``synthetic`` (empty = ``<output.base_dir>/data``).
    prepared_dir: str = ""
    image_size: int = 64
    validation_fraction: float = 0.2
    num_shards: int = 4
    synthetic_classes: int = 3
    synthetic_images_per_class: int = 40
    shuffle_buffer: int = 1024
    #: how shard records store pixels: ``raw`` uint8 (fast to read, ~97 KB per 180x180 image) or ``jpeg``
    #: (~10x smaller; decoded in the input pipeline, in parallel) -- for data larger than memory.
    encoding: Literal["raw", "jpeg"] = "raw"
    jpeg_quality: int = 95
    #: cache the train split in RAM only if it fits this many MB; -1 = derived from the machine's memory
    #: and the replicas per machine (``trainers.input_cache``); 0 = never cache (always stream).
    cache_budget_mb: int = -1
    #: seeded random flip + crop, stateless (keyed on seed and example position) so resume stays exact.
    augment: bool = False
    #: ``local``: threads in this process; ``beam``: Apache Beam DirectRunner here; ``dataflow``: Apache
    #: Beam on Google Cloud Dataflow (needs the ``dataflow`` block).
    prepare_runner: Literal["local", "beam", "dataflow"] = "local"
    dataflow: "Dataflow" = dataclasses.field(default_factory=lambda: Dataflow())


@dataclasses.dataclass
class Dataflow:
    """Dataflow options for ``data.prepare_runner: dataflow`` (validated without any cloud call)."""
    project: str = ""
    region: str = "us-central1"
    #: gs:// folder for Dataflow's temporary files (required).
    temp_location: str = ""
    #: gs:// folder for staged packages; empty = temp_location.
    staging_location: str = ""
    service_account: str = ""
    max_num_workers: int = 0
    machine_type: str = ""
    #: the worker container (required): FROM apache/beam_python3.11_sdk:2.77.0 with ``pip install .[cpu]``
    #: (Dataflow custom containers must derive from the Beam SDK image; see ``trainers.prepare_beam``).
    sdk_container_image: str = ""


@dataclasses.dataclass
class Model:
    name: Literal["small_cnn", "mobilenet_v2", "resnet50"] = "small_cnn"


@dataclasses.dataclass
class Training:
    epochs: int = 2
    #: total optimizer steps; 0 = epochs x steps per epoch.
    steps: int = 0
    per_replica_batch_size: int = 8
    #: 0 = per_replica_batch_size x replicas; if set it must divide evenly by the replicas.
    global_batch_size: int = 0
    optimizer: Literal["adam", "sgd"] = "adam"
    learning_rate: float = 0.001
    seed: int = 42
    #: seeded, op-deterministic: a resumed run ends bitwise equal to an uninterrupted one.
    deterministic: bool = True
    #: ``auto`` (``trainers.precision_auto``), where the device has two candidates (a CPU with AVX512_BF16/AMX:
    #: float32 vs bf16; Ampere+ GPUs: float32 vs bf16; V100/T4/P100: float32 vs float16 + loss scaling): a decision
    #: measured earlier on this machine (the user's cache folder), else a measurement of the job's own step where
    #: the run repays it, else the faster seen on the device's kind (``trainers/precision_priors.yaml``; float32
    #: where nothing is known); TPUs bf16; float32 elsewhere. An explicit value is never overridden.
    precision: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    #: deprecated: use ``precision`` (true meant "mixed where the device supports it" = ``auto``).
    mixed_precision: bool = False
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    log_every_steps: int = 10


@dataclasses.dataclass
class Checkpoint:
    every_steps: int = 20
    every_seconds: float = 0.0
    keep: int = 3


@dataclasses.dataclass
class Pool:
    replica_count: int = 0
    machine_type: str = ""
    accelerator_type: str = ""
    accelerator_count: int = 0
    #: a TPU VM slice's topology, the whole slice (``4x4`` on ct5lp-hightpu-4t: 4 hosts), in the chief pool.
    tpu_topology: str = ""
    disk_spec: DiskSpec = dataclasses.field(default_factory=DiskSpec)
    nfs_mounts: list[NfsMount] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Chief(Pool):
    """Pool 0: the chief, always one replica (Vertex runs ``workerPoolSpecs[0]`` once); a ``chief`` section that
    names only its machine has that one replica."""
    replica_count: int = 1


def _chief() -> Chief:
    return Chief(replica_count=1, machine_type="n1-standard-4")


@dataclasses.dataclass
class Topology:
    strategy: Strategy = "multi_worker"
    region: str = "us-central1"
    #: legacy AI Platform TPU runtime version (e.g. "2.11" or "pytorch-1.11").
    tpu_tf_version: str = ""
    chief: Chief = dataclasses.field(default_factory=_chief)
    worker: Pool = dataclasses.field(default_factory=Pool)
    parameter_server: Pool = dataclasses.field(default_factory=Pool)
    evaluator: Pool = dataclasses.field(default_factory=Pool)

    def pools(self) -> list[Pool]:
        """Worker pools in Vertex order: 0 chief, 1 worker, 2 parameter server, 3 evaluator."""
        return [self.chief, self.worker, self.parameter_server, self.evaluator]

    def replica_counts(self) -> list[int]:
        return [p.replica_count for p in self.pools()]


#: The built-in trainer's command (``trainer.module`` empty and ``container.command`` left as is).
BUILTIN_COMMAND = ["python", "-m", "trainers.task"]


@dataclasses.dataclass
class Container:
    #: the exact image every replica runs; empty = chosen by ``jobs.images`` from ``image_repository`` and
    #: the pools' accelerators (cpu: the repository, gpu: ``<repository>-gpu``, tpu: ``<repository>-tpu``).
    image_uri: str = ""
    #: where ``pipelines/run.py build`` pushes the trainer image (no tag: the tag is the sources' hash).
    image_repository: str = ""
    #: a user trainer's image is built FROM this trainer image, pinned by digest (``REPO[:TAG]@sha256:...``);
    #: empty = ``run.py build`` builds (or finds) the pools' variant of this repository's trainer image.
    base_image: str = ""
    #: the raw container command, for a trainer that is not a Python module (``["bash", "run.sh"]``);
    #: ``trainer.module`` sets the command for you and cannot be combined with a changed ``command``.
    command: list[str] = dataclasses.field(default_factory=lambda: list(BUILTIN_COMMAND))
    args: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Output:
    base_dir: str = "./runs/local"
    #: a Vertex TensorBoard instance (``projects/P/locations/REGION/tensorboards/ID``, same region as the job)
    #: that the custom job streams its TensorBoard logs to; needs the job to run as a service account.
    tensorboard: str = ""


@dataclasses.dataclass
class Validation:
    """How strictly the job is checked: ``strict`` refuses what the hardware catalog does not know (a machine or
    accelerator type it has never seen, a region without data) instead of warning (``run.py --strict``)."""
    strict: bool = False


@dataclasses.dataclass
class Gate:
    """The bar a verified model must pass before it is registered (``jobs.steps.gate``); empty: no bar."""
    #: ``"METRIC OP NUMBER"`` with OP one of ``>=``, ``>``, ``<=``, ``<`` (e.g. ``accuracy >= 0.8``,
    #: ``val_rmse <= 0.3``) on what the run measured: the verify step's evaluation, the training figures,
    #: the tuning study's best metric.
    thresholds: list[str] = dataclasses.field(default_factory=list)
    #: also beat ``serving.parent_model``'s default version on the thresholds' metrics (each in its
    #: threshold's direction), as its Model Registry evaluation records them.
    better_than_parent: bool = False
    #: a tuned job: register only a trial's model that beats the baseline (the job as it stands, run beside
    #: the study: ``tuning.baseline``) on the study's metric, in the study's direction; when the study found
    #: nothing better, the baseline's model goes on and this bar refuses it.
    better_than_baseline: bool = False


@dataclasses.dataclass
class Serving:
    """How the verified model is registered in the Vertex AI Model Registry (Vertex runs only)."""
    #: prediction container; empty = Google's prebuilt TensorFlow container for the region and device
    #: (``jobs.cloud.apis.vertex.prebuilt_serving_image``: tf2-cpu/tf2-gpu 2.15, the newest Google publishes).
    image_uri: str = ""
    #: Model Registry display name; empty = the job ``name``.
    display_name: str = ""
    #: ``projects/P/locations/R/models/ID``: register as a new version of that model instead of a new model.
    parent_model: str = ""
    labels: dict[str, str] = dataclasses.field(default_factory=dict)
    #: a JSON file ``{"instances": [...]}`` as Vertex online prediction takes it: the verify step runs the
    #: model's ``serving_default`` signature on it (empty: on an input generated from the signature).
    sample_request: str = ""
    #: held-out examples for an independent verdict on any model: a JSON Lines file, one example per line,
    #: ``{"instance": <one element of the sample request's instances>, "label": <value>}``, local (relative to
    #: the job file) for a run here, ``gs://`` for Vertex. The verify step evaluates the exported model on it
    #: (``jobs.evaluation.examples_file``): regression -> RMSE, MAE, the RMSE of predicting the labels' mean; classification
    #: -> accuracy, per-class precision and recall, the most-common-class baseline. Empty: no such verdict.
    eval_data: str = ""
    #: how ``eval_data`` is judged: ``auto`` decides from the labels and the model's output (``jobs.evaluation.examples_file``
    #: documents the rule), or say it: ``regression`` | ``classification``.
    eval_task: Literal["auto", "regression", "classification"] = "auto"
    #: which output of ``serving_default`` is the prediction, for a model with several (empty: the only one,
    #: or the one named like a prediction: ``probabilities``, ``predictions``, ...).
    eval_output: str = ""
    #: what the model must pass to be registered at all; a model that misses a bar stops the run.
    gate: Gate = dataclasses.field(default_factory=Gate)


@dataclasses.dataclass
class Parameter:
    """One hyperparameter of ``tuning.parameters`` (the names of aiplatform's ``hyperparameter_tuning`` specs).
    Every replica of a trial gets it as ``--NAME=VALUE`` after ``trainer.args``, as Vertex passes it."""
    #: double and integer: a range (``min``, ``max``, ``scale``); categorical: strings; discrete: numbers.
    type: Literal["double", "integer", "categorical", "discrete"] | None = None
    min: float | None = None
    max: float | None = None
    #: how the search spreads the range: ``log`` favours small values, ``reverse_log`` values near ``max``;
    #: unset = linear (Vertex's SCALE_TYPE_UNSPECIFIED); never for categorical.
    scale: Literal["linear", "log", "reverse_log"] | None = None
    values: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Tuning:
    """A hyperparameter study: no ``parameters`` = no tuning (``jobs.tuning``)."""
    #: the tag the trainer reports with cloudml-hypertune (``report_hyperparameter_tuning_metric``).
    metric: str = ""
    goal: Literal["minimize", "maximize"] | None = None
    parameters: dict[str, Parameter] = dataclasses.field(default_factory=dict)
    #: unset = Vertex's default (Bayesian optimization; TPE here), or ``bayesian`` said out loud.
    algorithm: Literal["bayesian", "random", "grid"] | None = None
    #: required with parameters (Vertex's maxTrialCount); a grid search ends sooner when its points run out.
    max_trials: int = 0
    #: trials at once: processes here (each trial is the whole topology), trial CustomJobs on Vertex.
    parallel_trials: int = 1
    #: failed trials that fail the study; 0 = Vertex decides (here: the first failed trial does).
    max_failed_trials: int = 0
    #: run the job as it stands (the trainer with its own arguments and no tuning flags; the built-in trainer
    #: with the config's values) beside the trials, measured the same way: the model that goes on is the
    #: better of the best trial and this baseline (``jobs.rules.tuning_rules.handed_on_run``). Here one more run of the
    #: study; on Vertex a CustomJob beside the HyperparameterTuningJob. false: no baseline, the best trial goes on.
    baseline: bool = True

    @property
    def enabled(self) -> bool:
        return bool(self.parameters)


@dataclasses.dataclass
class JobConfig:
    name: str = "tf-train"
    trainer: Trainer = dataclasses.field(default_factory=Trainer)
    data: Data = dataclasses.field(default_factory=Data)
    model: Model = dataclasses.field(default_factory=Model)
    training: Training = dataclasses.field(default_factory=Training)
    checkpoint: Checkpoint = dataclasses.field(default_factory=Checkpoint)
    topology: Topology = dataclasses.field(default_factory=Topology)
    container: Container = dataclasses.field(default_factory=Container)
    output: Output = dataclasses.field(default_factory=Output)
    scheduling: Scheduling = dataclasses.field(default_factory=Scheduling)
    serving: Serving = dataclasses.field(default_factory=Serving)
    tuning: Tuning = dataclasses.field(default_factory=Tuning)
    vertex: Vertex = dataclasses.field(default_factory=Vertex)
    placement: Placement = dataclasses.field(default_factory=Placement)
    budget: Budget = dataclasses.field(default_factory=Budget)
    validation: Validation = dataclasses.field(default_factory=Validation)
    notify: Notify = dataclasses.field(default_factory=Notify)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    # -- rewrites: every change the job side makes to a typed config, each returning a new config --------
    def with_overrides(self, overrides: list[str]) -> "JobConfig":
        """``--set``-style ``key.path=value`` overrides on top of this config."""
        return self if not overrides else from_dict(apply_overrides(self.to_dict(), list(overrides)))

    def with_image(self, image_uri: str) -> "JobConfig":
        """``container.image_uri`` replaced (a built image by digest wins over the config's); "" changes nothing."""
        if not image_uri:
            return self
        return dataclasses.replace(self, container=dataclasses.replace(self.container, image_uri=image_uri))

    def with_data(self, data_uri: str) -> "JobConfig":
        """Reading the prepared TFRecords at ``data_uri`` (a Dataset from ``prepare_data`` or elsewhere)."""
        return dataclasses.replace(self, data=dataclasses.replace(self.data, source="tfrecord", path=data_uri))

    def with_images(self, images_uri: str) -> "JobConfig":
        """Preparing the image folder ``images_uri`` (``<class>/*.jpg``) into ``<base>/data``."""
        return dataclasses.replace(self, data=dataclasses.replace(self.data, source="images", path=images_uri))

    def for_vertex(self) -> "JobConfig":
        """The config as a Vertex run carries it: no path of the submitter's machine. A user trainer's code is
        the image's WORKDIR there (``trainer.source_dir`` is dropped); the sample request travels as the
        pipeline's ``sample_request`` parameter (its path is dropped); a price file's figures travel in the placement
        the plan hands the pipeline (``budget.prices`` is dropped). Other local paths (``output.base_dir``,
        ``data.path``) are refused by the preflight, not rewritten."""
        return dataclasses.replace(self, trainer=dataclasses.replace(self.trainer, source_dir=""),
                                   serving=dataclasses.replace(self.serving, sample_request=""),
                                   budget=dataclasses.replace(self.budget, prices=""))

    @property
    def user_trainer(self) -> bool:
        """True when the replicas run a user's code (``trainer.module`` or a changed ``container.command``)
        rather than the built-in trainer."""
        return bool(self.trainer.module) or list(self.container.command) != BUILTIN_COMMAND


# --------------------------------------------------------------------------------------------------
# The ways in: plain data (``jobfile.coerce``), a file or preset (``jobfile.config_files``), JSON.


def read(data: Any) -> tuple[JobConfig, list[Problem]]:
    """THE parser of a job's plain data: the typed config and every problem of its shape, never raising. A field
    that is wrong keeps its default and its problem says so (``field: what is wrong; valid choices: ...``), so a
    reader that must judge the rest anyway (the hardware rules, on a job whose shape is wrong: a bad field must not
    hide a bad machine type) reads the same sections, with the same defaults, as :func:`from_dict`."""
    problems: list[Problem] = []
    topology = data.get("topology") if isinstance(data, dict) else None
    refused = REFUSED_STRATEGIES.get(str(topology.get("strategy")).lower()) if isinstance(topology, dict) else None
    if refused:
        problems.append(problem("topology.strategy", f"{topology['strategy']!r} is not supported: {refused[0]}",
                                [refused[1]]))
        data = {**data, "topology": {k: v for k, v in topology.items() if k != "strategy"}}
    return coerce.build(JobConfig, data, "", problems), problems


def from_dict(data: dict[str, Any]) -> JobConfig:
    """Typed config from plain data (defaults fill the gaps). Raises ConfigError with every problem."""
    cfg, problems = read(data)
    if problems:
        raise ConfigError(problems)
    return cfg


def load(source: str | None = "local", overrides: list[str] | None = None) -> JobConfig:
    """Load a preset name or YAML file, apply overrides, return the typed config (shape-checked)."""
    return from_dict(load_document(source, overrides))


def load_json(text: str) -> JobConfig:
    """The config as passed between pipeline steps and to Vertex replicas (``JobConfig.to_json``)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([problem("config_json", f"not valid JSON: {exc}")]) from None
    return from_dict(doc)


def resolved_base_dir(cfg: JobConfig) -> str:
    base = cfg.output.base_dir
    if base.startswith("gs://"):
        return base.rstrip("/")
    return os.path.abspath(base)


def prepared_data_dir(cfg: JobConfig) -> str:
    """Where the TFRecord shards the trainer reads are."""
    if cfg.data.source == "tfrecord":
        return cfg.data.path
    return cfg.data.prepared_dir or join(resolved_base_dir(cfg), "data")


def image_dir(cfg: JobConfig) -> str:
    if cfg.data.source == "images":
        return cfg.data.path
    return cfg.data.path or join(resolved_base_dir(cfg), "images")
