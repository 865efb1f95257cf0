"""The local runtime: replicas as processes (or containers) with Vertex's environment and nothing else
(``launcher``, ``launcher_cli``, ``vertex_env``), one run of the pipeline on this machine (``pipeline_run``),
one run per output folder and the history of them (``runs``, ``history``), what a person sees (``console``,
``hints``), ``--runner docker`` (``docker_session`` on the host, ``replica_container`` per replica,
``containers`` shared) and fault injection for tests (``faults``)."""
