"""Submit the training pipeline to Vertex AI Pipelines: preflight, compile, create, follow.

``python pipelines/run.py --config X --project P --region R --pipeline-root gs://BUCKET/PATH`` lands in
:func:`submit`. Everything Vertex would reject later (or accept and then fail on, an hour and a bill
later) is checked first, each problem one line naming the field, the rule and a valid alternative:

* ``--pipeline-root``: ``gs://bucket/path`` (Vertex rejects a bare bucket);
* pipeline name ``^[a-z0-9][a-z0-9-]{0,127}$`` and job id ``^[a-z][-a-z0-9]{0,127}$`` (``<name>-<UTC time>``);
* the trainer image: present, not the presets' ``my-project`` placeholder, in Artifact Registry in the
  job's region family (``R-docker.pkg.dev``, or the multi-region ``us``/``europe``/``asia-docker.pkg.dev``
  that contains R). ``gcr.io`` hosts are accepted with a warning: Container Registry is shut down, those
  hosts are served by Artifact Registry ``gcr.io`` repositories only where a project migrated;
  another registry is accepted with a warning (Vertex pulls only public images from it); a loopback
  registry is an error (Vertex cannot reach it);
* ``output.base_dir`` and ``data.path`` on Cloud Storage, without the presets' ``my-bucket`` placeholder;
* the job's machines and accelerators offered in R (the hardware catalog's rules, with region = R);
* ``--service-account`` / ``--network`` / ``--labels`` forms.

Then the pipeline is compiled exactly as ``--compile-only`` compiles it (or ``--template URI`` names an
uploaded one), created through ``jobs.cloud.vertex`` and, unless ``--no-wait``, followed to its end.
Exit status: 0 succeeded (or submitted with ``--no-wait``), 1 the job failed or a cloud call failed, 2 a
preflight problem, 130 Ctrl-C (the job itself goes on: following it stops).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from jobs.cloud import clients, vertex
from jobs.hardware.rules import REGION_RE
from jobs.images import PLACEHOLDER_PROJECT
from jobs.validate import NAME_RE as PIPELINE_NAME_RE
from trainers import config as config_lib
from trainers.errors import Problem, problem

JOB_ID_RE = re.compile(r"^[a-z][-a-z0-9]{0,127}$")
PROJECT_RE = re.compile(r"^(?:[a-z][a-z0-9.-]*:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")
PIPELINE_ROOT_RE = re.compile(r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]/[^/].*$")
SERVICE_ACCOUNT_RE = re.compile(r"^(?:[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z0-9.:-]+\.iam\.gserviceaccount\.com"
                                r"|[0-9]+-compute@developer\.gserviceaccount\.com"
                                r"|[a-z0-9.:-]+@appspot\.gserviceaccount\.com)$")
NETWORK_RE = re.compile(r"^projects/[0-9]+/global/networks/[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
PLACEHOLDER_BUCKET = "my-bucket"
MULTI_REGIONS = ("us", "europe", "asia")
TEMPLATE_RE = re.compile(r"^https://[a-z0-9-]+-kfp\.pkg\.dev/[^/]+/[^/]+/[^/]+/[^/]+$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The Vertex AI options of ``run.py`` (used with ``--project``)."""
    g = p.add_argument_group("Vertex AI Pipelines (with --project)")
    g.add_argument("--region", help="Vertex AI region of the pipeline job (default: topology.region)")
    g.add_argument("--pipeline-root", help="gs://BUCKET/PATH where Vertex keeps the pipeline's artifacts")
    g.add_argument("--service-account", help="run as NAME@PROJECT.iam.gserviceaccount.com (default: the "
                                             "Compute Engine default service account)")
    g.add_argument("--network", help="VPC peering network, projects/PROJECT_NUMBER/global/networks/NAME")
    g.add_argument("--labels", nargs="+", default=[], metavar="KEY=VALUE", help="labels of the pipeline job")
    g.add_argument("--no-wait", action="store_true", help="print the job's name and link, do not follow it")
    g.add_argument("--no-cache", action="store_true", help="run every step again (default: Vertex reuses the "
                                                          "results of steps whose inputs did not change)")
    g.add_argument("--api-endpoint", help="Vertex AI endpoint (e.g. a local stand-in http://127.0.0.1:PORT)")
    g.add_argument("--template", metavar="URI", help="run an uploaded template (https://REGION-kfp.pkg.dev/"
                                                     "PROJECT/REPO/PACKAGE/TAG) instead of compiling")
    g.add_argument("--poll-seconds", type=float, default=20.0, help="longest interval between state checks")


# --------------------------------------------------------------------------------------------------
# Preflight


def parse_labels(items: list[str]) -> tuple[dict[str, str], list[Problem]]:
    labels, problems = {}, []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(value):
            fixed = re.sub(r"[^a-z0-9_-]", "-", key.lower()).lstrip("-_0123456789")[:63] or "label"
            problems.append(problem("--labels", f"{item!r}: a label is key=value, key starting with a lower-case "
                                                "letter, both only lower-case letters, digits, '_' and '-' (<= 63)",
                                    [f"{fixed}={re.sub(r'[^a-z0-9_-]', '-', value.lower())[:63]}"]))
        else:
            labels[key] = value
    return labels, problems


def job_id_for(name: str, now: float | None = None) -> str:
    return f"{name}-{time.strftime('%Y%m%d%H%M%S', time.gmtime(now))}"


def _region_family_ok(host: str, region: str) -> bool:
    if host == f"{region}-docker.pkg.dev":
        return True
    return host in {f"{m}-docker.pkg.dev" for m in MULTI_REGIONS if region.split("-")[0] == m}


def image_problems(field: str, image: str, project: str, region: str) -> tuple[list[Problem], list[str]]:
    """(errors, warnings) for an image a Vertex job will pull."""
    fix = f"{region}-docker.pkg.dev/{project}/training/tf-trainer:latest"
    if not image:
        return [problem(field, "no trainer image: build and push one (python pipelines/run.py build) or set "
                               "container.image_uri / container.image_repository", [fix])], []
    host, _, rest = image.partition("/")
    if PLACEHOLDER_PROJECT in image.split("/")[:3] or f"/{PLACEHOLDER_PROJECT}/" in image:
        return [problem(field, f"{image} still names the presets' placeholder project {PLACEHOLDER_PROJECT!r}",
                        [image.replace(PLACEHOLDER_PROJECT, project)])], []
    if host.startswith(("127.", "localhost", "[::1]")):
        return [problem(field, f"{image} is on this machine's registry, which Vertex AI cannot reach", [fix])], []
    if host.endswith("-docker.pkg.dev"):
        if not _region_family_ok(host, region):
            near = [f"{region}-docker.pkg.dev/{rest}"] + [f"{m}-docker.pkg.dev/{rest}" for m in MULTI_REGIONS
                                                           if region.split("-")[0] == m]
            return [problem(field, f"{host} is not in the region family of {region}: every replica would pull "
                                   "across regions (slow start, egress charges); push the image to a registry "
                                   f"in {region}", near)], []
        return [], []
    if host.endswith("gcr.io"):
        return [], [f"{field}: {image} is on a gcr.io host: Container Registry is shut down; this works only where "
                    f"the host is served by an Artifact Registry gcr.io repository; prefer {region}-docker.pkg.dev"]
    return [], [f"{field}: {image} is not in Artifact Registry: Vertex AI can pull it only if it is public"]


def preflight(cfg: config_lib.JobConfig, project: str, region: str, pipeline_root: str, *,
              service_account: str = "", network: str = "", labels: list[str] = (), template: str = "",
              components_image: str = "") -> tuple[list[Problem], list[str], dict[str, str]]:
    """Every problem Vertex would have (errors), what it would do surprisingly (warnings), the labels.
    The config's own rules are checked again with region = ``region`` (``run.py`` has already printed
    their warnings). ``components_image``: ``run.py --image``, the components' base image."""
    from jobs import validate
    from jobs.images import component_image, job_image

    errors: list[Problem] = []
    warnings: list[str] = []
    if not PROJECT_RE.match(project or ""):
        errors.append(problem("--project", f"{project!r} is not a project id (6-30 lower-case letters, digits, '-', "
                                           "starting with a letter)", ["my-gcp-project"]))
    if not REGION_RE.match(region or ""):
        errors.append(problem("--region", f"{region!r} is not a region name", ["us-central1", "europe-west4"]))
    if not PIPELINE_ROOT_RE.match(pipeline_root or ""):
        bucket = (pipeline_root or "").removeprefix("gs://").split("/")[0] or "BUCKET"
        bare = not (pipeline_root or "").removeprefix("gs://").partition("/")[2].strip("/")
        why = "Vertex rejects a bare bucket" if bare else "bucket names are 3-63 lower-case letters, digits, '-', '_', '.'"
        errors.append(problem("--pipeline-root", f"{pipeline_root!r} must be gs://BUCKET/PATH ({why})",
                              [f"gs://{bucket if bare else 'BUCKET'}/pipeline-root"]))
    if not PIPELINE_NAME_RE.match(cfg.name):
        fixed = re.sub(r"[^a-z0-9-]+", "-", cfg.name.lower()).strip("-")[:100] or "tf-train"
        errors.append(problem("name", f"{cfg.name!r} is not a pipeline name (^[a-z0-9][a-z0-9-]{{0,127}}$)", [fixed]))
    else:
        job_id = job_id_for(cfg.name)
        if not JOB_ID_RE.match(job_id):
            fixed = ("tf-" + cfg.name if not cfg.name[0].isalpha() else cfg.name)[:113]
            errors.append(problem("name", f"the job id {job_id!r} would break Vertex's rule ^[a-z][-a-z0-9]{{0,127}}$ "
                                          "(it is the name plus a 15-character time stamp)", [fixed]))
    if service_account and not SERVICE_ACCOUNT_RE.match(service_account):
        errors.append(problem("--service-account", f"{service_account!r} is not a service account email",
                              [f"pipeline-runner@{project}.iam.gserviceaccount.com"]))
    if network and not NETWORK_RE.match(network):
        errors.append(problem("--network", f"{network!r} is not projects/PROJECT_NUMBER/global/networks/NAME "
                                           "(Vertex wants the project number, not its id)",
                              ["projects/123456789012/global/networks/default"]))
    if cfg.output.tensorboard and not service_account:
        errors.append(problem("--service-account", "output.tensorboard (Vertex TensorBoard) needs the training job "
                                                   "to run as a service account with roles/aiplatform.user and "
                                                   "roles/storage.objectAdmin on the bucket",
                              [f"pipeline-runner@{project}.iam.gserviceaccount.com"]))
    parent = cfg.serving.parent_model
    if parent and not re.match(rf"^projects/[^/]+/locations/{re.escape(region)}/models/[^/@]+$", parent):
        errors.append(problem("serving.parent_model", f"{parent!r} must be a model of the job's region, "
                                                      f"projects/PROJECT/locations/{region}/models/ID",
                              [f"projects/{project}/locations/{region}/models/{parent.rsplit('/', 1)[-1] or 'ID'}"]))
    parsed, label_problems = parse_labels(list(labels))
    errors += label_problems
    _, serving_problems = parse_labels([f"{k}={v}" for k, v in cfg.serving.labels.items()])
    errors += [Problem("serving.labels", p.message, p.valid) for p in serving_problems]
    base = cfg.output.base_dir
    if not base.startswith("gs://") or PLACEHOLDER_BUCKET in base.split("/")[2:3]:
        bucket = (pipeline_root or "").removeprefix("gs://").split("/")[0] or "BUCKET"
        errors.append(problem("output.base_dir", f"{base!r}: a Vertex job writes its model, checkpoints and logs to "
                                                 "Cloud Storage; give a gs:// folder of your own bucket",
                              [f"gs://{bucket}/runs/{cfg.name}"]))
    if PLACEHOLDER_BUCKET in cfg.data.path.replace("/gcs/", "gs://").split("/")[2:3]:
        errors.append(problem("data.path", f"{cfg.data.path!r} still names the presets' placeholder bucket "
                                           f"{PLACEHOLDER_BUCKET!r}", [cfg.data.path.replace(PLACEHOLDER_BUCKET, "BUCKET")]))
    elif cfg.data.path and not cfg.data.path.startswith(("gs://", "/gcs/")):
        errors.append(problem("data.path", f"{cfg.data.path!r} is on this machine; Vertex replicas read gs://BUCKET/... "
                                           "or /gcs/BUCKET/...", ["gs://BUCKET/flower_photos"]))
    if not cfg.container.image_uri and job_image(cfg):
        errors.append(problem("container.image_uri", f"is not set, so the replicas would pull {job_image(cfg)}, a tag "
                                                     "`run.py build` never pushes (it tags by content); build and push "
                                                     "first and pass the reference it prints",
                              ["--set container.image_uri=$(python pipelines/run.py build --config CONFIG | tail -n 1)"]))
    images = {"container.image_uri": job_image(cfg),
              "--image" if components_image else "the components' image": components_image or component_image(cfg)}
    if template and not TEMPLATE_RE.match(template):
        errors.append(problem("--template", f"{template!r} is not a template in Artifact Registry (aiplatform loads "
                                            "https://REGION-kfp.pkg.dev/PROJECT/REPO/PACKAGE/TAG-or-sha256:HEX)",
                              [f"https://{region}-kfp.pkg.dev/{project}/REPO/{cfg.name}/latest"]))
    if template:  # the components' image is inside the template; the replicas' image comes from the config
        images = {"container.image_uri": images["container.image_uri"]}
    for image, field in {image: field for field, image in reversed(images.items())}.items():  # once per image
        e, w = image_problems(field, image, project, region)
        errors += e
        warnings += w
    in_region = config_lib.apply_overrides_to(cfg, [f"topology.region={region}"]) if REGION_RE.match(region or "") else cfg
    report = validate.validate(in_region, check_data=False)
    errors += [Problem(p.field if p.field != "topology.region" else "--region", p.message, p.valid)
               for p in report.errors if p.field != "name"]
    return errors, warnings, parsed


# --------------------------------------------------------------------------------------------------
# The flow


def submit(cfg: config_lib.JobConfig, args: argparse.Namespace, out=print, err=None) -> int:
    """Preflight, compile (or take ``--template``), create the job, print its name and link, follow it."""
    err = err or (lambda line: print(line, file=sys.stderr))
    region = args.region or cfg.topology.region
    errors, warnings, labels = preflight(cfg, args.project, region, args.pipeline_root or "",
                                         service_account=args.service_account or "", network=args.network or "",
                                         labels=args.labels, template=args.template or "",
                                         components_image=getattr(args, "image", None) or "")
    for w in warnings:
        err(f"warning: {w}")
    for p in errors:
        err(f"error: {p}")
    if errors:
        return 2
    if region != cfg.topology.region:
        out(f"note: the job runs in --region {region} (the config says topology.region={cfg.topology.region})")
        cfg = config_lib.apply_overrides_to(cfg, [f"topology.region={region}"])
    job_id = job_id_for(cfg.name)
    link = ""
    params = {"config_json": cfg.to_json(), "target": "vertex", "location": region,
              "service_account": args.service_account or "", "network": args.network or ""}
    try:
        vertex.init(args.project, region, args.api_endpoint)
        with tempfile.TemporaryDirectory() as tmp:
            template = args.template
            if not template:
                from pipelines.training_pipeline import compile_pipeline

                template = compile_pipeline(cfg, str(Path(tmp) / "pipeline.yaml"), base_image=args.image)
            client, job = vertex.submit_pipeline(
                template, project=args.project, location=region, job_id=job_id, display_name=cfg.name,
                pipeline_root=args.pipeline_root, parameter_values=params, labels=labels,
                service_account=args.service_account, network=args.network,
                enable_caching=False if args.no_cache else None)
        link = vertex.console_url(args.project, region, job_id)
        out(f"submitted pipeline job {job.name}")
        out(f"  {link}")
        if args.no_wait:
            return 0
        state, message = vertex.follow(client, job.name, poll_s=args.poll_seconds, log=out)
    except clients.CloudError as exc:
        err(f"error: {exc}")
        return 1
    except KeyboardInterrupt:  # before the job exists nothing was created; after, only following stops
        err("interrupted" + (f": pipeline job {job_id} goes on in Vertex AI; cancel it at {link}" if link else ""))
        return 130
    if state != "PIPELINE_STATE_SUCCEEDED":
        err(f"error: pipeline job {job_id} ended {state.replace('PIPELINE_STATE_', '')}: {message}")
        return 1
    out(f"pipeline job {job_id} succeeded; model and logs under {cfg.output.base_dir}")
    return 0


def register_main(argv: list[str]) -> int:
    """``run.py register-model``: register an exported SavedModel folder (gs://) in the Model Registry
    with the same request the pipeline's Vertex branch sends (``jobs.cloud.vertex.model_upload_request``)."""
    from trainers.errors import ConfigError

    p = argparse.ArgumentParser(prog="python pipelines/run.py register-model", description=register_main.__doc__)
    p.add_argument("--config", default="local")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--project", required=True)
    p.add_argument("--region", help="default: topology.region")
    p.add_argument("--model-dir", required=True, help="gs://BUCKET/PATH holding saved_model.pb")
    p.add_argument("--api-endpoint")
    args = p.parse_args(argv)
    try:
        cfg = config_lib.load(args.config, args.overrides)
    except ConfigError as exc:
        for prob in exc.problems:
            print(f"error: {prob}", file=sys.stderr)
        return 2
    region = args.region or cfg.topology.region
    problems = []
    if not PROJECT_RE.match(args.project):
        problems.append(problem("--project", f"{args.project!r} is not a project id", ["my-gcp-project"]))
    if not REGION_RE.match(region):
        problems.append(problem("--region", f"{region!r} is not a region name", ["us-central1"]))
    if not re.match(r"^gs://[a-z0-9][a-z0-9._-]+[a-z0-9]/.+", args.model_dir):
        problems.append(problem("--model-dir", f"{args.model_dir!r}: Vertex serves models from Cloud Storage, the folder "
                                               "holding saved_model.pb", ["gs://BUCKET/runs/NAME/model"]))
    for prob in problems:
        print(f"error: {prob}", file=sys.stderr)
    if problems:
        return 2
    request = vertex.model_upload_request(cfg, args.model_dir, args.project, region)
    try:
        name = vertex.upload_model(request, region, args.api_endpoint)
    except clients.CloudError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"registered {name} (container {request['model']['containerSpec']['imageUri']})")
    return 0
