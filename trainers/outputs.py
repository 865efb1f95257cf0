"""Where a replica of YOUR trainer saves its model: one call, the right folder for every replica.

    from trainers.outputs import model_dir
    model.save(model_dir())          # tf_keras (Keras 2): every replica saves; Keras 3: model.export(model_dir())

The rule (TensorFlow's multi-worker guide, "Model saving and loading"): only the chief writes the job's model folder
(``AIP_MODEL_DIR``, the folder Vertex and this product read the model from); every other replica saves to a
throwaway folder of its own. Under ``MultiWorkerMirroredStrategy`` saving involves a collective, so every replica
must save (a worker that skips it hangs the chief); two replicas saving into one folder collide (the
``MergeV2Checkpoints ... variables_temp/part-00000-of-00001`` failure), and without a strategy each replica trained a
model of its own and the last one written wins. :func:`model_dir` gives the chief ``AIP_MODEL_DIR`` and any other
replica a fresh folder on its own machine's disk, removed when its process ends (nothing is written to the bucket
for it, unlike the guide's ``workertemp_<id>`` beside the model).

It reads the replica's place from the environment Vertex (or ``vtp``'s local launcher) sets, through
``trainers.cluster`` (the one reader of ``CLUSTER_SPEC``/``TF_CONFIG``/``AIP_*``): the chief is task type ``chief``,
or worker 0 of a cluster without one. In the trainer image (and beside ``vtp``) this package is importable; in an
image of your own, the rule is the few lines above. No TensorFlow is imported here.
"""
from __future__ import annotations

import atexit
import shutil
import tempfile
from typing import Mapping

from trainers.cluster import read_cluster


def is_chief(env: Mapping[str, str] | None = None) -> bool:
    """Whether this replica writes the job's outputs (the chief; a plain process with no cluster is one)."""
    return read_cluster(env).is_chief


def model_dir(env: Mapping[str, str] | None = None, default: str = "model") -> str:
    """The folder this replica saves its model to: ``AIP_MODEL_DIR`` on the chief (``default`` when no job set
    one: ``python -m trainer.task`` alone), a throwaway folder of its own on every other replica."""
    info = read_cluster(env)
    if info.is_chief:
        return info.model_dir or default
    folder = tempfile.mkdtemp(prefix=f"{info.replica_id}-model-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
