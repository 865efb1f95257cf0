"""Layer 3, Google Cloud: three places, bottom to top.

* ``apis/``: the Google Cloud APIs, one module each, under one policy (``clients``: endpoint, credentials, the one
  retry/timeout policy, errors), and the user's project as ``vtp plan`` sees it (``project``). The Docker Registry
  API and the Docker engine are image concerns: ``jobs.images``;
* ``vertex_jobs/``: what runs inside a pipeline step's container and runs a Vertex job there (``job_runner``,
  ``custom_job``, ``tuning_job``; ``python3 -m`` of the container components);
* ``planning``: the plan of a Vertex job (the request, the price, the option taken), decided before anything is
  sent; ``vtp plan``, submit, ``upload-template`` and the pipeline's check step share it.

The commands built on them are in ``jobs.commands``."""
