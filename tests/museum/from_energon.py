"""NVIDIA Megatron-Energon's SavableDataLoader, and Megatron-Bridge around it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stateful_contract import LoaderConfig

from ._base import ShardedEpochLoader, WorkerPoolLoader, piece


class RestoreRestartsWorkerRotation(WorkerPoolLoader):
    """Restores every worker's cursor but starts the round-robin at worker 0.

    Report: NVIDIA/Megatron-Energon#126, "Fix Save - Restore indexing"

    Mechanism: restoring sets each worker's sample index but starts the round-robin at
    worker 0 instead of at the worker that was next, so when the checkpoint is not at a
    multiple of ``num_workers`` batches the resumed batches come out of order.

    Trigger: a mid-epoch resume with two or more workers, at a batch count that
    ``num_workers`` does not divide.
    """

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.next_worker = 0


class SaveAfterRestoreForgetsIdleWorkers(WorkerPoolLoader):
    """Saves, after a restore, each worker's position from its checkpoints since the restore.

    Report: NVIDIA/Megatron-Energon#126, "Fix Save - Restore indexing"

    Mechanism: a state saved after a restore is assembled from each worker's last
    checkpoint since the restore, and a worker that has not yielded since (all of them,
    right after the restore) is written at the start of the epoch instead of at its
    restored position.

    Trigger: ``state_dict()`` right after ``load_state_dict``, before every worker has
    yielded once (a resumed job preempted again before its first steps).
    """

    since_restore: set[int] | None = None

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.since_restore = set()

    def run(self) -> Iterator[Any]:
        for batch in super().run():
            if self.since_restore is not None:
                self.since_restore.add((self.next_worker - 1) % self.workers)
            yield batch

    def end_of_epoch(self) -> None:
        super().end_of_epoch()
        self.since_restore = None

    def state_dict(self) -> dict[str, Any]:
        if self.pending is not None:  # restored, no worker has iterated yet
            return {**self.pending, "cursors": [0] * self.workers, "next_worker": 0}
        return super().state_dict()

    def position(self) -> dict[str, Any]:
        state = super().position()
        if self.since_restore is not None:
            state["cursors"] = [c if w in self.since_restore else 0 for w, c in enumerate(self.cursors)]
        return state


def eagerly_iterated(config: LoaderConfig) -> Iterator[Any]:
    """The builder's result: ``iter(loader)``, a plain iterator, where the loader was wanted.

    Report: NVIDIA-NeMo/Megatron-Bridge#5245, "[data, ckpt] fix: Preserve Energon checkpoint state"

    Mechanism: the dataset builder eagerly calls ``iter()`` on the train loader and
    returns that iterator, which has no ``save_state``/``state_dict``, so checkpointing
    silently saves no data position and a resume restarts the sample stream.

    Trigger: every checkpoint of a run built through that builder.
    """
    return iter(ShardedEpochLoader(config))


PIECES = [
    piece("energon-126-rotation", RestoreRestartsWorkerRotation, "SC10"),
    piece("energon-126-save", SaveAfterRestoreForgetsIdleWorkers, "SC13"),
    piece("megatron-bridge-5245", eagerly_iterated, "SC01"),
]
