"""A device prefetcher over ``StatefulDataLoader``, as trainers draw batches through it.

The prefetcher is the common one-batch-ahead shape: timm's ``PrefetchLoader``
(``timm/data/loader.py``) and NVIDIA apex's ``data_prefetcher``
(``examples/imagenet/main_amp.py``) take the next batch from the loader and start its copy to
the device before they hand the current one to the step. Here the device is the CPU (the
copy is ``.to("cpu")``): what matters to a resume is that the loader has already yielded the
batch the prefetcher holds. Declared as the trainer's consumption (`device_prefetch`,
``check(consume="tests.compat.prefetch:device_prefetch")``), every batch is drawn through it
and each state taken from the loader at the same instant, as a trainer's save does:

- `device_prefetch` over ``config.stateful_dataloader()`` (`prefetched_loader`): the trainer
  saves ``loader.state_dict()``, which is one batch past what it trained (F32);
- `saving_prefetch` over `SavesWhatItHolds` (`prefetched_owner`): the prefetcher keeps the
  loader's state from before the batch it holds, and the owner's ``state_dict()`` returns it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch

from stateful_contract.config import LoaderConfig

__all__ = ["SavesWhatItHolds", "device_prefetch", "prefetched_loader", "prefetched_owner", "saving_prefetch"]

#: Where the prefetcher copies batches (a GPU in training; the CPU here).
DEVICE = torch.device("cpu")


def _to_device(batch: Any) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(DEVICE, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v) for k, v in batch.items()}
    return batch


class SavesWhatItHolds:
    """The loader, with the state a prefetcher over it says the trainer has reached."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        #: The loader's state from before the batch the prefetcher holds (None: it holds none).
        self.held_state: Any = None

    def state_dict(self) -> Any:
        return self.loader.state_dict() if self.held_state is None else copy.deepcopy(self.held_state)

    def load_state_dict(self, state_dict: Any) -> None:
        self.held_state = None
        self.loader.load_state_dict(state_dict)


def _one_ahead(batches: Iterator[Any], owner: SavesWhatItHolds | None = None) -> Iterator[Any]:
    """timm's ``PrefetchLoader.__iter__``: fetch the next batch (and start its copy), then yield the current."""
    held, holding = None, False
    while True:
        before = copy.deepcopy(owner.loader.state_dict()) if owner is not None else None
        try:
            fetched = _to_device(next(batches))
        except StopIteration:
            break
        if holding:
            if owner is not None:
                owner.held_state = before  # the trainer gets `held`; `fetched` waits here
            yield held
        held, holding = fetched, True
    if holding:
        if owner is not None:
            owner.held_state = None  # nothing held beyond the last batch
        yield held


def device_prefetch(loader: Any) -> Iterator[Any]:
    """How the trainer draws: one batch ahead of it, through the prefetcher; it saves ``loader.state_dict()``."""
    return _one_ahead(iter(loader))


def saving_prefetch(owner: SavesWhatItHolds) -> Iterator[Any]:
    """The same prefetcher, which tells its owner the loader's state from before the batch it holds."""
    owner.held_state = None
    return _one_ahead(iter(owner.loader), owner)


def prefetched_loader(config: LoaderConfig) -> Any:
    """``config.stateful_dataloader()``: the loader the trainer draws from through `device_prefetch`."""
    return config.stateful_dataloader()


def prefetched_owner(config: LoaderConfig) -> SavesWhatItHolds:
    """``SavesWhatItHolds(config.stateful_dataloader())``: drawn through `saving_prefetch`."""
    return SavesWhatItHolds(config.stateful_dataloader())
