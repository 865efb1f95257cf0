"""A sample that checks the GPUs it was told it has (``--num-gpus 4`` for a pool of 4 x P100), as the
distributed-training samples do before they build a MirroredStrategy over them. A local replica sees no GPU:
its failure must say so."""
import argparse

import tensorflow as tf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-gpus", type=int, default=1)
    args = parser.parse_args()
    gpus = tf.config.list_physical_devices("GPU")
    assert len(gpus) == args.num_gpus
    strategy = tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(args.num_gpus)])
    print("replicas:", strategy.num_replicas_in_sync)


if __name__ == "__main__":
    main()
