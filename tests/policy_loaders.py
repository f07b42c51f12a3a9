"""Loaders correct only under a declared trainer policy (docs/clauses.md, "Checkpoint policies"), or with
the state their trainer keeps (`stateful_contract.TrainerView`).

`EpochEndOnly` saves only where torchtune's recipes save, at epoch ends: its state is the number of
finished epochs (torchtune's ``epochs_run``), so it resumes exactly after a pass's ``StopIteration``
(and before the first ``iter()``) and replays the epoch from its start anywhere else. The contract
fails it without a declaration and passes it with ``--checkpoint-alignment epoch``.

`ReshufflingLoader` is OLMo-core's pattern (``NumpyDataLoaderBase``: the trainer keeps the epoch and calls
``reshuffle(epoch)`` before each one): alone it cannot resume, through a `TrainerView` it resumes exactly,
and SC21 judges its ``reshuffle`` once the hook is declared (``--epoch-hook reshuffle``).
`ForgetsToReshuffleOnResume` is a trainer view that restores the counters and the loader's position but
not the epoch's order first: the next ``reshuffle`` starts the epoch over.

Imported by its plain name (``tests/`` is on ``sys.path``, conftest.py), as the zoo is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import default_collate
from zoo import SetEpochLoader

from stateful_contract import LoaderConfig, TrainerView

__all__ = ["EpochEndOnly", "ForgetsToReshuffleOnResume", "ReshufflingLoader", "epoch_end_only",
           "forgets_to_reshuffle", "reshuffled"]


class EpochEndOnly(SetEpochLoader):
    """The zoo's correct `SetEpochLoader` whose state keeps the epoch and drops the offset within it: the
    offset after ``StopIteration`` is 0, so that state is exact; a state taken inside an epoch resumes at
    that epoch's first batch."""

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": 0}


def epoch_end_only(config: LoaderConfig) -> EpochEndOnly:
    return EpochEndOnly(config)


class ReshufflingLoader:
    """``reshuffle(epoch)`` prepares ``epoch``'s order and, for an epoch other than the one prepared, starts it
    at its first batch; the state is the batches taken in the epoch (OLMo-core's ``batches_processed``),
    not the epoch, which the trainer keeps. Iterating before any ``reshuffle`` is refused."""

    def __init__(self, config: LoaderConfig) -> None:
        self.config = config
        self.epoch: int | None = None
        self.position = 0

    def reshuffle(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def batches(self, epoch: int) -> list[list[int]]:
        c = self.config
        order = (torch.randperm(c.dataset_size, generator=torch.Generator().manual_seed(c.seed + epoch)).tolist()
                 if c.shuffle else list(range(c.dataset_size)))
        out = [order[i:i + c.batch_size] for i in range(0, len(order), c.batch_size)]
        return [b for b in out if len(b) == c.batch_size] if c.drop_last else out

    def __iter__(self) -> Iterator[Any]:
        if self.epoch is None:
            raise RuntimeError("call reshuffle(epoch) before iterating (the trainer does, before each epoch)")
        return self._run(self.batches(self.epoch))

    def _run(self, batches: list[list[int]]) -> Iterator[Any]:
        while self.position < len(batches):
            indices = batches[self.position]
            self.position += 1
            yield default_collate([self.config.dataset[i] for i in indices])
        self.position = 0  # the epoch is done (OLMo-core's reset())

    def state_dict(self) -> dict[str, Any]:
        return {"batches_processed": self.position}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.position = int(state_dict["batches_processed"])


class ForgetsToReshuffleOnResume(TrainerView):
    """Restores the trainer's counters and the loader's position, but does not call ``reshuffle(epoch)``
    before the loader's load: the next ``reshuffle`` sees a new epoch and starts it over."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epoch, self.steps = int(state_dict["epoch"]), int(state_dict["steps"])
        self.loader.load_state_dict(state_dict["loader"])


def reshuffled(config: LoaderConfig) -> TrainerView:
    return TrainerView(ReshufflingLoader(config), hook="reshuffle")


def forgets_to_reshuffle(config: LoaderConfig) -> ForgetsToReshuffleOnResume:
    return ForgetsToReshuffleOnResume(ReshufflingLoader(config), hook="reshuffle")
