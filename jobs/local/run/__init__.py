"""One run of the pipeline on this machine, one run per output folder: the run (``pipeline_run``), the folder's
lock (``lock``), what made the run and whether a new one may go on in its folder (``folder``), the steps' wall
times (``step_timer``) and the report's step table read from them (``step_table``), the summary it ends with (``summary``) and the console a person watches (``console``)."""
