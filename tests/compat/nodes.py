"""torchdata.nodes: a ``Loader`` over ``SamplerWrapper`` and the common pipelines.

Each pipeline reads the config's map-style samples through a sampler: torchdata's stateful
``RandomSampler`` (its generator seeded from ``config.seed``) when ``config.shuffle``, else
torch's ``SequentialSampler``; ``Mapper(dataset.__getitem__)``, then ``Batcher``, then
``Mapper(default_collate)``, so batches are those of a ``DataLoader`` over the same
samples. torchdata.nodes ships with torchdata, a dependency of this package: these rows
need no extra install.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.utils.data import default_collate

from stateful_contract.config import LoaderConfig

__all__ = [
    "nodes_batcher",
    "nodes_parallel_mapper_thread",
    "nodes_prefetcher",
    "nodes_sequential",
    "nodes_stateful_distributed_sampler",
]


def _sampler(config: LoaderConfig) -> Any:
    if config.shuffle:
        from torchdata.stateful_dataloader.sampler import RandomSampler

        return RandomSampler(config.dataset, generator=torch.Generator().manual_seed(config.seed))
    return torch.utils.data.SequentialSampler(config.dataset)


def _batched(config: LoaderConfig, samples: Any) -> Any:
    from torchdata.nodes import Batcher, Mapper

    return Mapper(Batcher(samples, batch_size=config.batch_size, drop_last=config.drop_last), default_collate)


def nodes_batcher(config: LoaderConfig) -> Any:
    """``Loader(Mapper(Batcher(Mapper(SamplerWrapper(sampler), dataset.__getitem__)), collate))``."""
    from torchdata.nodes import Loader, Mapper, SamplerWrapper

    return Loader(_batched(config, Mapper(SamplerWrapper(_sampler(config)), config.dataset.__getitem__)))


def nodes_sequential(config: LoaderConfig) -> Any:
    """`nodes_batcher` pinned to ``shuffle=False``: torch's ``SequentialSampler``, which has no state
    (``SamplerWrapper`` fast-forwards it)."""
    return nodes_batcher(dataclasses.replace(config, shuffle=False))


def nodes_prefetcher(config: LoaderConfig) -> Any:
    """`nodes_batcher` with a ``Prefetcher(prefetch_factor=2)`` (a background thread) on top."""
    from torchdata.nodes import Loader, Mapper, Prefetcher, SamplerWrapper

    samples = Mapper(SamplerWrapper(_sampler(config)), config.dataset.__getitem__)
    return Loader(Prefetcher(_batched(config, samples), prefetch_factor=2))


def nodes_parallel_mapper_thread(config: LoaderConfig) -> Any:
    """Samples read by ``ParallelMapper(num_workers=2, method="thread")``, batched, prefetched."""
    from torchdata.nodes import Loader, ParallelMapper, Prefetcher, SamplerWrapper

    samples = ParallelMapper(SamplerWrapper(_sampler(config)), config.dataset.__getitem__, num_workers=2,
                             method="thread")
    return Loader(Prefetcher(_batched(config, samples), prefetch_factor=2))


def nodes_stateful_distributed_sampler(config: LoaderConfig) -> Any:
    """``SamplerWrapper`` over torchdata's ``StatefulDistributedSampler`` for the config's rank
    (SamplerWrapper calls its ``set_epoch`` at every new epoch), batched."""
    from torchdata.nodes import Loader, Mapper, SamplerWrapper
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    sampler = StatefulDistributedSampler(config.dataset, num_replicas=config.world_size, rank=config.rank,
                                         shuffle=config.shuffle, seed=config.seed, drop_last=config.drop_last)
    return Loader(_batched(config, Mapper(SamplerWrapper(sampler), config.dataset.__getitem__)))
