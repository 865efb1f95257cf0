"""The job side: everything that runs *outside* a training replica, on a user's machine, in Cloud Build or
in a KFP task.

* ``validate``, ``hardware/``: config validation and the hardware catalog and rules;
* ``stages``: the pipeline's steps as plain calls (the components in ``components/`` wrap them);
* ``images``, ``build_context``: which image a job runs, the one image-reference parser, the build context
  and its content tag;
* ``report``: the run report;
* ``cloud/``: the cloud side, one module per API (``clients`` holds endpoint, credentials, the retry and
  timeout policy and one-line errors for all of them), plus the commands that use them (``build``,
  ``submit``, ``templates``);
* ``local/``: the local runtime: the launcher that reproduces Vertex's replica environment
  (``launcher``, ``vertex_env``), one run per output folder (``runs``), the console and fault injection.

``trainers/`` is what runs inside a replica and never imports this package.
"""
