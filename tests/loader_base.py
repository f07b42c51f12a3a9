"""The one base of the test loaders: a small, correct, hand-written stateful loader.

`zoo.EpochLoader`, `ranked_loaders.Shards` and the museum's `ShardedEpochLoader` are this loader
(each adds only what its tests need), and every broken loader changes one thing in one of them,
the way real wrappers went wrong. Its semantics are `StatefulDataLoader`'s:

- the state is ``{"epoch", "offset"}`` (`position`); loading is lazy (it takes effect at the next
  ``iter()``) and ``state_dict()`` before that returns the loaded state;
- epoch ``e`` shuffles with ``torch.Generator().manual_seed(seed + e)`` and rank ``r`` of ``w``
  reads ``order[r::w]``, as ``DistributedSampler`` deals indices;
- a new ``iter()`` abandons an unfinished epoch; a state taken after the last batch resumes into
  an empty epoch, one taken after ``StopIteration`` into the next epoch.

Rank processes load the loader files by path with their folder on ``sys.path``, so this module is
imported by its plain name and imports nothing from the tests.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import default_collate

from stateful_contract import LoaderConfig

__all__ = ["EpochOffsetLoader"]


class EpochOffsetLoader:
    """Epoch number + batch offset in the epoch; see the module docstring for its semantics."""

    def __init__(self, config: LoaderConfig) -> None:
        self.config = config
        self.epoch = 0
        self.offset = 0
        self.in_progress = False
        self.pending: dict[str, Any] | None = None

    # -- the data ---------------------------------------------------------------------
    def order(self, epoch: int) -> list[int]:
        """Every index of ``epoch``, in the order the world reads them."""
        c = self.config
        if not c.shuffle:
            return list(range(c.dataset_size))
        return torch.randperm(c.dataset_size, generator=torch.Generator().manual_seed(c.seed + epoch)).tolist()

    def shard(self, epoch: int) -> list[int]:
        """The indices this rank reads in ``epoch``."""
        return self.order(epoch)[self.config.rank::self.config.world_size]

    def batches(self, epoch: int) -> list[list[int]]:
        c, mine = self.config, self.shard(epoch)
        out = [mine[i:i + c.batch_size] for i in range(0, len(mine), c.batch_size)]
        return [b for b in out if len(b) == c.batch_size] if c.drop_last else out

    def collate(self, indices: list[int]) -> Any:
        return default_collate([self.config.dataset[i] for i in indices])

    # -- iteration --------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None:
            self.restore(self.pending)
            self.pending = None
        elif self.in_progress:
            self.epoch, self.offset = self.epoch + 1, 0
        self.in_progress = True
        return self.run()

    def run(self) -> Iterator[Any]:
        batches = self.batches(self.epoch)
        while self.offset < len(batches):
            indices = batches[self.offset]
            self.offset += 1
            yield self.collate(indices)
        self.end_of_epoch()

    def end_of_epoch(self) -> None:
        self.epoch, self.offset, self.in_progress = self.epoch + 1, 0, False

    # -- state ------------------------------------------------------------------------
    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.offset}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = state["epoch"], state["offset"]

    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.pending) if self.pending is not None else self.position()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = copy.deepcopy(state_dict)
        self.in_progress = False
