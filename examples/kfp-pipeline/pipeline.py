"""A KFP user's own pipeline, built from this project's published components.

The user brings their own data step (a lightweight component that writes an image folder, one sub-folder per
class); the rest is this project's components, loaded from their YAML files as any KFP user would load them
(from a checkout, a URL, or an Artifact Registry KFP repository): prepare_data (images -> TFRecord shards),
train (the job's worker pools on one machine, here 2 workers under MultiWorkerMirroredStrategy), verify_model
and report.

    python examples/kfp-pipeline/pipeline.py --local runs/kfp-example        # run it here with kfp.local
    python examples/kfp-pipeline/pipeline.py --compile my-pipeline.yaml \\
        --image REPO/tf-trainer@sha256:... --base-dir gs://BUCKET/runs/kfp-example   # for Vertex AI Pipelines

On Vertex, the train step runs every replica inside its one task (a "train locally" step); for a Vertex
CustomJob with one machine per replica, use the project's own pipeline (pipelines/run.py) or its
custom_training_job component.
"""

import argparse
import sys
from pathlib import Path

from kfp import compiler, components, dsl
from kfp.dsl import Dataset, Output

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


def job_config(base_dir: str, steps: int = 20) -> str:
    """The job the components share, as JSON: the project's `local` preset, 2 workers, on your data."""
    from trainers import config as config_lib

    cfg = config_lib.load("local", [f"output.base_dir={base_dir}", "name=kfp-example", f"training.steps={steps}",
                                    "checkpoint.every_steps=10", "data.num_shards=2"])
    return cfg.to_json()


def build(base_dir: str, image: str = DEFAULT_IMAGE):
    prepare_data, train = load("prepare_data", image), load("train", image)
    verify_model, report = load("verify_model", image), load("report", image)
    images_step = make_images
    images_step.component_spec.implementation.container.image = image

    @dsl.pipeline(name="kfp-example", description="My data, then train -> verify -> report from vertex-tf-pipelines.")
    def my_pipeline(config_json: str = job_config(base_dir)):
        images = images_step()
        shards = prepare_data(config_json=config_json, images=images.outputs["images"])
        trained = train(config_json=config_json, dataset=shards.outputs["dataset"])
        verified = verify_model(model=trained.outputs["model"], dataset=shards.outputs["dataset"])
        report(verification=verified.outputs["verification"], tensorboard=trained.outputs["tensorboard"],
               checkpoints=trained.outputs["checkpoints"], config_json=config_json)

    return my_pipeline


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--local", metavar="BASE_DIR", help="run under kfp.local, writing the model under BASE_DIR")
    what.add_argument("--compile", metavar="OUT.yaml", help="compile for Vertex AI Pipelines")
    p.add_argument("--image", default=DEFAULT_IMAGE)
    p.add_argument("--base-dir", default="gs://my-bucket/runs/kfp-example", help="--compile: where the model goes")
    args = p.parse_args(argv)
    if args.compile:
        compiler.Compiler().compile(build(args.base_dir, args.image), package_path=args.compile)
        print(f"compiled {args.compile}")
        return 0
    from kfp import local

    base = str(Path(args.local).resolve())
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(Path(base) / "pipeline_root"))
    build(base, args.image)()
    print(f"model: {base}/model")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))  # this repository's packages, when run from a checkout
    sys.exit(main())
