"""torchtitan: ``ParallelAwareDataloader``, a ``StatefulDataLoader`` that keys its state by data-parallel rank.

Two factories:

- `torchtitan_parallel_aware`: the loader over a bare Hugging Face dataset split by node
  (``split_dataset_by_node(ds, dp_rank, dp_world_size)``), the shape of torchtitan's text
  dataset without its tokenizer and without the ``set_epoch`` that dataset calls, so it
  meets datasets' F21 (docs/findings.md): `LoaderConfig.hf_iterable_dataset`, split for the
  config's rank, nothing downloaded.
- `torchtitan_map_style`: the same loader built correctly, over the config's map-style
  samples with a batch sampler that resumes exactly
  (`stateful_contract.samplers.DistributedBatchSampler`, the batches of
  ``BatchSampler(DistributedSampler(...))`` for the rank). ``ParallelAwareDataloader``
  passes its keywords to ``StatefulDataLoader`` and keys the state by ``dp_rank``; its own
  ``load_state_dict`` refuses another data-parallel degree with an ``AssertionError``.

``torchtitan`` and ``datasets`` are imported only when a factory runs.
"""

from __future__ import annotations

import sys
from typing import Any

from stateful_contract.config import LoaderConfig
from stateful_contract.samplers import DistributedBatchSampler

__all__ = ["torchtitan_map_style", "torchtitan_parallel_aware"]


def torchtitan_parallel_aware(config: LoaderConfig) -> Any:
    """``ParallelAwareDataloader(split_dataset_by_node(hf_dataset, rank, world_size), dp_rank=rank,
    dp_world_size=world_size, batch_size=..., num_workers=...)`` over 4 shards."""
    from datasets.distributed import split_dataset_by_node
    from torchtitan.components.dataloader import ParallelAwareDataloader

    dataset = split_dataset_by_node(config.hf_iterable_dataset(4, shuffle=config.shuffle), rank=config.rank,
                                    world_size=config.world_size)
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    return ParallelAwareDataloader(dataset, dp_rank=config.rank, dp_world_size=config.world_size,
                                   batch_size=config.batch_size, drop_last=config.drop_last,
                                   num_workers=config.num_workers, **kwargs)


def torchtitan_map_style(config: LoaderConfig) -> Any:
    """``ParallelAwareDataloader(samples, dp_rank=rank, dp_world_size=world_size,
    batch_sampler=DistributedBatchSampler(samples, batch_size, num_replicas=world_size, rank=rank,
    shuffle, seed, drop_last), num_workers=...)``."""
    from torchtitan.components.dataloader import ParallelAwareDataloader

    sampler = DistributedBatchSampler(config.dataset, config.batch_size, num_replicas=config.world_size,
                                      rank=config.rank, shuffle=config.shuffle, seed=config.seed,
                                      drop_last=config.drop_last)
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    return ParallelAwareDataloader(config.dataset, dp_rank=config.rank, dp_world_size=config.world_size,
                                   batch_sampler=sampler, num_workers=config.num_workers, **kwargs)
