"""SC21's plan: where a trainer checkpoints in its epoch loop, and the epoch it resumes at.

The epoch a trainer's counter resumes at (`EpochLoop.resume_at`): docs/clauses.md, SC21, "How it is checked".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hypothesis import strategies as st

from ..config import LoaderConfig
from ..repro.epoch_steps import DEFAULT_HOOK, LoopPoint
from ..repro.vocabulary import at_window_boundary
from .plans import CHECKPOINT_EPOCHS, SavePoints

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
    """Run 1 checkpoints in epoch ``epoch`` of its loop at a point of kind ``kind`` (after ``batches`` batches
    for ``"mid-epoch"``: end-of-epoch kinds mean each rank's own last batch); run 2 loads the state and loops
    from `resume_at`. Both loops end before epoch ``stop``."""

    epoch: int
    kind: Kind
    batches: int = 0
    stop: int = 0
    #: The trainer's call at each epoch (the check's ``epoch_hook``).
    hook: str = DEFAULT_HOOK

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

    def describe(self, length: int, resumed_at: int | None = None) -> str:
        """Where the state was taken and the epoch the loop resumed at (``resumed_at``: the one the trainer's
        restored state held, when not `resume_at`)."""
        start = self.resume_at if resumed_at is None else resumed_at
        why = ("the trainer's state holds epoch {e}: it runs the rest of it first" if start != self.resume_at
               else "the trainer's epoch counter says epoch {e} is done" if start > self.epoch
               else "the trainer's epoch counter is still at epoch {e}").format(e=self.epoch)
        return f"{self.point(length).describe(length)}; resumed at epoch {start} ({why})"


def epoch_loop_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints, *,
                    epoch_hook: str = DEFAULT_HOOK) -> EpochLoop:
    epoch = data.draw(st.integers(0, CHECKPOINT_EPOCHS - 1), label="checkpoint epoch")
    n = lengths[epoch]
    window = saves.window(config)
    # Mid-epoch at 0 batches is right after the epoch's iter(), where some trainers never save (`SavePoints`).
    inside = [k for k in range(max(n, 1)) if at_window_boundary(k, window) and (k or saves.after_iter)]
    # Under the epoch-end policy the trainer saves after the pass's StopIteration, before its next
    # set_epoch() (as torchtune's recipes do at the end of their epoch loop's body).
    kinds = [k for k in KINDS if (n > 0 or k != "after the last batch")
             and (k == "after StopIteration" or not saves.epoch_ends_only) and (k != "mid-epoch" or inside)]
    kind = data.draw(st.sampled_from(kinds), label="checkpoint point")
    batches = 0
    if kind == "mid-epoch":
        batches = data.draw(st.sampled_from(inside), label="batches yielded in that epoch")
    return EpochLoop(epoch, kind, batches, epoch + 1 + LOOP_EPOCHS_AFTER, epoch_hook)
