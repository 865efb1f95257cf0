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
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("prepare_data", arguments)
