"""The job side: everything that runs *outside* a training replica, on a user's machine, in Cloud Build or
in a KFP task. One home per concept, in layers a reader walks downward (README "Layout"; ``tests/test_layout.py``
declares them and checks that no module imports a higher layer or closes a loop, imports inside functions
included):

* the spec, at the bottom: ``errors`` (the one-line errors), ``hardware/`` (the catalog and its rules),
  ``image_reference`` and ``job_image`` (which image a job runs), ``job_spec`` (THE Vertex CustomJobSpec of a
  config, for the local launch, the docker runner, the CustomJob step and a HyperparameterTuningJob's trials
  alike), ``replica_env`` (THE environment a replica sees), ``tuning_spec`` and ``gate_spec`` (the sections'
  rules), ``validate``, ``aiplatform/`` (AI Platform configs imported), ``records`` (every record a run
  leaves, the trials' folders, the one best-trial rule), ``tensorboard``;
* the clients, ``cloud/``: the Google Cloud APIs under one policy, and THE runner of a Vertex job;
* ``images/``: building an image through one builder interface;
* the local runtime, ``local/``: the launcher, THE local launch of a job's pools, one run of the pipeline
  here, the folder's lock and history, the console, ``--runner docker``;
* the steps: ``steps`` (the pipeline's steps as plain calls; the components in ``components/`` wrap them),
  ``tuning/`` (a study on this machine), ``gate``, ``report`` (with ``report_data``, ``report_sections``,
  ``report_charts``), ``verify``, ``compiled``, ``ci``.

``trainers/`` is what runs inside a replica and never imports this package; nothing here imports
``pipelines/``.
"""
