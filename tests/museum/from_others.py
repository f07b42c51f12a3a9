"""Trainers and data libraries with one reported resume bug each."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch

from ._base import ShardedEpochLoader, WorkerPoolLoader, piece

log = logging.getLogger(__name__)


class SkipCounterResetOnIter(ShardedEpochLoader):
    """Counts batches since the last ``iter()`` and applies a loaded count only as a one-shot skip.

    Report: KempnerInstitute/KempnerForge#57, "StatefulDataLoader loses alignment on second resume within an epoch"

    Mechanism: ``iter()`` zeroes the batches-yielded counter and ``load_state_dict``
    applies the loaded count as a one-shot sampler skip without storing it, so a
    resumed loader's state counts only the batches since the resume and a second resume
    lands that many batches into the epoch.

    Trigger: a second resume within one epoch (run 1, run 2, run 3), on a cluster that
    preempts more than once per epoch.
    """

    since_iter = 0

    def __iter__(self) -> Iterator[Any]:
        it = super().__iter__()
        self.since_iter = 0
        return it

    def run(self) -> Iterator[Any]:
        for batch in super().run():
            self.since_iter += 1
            yield batch

    def end_of_epoch(self) -> None:
        super().end_of_epoch()
        self.since_iter = 0

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches_yielded": self.since_iter}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = state["epoch"], state["batches_yielded"]


class MidEpochGlobalRngRestore(ShardedEpochLoader):
    """Shuffles from the global RNG at each ``iter()`` and checkpoints the RNG as it is at save time.

    Report: wyim-pgl/transgenic#59, "A mid-epoch resume re-shuffles the epoch: the DataLoader skip drops the wrong samples (measured 15 of 20 wrong)"

    Mechanism: each epoch's permutation is drawn from the global RNG when its iterator
    is created, and the checkpoint restores the RNG as it was at save time, mid-epoch,
    so the resumed epoch draws a different permutation and skipping the saved number of
    batches drops some samples and repeats others.

    Trigger: a mid-epoch resume of a shuffled loader with the default generator
    (``accelerate`` without ``use_seedable_sampler``, RNG restored by ``load_state``).
    """

    permutation: list[int] | None = None

    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None and "rng" in self.pending:
            torch.set_rng_state(self.pending["rng"])
        it = super().__iter__()
        if self.config.shuffle:
            self.permutation = torch.randperm(self.config.dataset_size).tolist()
        return it

    def shard(self, epoch: int) -> list[int]:
        if self.permutation is None:
            return super().shard(epoch)
        return self.permutation[self.config.rank::self.config.world_size]

    def position(self) -> dict[str, Any]:
        return {**super().position(), "rng": torch.get_rng_state()}


class StateSetAfterWorkersStarted(ShardedEpochLoader):
    """Starts its persistent workers when built; a state set afterwards never reaches them.

    Report: alibaba/TorchEasyRec#544, "[bugfix] correct dataloader checkpoint resume across forked workers and epochs"

    Mechanism: the loader starts its persistent workers when it is created, each with
    a copy of the dataset at its initial position, and a state set afterwards reaches
    only the main process's copy, so the workers replay the data from its first row.

    Trigger: ``load_state_dict`` on a loader with worker processes (``num_workers`` > 0)
    after it was built, the usual order of a trainer's resume.
    """

    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None and self.config.num_workers > 0:
            self.pending = None  # the forked copies never see it
        return super().__iter__()


class PerWorkerCursorsResharded(WorkerPoolLoader):
    """Keeps one cursor per worker and applies them to whatever workers the resumed loader has.

    Report: EvolvingLMMs-Lab/lmms-engine#172, "fix(iterable-dataset): implement stateful protocol for resume"

    Mechanism: the state keeps one cursor per worker over shards cut by worker id, and a
    loader resumed with another ``num_workers`` cuts the shards anew and applies the
    old cursors to the new shards, so samples are skipped and repeated without an error
    (the PR notes the cursor is enough "as long as those don't change").

    Trigger: resuming with a different ``num_workers`` than the run that saved.
    """

    def restore(self, state: dict[str, Any]) -> None:
        old = list(state["cursors"])
        cursors = [old[w] if w < len(old) else 0 for w in range(self.workers)]
        super().restore({**state, "cursors": cursors, "next_worker": state["next_worker"] % self.workers})


class WorkerCountMismatchRestarts(WorkerPoolLoader):
    """Records ``num_workers`` and world size, and on a mismatch warns and starts from scratch.

    Report: NVIDIA-BioNeMo/bionemo-recipes#1250, "add back num_workers and worldsize dataloader resumption checks"

    Mechanism: the state records the number of workers and the world size, and a loader
    resumed with other values logs a warning and starts the data from scratch, so the
    resumed run repeats everything it had already trained on, with no exception.

    Trigger: resuming with a different ``num_workers`` (or world size) than the run
    that saved.
    """

    def position(self) -> dict[str, Any]:
        return {**super().position(), "num_workers": self.workers, "world_size": self.config.world_size}

    def restore(self, state: dict[str, Any]) -> None:
        if (state["num_workers"], state["world_size"]) != (self.workers, self.config.world_size):
            log.warning("dataloader state saved with %s workers / world size %s; restarting from scratch",
                        state["num_workers"], state["world_size"])
            self.epoch, self.offset, self.cursors, self.next_worker = 0, 0, [0] * self.workers, 0
            return
        super().restore(state)




PIECES = [
    piece("kempnerforge-57", SkipCounterResetOnIter, "SC11"),
    piece("transgenic-59", MidEpochGlobalRngRestore, "SC10"),
    piece("torcheasyrec-544", StateSetAfterWorkersStarted, "SC10"),
    piece("lmms-engine-172", PerWorkerCursorsResharded, "SC23"),
    piece("bionemo-1250", WorkerCountMismatchRestarts, "SC23"),
]
