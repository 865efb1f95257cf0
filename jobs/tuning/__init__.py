"""Hyperparameter tuning from the job file's ``tuning:`` section: the one home of the study.

* :mod:`jobs.tuning_spec`   the section's rules (:func:`tuning_problems`, run by ``jobs.validate``) and the
  ``--NAME=VALUE`` flags a trial's replicas get;
* :mod:`jobs.tuning.search` the search itself (Optuna: TPE for Vertex's default Bayesian optimization, random,
  grid), and why Optuna rather than OSS Vizier;
* :mod:`jobs.tuning.local`  the study on this machine: every trial is the job's whole topology under the local
  launcher with the contract Vertex gives a trial (``run_local_study``, ``<base>/tuning.json``);
* ``jobs.cloud.tuning_job`` the same study as a Vertex AI HyperparameterTuningJob.

Importing this package is cheap (no Optuna): validation runs everywhere.
"""
from jobs.tuning_spec import tuning_problems

__all__ = ["tuning_problems"]
