"""upload_model's work, behind ``components.entry`` (its inputs and outputs: ``component.py``): the
Model Registry request built and sent by ``jobs.steps.calls.upload_model``; the gate's figures recorded on the new
version by ``jobs.steps.gate.record_on_version``."""
from __future__ import annotations

import json

from google_cloud_pipeline_components.types.artifact_types import VertexModel
from kfp.dsl import Artifact, Input, Model, Output

from jobs.rules.errors import CloudError
from jobs.steps import calls as steps, gate


def upload_model(model: Input[Model], vertex_model: Output[VertexModel], location: str, project: str = "",
                 display_name: str = "", serving_image: str = "", labels: dict = {}, parent_model: str = "",
                 pipeline_job: str = "", api_endpoint: str = "", dry_run: bool = False, record_dir: str = "",
                 gate_record: Input[Artifact] = None):
    """Fills ``vertex_model``; a refused upload: one ``error:`` line, exit 1."""
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
