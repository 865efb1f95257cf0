"""Layer 6, CI: the decisions of ``cloudbuild.yaml``'s steps (``cloudbuild_steps``, ``python -m
jobs.ci.cloudbuild_steps``) and ``vtp ci-local`` (``local/``: ``cloudbuild.yaml`` run on this machine, step by step)."""
