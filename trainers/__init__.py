"""What runs inside a training replica: the job config schema, the cluster environment, the strategy
switch, data preparation and input, models, the training loop, checkpoints and export.

Never imports kfp or ``jobs`` (the job side). Importing this package must stay cheap (no TensorFlow):
config validation runs in well under a second. The trainer modules (``trainers.train``, ``trainers.task``)
import TensorFlow themselves.
"""
