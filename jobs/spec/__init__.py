"""Layer 2, the spec: what a job is and whether it is valid, with nothing run yet. The one-line errors, how the
user started the command, the hardware catalog and its rules (``hardware/``), the image reference and a job's image,
THE Vertex job spec, the replica environment, placement, the ``tuning:``, ``serving.gate`` and scheduling sections'
rules, validation, the AI Platform import (``aiplatform/``), the records a run leaves and the TensorBoard scalars it
writes, the held-out verdict's rules, why a Vertex job failed. Imports ``trainers`` only."""
