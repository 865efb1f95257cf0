"""Images: which image a job runs, and building it. One module per concept:

=====================  ======================================================================================
``reference``          THE image-reference parser (``parse_reference``, ``ImageRef``) and ``BuildError``
``variants``           image variants (cpu/gpu/tpu), their repositories, a job's and its components' image
``context``            a build context as a deterministic tar, and its content tag (``ctx-<hash>``)
``builders``           ONE builder interface, ``build(context, repository, tag, build_args) -> pinned
                       reference``, one class per backend: a Docker engine, Cloud Build
``docker``             the Docker engine: the one client factory, build, push, "is this tag there"
``registry``           the Docker Registry API without an engine ("is this tag there", Cloud Build backend)
``user``               a user's trainer as an image: FROM the trainer image by digest, requirements, code
``build``              ``run.py build``: the job's image(s) built through a builder, returned by reference
=====================  ======================================================================================

This package's own names (the light ones, no docker SDK, no cloud client) are re-exported here, because
most callers need only "which image" and "parse this reference":
"""
from jobs.image_reference import DIGEST_HINT, DOCKER_HUB, BuildError, ImageRef, parse_reference
from jobs.job_image import (PLACEHOLDER_PROJECT, VARIANT_SUFFIX, VARIANTS, build_repository, component_image,
                                  job_image, repository_for, variant_for)

__all__ = ["BuildError", "DIGEST_HINT", "DOCKER_HUB", "ImageRef", "PLACEHOLDER_PROJECT", "VARIANTS", "VARIANT_SUFFIX",
           "build_repository", "component_image", "job_image", "parse_reference", "repository_for", "variant_for"]
