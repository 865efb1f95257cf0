"""Known failures of users' trainers, each recognised in a replica's output and explained in one line.

One place for "we have seen this before": the launcher adds the hint under a failed replica's error line.
"""
from __future__ import annotations

import re
from typing import Iterable

#: (pattern searched in the error line and the last lines, the hint)
KNOWN = (
    (re.compile(r"Attempt to convert a value \(PerReplica|Invalid reduction dimension 0 for input with 0 dimensions"),
     "this is Keras 3's Model.fit under a multi-worker strategy, which fails at its first step "
     "(keras-team/keras#20585); two ways out: train with tf_keras (Keras 2, installed in the trainer image) by "
     "declaring trainer.env: {TF_USE_LEGACY_KERAS: \"1\"} in the job file (TF_USE_LEGACY_KERAS=1 set before "
     "TensorFlow is imported, in every replica here and on Vertex; your shell's is not passed on), or train with a "
     "custom loop (strategy.run)"),
    (re.compile(r"No module named '?tf_keras"),
     "TF_USE_LEGACY_KERAS=1 needs the tf_keras package: it is in the trainer image and the dev extra "
     "(pip install -e '.[cpu]'); add tf_keras to your requirements for another image"),
)


def hint_for(lines: Iterable[str]) -> str | None:
    """The hint for the first known failure found in ``lines``, else None."""
    text = "\n".join(line for line in lines if line)
    for pattern, hint in KNOWN:
        if pattern.search(text):
            return hint
    return None
