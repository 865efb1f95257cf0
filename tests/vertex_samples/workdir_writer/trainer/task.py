"""A sample that keeps its data in its working directory, as Google's samples do when they fetch a dataset with
``tf.keras.utils.get_file(..., cache_dir=".")`` or unpack an archive "here": it writes ``./data/rows.csv`` if it
is not there yet, reads it back, trains one small epoch and saves the model to ``AIP_MODEL_DIR``. On Vertex
"here" is the container's own folder; a local replica's must be its own too, never the project's folder."""
import argparse
import os

import numpy as np
import tensorflow as tf


def fetch(path):
    """The sample's download, made local: rows written once into the working directory."""
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        rng = np.random.RandomState(0)
        x = rng.rand(32, 3)
        np.savetxt(path, np.c_[x, x.sum(axis=1)], delimiter=",")
        print(f"downloaded {path} into {os.getcwd()}")
    return np.loadtxt(path, delimiter=",", dtype="float32")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=os.path.join("data", "rows.csv"))
    args = parser.parse_args()
    rows = fetch(args.data)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(3,))])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(rows[:, :3], rows[:, 3:], epochs=1, verbose=2)
    model.save(os.environ["AIP_MODEL_DIR"])


if __name__ == "__main__":
    main()
