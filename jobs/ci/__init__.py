"""Layer 6, CI: the decisions of ``cloudbuild.yaml``'s steps (``cloudbuild_steps``, ``python -m
jobs.ci.cloudbuild_steps``, run inside Cloud Build). ``vtp ci-local`` is a command: ``jobs.commands.ci_local``."""
