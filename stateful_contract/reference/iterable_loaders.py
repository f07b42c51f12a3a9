"""Iterable datasets for the StatefulDataLoader matrix (`stateful_contract.reference.matrix`).

The config's samples as an iterable dataset, sharded over worker processes, with and
without a ``state_dict`` of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from stateful_contract.config import LoaderConfig

__all__ = ["ShardedTokens", "StatefulShardedTokens"]


class ShardedTokens(IterableDataset):  # type: ignore[type-arg]
    """The config's samples as an ``IterableDataset``, sharded over worker processes.

    The order is ``range(dataset_size)``, or one fixed permutation of it drawn from
    ``seed`` when ``config.shuffle`` (an iterable dataset shuffles itself; the loader
    cannot). Worker ``w`` of ``W`` yields ``order[w::W]``, so the workers together
    yield each sample once per epoch. No ``state_dict``: torchdata can only resume it
    by fast-forwarding.
    """

    def __init__(self, config: LoaderConfig) -> None:
        self.samples = config.dataset
        self.order = (torch.randperm(config.dataset_size, generator=torch.Generator().manual_seed(config.seed)).tolist()
                      if config.shuffle else list(range(config.dataset_size)))

    def shard(self) -> list[int]:
        info = get_worker_info()
        return self.order if info is None else self.order[info.id::info.num_workers]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in self.shard():
            yield self.samples[i]


class StatefulShardedTokens(ShardedTokens):
    """`ShardedTokens` with torchdata's ``Stateful`` protocol: the state is the offset
    in this process' shard. A loaded offset applies to the next ``iter()``; a new
    ``iter()`` otherwise starts the shard over."""

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.offset = 0
        self.pending: int | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # The position moves at iter(), not at the first batch: a generator's body would
        # run only at next(), and a state taken between the two would still hold the
        # previous pass's offset (found by SC22 on a pass cut short, as in torchdata#1368).
        shard = self.shard()
        self.offset, self.pending = (self.pending or 0), None
        return self._run(shard)

    def _run(self, shard: list[int]) -> Iterator[dict[str, Any]]:
        while self.offset < len(shard):
            i = shard[self.offset]
            self.offset += 1
            yield self.samples[i]
        self.offset = 0

    def state_dict(self) -> dict[str, Any]:
        return {"offset": self.offset if self.pending is None else self.pending}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = int(state_dict["offset"])
