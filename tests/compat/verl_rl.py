"""verl's RL loader as ``RayPPOTrainer`` saves and resumes it (verl 0.9.1, a model of the trainer's rule).

The loader is verl's own, built from torchdata's classes exactly as
``RayPPOTrainer._create_dataloader`` builds it (``verl/trainer/ppo/ray_trainer.py``, and
``create_rl_sampler`` in ``verl/trainer/ppo/utils.py``, verl 0.9.1 on PyPI; the same lines are in
verl-project/verl main at 1dda039b9c6311889a9c9a26040677e1254814f9):
``StatefulDataLoader(dataset, batch_size, num_workers, drop_last=True, sampler=...)`` where the
sampler is torchdata's stateful ``RandomSampler`` over a ``torch.Generator`` seeded with
``data.seed`` when ``data.shuffle`` (the default), else torch's ``SequentialSampler``.

What is modelled is the trainer's resume rule, which lives in ``RayPPOTrainer`` and not in the
loader (`VerlRLResume`): the trainer counts ``global_steps`` (one per batch, across epochs), saves
``train_dataloader.state_dict()`` beside it (``_save_checkpoint``: ``data.pt`` in
``global_step_{n}/``), and ``_load_checkpoint`` restores it *unless* ``global_steps %
len(train_dataloader) == 0`` (verl-project/verl PR #5725), in which case the next epoch starts
from a fresh loader. ``fit()`` calls no ``set_epoch``. This is docs/findings.md's F29.

Why a model and not the package: ``verl`` 0.9.1 requires ``ray[default]``, ``transformers``,
``peft``, ``wandb``, ``tensorboard`` and ``tensordict``, and the trainer cannot be built without
Ray workers and a model, while the loader itself is torchdata's. Only torchdata is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import torch

from stateful_contract.config import LoaderConfig

__all__ = ["VerlRLResume", "verl_rl_loader", "verl_rl_trainer"]


def verl_rl_loader(config: LoaderConfig) -> Any:
    """The loader ``RayPPOTrainer._create_dataloader`` builds: ``drop_last=True``, ``create_rl_sampler``'s
    sampler (torchdata ``RandomSampler(generator=torch.Generator().manual_seed(seed))`` when shuffled)."""
    from torch.utils.data import SequentialSampler
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    sampler: Any
    if config.shuffle:
        sampler = RandomSampler(config.dataset, generator=torch.Generator().manual_seed(config.seed))
    else:
        sampler = SequentialSampler(config.dataset)
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    return StatefulDataLoader(config.dataset, batch_size=config.batch_size, num_workers=config.num_workers,
                              drop_last=True, sampler=sampler, **kwargs)


class VerlRLResume:
    """The trainer's view of the loader: what ``RayPPOTrainer`` saves, and how it restores it.

    ``state_dict()`` is the checkpoint (the trainer's ``global_steps`` and the loader's state);
    ``load_state_dict`` is ``_load_checkpoint``'s rule: the loader's state is restored only
    when ``global_steps`` is not a multiple of the loader's length.
    """

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.global_steps = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        return self._count(iter(self.loader))

    def _count(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self.global_steps += 1  # fit(): one step per batch
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return {"global_steps": self.global_steps, "data": self.loader.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.global_steps = int(state_dict["global_steps"])
        steps_per_epoch = len(self.loader)
        at_epoch_boundary = steps_per_epoch > 0 and self.global_steps % steps_per_epoch == 0
        if not at_epoch_boundary:  # verl 0.9.1 _load_checkpoint: else "Skipping dataloader state restore"
            self.loader.load_state_dict(state_dict["data"])


def verl_rl_trainer(config: LoaderConfig) -> VerlRLResume:
    """`verl_rl_loader` resumed by ``RayPPOTrainer``'s rule (`VerlRLResume`)."""
    return VerlRLResume(verl_rl_loader(config))
