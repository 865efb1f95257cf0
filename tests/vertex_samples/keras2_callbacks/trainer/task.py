"""A sample written for TensorFlow 2.x's Keras 2, as many Vertex samples are: it takes
``tf.keras.callbacks.experimental.BackupAndRestore``, which Keras 3 (``tf.keras`` without
``TF_USE_LEGACY_KERAS=1``) does not have. Its failure must say so and how to run it unchanged."""
import os

import tensorflow as tf


def main():
    callbacks = [tf.keras.callbacks.experimental.BackupAndRestore(
        backup_dir=os.path.join(os.environ["AIP_CHECKPOINT_DIR"], "backup"))]
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(tf.zeros((8, 2)), tf.zeros((8, 1)), epochs=1, callbacks=callbacks, verbose=2)
    model.save(os.environ["AIP_MODEL_DIR"])


if __name__ == "__main__":
    main()
