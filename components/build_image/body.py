"""build_image's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the image through
THE builder interface (``jobs.steps.calls.trainer_image``: Cloud Build with a context, else the config's image)."""
from __future__ import annotations

from jobs.rules.errors import CloudError
from jobs.steps import calls as steps
from jobfile import config as config_lib


def build_image(config_json: str, build_context_uri: str = "", dockerfile: str = "containers/Dockerfile",
                project: str = "", api_endpoint: str = "") -> str:
    """The image by digest (the definition's ``Output``)."""
    try:
        image = steps.trainer_image(config_lib.load_json(config_json), build_context_uri, dockerfile, project,
                                     api_endpoint or None)
    except CloudError as exc:
        print(f"error: {exc}")
        raise SystemExit(1) from None
    print(f"trainer image: {image}")
    return image
