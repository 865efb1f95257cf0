"""AI Platform Training configs brought into this project: ``legacy`` translates a ``trainingInput`` YAML (and
``gcloud ai-platform jobs submit training`` flags, ``gcloud_flags``) into a job config and THE job spec's
worker pools, every problem with the legacy field or flag that set it; ``cli`` is ``python pipelines/run.py
validate FILE.yaml``, which checks either kind of file against the hardware rules (``jobs.hardware``)."""
