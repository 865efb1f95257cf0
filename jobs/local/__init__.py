"""The local runtime: a job's replicas as processes (or containers) on this machine with Vertex's environment
and nothing else (``launcher``, the supervisor, ``python -m jobs.local.launcher`` its command line; THE local
launch of a job's pools, ``custom_job``), one run of the pipeline on this machine (``pipeline_run``), one run
per output folder and the history of them (``runs``, ``history``, ``prune``, ``runs_cli``), what a person sees
(``console``, ``hints``), ``--runner docker`` (``docker_session`` on the host, ``replica_container`` per replica,
``containers`` shared) and fault injection for tests (``faults``)."""
