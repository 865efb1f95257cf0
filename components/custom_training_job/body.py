"""The work behind ``python3 -u -m components.entry custom_training_job --flag ...`` (``components/entry.py``): the
Vertex job step's runtime, ``jobs.cloud.vertex_jobs.custom_job``, whose ``main`` parses the flags the component's definition
passes and whose exit status is the step's."""
from __future__ import annotations

from jobs.cloud.vertex_jobs.custom_job import main

__all__ = ["main"]
