"""The hardware catalog (``catalog.yaml``: machines, GPUs, TPUs, regions, zones, with their sources) and every
rule the seeds state about them (``rules.check_job``; warnings in ``advice``; TPUs in ``tpu_rules``), read
through the one parser of a job (``shared.view``: ``jobfile.config.read``). Pure: no cloud client, no
TensorFlow. Importing AI Platform configs, and the ``validate`` command, are ``jobs.rules.aiplatform``."""
