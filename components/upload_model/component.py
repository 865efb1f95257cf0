"""upload_model: a Model (a SavedModel folder) in, a Vertex AI Model Registry entry (google.VertexModel)
out; locally (``dry_run``), the exact request, written, nothing sent."""
from google_cloud_pipeline_components.types.artifact_types import VertexModel
from kfp.dsl import Artifact, Input, Model, Output

from components.base import component


@component
def upload_model(model: Input[Model], vertex_model: Output[VertexModel], location: str, project: str = "",
                 display_name: str = "", serving_image: str = "", labels: dict = {}, parent_model: str = "",
                 pipeline_job: str = "", api_endpoint: str = "", dry_run: bool = False, record_dir: str = "",
                 gate_record: Input[Artifact] = None):
    """Register the SavedModel at ``model``'s URI (a ``gs://`` folder holding ``saved_model.pb``) in the
    Vertex AI Model Registry of ``project``/``location`` with ``serving_image`` as its prediction container
    (default: Google's prebuilt TensorFlow container of ``location``'s family), as a new model or, with
    ``parent_model`` (``projects/P/locations/L/models/ID``), a new version of it. ``pipeline_job``: the
    producing pipeline job's resource name (``dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER``), for lineage.

    ``dry_run``: build the request and write it, send nothing (a local run: what a Vertex run would
    register). With ``record_dir`` the request is written to ``<record_dir>/model_upload_request.json``.
    Output ``vertex_model``: URI and ``resourceName`` of the registered model (``dry_run``: metadata
    ``{"dry_run": true}`` and the request).

    ``gate_record`` (the ``gate`` step's ``result``): once registered, its figures are recorded on the new
    version as a Model Registry evaluation, what the next run's ``serving.gate.better_than_parent`` beats."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("upload_model", arguments)
