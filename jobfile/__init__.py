"""The job file: its schema (one dataclass per section, ``config.JobConfig`` the whole; the sections only Vertex
acts on in ``config_vertex``, ``notify:`` in ``config_notify``), THE parser of it (``config.read``, under
``config.from_dict``/``load``/``load_json``; the coercer ``coerce``), reading files and presets (``config_files``,
``presets/``), and what those stand on: the one-line problems (``errors``), local-or-``gs://`` paths (``paths``), the
bounded read of a file a user names (``regular_file``). The bottom layer: the replica (``trainers/``) and the job
side (``jobs/``) read it; it imports neither, nor TensorFlow."""
