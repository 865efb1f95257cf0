"""Layer 2, the rules: what a job is and whether it is valid, with nothing run yet. The one-line errors, how the
user started the command, the hardware catalog and its rules (``hardware/``), the image reference and a job's image,
THE Vertex job spec, the replica environment, placement, the ladder and THE placement procedure (``ranking``), the
``tuning:``, ``serving.gate``, scheduling, trainer and ``notify:`` sections' rules, validation, the preflight (what
Vertex would refuse, checked before anything is sent), the AI Platform import (``aiplatform/``), why a Vertex job
failed. Beside it in the same layer: what a run leaves (``jobs.run_records``) and the held-out verdict
(``jobs.evaluation``). Imports ``trainers`` only, and those two."""
