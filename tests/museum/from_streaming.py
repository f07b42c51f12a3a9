"""mosaicml/streaming: StreamingDataset and StreamingDataLoader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._base import ShardedEpochLoader, piece


class StaleStateAfterIteration(ShardedEpochLoader):
    """Applies a loaded state only if its epoch is not older than the dataset's next-epoch counter.

    Report: mosaicml/streaming#437, "Can't get mid epoch resumption to work"

    Mechanism: a loaded state is used only if its epoch is not older than the dataset's
    next-epoch counter, which every ``iter()`` advances, so a state loaded into a
    dataset that has already iterated is judged stale and the loader starts a fresh
    epoch from its first sample.

    Trigger: ``load_state_dict`` into a loader (or a dataset) that already iterated,
    instead of a fresh one: the report reuses the first loader's dataset.
    """

    next_epoch = 0

    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None and self.pending["epoch"] < self.next_epoch:
            self.pending = None  # stale: start the epoch the counter says
            self.epoch, self.offset, self.in_progress = self.next_epoch, 0, False
        it = super().__iter__()
        self.next_epoch = self.epoch + 1
        return it


PIECES = [piece("streaming-437", StaleStateAfterIteration, "SC20")]
