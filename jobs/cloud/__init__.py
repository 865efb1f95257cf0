"""The Google Cloud APIs, one module each, and the commands built on them.

API clients: ``clients`` (endpoint, credentials, the one retry/timeout policy, errors, shared by all),
``vertex`` (pipeline jobs, Model Registry), ``custom_job`` (create and follow the training CustomJob, pools by
position), ``tuning_job`` (create and follow a HyperparameterTuningJob), ``cloudbuild`` (Cloud Build), ``gcs``
(Cloud Storage). The Docker Registry API and the Docker engine are image concerns: ``jobs.images``.
Commands: ``submit`` (``run.py --project``, ``run.py register-model``), ``templates`` (``run.py
upload-template``); ``preflight`` holds the checks submit, templates and ``--compile-only`` share.
"""
