"""Layer 7, the commands users type: each ``vtp`` subcommand of ``pipelines/run.py``'s table that no lower
layer calls: ``run_command`` (``vtp`` itself: the pipeline command and the dispatch), ``validate_cli``,
``hardware_cli``, ``plan_cli`` and ``saved_plan`` (``vtp plan``, ``vtp apply``), ``submit`` (``--project``,
``register-model``), ``templates`` (``upload-template``), ``schedule``, ``runs_cli``, ``logs_cli``; what
they share: ``output_file`` (a file a command writes where the user names it), ``flag_file`` (a flag against
the job file); ``ci_local/`` (``vtp ci-local``: ``cloudbuild.yaml`` run on this machine, step by step)."""
