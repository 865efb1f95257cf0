"""The job side: everything that runs *outside* a training replica, on a user's machine, in Cloud Build or
in a KFP task: config validation and the hardware catalog (``validate``, ``hardware/``), the pipeline's
steps as plain calls (``steps``), the local launcher that reproduces Vertex's replica environment
(``launcher``, ``vertex_env``), fault injection for resilience tests (``faults``), and the cloud side:
image build/push, Cloud Build, pipeline submission, template upload, Model Registry.

``trainers/`` is what runs inside a replica and never imports this package.
"""
