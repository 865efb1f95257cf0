"""A Vertex AI custom-training sample, written the way Google's samples write one: ``tf.keras`` under a
``tf.distribute`` strategy, flags with argparse, the metric reported with cloudml-hypertune and the model saved in
TensorFlow Serving's layout, version 1 under ``AIP_MODEL_DIR`` (``model.save(os.path.join(AIP_MODEL_DIR, "1"))``).
Vertex accepts that layout; the local run must too, with this file unchanged. Its data is a few dozen generated
rows (the samples download theirs), so that a test that runs it stays small."""
import argparse
import os

import hypertune
import numpy as np
import tensorflow as tf


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--rows", type=int, default=64)
    return parser.parse_args()


def main():
    args = get_args()
    strategy = tf.distribute.MirroredStrategy()
    rng = np.random.RandomState(0)
    x = rng.rand(args.rows, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(4,), name="hidden"),
                                     tf.keras.layers.Dense(1, name="out")])
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=args.lr), loss="mse")
    history = model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
    hpt = hypertune.HyperTune()
    hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="loss", metric_value=history.history["loss"][-1],
                                            global_step=args.epochs)
    model.save(os.path.join(os.environ["AIP_MODEL_DIR"], "1"))


if __name__ == "__main__":
    main()
