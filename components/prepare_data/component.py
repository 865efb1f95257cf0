"""prepare_data: image folders (or generated images, or shards already prepared) in, a Dataset of sharded
TFRecords out."""
from kfp.dsl import Dataset, Input, Output

from components.base import component


@component
def prepare_data(config_json: str, dataset: Output[Dataset], images: Input[Dataset] = None):
    """Image folder ``<path>/<class>/*.jpg`` (``data.source: images``), generated images (``synthetic``) or
    prepared shards (``tfrecord``) -> sharded TFRecords with a class map, per-class counts and
    ``manifest.json``; split, shard count, image size and encoding from the config's ``data`` section.

    ``images`` (optional): an image folder made by a step of yours (``<uri>/<class>/*.jpg|png``): it
    replaces ``data.path``. ``dataset``: its URI is the folder of shards (local path or ``gs://``), its
    metadata the classes, example counts, image size and encoding. ``train`` reads it; so can any step of
    yours."""
    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobfile import config as config_lib
    # lazy: KFP component body
    from jobfile.errors import ConfigError

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
