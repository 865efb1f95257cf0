"""How every component of this project is made: a lightweight KFP component (its Python function's source
runs through ``kfp.dsl.executor_main``) in the trainer image, which has this package and kfp installed
(hence ``install_kfp_package=False``).

The image is one setting. The definitions and the committed ``component.yaml`` files name
:data:`DEFAULT_IMAGE`, the presets' placeholder (``my-project``), which submission refuses; give your own
pushed trainer image, by digest, with ``python pipelines/run.py components --image REPO@sha256:... --out
DIR`` (the YAML set for that image), ``components.published(image)`` in Python, or ``run.py --image`` /
``container.image_uri`` for the whole pipeline.
"""
from __future__ import annotations

from kfp import dsl

#: The image named by the committed definitions: the presets' cpu repository, a placeholder to replace.
DEFAULT_IMAGE = "us-central1-docker.pkg.dev/my-project/training/tf-trainer:latest"


def component(fn):
    """``fn`` as a lightweight component in :data:`DEFAULT_IMAGE`. Its body must import what it uses (KFP
    ships only the function's source) and nothing it does not: a step that needs no TensorFlow must not
    import it (2-9 s)."""
    return dsl.component(fn, base_image=DEFAULT_IMAGE, install_kfp_package=False)
