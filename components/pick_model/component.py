"""pick_model: a Vertex study's record and the baseline CustomJob beside it in; the better of the best trial's
and the baseline's Model out, with the study's record completed (the baseline, the model handed on)."""
from typing import NamedTuple

from kfp.dsl import Artifact, Input, Model, Output

from components.base import component


@component
def pick_model(model: Output[Model], study: Output[Artifact], config_json: str = "",
               tuning_study: Input[Artifact] = None, baseline_job: str = "", record_dir: str = "") -> NamedTuple(
        "Picked", [("handed_on", str)]):
    """After a HyperparameterTuningJob (``tuning_study``: ``hyperparameter_tuning_job``'s ``study``, every trial
    and the best) and, beside it, the baseline CustomJob (``custom_training_job`` with ``validate_config``'s
    ``baseline_worker_pool_specs``/``baseline_output_directory``: the job as it stands in ``<record_dir>/baseline``;
    ``baseline_job``: its ``gcp_resources``, empty when that step failed), hand on the better model by the study's
    metric and goal (``config_json``'s ``tuning``; a tie goes to the baseline, the job as it stands). The baseline's
    figure is the last report of the study's metric in its chief's cloudml-hypertune file,
    ``<record_dir>/baseline/hypertune/chief-0.metrics``, read through Vertex's ``/gcs`` mount
    (the file every trial writes on Vertex too). A failed baseline: the best trial goes on, and the record says why.

    Outputs: ``model`` (URI: the model folder that goes on, ``<base>/<trial id>/model`` or
    ``<base>/baseline/model``; metadata: its id, values, metric and the reason); ``study``: the study's record
    with ``baseline`` and ``handed_on`` (also written to ``<record_dir>/tuning.json``); ``handed_on``: JSON
    ``{"run", "id", "parameters", "metric", "model_dir", "reason"}`` (``gate``'s ``tuning_metric``). Fails with one
    ``error:`` line when the study's record is missing or names no succeeded trial. The pipeline runs it with
    ``ignore_upstream_failure`` so a failed baseline does not stop the run."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("pick_model", arguments)
