"""train: the job's worker pools as processes on this machine, with the environment Vertex gives each
replica; a Model (the SavedModel the chief wrote to AIP_MODEL_DIR) and the training figures out."""
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components.base import component


@component
def train(config_json: str, model: Output[Model], metrics: Output[Metrics], checkpoints: Output[Artifact],
          tensorboard: Output[Artifact], dataset: Input[Dataset] = None, run_id: str = ""):
    """Run every replica of the job's pools (chief, workers, parameter servers, evaluators) as a real process
    on loopback with Vertex's ``CLUSTER_SPEC``/``TF_CONFIG``/``AIP_*`` (the local launcher, ``vtp``'s): the built-in
    trainer, or a user's ``python -m <trainer.module>`` in its own copy of ``trainer.source_dir``. A replica that dies
    restarts the job (``scheduling.max_restarts``); the trainer resumes from its checkpoints.

    ``dataset`` (optional): TFRecord shards as ``prepare_data`` writes them, read by the built-in trainer
    (its URI replaces ``data.path``). Outputs: ``model``, URI = the SavedModel folder (``AIP_MODEL_DIR``, or the
    one folder below it that holds the SavedModel: ``model/1``, TF Serving's layout, as verify_model finds it);
    ``metrics``: the final training figures; ``checkpoints`` and ``tensorboard``: their folders. On Vertex
    the same pools run as a CustomJob instead (``custom_training_job``). A failed job's cause (the replica, its error
    line and hint, its last lines) is recorded for the run ``run_id`` (``<base>/failure.json``: the end message's)."""
    arguments = dict(locals())  # the inputs and outputs, as kfp's executor passed them
    # lazy: KFP component body
    from components.entry import v1

    return v1("train", arguments)
