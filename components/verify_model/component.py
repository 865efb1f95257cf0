"""verify_model: a Model (a SavedModel, made by anything) in; loaded, run and timed; a verified Model,
Metrics and the full verification record out."""
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import component


@component
def verify_model(model: Input[Model], verified_model: Output[Model], metrics: Output[Metrics],
                 verification: Output[Artifact], sample_request: str = "", dataset: Input[Dataset] = None,
                 record_dir: str = "", eval_data: str = "", eval_task: str = "auto", eval_output: str = ""):
    """Load the SavedModel at ``model``'s URI in this task's own process (it never trained: the export must
    stand alone), run its ``serving_default`` signature on ``sample_request`` (JSON text
    ``{"instances": [...]}`` as Vertex online prediction takes it; empty: an input generated from the
    signature's specs) and time it. With ``eval_data`` (a JSON Lines file of ``{"instance": ..., "label": ...}``,
    local or ``gs://``), evaluate the model on those held-out examples, whoever made it: RMSE, MAE and the RMSE
    of predicting the labels' mean for a regressor; accuracy, per-class precision and recall and the
    most-common-class baseline for a classifier (``eval_task``: ``auto`` | ``regression`` | ``classification``;
    ``eval_output``: which output is the prediction, for a model with several). For the built-in classifier
    with its ``dataset``, also accuracy, loss, the confusion matrix and sample predictions on the held-out split.

    The SavedModel is the one in ``model``'s folder or one folder below it (``model/1``, TensorFlow Serving's layout;
    of several numbered ones the newest). Fails with one ``error:`` line for a folder without one (listing what it holds), a
    model without ``serving_default``, or a sample that does not fit (naming the signature's inputs). Outputs:
    ``verified_model`` (URI: the SavedModel's folder;
    metadata: framework and version, signatures, inputs and outputs, latency, accuracy for a classifier),
    ``metrics``, ``verification`` (a JSON file: the whole record, predictions included); with
    ``record_dir``, the record is also written to ``<record_dir>/verification.json``."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("verify_model", arguments)
