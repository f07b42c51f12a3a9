"""torchtune's fine-tuning recipes: their loader, and the recipe that saves and resumes it (torchtune 0.6.1, modelled).

The loader is what the recipes build from torchdata's classes (``_setup_data`` in
``recipes/full_finetune_single_device.py`` and ``recipes/full_finetune_distributed.py``,
torchtune 0.6.1 on PyPI): ``StatefulDataLoader(dataset, batch_size, sampler=
StatefulDistributedSampler(dataset, num_replicas=dp_size, rank=dp_rank, shuffle, seed=0),
drop_last=True)``. What the recipe adds (`TorchtuneRecipe`):

- ``train()`` runs ``for curr_epoch in range(self.epochs_run, self.total_epochs)``, calling
  ``self._dataloader.sampler.set_epoch(curr_epoch)`` before each epoch, and saves a checkpoint
  only when an epoch ends (``self.epochs_run += 1; self.save_checkpoint(epoch=curr_epoch)``);
- ``save_checkpoint`` stores ``epochs_run`` and ``self._dataloader.state_dict()``;
- on resume ``_update_recipe_state`` restores ``epochs_run``; the saved loader state is passed
  to ``_setup_data(dataloader_state_dict=...)``, which does not load it: the resumed recipe
  starts epoch ``epochs_run`` from a fresh loader.

So the recipe resumes exactly at epoch ends, where it saves, and a state taken mid-epoch would
restart that epoch: a check declares the recipe's checkpoint policy (epoch ends only).

Why a model and not the package: the recipes' data path is torchdata's classes and the
recipe's own loop, and a recipe cannot run without a model, a tokenizer and a checkpointer;
and torchtune 0.6.1 does not import beside torch 2.13.0 (it requires ``torchao``, and the
``torchao`` pip resolves there, 0.18.0, has no ``torchao.dtypes.nf4tensor``, which
``torchtune.modules`` imports). Only torchdata is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from stateful_contract.config import LoaderConfig

__all__ = ["TorchtuneRecipe", "torchtune_recipe"]

#: The recipes' sampler seed (``_setup_data``: ``seed=0``), whatever the config's seed.
SAMPLER_SEED = 0


class TorchtuneRecipe:
    """A torchtune recipe's view of its loader: ``epochs_run``, ``set_epoch`` before each epoch,
    the loader's state saved and not loaded."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.epochs_run = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.loader.sampler.set_epoch(self.epochs_run)  # train(): sampler.set_epoch(curr_epoch)
        return self._epoch(iter(self.loader))

    def _epoch(self, batches: Iterator[Any]) -> Iterator[Any]:
        yield from batches
        self.epochs_run += 1  # train(): the epoch is done, then save_checkpoint(epoch=curr_epoch)

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_run": self.epochs_run, "dataloader": self.loader.state_dict()}  # save_checkpoint

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # _update_recipe_state restores epochs_run; _setup_data is handed state_dict["dataloader"]
        # and never loads it.
        self.epochs_run = int(state_dict["epochs_run"])


def torchtune_recipe(config: LoaderConfig) -> TorchtuneRecipe:
    """``StatefulDataLoader(samples, batch_size, sampler=StatefulDistributedSampler(samples,
    num_replicas=world_size, rank=rank, shuffle, seed=0), drop_last=True)`` inside `TorchtuneRecipe`."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    sampler = StatefulDistributedSampler(config.dataset, num_replicas=config.world_size, rank=config.rank,
                                         shuffle=config.shuffle, seed=SAMPLER_SEED)
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    return TorchtuneRecipe(StatefulDataLoader(config.dataset, batch_size=config.batch_size, sampler=sampler,
                                              drop_last=True, num_workers=config.num_workers, **kwargs))
