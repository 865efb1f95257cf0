"""Images: building one, through ONE builder interface. One module per concept:

=====================  ======================================================================================
``context``            a build context as a deterministic tar, and its content tag (``ctx-<hash>``)
``builders``           ONE builder interface, ``build(context, repository, tag, build_args) -> pinned
                       reference``, one class per backend: a Docker engine, Cloud Build
``cloudbuild``         Cloud Build as a builder: a context staged in Cloud Storage (or one already there)
``docker``             the Docker engine: the one client factory, build, push, "is this tag there"
``registry``           the Docker Registry API without an engine ("is this tag there", Cloud Build backend)
``user``               a user's trainer as an image: FROM the trainer image by digest, requirements, code
``build``              ``run.py build``: the job's image(s) built through a builder, returned by reference
=====================  ======================================================================================

Which image a job runs is the spec's (``jobs.rules.job_image``, over THE reference parser ``jobs.rules.image_reference``);
their names are handed on here for callers above the spec that say ``images.job_image(cfg)``:
"""
from jobs.rules.image_reference import DIGEST_HINT, DOCKER_HUB, BuildError, ImageRef, parse_reference
from jobs.rules.job_image import (PLACEHOLDER_PROJECT, VARIANT_SUFFIX, VARIANTS, build_repository, component_image,
                            job_image, repository_for, variant_for)

__all__ = ["BuildError", "DIGEST_HINT", "DOCKER_HUB", "ImageRef", "PLACEHOLDER_PROJECT", "VARIANTS", "VARIANT_SUFFIX",
           "build_repository", "component_image", "job_image", "parse_reference", "repository_for", "variant_for"]
