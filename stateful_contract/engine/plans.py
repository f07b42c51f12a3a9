"""Drawing checkpoint plans: where in the stream a state is taken.

Positions are drawn *after* the uninterrupted run, from the epoch lengths it
showed, so every index of every epoch is reachable (mid grad-acc window, window
boundaries, the last batch, after ``StopIteration``) and Hypothesis shrinks towards
the first batch of the first epoch.
"""

from __future__ import annotations

from typing import Literal

from hypothesis import strategies as st

from ..config import LoaderConfig
from .steps import Position

__all__ = [
    "CHECKPOINT_EPOCHS",
    "REFERENCE_EPOCHS",
    "Alignment",
    "allowed_stream_points",
    "draw_position",
    "window_of",
]

#: Checkpoints are drawn in the first two epochs: the second shows what carries over
#: an epoch boundary (sampler reseeding, buffered windows, worker restarts).
CHECKPOINT_EPOCHS = 2
#: The uninterrupted run covers the checkpoint's epoch plus two further epochs.
REFERENCE_EPOCHS = CHECKPOINT_EPOCHS + 2
#: iter() calls a resumed loader gets beyond the epochs it must cover: torchdata
#: resumes a state taken after an epoch's last batch into one empty epoch.
ALIGNMENT_SLACK = 2

#: ``"window"``: checkpoints only at grad-acc window boundaries (``config.grad_acc_step``);
#: an int: only at multiples of that many batches within an epoch.
Alignment = Literal["window"] | int | None


def window_of(alignment: Alignment, config: LoaderConfig) -> int:
    if alignment is None:
        return 1
    if alignment == "window":
        return config.grad_acc_step
    return int(alignment)


def _allowed_batches(n: int, window: int) -> list[int]:
    """Batch counts within an epoch of ``n`` batches at which a checkpoint may be taken."""
    return [k for k in range(n + 1) if k % window == 0 or k == n]


def draw_position(data: st.DataObject, lengths: list[int], config: LoaderConfig, alignment: Alignment,
                  *, allow_before_iter: bool = True) -> Position:
    """A checkpoint point in one of the first `CHECKPOINT_EPOCHS` epochs."""
    epoch = data.draw(st.integers(0, CHECKPOINT_EPOCHS - 1), label="checkpoint epoch")
    n = lengths[epoch]
    batches = data.draw(st.sampled_from(_allowed_batches(n, window_of(alignment, config))),
                        label="batches yielded in that epoch")
    after_stop = batches == n and data.draw(st.booleans(), label="after StopIteration")
    before_iter = (allow_before_iter and epoch == 0 and batches == 0
                   and data.draw(st.booleans(), label="before the first iter()"))
    return Position(epoch=epoch, batches=batches, after_stop=after_stop, before_iter=before_iter)


def allowed_stream_points(lengths: list[int], config: LoaderConfig, alignment: Alignment) -> list[int]:
    """Stream indices (over the first `CHECKPOINT_EPOCHS` + 1 epochs) where a hop may checkpoint."""
    window = window_of(alignment, config)
    points: list[int] = []
    start = 0
    for n in lengths[: CHECKPOINT_EPOCHS + 1]:
        points.extend(start + k for k in _allowed_batches(n, window))
        start += n
    return sorted(set(points))
