"""The local runtime: a job on this machine, as Vertex would run it. Four folders, bottom to top (each imports
only those before it):

* ``process/``: process tools (no child outlives its parent; fault injection for the resilience tests);
* ``launch/``: a job's replicas as processes or containers (the supervisor, ``python -m jobs.local.launch``, THE
  local launch of a job's pools, the known-failure hints, ``--runner docker``);
* ``run/``: one run of the pipeline per output folder (its lock, what made it, the steps' wall times, its summary,
  the console);
* ``history/``: the runs of an output root read back (``runs list|compare|prune``, ``vtp logs``)."""
