"""A hyperparameter study of the job file's ``tuning:`` section, run on this machine.

* :mod:`jobs.tuning.search` the search itself (Optuna: TPE for Vertex's default Bayesian optimization, random,
  grid), and why Optuna rather than OSS Vizier;
* :mod:`jobs.tuning.local`  the study on this machine: every trial is the job's whole topology under the one
  local launch (``jobs.local.custom_job``) with the contract Vertex gives a trial (``run_local_study``);
* ``python -m jobs.tuning`` (:mod:`jobs.tuning.__main__`): a job file's study alone.

Beside it: ``jobs.tuning_spec`` (the section's rules, run by ``jobs.validate``, and the ``--NAME=VALUE`` flags a
trial's replicas get), ``jobs.records`` (the study's record, ``<base>/tuning.json``, the trials' folders and THE
best-trial rule) and ``jobs.cloud.tuning_job`` (the same study as a Vertex AI HyperparameterTuningJob).
"""
