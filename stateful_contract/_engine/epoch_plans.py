"""SC21's plan: where a trainer checkpoints in its epoch loop, and the epoch it resumes at.

The trainer's loop is ``for epoch in range(start, n): set_epoch(epoch); for batch in
loader: step()``. After a restart it builds a new loader, calls
``load_state_dict(saved)`` and runs the loop from ``start``, the epoch its own counter
says it was in. What that counter says depends on where the checkpoint was taken, and
the plan says it (`EpochLoop.resume_at`):

- after ``set_epoch(e)``, before ``iter()`` (a save at the top of the epoch loop):
  epoch ``e``;
- after ``k`` of the epoch's ``n`` batches, ``k < n`` (a save every N steps):
  epoch ``e``, since ``global_step // steps_per_epoch == e`` and the loop variable is ``e``;
- after the last batch, before ``StopIteration`` (the save inside the batch loop on the
  epoch's last step, ``save_freq`` a multiple of ``steps_per_epoch``): epoch ``e + 1``,
  since ``global_step == (e + 1) * n``; verl derives its epoch this way, as does every
  trainer that counts steps (a trainer that saved its loop variable ``e`` instead
  resumes into the empty rest of epoch ``e``, which SC10 covers);
- after ``StopIteration`` (the save after the batch loop): epoch ``e + 1``, the next one
  to run.

A mid-epoch resume expects the rest of epoch ``e``; an end-of-epoch one expects epoch
``e + 1`` from its first batch. In an epoch with no batch at all (``drop_last`` and fewer
samples than a batch) only the top-of-loop, ``iter()`` and after-``StopIteration`` points
exist; the first two resume at ``e``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hypothesis import strategies as st

from ..config import LoaderConfig
from .epoch_steps import LoopPoint
from .plans import CHECKPOINT_EPOCHS, Alignment, window_of

__all__ = ["KINDS", "LOOP_EPOCHS_AFTER", "EpochLoop", "Kind", "epoch_loop_plan"]

#: The loops run to the end of the second epoch after the checkpoint's.
LOOP_EPOCHS_AFTER = 2

Kind = Literal["mid-epoch", "before iter()", "after the last batch", "after StopIteration"]
#: The kinds of checkpoint points, in the order Hypothesis shrinks towards.
KINDS: tuple[Kind, ...] = ("mid-epoch", "before iter()", "after the last batch", "after StopIteration")
#: The kinds after which a trainer's counter says the epoch is done.
_DONE = ("after the last batch", "after StopIteration")


@dataclass(frozen=True)
class EpochLoop:
    """Run 1 checkpoints in epoch ``epoch`` of its loop at a point of kind ``kind`` (after
    ``batches`` batches for ``"mid-epoch"``); run 2 loads the state and loops from
    `resume_at`. Both loops end before epoch ``stop``.

    The end-of-epoch kinds mean each rank's own last batch: on several ranks the plan is
    drawn from the shortest rank's epoch lengths, and ranks may differ by a batch.
    """

    epoch: int
    kind: Kind
    batches: int = 0
    stop: int = 0

    @property
    def resume_at(self) -> int:
        """The epoch the trainer's loop resumes at (the module docstring says why)."""
        return self.epoch + 1 if self.kind in _DONE else self.epoch

    def point(self, length: int) -> LoopPoint:
        """The checkpoint point in an epoch of ``length`` batches."""
        if self.kind == "before iter()":
            return LoopPoint(self.epoch, 0, before_iter=True)
        if self.kind == "mid-epoch":
            return LoopPoint(self.epoch, min(self.batches, length))
        return LoopPoint(self.epoch, length, after_stop=self.kind == "after StopIteration")

    def describe(self, length: int) -> str:
        why = ("the trainer's epoch counter says epoch {e} is done" if self.resume_at > self.epoch
               else "the trainer's epoch counter is still at epoch {e}").format(e=self.epoch)
        return f"{self.point(length).describe(length)}; resumed at epoch {self.resume_at} ({why})"


def epoch_loop_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, alignment: Alignment,
                    ) -> EpochLoop:
    epoch = data.draw(st.integers(0, CHECKPOINT_EPOCHS - 1), label="checkpoint epoch")
    n = lengths[epoch]
    kind = data.draw(st.sampled_from([k for k in KINDS if n > 0 or k != "after the last batch"]),
                     label="checkpoint point")
    batches = 0
    if kind == "mid-epoch":
        window = window_of(alignment, config)
        batches = data.draw(st.sampled_from([k for k in range(max(n, 1)) if k % window == 0]),
                            label="batches yielded in that epoch")
    return EpochLoop(epoch, kind, batches, epoch + 1 + LOOP_EPOCHS_AFTER)
