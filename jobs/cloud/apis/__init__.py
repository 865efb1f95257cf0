"""The Google Cloud APIs under one policy, one module each: ``clients`` (every call: endpoint, credentials,
the one retry/timeout policy, errors), ``policy``, ``credentials`` (where the token may go), ``lines``;
``vertex``, ``cloudbuild``, ``gcs``, ``registry``, ``job_logs`` (Cloud Logging), ``notify`` (a run's end to
its webhook); the user's project as ``vtp plan`` sees it (``project``: ``quotas``, ``service_usage``,
``iam``)."""
