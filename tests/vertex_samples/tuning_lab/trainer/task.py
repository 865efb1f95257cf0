"""The shape of Vertex AI's hyperparameter-tuning codelab trainer: its flags with argparse (the job's fixed
arguments give ``--lr`` and ``--batch_size``, and the study's trial spec tunes ``--lr`` again: Vertex appends each
trial's ``--lr=VALUE`` after them and argparse keeps the last), one report of its metric with cloudml-hypertune, and,
like the codelab, no model written unless ``--export`` is given. The codelab's Keras fit is replaced by a formula of
the flags (no TensorFlow: the study's rules are what its tests prove), which also makes the metric say which
``--lr`` the trainer took: ``accuracy`` = 1 - |lr - 0.03| - batch_size / 10000."""
import argparse
import os

import hypertune


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--export", action="store_true", help="save a model (in TF Serving's layout: model/1)")
    args = parser.parse_args()
    accuracy = 1.0 - abs(args.lr - 0.03) - args.batch_size / 10000
    print(f"lr={args.lr} batch_size={args.batch_size} accuracy={accuracy:.4f}")
    hypertune.HyperTune().report_hyperparameter_tuning_metric(hyperparameter_metric_tag="accuracy",
                                                              metric_value=accuracy, global_step=1)
    if args.export:  # a stand-in for model.save(os.path.join(AIP_MODEL_DIR, "1")): the file the rule looks for
        folder = os.path.join(os.environ["AIP_MODEL_DIR"], "1")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "saved_model.pb"), "wb") as f:
            f.write(b"\x08\x01")


if __name__ == "__main__":
    main()
