"""Hugging Face accelerate: its dataloader adapters around StatefulDataLoader (single process).

The multi-process accelerate pieces (#3938, #4195) are in `ranked.py`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from stateful_contract import LoaderConfig

from ._base import ShardedEpochLoader, piece


class EpochCounterNotSaved(ShardedEpochLoader):
    """Seeds each epoch's shuffle from a counter that the checkpoint leaves out.

    Report: huggingface/accelerate#3996, "(issue text not in the searched corpus; as its fixes #4012 and #4232 describe it: resuming from save_state/load_state replays the epoch-0 shuffle order)"

    Mechanism: the shuffle of each epoch is seeded with ``seed + iteration``, the
    adapter's epoch counter, which ``save_state``/``load_state`` never persist, so a
    resumed run restores the batch position but shuffles with the first epoch's seed.

    Trigger: a shuffled loader (``use_seedable_sampler=True``) resumed in any epoch
    after the first.
    """

    def position(self) -> dict[str, Any]:
        return {"offset": self.offset}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = 0, state["offset"]  # a fresh adapter's iteration is 0


class StaleCachedState(ShardedEpochLoader):
    """Returns a cached state that ``load_state_dict`` does not refresh.

    Report: huggingface/accelerate#4244, "Fix stateful dataloader checkpoint cache after loading"

    Mechanism: the adapter answers ``state_dict()`` from a copy it refreshes on every
    batch, and ``load_state_dict`` updates the wrapped loader but not that copy, so a
    state saved after a load and before the next batch is the adapter's previous
    cursor: the start for a fresh adapter (data replayed), a later point for a used one
    (data skipped).

    Trigger: a resumed job saving again before its first step (a preemption right
    after the restart, a save on resume).
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.cached = self.position()

    def run(self) -> Iterator[Any]:
        for batch in super().run():
            self.cached = self.position()
            yield batch
        self.cached = self.position()

    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.cached)


class SkipLoaderLeavesEpochUncounted(ShardedEpochLoader):
    """Serves the resumed pass from a separate skip loader that the original never hears back from.

    Report: huggingface/accelerate#4233, "Resume a mid-epoch checkpoint on the same permutation"

    Mechanism: the rest of the interrupted epoch is served by a separate
    ``skip_first_batches`` loader, so the original loader never counts that epoch as
    done and its next pass calls ``set_epoch`` with the same epoch again: the resumed
    epoch's permutation is trained twice and the next one is never seen.

    Trigger: a shuffled loader resumed mid-epoch, then trained for further epochs
    (``examples/by_feature/checkpointing.py`` has this shape).
    """

    def __iter__(self) -> Iterator[Any]:
        skipping = self.pending is not None and self.pending.get("offset", 0) > 0
        it = super().__iter__()
        return self.skip_loader(it) if skipping else it

    def skip_loader(self, it: Iterator[Any]) -> Iterator[Any]:
        epoch = self.epoch
        yield from it
        self.epoch = epoch  # the original loader's counter never moved


PIECES = [
    piece("accelerate-3996", EpochCounterNotSaved, "SC10"),
    piece("accelerate-4244", StaleCachedState, "SC13"),
    piece("accelerate-4233", SkipLoaderLeavesEpochUncounted, "SC10"),
]
