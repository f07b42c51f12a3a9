"""torchtitan: ``ParallelAwareDataloader``, a ``StatefulDataLoader`` that keys its state by data-parallel rank.

torchtitan's own text dataset streams a Hugging Face dataset split by node
(``split_dataset_by_node(ds, dp_rank, dp_world_size)``) and tokenizes it; the factory
keeps that shape with the config's samples instead of text (no tokenizer, nothing
downloaded): `LoaderConfig.hf_iterable_dataset`, split for the config's rank.
``torchtitan`` and ``datasets`` are imported only when the factory runs.
"""

from __future__ import annotations

import sys
from typing import Any

from stateful_contract.config import LoaderConfig

__all__ = ["torchtitan_parallel_aware"]


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
