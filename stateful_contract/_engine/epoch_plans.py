"""SC21's plan: where a trainer checkpoints in its epoch loop, and the epoch it resumes at.

The trainer's loop is ``for epoch in range(start, n): set_epoch(epoch); for batch in
loader: step()``. After a restart it builds a new loader, calls
``load_state_dict(saved)`` and runs the loop from ``start``, the epoch its own counter
says it was in. What that counter says depends on where the checkpoint was taken, and
the plan records it (`EpochLoop.resume_at`, from `trainer_resume_epoch`):

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

from hypothesis import strategies as st

from ..config import LoaderConfig
from .epoch_steps import LoopPoint
from .plans import CHECKPOINT_EPOCHS, Alignment, window_of

__all__ = ["LOOP_EPOCHS_AFTER", "EpochLoop", "epoch_loop_plan", "trainer_resume_epoch"]

#: The loops run to the end of the second epoch after the checkpoint's.
LOOP_EPOCHS_AFTER = 2

#: The kinds of checkpoint points, in the order Hypothesis shrinks towards.
KINDS = ("mid-epoch", "before iter()", "after the last batch", "after StopIteration")


def trainer_resume_epoch(point: LoopPoint, length: int) -> int:
    """The epoch a trainer's loop resumes at after a checkpoint at ``point`` (see the module docstring)."""
    done = point.after_stop or (not point.before_iter and length > 0 and point.batches >= length)
    return point.epoch + 1 if done else point.epoch


@dataclass(frozen=True)
class EpochLoop:
    """Run 1 checkpoints at ``point`` of its epoch loop; run 2 loads the state and loops from ``resume_at``.

    ``length`` is the checkpoint epoch's number of batches in the uninterrupted run, and
    both loops end before epoch ``stop``.
    """

    point: LoopPoint
    length: int
    resume_at: int
    stop: int

    def describe(self) -> str:
        why = ("the trainer's epoch counter says epoch {e} is done" if self.resume_at > self.point.epoch
               else "the trainer's epoch counter is still at epoch {e}").format(e=self.point.epoch)
        return f"{self.point.describe(self.length)}; resumed at epoch {self.resume_at} ({why})"


def epoch_loop_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, alignment: Alignment,
                    ) -> EpochLoop:
    epoch = data.draw(st.integers(0, CHECKPOINT_EPOCHS - 1), label="checkpoint epoch")
    n = lengths[epoch]
    kinds = [k for k in KINDS if n > 0 or k != "after the last batch"]
    kind = data.draw(st.sampled_from(kinds), label="checkpoint point")
    if kind == "mid-epoch":
        window = window_of(alignment, config)
        batches = data.draw(st.sampled_from([k for k in range(max(n, 1)) if k % window == 0]),
                            label="batches yielded in that epoch")
        point = LoopPoint(epoch, batches)
    elif kind == "before iter()":
        point = LoopPoint(epoch, 0, before_iter=True)
    else:
        point = LoopPoint(epoch, n, after_stop=kind == "after StopIteration")
    return EpochLoop(point, n, trainer_resume_epoch(point, n), epoch + 1 + LOOP_EPOCHS_AFTER)
