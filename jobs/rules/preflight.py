"""What Vertex would reject (or accept and then fail on, an hour and a bill later), checked before anything
is sent: ONE preflight for ``run.py --project`` (submit) and ``run.py upload-template``, so a template can
never carry what submit refuses. Each problem is one line naming the field, the rule and a valid choice.

* project ids, regions (the Vertex AI regions the aiplatform SDK knows; an unknown one is refused with
  the list), Cloud Storage URIs (``gs://`` only; bucket naming rules; the presets' ``my-bucket``);
* every image a job pulls (:func:`image_problems`, through THE reference parser ``jobs.images``):
  pinned by digest (a tag can move between submission and the replicas' pull; ``run.py build`` prints
  ``REPO:TAG@sha256:...``), not the presets' ``my-project`` placeholder, not on this machine, and in
  Artifact Registry in the job's region family (``R-docker.pkg.dev`` or the ``us``/``europe``/``asia``
  multi-region containing R); ``gcr.io`` hosts and other registries are warnings (public images only);
* the job itself (:func:`job_problems`): name, ``output.base_dir`` / ``data.path`` / ``serving.eval_data`` on
  Cloud Storage, the machines and accelerators offered in the region (the hardware catalog), Model Registry
  fields.
"""
from __future__ import annotations

import re
from typing import Iterable

from jobs.rules import validate
from jobs.rules.command_line import shown
from jobs.rules.hardware.catalog import load_catalog
from jobs.rules.hardware.names import region_verdict
from jobs.rules.image_reference import BuildError, parse_reference
from jobs.rules.job_image import PLACEHOLDER_PROJECT, component_image, job_image
from jobs.rules.notify_section import vertex_problems as notify_problems
from jobs.rules.labels import LABEL_KEY_RE, LABEL_VALUE_RE
from jobs.rules.validate import NAME_RE as PIPELINE_NAME_RE, sample_request_problems
from jobfile import config as config_lib
from jobfile.errors import Problem, problem
from jobfile.paths import gcs_uri
from trainers.resource_names import BUCKET_RE, PROJECT_RE, REGION_RE, fits

PLACEHOLDER_BUCKET = "my-bucket"
#: How a refusal's "valid choices" name what only the user knows: a form, never a placeholder value that the same
#: check would refuse again (``gs://BUCKET/...`` is not a bucket name; ``my-gcp-project`` is nobody's project).
BUCKET_FORM = "<your bucket>"
PROJECT_FORM = "<your project id>"
MULTI_REGIONS = ("us", "europe", "asia")


def vertex_regions() -> list[str]:
    """The regions Vertex AI serves (the aiplatform SDK's own list, without the global endpoint)."""
    from google.cloud.aiplatform.constants import base

    return sorted(r for r in base.SUPPORTED_REGIONS if r != "global")


def say(errors: Iterable[object], warnings: Iterable[str], err=None) -> bool:
    """The preflight's verdict, said: one ``warning:`` line each, then one ``error:`` line each (on stderr unless
    ``err`` is given); True when there was an error (nothing may be sent or written then)."""
    import sys

    err = err or (lambda line: print(line, file=sys.stderr))
    errors = [e for e in errors if e]
    for w in warnings:
        err(f"warning: {w}")
    for e in errors:
        err(f"error: {e}")
    return bool(errors)


def project_problems(flag: str, project: str | None) -> list[Problem]:
    if project is None:
        return [problem(flag, "is required", [PROJECT_FORM])]
    if not fits(PROJECT_RE, project):
        return [problem(flag, f"{project!r} is not a project id (6-30 lower-case letters, digits, '-', starting "
                              "with a letter)", [PROJECT_FORM])]
    return []


def region_problems(flag: str, region: str | None) -> list[Problem]:
    """A region Vertex AI serves; anything else is refused with the full list (every image kind a job
    uses, trainer, components and prediction container, lives in a region)."""
    regions = vertex_regions()
    if region in regions:
        return []

    near = (list(region_verdict(region or "", regions).suggest) or load_catalog().suggest(region or "", regions)
            or ["us-central1"])
    return [problem(flag, f"{region!r} is not a Vertex AI region (did you mean {', '.join(near)}?)", regions)]


def gcs_problems(flag: str, uri: str | None, example: str, path_required: bool = True) -> list[Problem]:
    """``gs://BUCKET[/PATH]`` only: other schemes, bad bucket names and the presets' placeholder bucket are
    refused, each with its own reason."""
    if not uri:
        return [problem(flag, "is required: a Cloud Storage folder", [example])]
    if not uri.startswith("gs://"):
        scheme = uri.split("://")[0] + "://" if "://" in uri else "a path on this machine (Vertex cannot see it)"
        return [problem(flag, f"{uri!r}: only Cloud Storage (gs://) works here, not {scheme}", [example])]
    bucket, _, path = uri[5:].partition("/")
    if not fits(BUCKET_RE, bucket) or ".." in bucket:
        return [problem(flag, f"{uri!r}: {bucket!r} is not a bucket name (3-63 lower-case letters, digits, '-', "
                              "'_', '.', starting and ending with a letter or digit)", [example])]
    if bucket == PLACEHOLDER_BUCKET:
        return [problem(flag, f"{uri!r} still names the presets' placeholder bucket {PLACEHOLDER_BUCKET!r}",
                        [uri.replace(PLACEHOLDER_BUCKET, BUCKET_FORM, 1)])]
    if path_required and not path.strip("/"):
        return [problem(flag, f"{uri!r} is a whole bucket; give a folder in it", [f"gs://{bucket}/pipeline-root"])]
    return []


def parse_labels(items: Iterable[str], field: str = "--labels") -> tuple[dict[str, str], list[Problem]]:
    labels, problems = {}, []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY_RE.fullmatch(key) or not LABEL_VALUE_RE.fullmatch(value):
            fixed = re.sub(r"[^a-z0-9_-]", "-", key.lower()).lstrip("-_0123456789")[:63] or "label"
            problems.append(problem(field, f"{item!r}: a label is key=value, key starting with a lower-case "
                                           "letter, both only lower-case letters, digits, '_' and '-' (<= 63)",
                                    [f"{fixed}={re.sub(r'[^a-z0-9_-]', '-', value.lower())[:63]}"]))
        else:
            labels[key] = value
    return labels, problems


def _region_family_ok(host: str, region: str) -> bool:
    if host == f"{region}-docker.pkg.dev":
        return True
    return host in {f"{m}-docker.pkg.dev" for m in MULTI_REGIONS if region.split("-")[0] == m}


def image_problems(field: str, image: str, project: str, region: str) -> tuple[list[Problem], list[str]]:
    """(errors, warnings) for an image a Vertex job will pull (see the module doc)."""
    project = project if fits(PROJECT_RE, project) else PROJECT_FORM
    fix = f"{region}-docker.pkg.dev/{project}/training/tf-trainer:<tag>@sha256:<digest>"
    if not image:
        return [problem(field, shown("no trainer image: build and push one (python pipelines/run.py build) and pass "
                                     "the reference it prints"), [fix])], []
    try:
        ref = parse_reference(image)
    except BuildError as exc:
        return [problem(field, str(exc), [fix])], []
    if PLACEHOLDER_PROJECT in ref.path.split("/")[:1] or ref.registry == PLACEHOLDER_PROJECT:
        # the valid choice is pinned too: an image by tag alone would be refused again, below
        yours = ref.repository.replace(PLACEHOLDER_PROJECT, project)
        return [problem(field, f"{image} still names the presets' placeholder project {PLACEHOLDER_PROJECT!r}",
                        [f"{yours}:{ref.tag or '<tag>'}@sha256:<digest>"])], []
    if ref.registry.startswith(("127.", "localhost", "[::1]")):
        return [problem(field, f"{image} is on this machine's registry, which Vertex AI cannot reach", [fix])], []
    errors, warnings = [], []
    if ref.registry.endswith("-docker.pkg.dev"):
        if not _region_family_ok(ref.registry, region):
            rest = str(ref)[len(ref.registry) + 1:]
            near = [f"{region}-docker.pkg.dev/{rest}"] + [f"{m}-docker.pkg.dev/{rest}" for m in MULTI_REGIONS
                                                           if region.split("-")[0] == m]
            errors.append(problem(field, f"{ref.registry} is not in the region family of {region}: every replica "
                                         "would pull across regions (slow start, egress charges); push the image to "
                                         f"a registry in {region}", near))
    elif ref.registry == "gcr.io" or ref.registry.endswith(".gcr.io"):
        warnings.append(f"{field}: {image} is on a gcr.io host: Container Registry is shut down; this works only where "
                        f"the host is served by an Artifact Registry gcr.io repository; prefer {region}-docker.pkg.dev")
    else:
        warnings.append(f"{field}: {image} is not in Artifact Registry: Vertex AI can pull it only if it is public")
    if not ref.pinned:
        pinned = f"{ref.repository}:{ref.tag or '<tag>'}@sha256:<digest>"
        errors.append(problem(field, f"{image} is not pinned by digest: a tag can move between now and the replicas' "
                                     + shown("pull; pass the reference `python pipelines/run.py build` prints"),
                              [pinned]))
    return errors, warnings


def images_problems(images: dict[str, str], project: str, region: str) -> tuple[list[Problem], list[str]]:
    """:func:`image_problems` for each distinct image ({field: image}), once per image."""
    errors: list[Problem] = []
    warnings: list[str] = []
    for image, field in {image: field for field, image in reversed(list(images.items()))}.items():
        e, w = image_problems(field, image, project, region)
        errors += e
        warnings += w
    return errors, warnings


def placeholder_free(cfg: config_lib.JobConfig) -> config_lib.JobConfig:
    """``cfg`` as a compiled pipeline or a submitted job carries it: a ``container.image_repository`` that still
    names the presets' placeholder project is left out when nothing builds into it (``container.image_uri`` names
    the image); without ``image_uri`` it is the image's repository, and :func:`image_problems` refuses it."""
    repository = cfg.container.image_repository
    if cfg.container.image_uri and PLACEHOLDER_PROJECT in repository.split("/")[1:2]:
        return cfg.with_overrides(["container.image_repository="])
    return cfg


def job_problems(cfg: config_lib.JobConfig, project: str, region: str, *, components_image: str = "",
                 replicas_only: bool = False) -> tuple[list[Problem], list[str]]:
    """What submit and upload-template share: the job's name, storage, images (``components_image``:
    ``--image``; ``replicas_only``: the components' image is checked elsewhere, e.g. inside a template),
    Model Registry fields, and the config's own rules with region = ``region``."""
    errors: list[Problem] = []
    warnings: list[str] = []
    if not PIPELINE_NAME_RE.fullmatch(cfg.name):
        fixed = re.sub(r"[^a-z0-9-]+", "-", cfg.name.lower()).strip("-")[:100] or "tf-train"
        errors.append(problem("name", f"{cfg.name!r} is not a pipeline name (^[a-z0-9][a-z0-9-]{{0,127}}$)", [fixed]))
    errors += gcs_problems("output.base_dir", cfg.output.base_dir, f"gs://{BUCKET_FORM}/runs/{cfg.name}")
    # a replica's /gcs/B/P is the bucket's gs://B/P: both are Cloud Storage
    if cfg.data.source not in ("synthetic", "none") or cfg.data.path:
        errors += gcs_problems("data.path", gcs_uri(cfg.data.path), f"gs://{BUCKET_FORM}/flower_photos")
    if cfg.data.prepared_dir:
        errors += gcs_problems("data.prepared_dir", gcs_uri(cfg.data.prepared_dir),
                               f"gs://{BUCKET_FORM}/flowers-tfrecords")
    if cfg.serving.eval_data:  # read by the verify step on Vertex: Cloud Storage, like every other path
        errors += gcs_problems("serving.eval_data", gcs_uri(cfg.serving.eval_data), f"gs://{BUCKET_FORM}/eval.jsonl")
    if cfg.serving.sample_request:  # its content travels in the pipeline: it must be readable here

        errors += sample_request_problems(cfg.serving.sample_request)
    parent = cfg.serving.parent_model
    if parent and not re.match(rf"^projects/[^/]+/locations/{re.escape(region)}/models/[^/@]+$", parent):
        errors.append(problem("serving.parent_model", f"{parent!r} must be a model of the job's region, "
                                                      f"projects/PROJECT/locations/{region}/models/ID",
                              [f"projects/{project}/locations/{region}/models/{parent.rsplit('/', 1)[-1] or 'ID'}"]))
    _, serving_problems = parse_labels([f"{k}={v}" for k, v in cfg.serving.labels.items()], "serving.labels")
    errors += serving_problems
    errors += notify_problems(cfg)  # the exit handler runs on Vertex: no variable of this machine reaches it
    images = {"container.image_uri": job_image(cfg)}
    if not replicas_only:
        images["--image" if components_image else "the components' image"] = components_image or component_image(cfg)
    e, w = images_problems(images, project, region)
    errors += e
    warnings += w
    if region.split("-")[0] not in MULTI_REGIONS and not cfg.serving.image_uri:
        warnings.append(f"serving.image_uri: Google publishes no prebuilt prediction container in {region}'s family; "
                        "the model is registered with the us-docker.pkg.dev one (pulled across regions)")
    # a job with a hardware ladder runs on the rung the plan picks in its region (the plan judged every rung there):
    # its topology as written is checked where it was written
    moved = fits(REGION_RE, region) and not cfg.placement.hardware
    in_region = cfg.with_overrides([f"topology.region={region}"]) if moved else cfg
    report = validate.validate(in_region, check_data=False)
    errors += [Problem(p.field if p.field != "topology.region" else "--region", p.message, p.valid)
               for p in report.errors if p.field != "name"]
    return errors, warnings
