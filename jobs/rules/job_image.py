"""Which trainer image a job runs: the image variants, their repositories, a job's and its components' image.

Image variants (``containers/Dockerfile`` ``--build-arg VARIANT=...``, pyproject extras of the same name):

=======  ===========================================  ===============================================
variant  TensorFlow in the image (+ tf_keras)         chosen when the job's pools ask for
=======  ===========================================  ===============================================
cpu      tensorflow 2.21 (the full wheel)             no accelerator
gpu      tensorflow[and-cuda] 2.21 (CUDA/cuDNN wheels) a GPU (``NVIDIA_*``) in any pool
tpu      tensorflow-tpu 2.20 + libtpu (no 2.21 build)  a TPU (``cloud-tpu``, TPU VM machine, ``TPU_*``)
=======  ===========================================  ===============================================

Why one repository per variant (``<container.image_repository>`` for cpu, ``...-gpu``, ``...-tpu``): the
content tag (:func:`jobs.images.context.content_tag`) names the sources, and a CPU and a GPU image of the
same sources must not fight over one tag. ``container.image_uri``, when set, wins over all of this.

Building and pushing: ``jobs.images.builders`` (one interface; a Docker engine or Cloud Build). Every failure
here is a :class:`~jobs.rules.image_reference.BuildError` whose text is one line.
"""
from __future__ import annotations

from typing import Any, Mapping

from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.image_reference import BuildError, parse_reference

VARIANTS = ("cpu", "gpu", "tpu")
#: the project the presets name in container.image_repository; never a real build target
PLACEHOLDER_PROJECT = "my-project"
#: repository suffix per variant (cpu is the plain repository: what components and CPU jobs run).
VARIANT_SUFFIX = {"cpu": "", "gpu": "-gpu", "tpu": "-tpu"}

# ---- which image ------------------------------------------------------------------------------------

def _pools(cfg: Any) -> list[Mapping[str, Any]]:
    doc = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
    topology = doc.get("topology") or {}
    return [topology.get(name) or {} for name in ("chief", "worker", "parameter_server", "evaluator")]


def variant_for(cfg: Any) -> str:
    """``gpu`` when any pool with replicas asks for a GPU, ``tpu`` for a TPU, else ``cpu``.

    ``cfg``: a :class:`jobfile.config.JobConfig` or its dict. TPUs are recognised through the hardware
    catalog (legacy ``cloud-tpu`` machines, TPU VM machine types, ``TPU_*`` accelerators).
    """
    catalog = load_catalog()
    doc = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
    found = set()
    if (doc.get("topology") or {}).get("strategy") == "tpu":
        found.add("tpu")
    for pool in _pools(doc):
        if not pool.get("replica_count"):
            continue
        accel, machine = str(pool.get("accelerator_type") or ""), str(pool.get("machine_type") or "")
        entry = catalog.machines.get(machine)
        if (entry is not None and entry.tpu) or (accel and catalog.is_tpu(accel)) or pool.get("tpu_topology"):
            found.add("tpu")
        elif accel and int(pool.get("accelerator_count") or 0) > 0:
            found.add("gpu")
    if "tpu" in found:
        return "tpu"
    return "gpu" if "gpu" in found else "cpu"


def repository_for(base_repository: str, variant: str) -> str:
    """``base`` for cpu, ``base-gpu`` / ``base-tpu`` for the others."""
    if variant not in VARIANTS:
        raise BuildError(f"unknown image variant {variant!r}; valid choices: {', '.join(VARIANTS)}")
    return parse_reference(base_repository).repository + VARIANT_SUFFIX[variant]


def build_repository(cfg: Any, variant: str | None = None) -> str:
    """The repository a build for this job pushes to: ``container.image_repository`` + variant suffix.

    A config that sets only ``container.image_uri`` builds into that image's repository (no suffix: the
    user named the image). Neither set -> :class:`BuildError`.
    """
    container = cfg.container if hasattr(cfg, "container") else None
    base = getattr(container, "image_repository", "") if container is not None else ""
    explicit = getattr(container, "image_uri", "") if container is not None else ""
    if base:
        repository = repository_for(base, variant or variant_for(cfg))
        if f"/{PLACEHOLDER_PROJECT}/" in repository:
            raise BuildError(f"container.image_repository {base} still names the presets' placeholder project "
                             f"{PLACEHOLDER_PROJECT!r}: --set container.image_repository=REGION-docker.pkg.dev/"
                             "PROJECT/REPO/tf-trainer, or pass --image REPO_URI")
        return repository
    if explicit:
        return parse_reference(explicit).repository
    raise BuildError("the config names no image repository: set container.image_repository "
                     "(e.g. us-central1-docker.pkg.dev/PROJECT/REPO/tf-trainer) or pass --image")


def job_image(cfg: Any, built: str | None = None) -> str:
    """The image a job's replicas run: ``container.image_uri`` when set (explicit wins), else ``built``
    (what a build step produced, ``REPO:TAG@sha256:...``), else ``<variant repository>:latest``."""
    explicit = getattr(cfg.container, "image_uri", "")
    if explicit:
        return explicit
    if built:
        return built
    base = getattr(cfg.container, "image_repository", "")
    return f"{repository_for(base, variant_for(cfg))}:latest" if base else ""


def component_image(cfg: Any) -> str:
    """Pipeline components always run the CPU image (they never train): the explicit image, else the
    cpu repository ``:latest``."""
    explicit = getattr(cfg.container, "image_uri", "")
    if explicit:
        return explicit
    base = getattr(cfg.container, "image_repository", "")
    return f"{repository_for(base, 'cpu')}:latest" if base else ""
