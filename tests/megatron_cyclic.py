"""Megatron-LM's cyclic data loading, modelled for SC31 on an endless stream (docs/unseen.md).

Modelled on NVIDIA/Megatron-LM `00caa53a`: `MegatronPretrainingRandomSampler.__iter__`
(`megatron/training/datasets/data_samplers.py`) under `cyclic_iter` (`megatron/training/training.py`), with the
trainer's `consumed_train_samples` as the state (the trainer counts a global batch per step, saves the count,
and a restarted job builds its sampler from it). The permutation is seeded by the epoch alone, as Megatron's
is. Each rank of the contract's world is a data-parallel rank; `LoaderConfig.batch_size` is its micro-batch
(one micro-batch a step), so a fixed global batch (declared) resumes on M ranks with micro-batch global / M.

- ``data_sharding=False``: every rank deals from one permutation of the epoch, from the samples the world
  consumed on, ``[rank::world_size]``: any world takes the same global steps (SC31 passes).
- ``data_sharding=True``: rank r shuffles a bucket of its own (``r * bucket_size`` on) and skips
  ``consumed // world_size`` of it; another world size deals other buckets and skips into them, so the samples
  of the interrupted epoch are lost and repeated silently (SC31 fails: 8 samples on 2 ranks, 2 global steps,
  resumed on 1 rank, trains 1 and 5 twice and 3 and 7 never).

Every rank of a check imports this file by path (`target`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import default_collate

from stateful_contract import LoaderConfig

HERE = Path(__file__).resolve()


def target(name: str) -> str:
    """The check target of the factory ``name`` in this file."""
    return f"{HERE}:{name}"


class CyclicRandomSampler:
    """The sampler's epochs, one after another without end, as ``cyclic_iter`` draws them: its state is the
    samples the whole world consumed (one global batch a step)."""

    def __init__(self, config: LoaderConfig, *, data_sharding: bool) -> None:
        self.config = config
        self.data_sharding = data_sharding
        self.consumed = 0

    def epoch(self) -> Iterator[list[int]]:
        """One ``__iter__`` of the sampler, from ``self.consumed`` on."""
        c = self.config
        micro, ranks, total = c.batch_size, c.world_size, c.dataset_size
        per_step = micro * ranks
        active = total - total % per_step  # an incomplete last global batch is dropped
        epoch, into = divmod(self.consumed, active)
        assert into % per_step == 0, "the sampler resumes only at a global step"
        generator = torch.Generator().manual_seed(epoch)
        if self.data_sharding:  # a bucket per rank, shuffled, skipping the world's consumed // world size
            bucket = total // per_step * micro
            order = [c.rank * bucket + i for i in torch.randperm(bucket, generator=generator).tolist()[into // ranks:]]
        else:  # one permutation of the epoch, dealt rank by rank from the samples consumed on
            order = torch.randperm(total // micro * micro, generator=generator).tolist()[into:][c.rank::ranks]
        for start in range(0, len(order) - micro + 1, micro):
            self.consumed += per_step
            yield order[start:start + micro]

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from (default_collate([self.config.dataset[i] for i in indices]) for indices in self.epoch())

    def state_dict(self) -> dict[str, Any]:
        return {"consumed_train_samples": self.consumed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.consumed = int(state_dict["consumed_train_samples"])


def sharded(config: LoaderConfig) -> CyclicRandomSampler:
    return CyclicRandomSampler(config, data_sharding=True)


def unsharded(config: LoaderConfig) -> CyclicRandomSampler:
    return CyclicRandomSampler(config, data_sharding=False)
