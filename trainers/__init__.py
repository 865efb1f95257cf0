"""Library behind the components: config, hardware catalog, cluster environment, trainer, launcher.

Importing this package must stay cheap (no TensorFlow): config validation runs in well under a second.
The trainer modules (``trainers.train``, ``trainers.task``) import TensorFlow themselves.
"""
