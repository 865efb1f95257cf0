"""Lightweight KFP components: thin wrappers over ``jobs.stages`` (all logic lives in the library).

Each function body imports what it needs, because KFP ships only the function's source to the task.
The task's image must have this repository installed (``containers/Dockerfile``); locally, kfp.local's
SubprocessRunner runs them in this Python environment.
"""
from typing import NamedTuple

from kfp.dsl import HTML, ClassificationMetrics, Dataset, Markdown, Metrics, Model, Output


def build_image(config_json: str, build_context_uri: str = "", dockerfile: str = "containers/Dockerfile",
                project: str = "", api_endpoint: str = "") -> str:
    """The image every replica runs: built by Cloud Build from ``build_context_uri`` (a gs:// context
    tarball) and returned by digest; with no context, the config's image, without any cloud call."""
    from trainers import config as config_lib
    from jobs import stages

    image = stages.trainer_image(config_lib.load_json(config_json), build_context_uri, dockerfile, project,
                                 api_endpoint or None)
    print(f"trainer image: {image}")
    return image


def validate_config(config_json: str, image_uri: str = "") -> NamedTuple("ValidatedJob", [
    ("config_json", str), ("display_name", str), ("worker_pool_specs", list), ("base_output_directory", str),
    ("scheduling_strategy", str), ("restart_job_on_worker_restart", bool), ("timeout", str), ("model_dir", str),
    ("warnings", str), ("tensorboard", str),
]):
    """Check every rule before anything is spent; emit the normalised config and the Vertex job spec
    (with ``image_uri``, e.g. ``build_image``'s output, as every pool's image when given)."""
    from collections import namedtuple

    from trainers import config as config_lib
    from jobs import stages
    from jobs import validate

    cfg = stages.with_image(config_lib.load_json(config_json), image_uri)  # a built image wins
    report = validate.validate_or_raise(cfg)
    for w in report.warnings:
        print(f"warning: {w}")
    spec = stages.vertex_job(cfg)
    out = namedtuple("ValidatedJob", ["config_json", "display_name", "worker_pool_specs", "base_output_directory",
                                      "scheduling_strategy", "restart_job_on_worker_restart", "timeout", "model_dir",
                                      "warnings", "tensorboard"])
    return out(cfg.to_json(), spec["display_name"], spec["worker_pool_specs"], spec["base_output_directory"],
               spec["scheduling_strategy"], spec["restart_job_on_worker_restart"], spec["timeout"],
               stages.output_dirs(cfg)["model"], "\n".join(str(w) for w in report.warnings), spec["tensorboard"])


def custom_training_job(image: str):
    """The Vertex branch's training: one CustomJob with the worker pools by position (chief 0, workers 1,
    parameter servers 2, evaluator 3), created, followed, cancelled with the pipeline (``jobs.cloud.custom_job``
    says why not GCPC's CustomTrainingJobOp). A container component running ``python3 -m jobs.cloud.custom_job``
    in ``image``, as GCPC's launcher runs: Python must be the container's own process to get the SIGTERM of a
    cancelled pipeline, and a lightweight component runs under ``sh -ec``, which does not pass it on."""
    from kfp import dsl

    @dsl.container_component
    def custom_training_job(display_name: str, worker_pool_specs: list, base_output_directory: str, tensorboard: str,
                            restart_job_on_worker_restart: bool, scheduling_strategy: str, timeout: str,
                            service_account: str, network: str, location: str, project: str,
                            gcp_resources: dsl.OutputPath(str), api_endpoint: str = ""):
        return dsl.ContainerSpec(image=image, command=["python3", "-u", "-m", "jobs.cloud.custom_job"], args=[
            "--display_name", display_name, "--worker_pool_specs", worker_pool_specs,
            "--base_output_directory", base_output_directory, "--tensorboard", tensorboard,
            "--restart_job_on_worker_restart", restart_job_on_worker_restart,
            "--scheduling_strategy", scheduling_strategy, "--timeout", timeout, "--service_account", service_account,
            "--network", network, "--location", location, "--project", project, "--gcp_resources", gcp_resources,
            "--api_endpoint", api_endpoint])

    return custom_training_job


def prepare_data(config_json: str, dataset: Output[Dataset]) -> str:
    """Image folder (or generated images) -> sharded TFRecords + class map + per-class counts."""
    import json

    from trainers import config as config_lib
    from jobs import stages

    cfg = config_lib.load_json(config_json)
    data_dir, manifest = stages.prepare(cfg)
    with open(dataset.path, "w") as f:
        json.dump(manifest, f, indent=1)
    dataset.metadata.update({"data_dir": data_dir, "classes": manifest["classes"],
                             "num_examples": manifest["num_examples"], "image_size": manifest["image_size"]})
    print(f"prepared {manifest['num_examples']} examples of {len(manifest['classes'])} classes in {data_dir}")
    return data_dir


def train_local(config_json: str, data_dir: str, metrics: Output[Metrics]) -> NamedTuple("TrainOutputs", [
    ("model_dir", str), ("checkpoint_dir", str), ("tensorboard_dir", str),
]):
    """Run every worker pool as a real process on this machine with the environment Vertex gives."""
    from collections import namedtuple

    from trainers import config as config_lib
    from jobs import stages

    cfg = config_lib.load_json(config_json)
    try:
        result = stages.run_local(cfg)
    except KeyboardInterrupt:  # replicas already stopped and checkpointed; run.py prints how to resume
        raise SystemExit(130) from None
    for r in result.restarts:
        print(f"restart {r.attempt}: {r.failure.replica} exited with {r.failure.exit_status}; resumed from step {r.resumed_step}")
    trained = stages.read_metrics(cfg)
    for key in ("train_loss", "train_accuracy", "steps", "examples_per_second"):
        if isinstance(trained.get(key), (int, float)):
            metrics.log_metric(key, float(trained[key]))
    metrics.log_metric("restarts", float(len(result.restarts)))
    dirs = stages.output_dirs(cfg)
    return namedtuple("TrainOutputs", ["model_dir", "checkpoint_dir", "tensorboard_dir"])(
        dirs["model"], dirs["checkpoints"], dirs["logs"])


def verify_model(model_dir: str, data_dir: str, model: Output[Model], metrics: Output[Metrics]):
    """Load the SavedModel in a fresh process, run its serving signature on held-out examples, log
    accuracy/loss, and output it as a Model artifact with its signature, classes and framework version."""
    import shutil

    import tensorflow as tf

    from jobs import stages

    result = stages.verify(model_dir, data_dir)
    metrics.log_metric("accuracy", float(result["accuracy"]))
    metrics.log_metric("loss", float(result["loss"]))
    metrics.log_metric("examples", float(result["examples"]))
    meta = result["metadata"]
    if model_dir.startswith("gs://"):
        for root, _, files in tf.io.gfile.walk(model_dir):
            for name in files:
                dst = model.path + root[len(model_dir.rstrip("/")):] + "/" + name
                tf.io.gfile.makedirs(dst.rsplit("/", 1)[0])
                tf.io.gfile.copy(f"{root}/{name}", dst, overwrite=True)
    else:
        shutil.copytree(model_dir, model.path, dirs_exist_ok=True)
    model.metadata.update({"framework": meta["framework"], "framework_version": meta["framework_version"],
                           "classes": meta["classes"], "image_size": meta["image_size"],
                           "signatures": meta["signatures"], "source_model_dir": model_dir,
                           "accuracy": result["accuracy"], "split": result["split"]})
    print(f"verified {model_dir}: accuracy={result['accuracy']:.3f} loss={result['loss']:.3f} "
          f"on {result['examples']} {result['split']} examples; sample: {result['sample'][:3]}")


def model_upload_request(config_json: str, model_dir: str, location: str, project: str = "") -> NamedTuple(
        "ModelUpload", [("display_name", str), ("artifact_uri", str), ("serving_image", str), ("labels", dict),
                        ("request_json", str)]):
    """What the Vertex Model Registry gets for the verified model (``jobs.cloud.vertex.model_upload_request``),
    written beside it as ``model_upload_request.json``; the Vertex branch feeds these outputs to GCPC's
    ``ModelUploadOp``, so both targets describe the same upload."""
    import json
    from collections import namedtuple

    from trainers import config as config_lib
    from jobs.cloud import vertex

    request = vertex.write_upload_request(config_lib.load_json(config_json), model_dir, project, location)
    model = request["model"]
    print(f"model upload request for {request['parent']}: {json.dumps(model)}")
    return namedtuple("ModelUpload", ["display_name", "artifact_uri", "serving_image", "labels", "request_json"])(
        model["displayName"], model["artifactUri"], model["containerSpec"]["imageUri"], model.get("labels", {}),
        json.dumps(request))



def run_report(config_json: str, report: Output[HTML], summary: Output[Markdown],
               confusion: Output[ClassificationMetrics]):
    """The run report (job, loss/accuracy curves, validation metrics, confusion matrix, sample predictions,
    checkpoints and resumes) as an HTML artifact and a Markdown summary for the Vertex Pipelines UI, the
    confusion matrix as ClassificationMetrics (the UI draws it), and ``<output.base_dir>/report.html``."""
    from trainers import config as config_lib
    from jobs import report as report_lib

    cfg = config_lib.load_json(config_json)
    path, content = report_lib.write(cfg, config_lib.resolved_base_dir(cfg))
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(content["html"])
    with open(summary.path, "w", encoding="utf-8") as f:
        f.write(content["markdown"])
    if content["classes"] and content["confusion_matrix"]:
        confusion.log_confusion_matrix(content["classes"], content["confusion_matrix"])
    print(f"wrote the run report {path}")
