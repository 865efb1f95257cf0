"""AI Platform Training configs brought into this project: ``legacy`` translates a ``trainingInput`` YAML (and
``gcloud ai-platform jobs submit training`` flags, ``gcloud_flags``) into a job config and THE job spec's
worker pools, every problem with the legacy field or flag that set it; ``config_file`` reads such a file
(floats keep their text). The command that checks either kind of file is ``vtp validate`` (``jobs.commands.validate_cli``)."""
