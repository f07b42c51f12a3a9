"""Hugging Face ``datasets``: an ``IterableDataset`` under torchdata's ``StatefulDataLoader``.

The dataset is `LoaderConfig.hf_iterable_dataset` (the config's samples in shards of
consecutive samples, built from a generator, torch format); ``StatefulDataLoader`` saves
its ``state_dict()`` (shard and example offsets) with its own, in the main process or in
each worker. ``datasets`` is imported only when a factory runs.
"""

from __future__ import annotations

import sys
from typing import Any

from stateful_contract.config import LoaderConfig

__all__ = ["SHARDS", "hf_set_epoch", "hf_shards", "hf_shuffle_buffer", "hf_split_by_node"]

#: Shards of every dataset here: more than the 2 worker processes, so each worker has some.
SHARDS = 4


def _loader(config: LoaderConfig, dataset: Any, *, set_epoch: bool = False) -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader_class = _with_set_epoch() if set_epoch else StatefulDataLoader
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    return loader_class(dataset, batch_size=config.batch_size, drop_last=config.drop_last,
                        num_workers=config.num_workers, **kwargs)


def hf_shards(config: LoaderConfig) -> Any:
    """``IterableDataset`` of 4 shards (samples permuted once from the seed when ``config.shuffle``)."""
    return _loader(config, config.hf_iterable_dataset(SHARDS, shuffle=config.shuffle))


def hf_shuffle_buffer(config: LoaderConfig) -> Any:
    """``IterableDataset`` of 4 shards, ``.shuffle(seed=config.seed, buffer_size=4)``: shards
    and a buffer of 4 samples shuffled (pinned: the config's ``shuffle`` is not read)."""
    return _loader(config, config.hf_iterable_dataset(SHARDS).shuffle(seed=config.seed, buffer_size=4))


def hf_split_by_node(config: LoaderConfig) -> Any:
    """``split_dataset_by_node(dataset, rank=config.rank, world_size=config.world_size)`` over 4
    shards: on 2 ranks each rank reads 2 whole shards."""
    from datasets.distributed import split_dataset_by_node

    dataset = config.hf_iterable_dataset(SHARDS, shuffle=config.shuffle)
    return _loader(config, split_dataset_by_node(dataset, rank=config.rank, world_size=config.world_size))


def _with_set_epoch() -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    class SetEpochLoader(StatefulDataLoader):  # type: ignore[misc]
        """``set_epoch(e)`` forwarded to the dataset, as accelerate's ``DataLoaderShard`` and the
        Hugging Face ``Trainer`` do: datasets' ``IterableDataset.set_epoch``."""

        def set_epoch(self, epoch: int) -> None:
            self.dataset.set_epoch(epoch)

    return SetEpochLoader


def hf_set_epoch(config: LoaderConfig) -> Any:
    """`hf_shards` under a ``StatefulDataLoader`` whose ``set_epoch(e)`` calls the dataset's
    ``set_epoch(e)``, the loop datasets documents (what SC21 runs)."""
    return _loader(config, config.hf_iterable_dataset(SHARDS, shuffle=config.shuffle), set_epoch=True)
