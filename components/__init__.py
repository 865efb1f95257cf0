"""KFP v2 components (lightweight, thin wrappers over ``jobs.stages``).

``make_components(base_image)`` turns the plain functions of ``components.steps`` into components that
run in ``base_image`` (the trainer image built from ``containers/Dockerfile``, which has this package
and kfp installed, hence ``install_kfp_package=False``), plus the Vertex branch's ``custom_training_job``,
a container component in the same image (``python3 -m jobs.cloud.custom_job``; see ``components.steps``).
"""
from __future__ import annotations

import types

from kfp import dsl

from components import steps

STEP_FUNCTIONS = (steps.build_image, steps.validate_config, steps.prepare_data, steps.train_local, steps.verify_model,
                  steps.model_upload_request, steps.run_report)


def make_components(base_image: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{
        fn.__name__: dsl.component(fn, base_image=base_image, install_kfp_package=False)
        for fn in STEP_FUNCTIONS
    }, custom_training_job=steps.custom_training_job(base_image))
