"""A user's own trainer, written the way the Vertex AI distributed-training lab writes one.

Keras ``fit`` under ``MultiWorkerMirroredStrategy``, with the legacy Keras 2 API (``tf_keras``, selected by
``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported: Keras 3's ``fit`` fails under this strategy,
keras-team/keras#20585). ``job.yaml`` declares it in ``trainer.env``, so every replica gets it, here and on Vertex
(a replica sees nothing of your shell); the ``setdefault`` below keeps ``python -m trainer.task`` working alone. It reads only what Vertex AI gives every replica: ``TF_CONFIG`` (through the
strategy), ``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR`` and ``AIP_TENSORBOARD_LOG_DIR``. The chief saves the
model to ``AIP_MODEL_DIR``; the other workers save to a temporary folder (saving involves a collective, so
every worker must save), as in the lab. ``BackupAndRestore`` makes a restarted job resume at the last
finished epoch.

The data is its own: a synthetic tabular regression problem (8 features, y = x . w + noise; ``trainer/data.py``),
so the pipeline has no prepare step (``data.source: none`` in job.yaml). ``eval.jsonl`` holds held-out examples of
the same problem that training never sees (``python -m trainer.data``): the job's ``serving.eval_data``, on which
the verify step judges the exported model.

Tunable as Vertex AI's hyperparameter tuning docs write a trainer (``tune.yaml``): every hyperparameter is a flag
(``--learning_rate``, ``--units``, ``--optimizer``, ``--batch_size``; a tuning trial passes ``--NAME=VALUE``), and
the validation RMSE is reported with cloudml-hypertune under the tag ``val_rmse`` after every epoch (the study
counts the last report).

    python -m trainer.task --epochs 3 --learning_rate 0.01 --units 32 --optimizer adam --batch_size 32
"""
import argparse
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import hypertune  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from trainer.data import FEATURES, make_data  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", "--batch-size", type=int, default=32, help="per replica")
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--units", type=int, default=32, help="of the hidden layer")
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--examples", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args(argv)


def create_model(units=32):
    inputs = tf.keras.Input(shape=(FEATURES,), name="features")
    hidden = tf.keras.layers.Dense(units, activation="relu")(inputs)
    outputs = tf.keras.layers.Dense(1, name="value")(hidden)
    return tf.keras.Model(inputs, outputs)


def _is_chief(task_type, task_id):
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0
                                                         and "chief" not in _cluster())


def _cluster():
    return json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})


def write_filepath(filepath, task_type, task_id):
    """The chief writes ``filepath``; every other worker a temporary ``workertemp_<id>`` folder (the lab's pattern)."""
    if _is_chief(task_type, task_id):
        return filepath
    path = os.path.join(os.path.dirname(filepath.rstrip("/")), f"workertemp_{task_id}")
    tf.io.gfile.makedirs(path)
    return path


class ReportValRmse(tf.keras.callbacks.Callback):
    """The validation RMSE after every epoch, reported with cloudml-hypertune (tag ``val_rmse``). Computed from
    the model's own predictions on this replica: the loss Keras logs under a multi-worker strategy is summed
    over replicas."""

    def __init__(self, x, y):
        super().__init__()
        self.x, self.y, self.hpt = x, y, hypertune.HyperTune()

    def on_epoch_end(self, epoch, logs=None):
        rmse = float(np.sqrt(np.mean((self.model(self.x, training=False).numpy() - self.y) ** 2)))
        print(f"epoch {epoch + 1}: val_rmse {rmse:.4f}", flush=True)
        self.hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="val_rmse", metric_value=rmse,
                                                     global_step=epoch + 1)


def main(argv=None):
    args = parse_args(argv)
    tf.keras.utils.set_random_seed(args.seed)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    (x, y), (vx, vy) = make_data(args.examples, args.seed)
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=args.seed).batch(global_batch)
    validation = tf.data.Dataset.from_tensor_slices((vx, vy)).batch(global_batch)
    optimizers = {"adam": tf.keras.optimizers.Adam, "sgd": tf.keras.optimizers.SGD}
    with strategy.scope():
        model = create_model(args.units)
        model.compile(optimizer=optimizers[args.optimizer](args.learning_rate), loss="mse", metrics=["mae"])
    model_dir = os.environ.get("AIP_MODEL_DIR", "model")
    callbacks = [tf.keras.callbacks.BackupAndRestore(os.environ.get("AIP_CHECKPOINT_DIR", "checkpoints")),
                 tf.keras.callbacks.TensorBoard(os.environ.get("AIP_TENSORBOARD_LOG_DIR", "logs")),
                 ReportValRmse(vx, vy)]
    model.fit(train, validation_data=validation, epochs=args.epochs, callbacks=callbacks, verbose=2)
    resolver = strategy.cluster_resolver
    model.save(write_filepath(model_dir, resolver.task_type, resolver.task_id))


if __name__ == "__main__":
    main()
