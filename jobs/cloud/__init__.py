"""Clients of the cloud APIs, one module per API, and the commands built on them.

API clients: ``clients`` (endpoint, credentials, retry/timeout policy, errors, shared by all),
``registry`` (Docker Registry HTTP API v2), ``docker_engine`` (a Docker engine), ``cloudbuild`` (Cloud
Build), ``gcs`` (Cloud Storage), ``vertex`` (Vertex AI: pipeline jobs, Model Registry), ``custom_job``
(the pipeline's training CustomJob, worker pools by position).
Commands: ``build`` (``run.py build``), ``submit`` (``run.py --project``, ``run.py register-model``),
``templates`` (``run.py upload-template``); ``preflight`` holds the checks submit and templates share.
"""
