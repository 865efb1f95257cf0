"""A hyperparameter study of the job file's ``tuning:`` section, run on this machine.

* :mod:`jobs.tuning.search` the search itself (Optuna: TPE for Vertex's default Bayesian optimization, random,
  grid), and why Optuna rather than OSS Vizier;
* :mod:`jobs.tuning.local`  the study on this machine: every trial is the job's whole topology under the one
  local launch (``jobs.local.custom_job``) with the contract Vertex gives a trial, and the job as it stands
  beside them, the baseline (``run_local_study``);
* :mod:`jobs.tuning.pick`   after a Vertex study: the baseline CustomJob's figure read through ``/gcs`` and the
  model handed on (the ``pick_model`` step);
* ``python -m jobs.tuning`` (:mod:`jobs.tuning.__main__`): a job file's study alone.

Beside it: ``jobs.tuning_spec`` (the section's rules, run by ``jobs.validate``, and the ``--NAME=VALUE`` flags a
trial's replicas get), ``jobs.records`` (the study's record, ``<base>/tuning.json``, the trials' folders and THE
best-trial rule) and ``jobs.cloud.tuning_job`` (the same study as a Vertex AI HyperparameterTuningJob).
"""
