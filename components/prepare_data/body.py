"""prepare_data's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the shards made by
``jobs.steps.calls.prepare`` (``trainers.prepare``)."""
from __future__ import annotations

from kfp.dsl import Dataset, Input, Output

from jobs.steps import calls as steps
from jobfile import config as config_lib
from jobfile.errors import ConfigError


def prepare_data(config_json: str, dataset: Output[Dataset], images: Input[Dataset] = None):
    """Fills ``dataset`` (its URI: the shards' folder; its metadata: classes, counts, image size, encoding)."""
    try:
        cfg = config_lib.load_json(config_json)
        if images is not None:
            cfg = cfg.with_images(images.uri)
        data_dir, manifest = steps.prepare(cfg)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"error: {problem}")
        raise SystemExit(2) from None
    dataset.uri = data_dir
    dataset.metadata.update({"format": "tfrecord", "classes": manifest["classes"],
                             "num_examples": manifest["num_examples"], "image_size": manifest["image_size"],
                             "encoding": manifest.get("encoding", "raw")})
    counts = manifest["num_examples"]
    print(f"prepared {sum(counts.values())} examples ({', '.join(f'{n} {s}' for s, n in counts.items())}) of "
          f"{len(manifest['classes'])} classes in {data_dir}")
