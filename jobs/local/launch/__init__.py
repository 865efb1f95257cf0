"""Launching a job's replicas on this machine, as processes or containers, with Vertex's environment and nothing
else: the supervisor (``supervisor``: restarts, the done and worker-failure rules, Ctrl-C; the result of a job in
``outcome``, one attempt of every replica in ``attempt``), its command line (``python -m jobs.local.launch``),
THE local launch of a job's worker pools (``custom_job``), what a replica's failure means (``hints``), and
``--runner docker`` (``docker_session`` on the host, ``replica_container`` per replica, ``containers`` shared)."""
