"""The history of local runs, read back from their folders: the one reader of a run folder (``reader``, with the
strict reading of its records in ``record_check`` and a run's figures, study and gate in ``results``), what
``runs list`` and ``runs compare`` show (``views``), ``runs prune`` (``prune``), the ``runs`` command line
(``runs_cli``) and ``vtp logs`` (``logs_cli``: a local run's or a Vertex job's replica logs)."""
