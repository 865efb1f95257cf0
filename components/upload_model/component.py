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
    import json

    # lazy: KFP component body
    from jobs.steps import calls as steps
    # lazy: KFP component body
    from jobs.spec.errors import CloudError

    try:
        name, request = steps.upload_model(model.uri, location=location, project=project,
                                            display_name=display_name or model.metadata.get("job") or "model",
                                            serving_image=serving_image, labels=dict(labels), parent_model=parent_model,
                                            pipeline_job=pipeline_job, api_endpoint=api_endpoint, dry_run=dry_run, record_dir=record_dir)
    except CloudError as exc:
        print(f"error: {exc}")
        raise SystemExit(1) from None
    if dry_run:
        vertex_model.metadata.update({"dry_run": True, "request": request})
        print(f"model upload request (not sent) for {request['parent']}: {json.dumps(request['model'])}")
        return
    vertex_model.uri = f"https://{location}-aiplatform.googleapis.com/v1/{name}"
    vertex_model.metadata["resourceName"] = name.split("@")[0]
    print(f"registered {name} (container {request['model']['containerSpec']['imageUri']})")
    if gate_record is not None:
        # lazy: KFP component body
        from jobs.steps import gate

        with open(gate_record.path, encoding="utf-8") as f:
            record = json.load(f)
        try:
            evaluation = gate.record_on_version(name, record, pipeline_job=pipeline_job, api_endpoint=api_endpoint)
        except CloudError as exc:
            print(f"error: {exc}; the model is registered as {name}, but the next run's "
                  "serving.gate.better_than_parent finds no figures on it")
            raise SystemExit(1) from None
        vertex_model.metadata["evaluation"] = evaluation
        print(f"recorded the gate's figures on {name} as evaluation {evaluation}")
