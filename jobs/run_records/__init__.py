"""What a run leaves and how it is read back: the records (``records``: names, reading, writing), what made a
run (``provenance``), this product's own files in a project folder (``own_outputs``), a study's trials on
disk (``trial_files``), what a run cost (``run_cost``), the TensorBoard scalars it wrote (``tensorboard``)."""
