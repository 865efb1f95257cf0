"""The job side: everything that runs *outside* a training replica, on a user's machine, in Cloud Build or in a
KFP task. One folder per layer, read bottom to top (README "Layout"; ``tests/test_layout.py`` declares the layers
and checks that no module imports a higher layer or closes a loop, imports inside functions included):

* ``rules/``: what a job is and whether it is valid, nothing run yet: the one-line errors, the hardware catalog
  and its rules (``hardware/``), the image reference and a job's image, THE Vertex job spec, the replica
  environment, placement, each section's rules (``*_section``), validation, the preflight, the AI Platform import
  (``aiplatform/``); beside it ``run_records/`` (what a run leaves and how it is read back: the records, a study's
  trial files, provenance, the cost, TensorBoard's scalars) and ``evaluation/`` (the held-out verdict);
* ``cloud/``: the Google Cloud APIs under one policy (``apis/``), what runs inside a step's container to run a
  Vertex job (``vertex_jobs/``), the plan of a Vertex job (``planning``);
* ``images/``: building an image through one builder interface;
* ``local/``: a job on this machine as Vertex would run it (``process/``, ``launch/``, ``run/``, ``history/``);
* ``steps/``, ``tuning/``, ``ci/``: the pipeline's steps as plain calls (the components in ``components/`` wrap
  them), the gate, verification, the report, compiling; a study on this machine; the decisions of the CI's steps;
* ``commands/``: the commands users type (``pipelines/run.py``'s table), where no lower layer calls them.

``trainers/`` is what runs inside a replica and never imports this package; nothing here imports ``pipelines/``.
Importing the package installs the one compatibility hook: the module paths that component YAMLs compiled by
earlier versions import (``moved.py``).
"""
from jobs import moved

moved.install()
