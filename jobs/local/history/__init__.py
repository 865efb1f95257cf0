"""The history of local runs, read back from their folders: the one reader of a run folder (``reader``, with the
strict reading of its records in ``record_check`` and a run's figures, study and gate in ``results``), what
``runs list`` and ``runs compare`` show (``views``), ``runs prune`` (``prune``). The commands that show them are ``jobs.commands.runs_cli`` and
``jobs.commands.logs_cli`` (``vtp logs``: a local run's or a Vertex job's replica logs)."""
