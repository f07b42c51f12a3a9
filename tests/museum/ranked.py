"""Pieces that only break with more than one rank (accelerate DDP, torchtitan data parallelism).

A multi-rank check (``check(target, world_size=2)``) starts fresh rank processes that
import the factory by file path, so this module is loaded both as ``museum.ranked``
and, in every rank, as a plain file with ``tests/museum`` on ``sys.path``. That is why
it imports its base by either name and defines one module-level factory per piece.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from stateful_contract import LoaderConfig

try:
    from ._base import ShardedEpochLoader, piece
except ImportError:  # loaded by file path in a rank process
    from _base import ShardedEpochLoader, piece  # type: ignore[import-not-found,no-redef]

log = logging.getLogger(__name__)


class DDPPrefetchAdjustment(ShardedEpochLoader):
    """A sharded loader whose load subtracts a look-ahead correction meant for another wrapper.

    Report: huggingface/accelerate#3938, "[Bug] DataLoaderShard with StatefulDataLoader produces wrong state dict in DDP"

    Mechanism: the state is snapshotted before the one-batch look-ahead fetch and so is
    already exact, but loading subtracts the ``num_processes - 1`` batches that only the
    dispatcher variant over-counts, so every rank resumes ``num_processes - 1`` batches
    early and trains on them twice.

    Trigger: any resume after the first batch of an epoch with two or more ranks (DDP);
    a single process subtracts nothing.
    """

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self.offset > 0:
            self.offset = max(0, self.offset - (self.config.world_size - 1))


class UnsavedSynchronizedGenerator(ShardedEpochLoader):
    """Shuffles from a generator shared by the ranks whose state is never saved.

    Report: huggingface/accelerate#4195, "`use_stateful_dataloader` under multi-process training restores the cursor, not the shuffle order — sampler permutation is never serialized"

    Mechanism: with more than one process each epoch's permutation is the next draw
    from a synchronized generator that is not part of the state, so a fresh process
    restores the epoch and batch position but draws the first epoch's permutation again.

    Trigger: a shuffled multi-process run resumed in any epoch after the first; one
    process keeps torchdata's own sampler state and resumes exactly.
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.permutation: list[int] | None = None

    def __iter__(self) -> Iterator[Any]:
        it = super().__iter__()
        if self.config.shuffle and self.config.world_size > 1:
            self.permutation = torch.randperm(self.config.dataset_size, generator=self.generator).tolist()
        return it

    def shard(self, epoch: int) -> list[int]:
        if self.permutation is None:
            return super().shard(epoch)
        return self.permutation[self.config.rank::self.config.world_size]


class RankBlindBufferedState(ShardedEpochLoader):
    """Keeps a buffered next batch in a state whose keys are the same on every rank.

    Report: pytorch/torchtitan#291, "Make dataloader stateful?"

    Mechanism: the loader's state (its position and the buffered next batch of its own
    shard) has the same keys on every rank, and torch.distributed.checkpoint keeps one
    copy of a key that every rank saves, so all ranks resume from one rank's buffer and
    that rank's samples are trained twice while the others' are lost.

    Trigger: ``dcp.save({"dataloader": loader})`` with two or more ranks (one shared DCP
    key); per-rank ``torch.save`` files, and DCP with per-rank keys, resume exactly.
    """

    def position(self) -> dict[str, Any]:
        batches = self.batches(self.epoch)
        buffered = batches[self.offset] if self.offset < len(batches) else []
        return {"epoch": self.epoch, "offset": self.offset, "buffer": list(buffered)}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.buffered: list[int] = list(state.get("buffer", []))

    def run(self) -> Iterator[Any]:
        buffered, self.buffered = getattr(self, "buffered", []), []
        if buffered:  # the buffered batch first, as the token buffer is drained before reading on
            self.offset += 1
            yield self.collate(buffered)
        yield from super().run()


class SkipDividedAcrossRanks(ShardedEpochLoader):
    """Resumes by skipping the consumed samples after splitting the dataset by rank.

    Report: pytorch/torchtitan#1082, "Fast dataset resume"

    Mechanism: the resume calls ``.skip(n)`` with the rank's consumed-sample count after
    ``split_dataset_by_node``, which divides the skip across the ranks, so each rank
    skips only ``n / world_size`` samples and trains on the rest again.

    Trigger: any resume after the first batch of an epoch with two or more ranks.
    """

    skipped = 0

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None:
            self.skipped = 0
        return super().__iter__()

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "samples": self.samples}

    @property
    def samples(self) -> int:
        return self.skipped + sum(len(b) for b in self.batches_after_skip()[: self.offset])

    def batches_after_skip(self) -> list[list[int]]:
        c = self.config
        order = self.shard(self.epoch)[self.skipped:]
        out = [order[i:i + c.batch_size] for i in range(0, len(order), c.batch_size)]
        return [b for b in out if len(b) == c.batch_size] if c.drop_last else out

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = state["epoch"], 0
        self.skipped = state["samples"] // self.config.world_size

    def run(self) -> Iterator[Any]:
        batches = self.batches_after_skip()
        while self.offset < len(batches):
            self.offset += 1
            yield self.collate(batches[self.offset - 1])
        self.skipped = 0
        self.end_of_epoch()


class PerRankKeyWarnsAndRestarts(ShardedEpochLoader):
    """Saves its position under ``dp_rank_{r}`` and starts over, with a warning, when its key is missing.

    Report: pytorch/torchtitan#811, "FSDP checkpoints don't load when run is restarted with greater world size"

    Mechanism: each data-parallel rank keeps its position under its own ``dp_rank_{r}``
    key and the loader records no data-parallel degree, so a run resumed on fewer ranks
    silently drops the other ranks' positions and a rank with no key of its own logs a
    warning and starts its shard from the beginning.

    Trigger: resume with another data-parallel degree than the save (an elastic
    restart: dp 4 to dp 2, or 8 to 16 GPUs).
    """

    records_world_size = False  # torchtitan stored no data-parallel degree before PR #816

    @property
    def key(self) -> str:
        return f"dp_rank_{self.config.rank}"

    def state_dict(self) -> dict[str, Any]:
        return {self.key: super().state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        mine = state_dict.get(self.key)
        if mine is None:
            log.warning("DataLoader state is empty for dp rank %d, expected key %s", self.config.rank, self.key)
            self.pending, self.in_progress = None, False
            self.epoch, self.offset = 0, 0
            return
        super().load_state_dict(copy.deepcopy(mine))


# Module-level factories: rank processes import them by name.
def accelerate_3938(config: LoaderConfig) -> DDPPrefetchAdjustment:
    return DDPPrefetchAdjustment(config)


def accelerate_4195(config: LoaderConfig) -> UnsavedSynchronizedGenerator:
    return UnsavedSynchronizedGenerator(config)


def torchtitan_291(config: LoaderConfig) -> RankBlindBufferedState:
    return RankBlindBufferedState(config)


def torchtitan_1082(config: LoaderConfig) -> SkipDividedAcrossRanks:
    return SkipDividedAcrossRanks(config)


def torchtitan_811(config: LoaderConfig) -> PerRankKeyWarnsAndRestarts:
    return PerRankKeyWarnsAndRestarts(config)


_HERE = str(Path(__file__).resolve())


def _ranked(piece_id: str, cls: Any, should: str, factory: Any) -> Any:
    return piece(piece_id, cls, should, factory=factory, target=f"{_HERE}:{factory.__name__}",
                 check_kwargs={"world_size": 2}, baseline_world_size=2)


PIECES = [
    _ranked("accelerate-3938", DDPPrefetchAdjustment, "SC30", accelerate_3938),
    _ranked("accelerate-4195", UnsavedSynchronizedGenerator, "SC30", accelerate_4195),
    _ranked("torchtitan-291", RankBlindBufferedState, "SC30", torchtitan_291),
    _ranked("torchtitan-1082", SkipDividedAcrossRanks, "SC30", torchtitan_1082),
    _ranked("torchtitan-811", PerRankKeyWarnsAndRestarts, "SC31", torchtitan_811),
]
