"""The held-out verdict on ``serving.eval_data``: the examples file, its rules and reading (``examples_file``), and
the verdict and its figures (``verdict``). Numpy only: running the model is ``jobs.steps.verify``'s.

A component YAML compiled by an earlier version reads old names here, which :mod:`jobs.moved` answers."""
from jobs import moved

__getattr__ = moved.getter(__name__)
