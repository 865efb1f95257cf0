"""A hyperparameter study of the job file's ``tuning:`` section, run on this machine.

* :mod:`jobs.tuning.search` the search itself (Optuna: TPE for Vertex's default Bayesian optimization, random,
  grid), and why Optuna rather than OSS Vizier;
* :mod:`jobs.tuning.local`  the study on this machine (``run_local_study``): every trial is the job's whole
  topology under the one local launch (``jobs.local.launch.custom_job``) with the contract Vertex gives a trial, and the
  job as it stands beside them, the baseline; its parts: :mod:`jobs.tuning.loop` (the trial loop),
  :mod:`jobs.tuning.trial` (one run, a trial or the baseline, and its outcome), :mod:`jobs.tuning.record` (the
  study's own record: its key, resuming it, writing it), :mod:`jobs.tuning.failures` (why a study stops, said);
* :mod:`jobs.tuning.pick`   after a Vertex study: the baseline CustomJob's figure read through ``/gcs`` and the
  model handed on (the ``pick_model`` step);
* ``python -m jobs.tuning`` (:mod:`jobs.tuning.__main__`): a job file's study alone.

Beside it, in the spec layer (the local runtime and the clients read them too): ``jobs.rules.tuning_section`` (the
section's rules, run by ``jobs.rules.validate``, THE parser of the section into the typed ``Study`` every part takes,
and the ``--NAME=VALUE`` flags a trial's replicas get), ``jobs.rules.tuning_rules`` (the study's record and its rules:
THE best-trial rule, the baseline and the model handed on), ``jobs.run_records.trial_files`` (the trials' folders and
cloudml-hypertune files), ``jobs.run_records.records`` (the record's name, ``<base>/tuning.json``, read and written) and
``jobs.cloud.vertex_jobs.tuning_job`` (the same study as a Vertex AI HyperparameterTuningJob).
"""
