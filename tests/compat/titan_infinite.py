"""torchtitan's text dataset with ``infinite=True``, modelled, as torchtitan's trainer consumes it.

Upstream (pytorch/torchtitan at ``c537bca68d96cbedcee6c22cfd693dfecdb54752``, 2026-08-19, the last commit
before the data path moved to grain in ``1b04fc1c``), ``torchtitan/hf_datasets/text_datasets.py``:

- ``HuggingFaceTextDataset(IterableDataset, Stateful)`` over ``split_dataset_by_node(ds, dp_rank,
  dp_world_size)``; ``HuggingFaceTextDataLoader.Config.infinite`` defaults to ``True``.
- ``__iter__`` is ``while True: for sample in self._get_data_iter(): ... self._sample_idx += 1; yield``, and at
  the end of the data ``reloop()``: ``_sample_idx = 0``, ``_epoch += 1``, and a map-style ``datasets.Dataset``
  is re-shuffled (``_original_data.shuffle(seed=42 + _epoch)``; epoch 0 stays unshuffled), a streaming
  ``IterableDataset`` gets ``set_epoch(epoch + 1)``.
- map-style: ``_get_data_iter`` is ``iter(self._data.skip(self._sample_idx))``; ``state_dict()`` is
  ``{sample_idx, epoch, token buffers}``, ``load_state_dict`` restores them and replays the epoch's shuffle.
  streaming: the state is ``{"data": self._data.state_dict(), buffers}``, and ``load_state_dict`` calls
  ``self._data.set_epoch(saved_epoch)`` and ``self._data.load_state_dict(...)`` (datasets' own resume).
- ``torchtitan/components/dataloader.py::ParallelAwareDataloader`` is a ``StatefulDataLoader`` whose state is
  ``{f"dp_rank_{rank}": pickle.dumps(super().state_dict()), "world_size": dp_world_size}``; it asserts the same
  world size at load. ``torchtitan/trainer.py::batch_generator`` calls ``iter(dataloader)`` once and then
  ``next()`` for every step; the checkpointer saves ``dataloader.state_dict()``. That one ``iter()`` drawn
  without end is what the contract does with an endless stream, so no ``consume`` is declared.

The model keeps one sample per sequence (``seq_len`` of the config's tokens: the token buffers stay empty, and
the contract counts samples), the config's samples for the dataset, and torch's ``randperm`` for datasets'
``shuffle(seed)``: the same shape, not the same permutation. The loader is torchdata's ``StatefulDataLoader``
keyed by data-parallel rank as ``ParallelAwareDataloader`` keys it (`RankKeyed`), so the row needs nothing
installed; `torchtitan_infinite_stream` uses the real ``datasets.IterableDataset`` and needs ``datasets``.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from stateful_contract.config import LoaderConfig

__all__ = ["InfiniteTextDataset", "RankKeyed", "torchtitan_infinite_map", "torchtitan_infinite_stream"]

#: ``reloop()``'s shuffle seed is ``42 + epoch`` (a constant upstream, not the run's seed).
RELOOP_SEED = 42


class InfiniteTextDataset(IterableDataset):  # type: ignore[type-arg]
    """``HuggingFaceTextDataset(infinite=True)`` over a map-style shard: ``sample_idx`` and ``epoch`` are its
    state; epoch 0 in the shard's order, every later epoch a permutation seeded ``42 + epoch``."""

    def __init__(self, samples: Any, shard: list[int], *, infinite: bool = True) -> None:
        self.samples, self.shard, self.infinite = samples, shard, infinite
        self._sample_idx, self._epoch = 0, 0

    def _order(self) -> list[int]:
        if self._epoch == 0:
            return self.shard
        permutation = torch.randperm(len(self.shard), generator=torch.Generator().manual_seed(RELOOP_SEED + self._epoch))
        return [self.shard[i] for i in permutation.tolist()]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            for index in self._order()[self._sample_idx:]:  # ``self._data.skip(self._sample_idx)``
                self._sample_idx += 1
                yield self.samples[index]
            if not self.infinite:
                break
            self._sample_idx, self._epoch = 0, self._epoch + 1  # reloop()

    def state_dict(self) -> dict[str, Any]:
        return {"sample_idx": self._sample_idx, "epoch": self._epoch, "inputs_buffer": [], "labels_buffer": []}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._sample_idx, self._epoch = state_dict["sample_idx"], state_dict.get("epoch", 0)


class RankKeyed(StatefulDataLoader):  # type: ignore[misc]
    """``ParallelAwareDataloader``'s state: the loader's, pickled under ``dp_rank_<rank>``, beside the world size."""

    def __init__(self, dataset: Any, *, dp_rank: int, dp_world_size: int, **kwargs: Any) -> None:
        self.dp_rank, self.dp_world_size = dp_rank, dp_world_size
        super().__init__(dataset, **kwargs)

    def state_dict(self) -> dict[str, Any]:
        return {f"dp_rank_{self.dp_rank}": pickle.dumps(super().state_dict()), "world_size": self.dp_world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not state_dict or f"dp_rank_{self.dp_rank}" not in state_dict:
            return  # upstream logs a warning and starts fresh
        assert self.dp_world_size == state_dict["world_size"], "dp_degree is inconsistent before and after checkpoint"
        super().load_state_dict(pickle.loads(state_dict[f"dp_rank_{self.dp_rank}"]))


def _contiguous_shard(size: int, rank: int, world_size: int) -> list[int]:
    """``split_dataset_by_node`` of a map-style ``Dataset``: ``shard(world_size, rank, contiguous=True)``."""
    per, extra = divmod(size, world_size)
    start = rank * per + min(rank, extra)
    return list(range(start, start + per + (1 if rank < extra else 0)))


def torchtitan_infinite_map(config: LoaderConfig) -> RankKeyed:
    """``HuggingFaceTextDataLoader`` over a map-style dataset (``c4_test``'s shape), ``infinite=True``: the
    model dataset under ``RankKeyed(batch_size=..., snapshot_every_n_steps=1)``, no workers (upstream's default)."""
    dataset = InfiniteTextDataset(config.dataset, _contiguous_shard(config.dataset_size, config.rank, config.world_size))
    return RankKeyed(dataset, dp_rank=config.rank, dp_world_size=config.world_size, batch_size=config.batch_size,
                     snapshot_every_n_steps=1)


class InfiniteStreamingTextDataset(IterableDataset):  # type: ignore[type-arg]
    """``HuggingFaceTextDataset(infinite=True)`` over a streaming ``datasets.IterableDataset`` (``c4``'s shape):
    its state is the datasets object's; ``reloop()`` calls ``set_epoch(epoch + 1)`` and iterates it again."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self._data
            self._data.set_epoch(self._data.epoch + 1)  # reloop()

    def state_dict(self) -> dict[str, Any]:
        return {"data": self._data.state_dict(), "inputs_buffer": [], "labels_buffer": []}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        data_state = state_dict["data"]
        self._data.set_epoch(data_state.get("epoch", 0))
        self._data.load_state_dict(data_state)


def torchtitan_infinite_stream(config: LoaderConfig) -> RankKeyed:
    """The same over ``split_dataset_by_node(datasets.IterableDataset of 4 shards, rank, world_size)``."""
    from datasets.distributed import split_dataset_by_node

    data = split_dataset_by_node(config.hf_iterable_dataset(4, shuffle=config.shuffle), rank=config.rank,
                                 world_size=config.world_size)
    return RankKeyed(InfiniteStreamingTextDataset(data), dp_rank=config.rank, dp_world_size=config.world_size,
                     batch_size=config.batch_size, snapshot_every_n_steps=1)
