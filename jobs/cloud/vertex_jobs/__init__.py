"""What runs inside a pipeline step's container and runs a Vertex job there: THE runner (``job_runner``:
create, follow, cancel, logs), the training CustomJob (``custom_job``, with its capacity fall-over along the
plan's ranking) and the study (``tuning_job``), each ``python3 -m`` of a container component."""
