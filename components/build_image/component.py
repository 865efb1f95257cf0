"""build_image: a build context in Cloud Storage in, the trainer image by digest out."""
from components.base import component


@component
def build_image(config_json: str, build_context_uri: str = "", dockerfile: str = "containers/Dockerfile",
                project: str = "", api_endpoint: str = "") -> str:
    """The image every replica runs, ``REPO:TAG@sha256:DIGEST``: built and pushed by Cloud Build from
    ``build_context_uri`` (a ``gs://.../ctx-<hash>.tgz`` context, as ``run.py build --backend cloudbuild``
    stages it) into the job's variant repository; with no context, the config's image, without any cloud
    call."""
    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobs.spec.errors import CloudError
    # lazy: KFP component body
    from jobfile import config as config_lib

    try:
        image = steps.trainer_image(config_lib.load_json(config_json), build_context_uri, dockerfile, project,
                                     api_endpoint or None)
    except CloudError as exc:
        print(f"error: {exc}")
        raise SystemExit(1) from None
    print(f"trainer image: {image}")
    return image
