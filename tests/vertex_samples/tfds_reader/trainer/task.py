"""A sample that reads its data with TensorFlow Datasets, as the multi-worker codelab does; its requirements list
``tensorflow-datasets``, which ``vtp build`` installs in the image. The process runner runs it in this environment,
where the package may not be: the failure must say where to install it."""
import tensorflow_datasets as tfds  # noqa: F401  (the codelab reads mnist with it)


def main():
    raise SystemExit("never reached without tensorflow_datasets")


if __name__ == "__main__":
    main()
