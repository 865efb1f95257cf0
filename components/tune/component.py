"""tune: the job's study on this machine (every trial the job's worker pools under the local launcher, with the
contract Vertex gives a trial, and the job as it stands beside them); the better of the best trial's and the
baseline's Model, the study's Metrics and its record out."""
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import component


@component
def tune(config_json: str, model: Output[Model], metrics: Output[Metrics], study: Output[Artifact],
         tensorboard: Output[Artifact], checkpoints: Output[Artifact], dataset: Input[Dataset] = None):
    """Run (or resume) the study of the config's ``tuning`` section here (as ``vtp`` runs it locally): up to
    ``parallel_trials`` trials at once, each the job's whole topology with its values as ``--NAME=VALUE`` flags,
    ``CLOUD_ML_TRIAL_ID``, its own ``<base>/<trial id>/`` folders and its own cloudml-hypertune file; the trial's
    last report of ``tuning.metric`` is its result. A trainer that never reports the metric stops the study after
    the first trials with one line naming the tag expected and the tags reported.

    ``dataset`` (optional): TFRecord shards as ``prepare_data`` writes them, read by the built-in trainer.
    With ``tuning.baseline`` (default true) the job as it stands (its own arguments, no tuning flags) runs beside
    the trials in ``<base>/baseline/``, measured the same way, and the model that goes on is the better of the best
    trial and the baseline by the study's metric (a tie: the baseline); the console says which and why.

    Outputs: ``model``, URI = the ``AIP_MODEL_DIR`` of the model that goes on (``<base>/<trial id>/model``, or
    ``<base>/baseline/model``), with its trial id (``baseline``), values and metric as metadata; ``metrics``: its
    metric, the baseline's, the trial counts; ``study``: URI = ``<base>/tuning.json``, every trial (parameters,
    metric, state, seconds), the best one, the baseline and the model handed on; ``tensorboard`` and
    ``checkpoints``: that model's folders. On Vertex the same section runs as a HyperparameterTuningJob
    (``hyperparameter_tuning_job``) beside a baseline CustomJob (``custom_training_job``), joined by ``pick_model``."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("tune", arguments)
