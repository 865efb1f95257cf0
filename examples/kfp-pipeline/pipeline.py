"""A KFP user's own pipeline, built from this project's published components.

The user brings their own data step (a lightweight component that writes an image folder, one sub-folder per
class); the rest is this project's components, loaded from their YAML files as any KFP user would load them
(from a checkout, a URL, or an Artifact Registry KFP repository): prepare_data (images -> TFRecord shards),
then the training (here: `train`, the job's worker pools on this machine; on Vertex: `validate_config` and
`custom_training_job`, one CustomJob with the pools by position), verify_model and report.

    python examples/kfp-pipeline/pipeline.py --local runs/kfp-example        # run it here with kfp.local
    python examples/kfp-pipeline/pipeline.py --compile my-pipeline.yaml \\
        --image REPO/tf-trainer:TAG@sha256:... --base-dir gs://BUCKET/runs/kfp-example   # for Vertex AI Pipelines

The YAML for Vertex runs the CustomJob when started with its defaults; it is refused here unless the image
is pinned by digest and the output folder is in Cloud Storage, as the project's own submission refuses.
"""

import argparse
import sys
from pathlib import Path

from kfp import compiler, components, dsl
from kfp.dsl import Artifact, Dataset, Model, Output

HERE = Path(__file__).resolve().parent
COMPONENTS = HERE.parent.parent / "components"
#: the image every step runs in: your pushed trainer image, by digest (`python pipelines/run.py build`)
DEFAULT_IMAGE = "us-central1-docker.pkg.dev/my-project/training/tf-trainer:latest"


def load(name: str, image: str):
    """One of this project's components, from its published YAML, in ``image``."""
    component = components.load_component_from_file(str(COMPONENTS / name / "component.yaml"))
    component.component_spec.implementation.container.image = image
    return component


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def make_images(images: Output[Dataset], classes: int = 3, per_class: int = 30, size: int = 32, seed: int = 7):
    """The user's own data step: ``<images>/<class>/<n>.png``, each class a different colour and stripe."""
    import os

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in range(classes):
        folder = os.path.join(images.path, f"class_{c}")
        os.makedirs(folder, exist_ok=True)
        for n in range(per_class):
            pixels = rng.integers(0, 60, size=(size, size, 3)).astype("uint8")
            pixels[:, :, c % 3] += 150
            pixels[(n + c * 5) % size, :, :] = 255
            Image.fromarray(pixels).save(os.path.join(folder, f"{n:03d}.png"))
    images.metadata["classes"] = classes
    print(f"wrote {classes * per_class} images to {images.path}")


def job_configs(base_dir: str, steps: int = 20, image: str = "") -> tuple[str, str]:
    """The job the components share, as JSON: the project's `local` preset, 2 workers, on your data. Two
    views of it: the one that prepares your images into ``<base>/data``, and the one that trains on those
    shards (the CustomJob's replicas read them there; a Vertex replica cannot take a KFP artifact)."""
    from jobfile import config as config_lib

    cfg = config_lib.load("local", [f"output.base_dir={base_dir}", "name=kfp-example", f"training.steps={steps}",
                                    "checkpoint.every_steps=10", "data.num_shards=2"]).with_image(image)
    data_dir = config_lib.prepared_data_dir(cfg)
    return cfg.to_json(), cfg.with_data(data_dir).to_json()


def build(base_dir: str, image: str = DEFAULT_IMAGE, target: str = "local"):
    """The pipeline for ``target``: ``local`` (kfp.local: the train step runs the pools here) or ``vertex``."""
    prepare_data, verify_model, report = load("prepare_data", image), load("verify_model", image), load("report", image)
    prepare_json, train_json = job_configs(base_dir, image=image if target == "vertex" else "")
    images_step = make_images
    images_step.component_spec.implementation.container.image = image

    @dsl.pipeline(name="kfp-example", description="My data, then train -> verify -> report from vertex-tf-pipelines.")
    def my_pipeline(config_json: str = train_json, prepare_config_json: str = prepare_json):
        images = images_step()
        shards = prepare_data(config_json=prepare_config_json, images=images.outputs["images"])
        if target == "local":
            trained = load("train", image)(config_json=config_json, dataset=shards.outputs["dataset"])
            model, logs = trained.outputs["model"], trained.outputs["tensorboard"]
        else:
            from google_cloud_pipeline_components import _placeholders

            job = load("validate_config", image)(config_json=config_json)
            training = load("custom_training_job", image)(
                display_name=job.outputs["display_name"], worker_pool_specs=job.outputs["worker_pool_specs"],
                base_output_directory=job.outputs["base_output_directory"], tensorboard=job.outputs["tensorboard"],
                restart_job_on_worker_restart=job.outputs["restart_job_on_worker_restart"],
                scheduling_strategy=job.outputs["scheduling_strategy"], timeout=job.outputs["timeout"],
                max_wait_duration=job.outputs["max_wait_duration"],
                persistent_resource_id=job.outputs["persistent_resource_id"], service_account="", network="",
                location="us-central1", project=_placeholders.PROJECT_ID_PLACEHOLDER).after(shards)
            model = dsl.importer(artifact_uri=job.outputs["model_dir"], artifact_class=Model).after(training).output
            logs = dsl.importer(artifact_uri=job.outputs["tensorboard_dir"], artifact_class=Artifact).after(training).output
        verified = verify_model(model=model, dataset=shards.outputs["dataset"], record_dir=base_dir)
        report(verification=verified.outputs["verification"], tensorboard=logs, config_json=config_json,
               record_dir=base_dir)

    return my_pipeline


def compile_problems(image: str, base_dir: str) -> list[str]:
    """What the project's submission would refuse in the Vertex YAML (``jobs.rules.preflight``)."""
    from jobs.rules import preflight

    errors, _ = preflight.image_problems("--image", image, "PROJECT", "us-central1")
    errors += preflight.gcs_problems("--base-dir", base_dir, "gs://BUCKET/runs/kfp-example")
    return [str(e) for e in errors]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--local", metavar="BASE_DIR", help="run under kfp.local, writing the model under BASE_DIR")
    what.add_argument("--compile", metavar="OUT.yaml", help="compile for Vertex AI Pipelines")
    p.add_argument("--image", default=DEFAULT_IMAGE, help="--compile: your trainer image, REPO:TAG@sha256:...")
    p.add_argument("--base-dir", default="", help="--compile: where the model goes, gs://BUCKET/PATH")
    p.add_argument("--verbose", action="store_true", help="--local: every task's full output")
    args = p.parse_args(argv)
    if args.compile:
        problems = compile_problems(args.image, args.base_dir)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            return 2
        compiler.Compiler().compile(build(args.base_dir, args.image, "vertex"), package_path=args.compile)
        print(f"compiled {args.compile}")
        return 0
    import contextlib
    import warnings

    from kfp import local

    from jobs.local.run.console import Console

    warnings.filterwarnings("ignore", module=r"kfp\.local")  # the steps run in this environment, as designed
    base = str(Path(args.local).resolve())
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(Path(base) / "pipeline_root"))
    with (contextlib.nullcontext() if args.verbose else Console()):  # the project's short console
        build(base, args.image)()
    print(f"model:  {base}/model\nreport: {base}/report.html")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))  # this repository's packages, when run from a checkout
    sys.exit(main())
