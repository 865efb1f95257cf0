"""A user's trainer written as Vertex AI's hyperparameter tuning docs write one, small enough for tests.

Each hyperparameter is a command-line flag (Vertex passes ``--NAME=VALUE``), the metric is reported with
cloudml-hypertune under the tag the study names, and the model goes to ``AIP_MODEL_DIR`` (with a stand-in
``saved_model.pb``, the file a trial's model folder must hold). NumPy only (no
TensorFlow: a trial takes well under a second): a one-hidden-layer regressor on a synthetic problem.

    python -m trainer.task --learning_rate 0.01 --units 8 --optimizer adam --batch_size 32
"""
import argparse
import json
import os
import time

import hypertune
import numpy as np


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=0.01)
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seconds_per_epoch", type=float, default=0.0, help="make a trial last (tests)")
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args(argv)


def make_data(seed, examples=512, features=4):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(features, 1))
    x = rng.normal(size=(examples, features))
    y = np.tanh(x @ w) + 0.05 * rng.normal(size=(examples, 1))
    split = int(examples * 0.8)
    return (x[:split], y[:split]), (x[split:], y[split:])


def is_chief():
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    return task.get("type", "chief") == "chief"


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    (x, y), (vx, vy) = make_data(args.seed)
    params = {"w1": rng.normal(scale=0.5, size=(x.shape[1], args.units)), "b1": np.zeros(args.units),
              "w2": rng.normal(scale=0.5, size=(args.units, 1)), "b2": np.zeros(1)}
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}

    def forward(inputs):
        hidden = np.maximum(inputs @ params["w1"] + params["b1"], 0)
        return hidden, hidden @ params["w2"] + params["b2"]

    hpt = hypertune.HyperTune()
    step = 0
    for epoch in range(args.epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), args.batch_size):
            idx = order[start:start + args.batch_size]
            hidden, pred = forward(x[idx])
            err = (pred - y[idx]) / len(idx)
            grads = {"w2": hidden.T @ err, "b2": err.sum(0)}
            back = (err @ params["w2"].T) * (hidden > 0)
            grads.update(w1=x[idx].T @ back, b1=back.sum(0))
            step += 1
            for k, g in grads.items():
                if args.optimizer == "sgd":
                    params[k] -= args.learning_rate * g
                else:
                    m, v = moments[k]
                    m[:] = 0.9 * m + 0.1 * g
                    v[:] = 0.999 * v + 0.001 * g * g
                    params[k] -= args.learning_rate * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
        val_rmse = float(np.sqrt(np.mean((forward(vx)[1] - vy) ** 2)))
        print(f"epoch {epoch + 1}/{args.epochs}: val_rmse {val_rmse:.4f}", flush=True)
        hpt.report_hyperparameter_tuning_metric(hyperparameter_metric_tag="val_rmse", metric_value=val_rmse,
                                                global_step=epoch + 1)
        time.sleep(args.seconds_per_epoch)
    model_dir = os.environ.get("AIP_MODEL_DIR", "model")
    if is_chief():
        os.makedirs(model_dir, exist_ok=True)
        np.savez(os.path.join(model_dir, "model.npz"), **params)
        with open(os.path.join(model_dir, "trained.json"), "w") as f:
            json.dump({"val_rmse": val_rmse, "args": vars(args)}, f)
        # the file a SavedModel's folder holds: the train step and every trial require one (no TensorFlow here)
        with open(os.path.join(model_dir, "saved_model.pb"), "wb") as f:
            f.write(b"\x08\x01")


if __name__ == "__main__":
    main()
