"""build_image: a build context in Cloud Storage in, the trainer image by digest out."""
from components.base import component


@component
def build_image(config_json: str, build_context_uri: str = "", dockerfile: str = "containers/Dockerfile",
                project: str = "", api_endpoint: str = "") -> str:
    """The image every replica runs, ``REPO:TAG@sha256:DIGEST``: built and pushed by Cloud Build from
    ``build_context_uri`` (a ``gs://.../ctx-<hash>.tgz`` context, as ``run.py build --backend cloudbuild``
    stages it) into the job's variant repository; with no context, the config's image, without any cloud
    call."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("build_image", arguments)
