"""accelerate: ``prepare_data_loader(DataLoader(...), use_stateful_dataloader=True)``.

The factory builds the plain torch ``DataLoader`` a user hands to ``Accelerator.prepare``
and prepares it the way ``Accelerator.prepare`` does (``rng_types=["generator"]``,
``even_batches=True``), for the config's rank and world size (``num_processes``,
``process_index``): accelerate's ``DataLoaderShard``, a ``StatefulDataLoader``
subclass. An ``Accelerator(cpu=True)`` is created first, once per process, as in any
script that calls ``prepare``: on several processes the loader synchronizes its sampler's
generator through ``AcceleratorState``, which refuses to work before one exists (and it
joins the process group the ranks already have). ``accelerate`` is imported only when a
factory runs.

`accelerate_dispatcher` is the other loader ``prepare`` builds: for an ``IterableDataset``
``Accelerator.prepare`` sets ``dispatch_batches=True`` and gets a ``DataLoaderDispatcher``,
which fetches the next batch before it yields the current one (to know which batch is the
last) and snapshots the base loader's state before each fetch
(``src/accelerate/data_loader.py``, ``DataLoaderDispatcher._fetch_batches`` and ``__iter__``,
huggingface/accelerate ``16cb6eb80dd9aa8b4df1a63ef57863e455d53b83``, 2026-07-24). The trainer
draws from the prepared loader itself (``for step, batch in enumerate(train_dataloader)`` in
``examples/by_feature/checkpointing.py``) and ``save_state`` saves its ``state_dict()``
(``checkpointing.py``, ``save_accelerator_state``): the object the contract draws from and
saves, so no ``consume`` is declared.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from stateful_contract.config import LoaderConfig

__all__ = ["accelerate_dispatcher", "accelerate_prepared", "accelerate_seedable"]


@functools.cache
def _accelerator() -> Any:
    from accelerate import Accelerator

    return Accelerator(cpu=True)


def _prepared(config: LoaderConfig, *, use_seedable_sampler: bool) -> Any:
    import torch
    from accelerate.data_loader import prepare_data_loader

    accelerator = _accelerator()
    if (accelerator.num_processes, accelerator.process_index) != (config.world_size, config.rank):
        raise RuntimeError(f"accelerate sees rank {accelerator.process_index} of {accelerator.num_processes}, "
                           f"the config is rank {config.rank} of {config.world_size}")

    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    loader = torch.utils.data.DataLoader(config.dataset, batch_size=config.batch_size, shuffle=config.shuffle,
                                         drop_last=config.drop_last, num_workers=config.num_workers, **kwargs)
    return prepare_data_loader(loader, num_processes=config.world_size, process_index=config.rank,
                               put_on_device=False, rng_types=["generator"], use_seedable_sampler=use_seedable_sampler,
                               data_seed=config.seed if use_seedable_sampler else None,
                               use_stateful_dataloader=True)


def accelerate_prepared(config: LoaderConfig) -> Any:
    """``prepare_data_loader(DataLoader(dataset, shuffle=config.shuffle, ...), use_stateful_dataloader=True)``."""
    return _prepared(config, use_seedable_sampler=False)


def accelerate_seedable(config: LoaderConfig) -> Any:
    """The same with ``use_seedable_sampler=True, data_seed=config.seed`` (accelerate's
    ``SeedableRandomSampler``, reseeded by ``set_epoch``)."""
    return _prepared(config, use_seedable_sampler=True)


def accelerate_dispatcher(config: LoaderConfig) -> Any:
    """``prepare_data_loader(DataLoader(stateful IterableDataset of the config's samples), dispatch_batches=True,
    use_stateful_dataloader=True)``: accelerate's ``DataLoaderDispatcher``, one batch ahead, on 1 process."""
    import torch
    from accelerate.data_loader import prepare_data_loader

    accelerator = _accelerator()
    if accelerator.num_processes != 1:
        raise RuntimeError("the dispatcher row runs on 1 process")
    loader = torch.utils.data.DataLoader(config.iterable_dataset(stateful=True), batch_size=config.batch_size,
                                         drop_last=config.drop_last)
    return prepare_data_loader(loader, num_processes=1, process_index=0, put_on_device=True,  # the CPU here
                               dispatch_batches=True, use_stateful_dataloader=True)
