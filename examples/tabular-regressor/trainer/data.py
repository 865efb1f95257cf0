"""This trainer's data: a synthetic tabular regression problem (8 features, y = x . w + noise), numpy only.

``make_data`` is what the trainer trains and validates on; ``held_out`` draws new examples of the same problem
(the same weights ``w``, features from a seed the trainer never uses), which the trainer never sees: the job
file's ``serving.eval_data`` (``eval.jsonl``) is written from it, and the verify step judges the exported model
on it. Regenerate it with:

    python -m trainer.data --eval-out eval.jsonl
"""
import argparse
import json

import numpy as np

FEATURES = 8
NOISE = 0.1
#: the features of the held-out examples come from their own seed: none is in the training data
HELD_OUT_SEED = 1_000_003


def weights(seed):
    """The problem's true weights: the first draw of the trainer's seeded generator."""
    return np.random.default_rng(seed).normal(size=(FEATURES, 1)).astype("float32")


def make_data(examples, seed):
    """(train, validation) as ``(x, y)`` pairs, 80/20, from one seeded generator (weights, features, noise)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(FEATURES, 1)).astype("float32")
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    y = x @ w + NOISE * rng.normal(size=(examples, 1)).astype("float32")
    split = int(examples * 0.8)
    return (x[:split], y[:split]), (x[split:], y[split:])


def held_out(examples, seed, held_out_seed=HELD_OUT_SEED):
    """``examples`` new ``(x, y)`` of the problem the trainer's ``seed`` defines, never seen in training."""
    rng = np.random.default_rng(held_out_seed)
    x = rng.normal(size=(examples, FEATURES)).astype("float32")
    y = x @ weights(seed) + NOISE * rng.normal(size=(examples, 1)).astype("float32")
    return x, y


def eval_lines(examples=256, seed=7):
    """``serving.eval_data``'s lines: ``{"instance": [8 features], "label": y}`` (as the sample request's
    instances: one list of 8 numbers each)."""
    x, y = held_out(examples, seed)
    return [json.dumps({"instance": [round(float(v), 5) for v in row], "label": round(float(label[0]), 5)})
            for row, label in zip(x, y)]


def main(argv=None):
    parser = argparse.ArgumentParser(description="write the held-out examples (serving.eval_data)")
    parser.add_argument("--eval-out", default="eval.jsonl")
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--seed", type=int, default=7, help="the trainer's --seed (it defines the problem)")
    args = parser.parse_args(argv)
    with open(args.eval_out, "w", encoding="utf-8") as f:
        f.write("\n".join(eval_lines(args.examples, args.seed)) + "\n")


if __name__ == "__main__":
    main()
