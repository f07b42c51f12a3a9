"""torchtune's distributed full fine-tune recipe, as it trains: step limit, step checkpoints, resume (modelled).

Read at pytorch/torchtune ``bd2a0fc7`` (the newest commit of the repository, 2025; step checkpointing came in
``e43b6e6b``, "Implement step based checkpointing (#2869)", after 0.6.1, which `tune` models),
``recipes/full_finetune_distributed.py``:

- ``_setup_data`` builds ``StatefulDataLoader(ds, batch_size, sampler=StatefulDistributedSampler(ds,
  num_replicas=dp_degree, rank=dp_rank, shuffle, seed=0), drop_last=True)``, no ``num_workers`` (so none),
  and loads the saved loader state into it at once (``dataloader.load_state_dict(dataloader_state_dict)``);
- ``setup`` then sets ``_steps_per_epoch = len(loader) // gradient_accumulation_steps``, cut to
  ``max_steps_per_epoch`` when that is smaller, ``save_every_n_steps`` to ``_steps_per_epoch`` when unset,
  and, resumed from a checkpoint with ``global_step % _steps_per_epoch == 0``, runs ``list(self._dataloader)``:
  it draws the loaded pass to its end before training;
- ``train`` runs ``for curr_epoch in range(self.epochs_run, self.total_epochs)``: ``inner_step_count =
  global_step % _steps_per_epoch``, ``sampler.set_epoch(curr_epoch)``, ``iter(loader)``, ``next()`` until
  ``inner_step_count`` reaches ``_steps_per_epoch`` (or ``StopIteration``), and after each optimizer step
  ``save_checkpoint(epoch=curr_epoch)`` when ``global_step % save_every_n_steps == 0``: inside the pass, after
  the step's batch, before the pass' next ``next()`` or the next epoch's ``iter()``;
- ``save_checkpoint`` stores ``epochs_run = curr_epoch + 1`` if ``global_step % _steps_per_epoch == 0``
  (else ``curr_epoch``), ``steps_run = global_step`` and ``self._dataloader.state_dict()``; resumed,
  ``_update_recipe_state`` restores ``epochs_run`` and ``global_step``.

On several ranks the synchronous checkpointer writes rank 0's ``recipe_state`` only
(``torchtune/training/checkpointing/_checkpoint_client.py`` ``_save_checkpoint_sync``) and every rank
loads it. Each rank here saves and loads its own loader's state: the loader states of the ranks are
the same at every step (`tests/evidence/test_torchtune_distributed.py` measures it), so that is the
same resume.

`TorchtuneDistributedRecipe` is the recipe's view of its loader, which the check drives: one pass of
the view is one epoch of ``train`` (the step limit inside it), its ``state_dict()`` is what
``save_checkpoint`` stores wherever the check takes it, its ``load_state_dict()`` is ``setup``'s
resume into a fresh loader. The recipe draws each pass's first batch at once after ``iter()``,
loads only into a fresh loader and never leaves one of the view's passes early: the row declares
those facts of its shape. One optimizer step per batch (``gradient_accumulation_steps=1``).
Why a model and not the package: `tune` says (torchtune does not import beside torch 2.13.0).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stateful_contract.config import LoaderConfig

from .tune import SAMPLER_SEED

__all__ = ["TorchtuneDistributedRecipe", "step_limit", "torchtune_distributed_recipe",
           "torchtune_distributed_recipe_without_drain"]


def step_limit(batches: int) -> int:
    """The ``max_steps_per_epoch`` of the modelled runs: about three tenths of the epoch (3 of 10 batches, the
    case docs/clauses.md measured), so every epoch of two batches or more is cut short, and one of a single
    batch runs whole and saves after its last batch, before its ``StopIteration``."""
    return max(1, 3 * batches // 10)


class TorchtuneDistributedRecipe:
    """``train``'s epochs over a fresh or resumed loader: ``set_epoch``, one ``iter()``, steps up to the
    limit; the state ``save_checkpoint`` stores; ``setup``'s resume (``drain_on_resume``: its
    ``list(self._dataloader)``)."""

    def __init__(self, loader: Any, *, drain_on_resume: bool = True) -> None:
        self.loader = loader
        self.drain_on_resume = drain_on_resume
        self.max_steps_per_epoch = step_limit(len(loader))  # the config's, on the world it first ran on
        self.steps_per_epoch = self.max_steps_per_epoch
        self.epochs_run = 0
        self.global_step = 0
        #: ``curr_epoch`` of the last epoch ``train`` entered, which ``save_checkpoint(epoch=...)`` is given:
        #: before any, the one whose end ``epochs_run`` counts.
        self.curr_epoch = -1

    def __len__(self) -> int:
        return self.steps_per_epoch

    def __iter__(self) -> Iterator[Any]:
        self.curr_epoch = self.epochs_run
        inner_step_count = self.global_step % self.steps_per_epoch
        self.loader.sampler.set_epoch(self.curr_epoch)
        return self._epoch(iter(self.loader), inner_step_count)

    def _epoch(self, batches: Iterator[Any], inner_step_count: int) -> Iterator[Any]:
        while inner_step_count < self.steps_per_epoch:
            try:
                batch = next(batches)
            except StopIteration:
                break
            self.global_step += 1  # the optimizer step; save_checkpoint may run right after it
            inner_step_count += 1
            yield batch
        self.epochs_run += 1

    def _saved_epochs_run(self) -> int:
        return self.curr_epoch + 1 if self.global_step % self.steps_per_epoch == 0 else self.curr_epoch

    def state_dict(self) -> dict[str, Any]:
        return {"epochs_run": self._saved_epochs_run(), "steps_run": self.global_step,
                "max_steps_per_epoch": self.max_steps_per_epoch, "dataloader": self.loader.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # setup(): the loader built by _setup_data loads its state at once, _update_recipe_state restores
        # the counters, and a checkpoint at an epoch's step limit draws the loaded pass to its end.
        self.loader.load_state_dict(state_dict["dataloader"])
        self.epochs_run = int(state_dict["epochs_run"])
        self.global_step = int(state_dict["steps_run"])
        # _update_recipe_state keeps the checkpoint's max_steps_per_epoch; setup() cuts the epoch to it.
        self.max_steps_per_epoch = int(state_dict["max_steps_per_epoch"])
        self.steps_per_epoch = min(len(self.loader), self.max_steps_per_epoch)
        at_limit = self.global_step % self.steps_per_epoch == 0
        self.curr_epoch = self.epochs_run - 1 if at_limit else self.epochs_run
        if at_limit and self.drain_on_resume:
            list(self.loader)


def _loader(config: LoaderConfig) -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    sampler = StatefulDistributedSampler(config.dataset, num_replicas=config.world_size, rank=config.rank,
                                         shuffle=config.shuffle, seed=SAMPLER_SEED)
    return StatefulDataLoader(config.dataset, batch_size=config.batch_size, sampler=sampler, drop_last=True)


def torchtune_distributed_recipe(config: LoaderConfig) -> TorchtuneDistributedRecipe:
    """``_setup_data``'s loader (no workers, whatever the config's ``num_workers``: the recipe passes none)
    inside `TorchtuneDistributedRecipe`, its step limit `step_limit`."""
    return TorchtuneDistributedRecipe(_loader(config))


def torchtune_distributed_recipe_without_drain(config: LoaderConfig) -> TorchtuneDistributedRecipe:
    """The same recipe without ``setup``'s ``list(self._dataloader)``, as docs/clauses.md described it until
    session 39: resumed at a step limit, its first ``iter()`` goes on with the loaded pass."""
    return TorchtuneDistributedRecipe(_loader(config), drain_on_resume=False)
