"""The local runtime: replicas as processes with Vertex's environment (``launcher``, ``vertex_env``), one
run per output folder (``runs``), what a person sees (``console``) and fault injection for tests
(``faults``)."""
