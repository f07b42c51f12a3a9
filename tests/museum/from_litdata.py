"""Lightning-AI/litData: StreamingDataLoader and its cycling datasets."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from ._base import ContinuingLoader, ShardedEpochLoader, piece


class ExternalLoadDisablesPassResume(ContinuingLoader):
    """Continues a cut-short pass on the next ``iter()``, except after an external load.

    Report: Lightning-AI/litData#770, "`ParallelStreamingDataset` with `resume=True` does not resume after manually loading state dict when breaking early"

    Mechanism: an external ``load_state_dict`` sets a ``restore`` flag that only a pass
    running to its end clears, and while it is set the loader skips its own per-pass
    resume, so after a resume every pass that breaks early is followed by a pass that
    starts again at the loaded point instead of continuing.

    Trigger: ``load_state_dict``, then passes that break early (``limit_train_batches``)
    and further passes.
    """

    restore_flag = False
    loaded: dict[str, Any] | None = None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.loaded, self.restore_flag = copy.deepcopy(state_dict), True

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None and self.in_progress and self.restore_flag and self.loaded is not None:
            self.restore(self.loaded)  # the dataset still holds the loaded state
        return super().__iter__()

    def end_of_epoch(self) -> None:
        super().end_of_epoch()
        self.restore_flag = False


class ResumeStateNeverCleared(ShardedEpochLoader):
    """Keeps the loaded state after resuming and resumes every later epoch from it too.

    Report: Lightning-AI/litData#330, "Reset state_dict after resume"

    Mechanism: the dataset resumes whenever it holds a loaded state and never drops it
    after the resume, so every later epoch's iterator resumes from it again and skips
    the batches that the interrupted epoch had already yielded.

    Trigger: any mid-epoch resume followed by further epochs.
    """

    resume_at = 0

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.resume_at = self.offset

    def end_of_epoch(self) -> None:
        super().end_of_epoch()
        self.offset = self.resume_at


PIECES = [
    piece("litdata-770", ExternalLoadDisablesPassResume, "SC22"),
    piece("litdata-330", ResumeStateNeverCleared, "SC10"),
]
