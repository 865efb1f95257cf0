"""The job side: everything that runs *outside* a training replica, on a user's machine, in Cloud Build or
in a KFP task. One home per concept (README "Layout"):

* ``validate``, ``hardware/``: config validation and the hardware catalog and rules;
* ``job_spec``: THE Vertex CustomJobSpec of a config (command, pools by position, env, scheduling), for the
  local launcher, the docker runner, the CustomJob step and a HyperparameterTuningJob's trials alike;
* ``steps``: the pipeline's steps as plain calls (the components in ``components/`` wrap them);
  ``records``: the records they leave beside a run;
* ``verify``, ``gate``, ``report``, ``tensorboard``: checking, gating and showing a trained model;
* ``tuning/``: a hyperparameter study on this machine; ``compiled``: writing a compiled pipeline;
* ``images/``: which image a job runs and building it (one builder interface, one reference parser);
* ``cloud/``: the Google Cloud APIs, one module each, and the commands on them;
* ``local/``: the local runtime (the launcher, the replica environment, one run of the pipeline here, the
  folder's lock and history, the console, ``--runner docker``).

``trainers/`` is what runs inside a replica and never imports this package; nothing here imports
``pipelines/``.
"""
