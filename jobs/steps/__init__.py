"""Layer 6, the steps: the pipeline's steps as plain calls (``calls``; the components in ``components/`` wrap them),
the gate, verification, the run report (``reporting/``), what a target's pipeline holds (``pipeline_plan``),
and compiling (``compiled``). The pipeline command itself is ``jobs.commands.run_command``.

``jobs.steps`` was a module before these were laid out in folders: a component YAML compiled by an earlier version
reads ``steps.train_local`` and the like here, which :mod:`jobs.moved` answers."""
from jobs import moved

__getattr__ = moved.getter(__name__)
