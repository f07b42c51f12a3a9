"""How far into a run checkpoints are taken: the one size the plans draw in and the coverage line measures.

A module of its own, imported by both without torch: pytest-xdist's controller describes a worker's
coverage with it and never imports the plans (Hypothesis, the compared streams, torch).
"""

from __future__ import annotations

__all__ = ["CHECKPOINT_EPOCHS"]

#: Checkpoints are drawn in the first two epochs: the second shows what carries over an epoch boundary
#: (sampler reseeding, buffered windows, worker restarts).
CHECKPOINT_EPOCHS = 2
