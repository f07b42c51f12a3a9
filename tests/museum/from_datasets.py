"""Hugging Face datasets: resumable ``IterableDataset`` under StatefulDataLoader."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from stateful_contract import LoaderConfig

from ._base import ShardedEpochLoader, piece

#: Shuffle buffer of `ShuffleBufferNotSaved`: a few samples, so that a dataset of up to
#: 24 samples has most of its order decided by the buffer.
BUFFER_SIZE = 4


class PersistentWorkerReappliesResumePoint(ShardedEpochLoader):
    """With persistent workers, the worker's dataset copy re-applies the loaded position every epoch.

    Report: huggingface/datasets#7447, "Epochs shortened after resuming mid-epoch with Iterable dataset+StatefulDataloader(persistent_workers=True)"

    Mechanism: the resume position is loaded into each worker's copy of the dataset,
    and with persistent workers that copy serves every later epoch and starts each of
    them at the same position again, so every epoch after the resume is cut to what was
    left of the interrupted one.

    Trigger: a mid-epoch resume with ``persistent_workers=True`` (``num_workers`` > 0),
    then further epochs; without workers each epoch starts from a fresh dataset
    iterator.
    """

    resume_at = 0

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self.config.num_workers > 0:
            self.resume_at = self.offset

    def end_of_epoch(self) -> None:
        super().end_of_epoch()
        self.offset = self.resume_at


class StateFrozenAfterLoad(ShardedEpochLoader):
    """After a load, reports a progress object that the iteration no longer updates.

    Report: huggingface/datasets#8308, "Streaming IterableDataset state stops advancing after first resume — second resume restarts from the beginning"

    Mechanism: loading rebinds the examples iterable's progress dict to a new object
    while the dataset's state keeps a reference to the old one, so after a resume
    ``state_dict()`` stays at the position it had before the load (the start) and a
    second resume restarts the stream.

    Trigger: a second resume (run 1, run 2, run 3) after the resumed run iterated.
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.reported = {"epoch": 0, "offset": 0}
        self.rebound = False

    def __iter__(self) -> Iterator[Any]:
        it = super().__iter__()
        self.track()
        return it

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.rebound = True  # the iteration now updates a new dict; `reported` is the old one

    def run(self) -> Iterator[Any]:
        for batch in super().run():
            self.track()
            yield batch
        self.track()

    def track(self) -> None:
        if not self.rebound:
            self.reported.update(epoch=self.epoch, offset=self.offset)

    def position(self) -> dict[str, Any]:
        return dict(self.reported)


class ShuffleBufferNotSaved(ShardedEpochLoader):
    """Buffer-shuffles its stream and saves only how far the source was read.

    Report: huggingface/datasets#7901, "ShuffledDataSourcesArrowExamplesIterable cannot properly resume from checkpoint"

    Mechanism: the state saves how far the source was read into the shuffle buffer but
    not the buffer's content or its generator, so a resume starts with an empty buffer
    at that source position: the samples that were in the buffer are lost and the
    order after them changes (fixed by saving the buffer, huggingface/datasets PR #8408).

    Trigger: any mid-epoch resume of a buffer-shuffled stream (``shuffle=True``).
    """

    start = 0  # source position the current pass started reading at
    read = 0  # source samples read when the last batch was yielded

    def stream(self, epoch: int, start: int) -> list[tuple[int, int]]:
        """``(sample, source samples read)`` of ``epoch``, read from source position ``start`` with an empty buffer."""
        source = self.shard(epoch)
        if not self.config.shuffle:
            return [(s, i + 1) for i, s in enumerate(source)][start:]
        generator = torch.Generator().manual_seed(self.config.seed + epoch)
        out, buffer, read = [], [], start
        while read < len(source) or buffer:
            while read < len(source) and len(buffer) < BUFFER_SIZE:
                buffer.append(source[read])
                read += 1
            pick = int(torch.randint(len(buffer), (1,), generator=generator))
            out.append((buffer.pop(pick), read))
        return out

    def batches_from(self, start: int) -> list[list[tuple[int, int]]]:
        c = self.config
        stream = self.stream(self.epoch, start)
        out = [stream[i:i + c.batch_size] for i in range(0, len(stream), c.batch_size)]
        return [b for b in out if len(b) == c.batch_size] if c.drop_last else out

    def __iter__(self) -> Iterator[Any]:
        self.start, self.read = 0, 0
        return super().__iter__()

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset = state["epoch"], 0
        self.start = self.read = state["source_read"]

    def run(self) -> Iterator[Any]:
        batches = self.batches_from(self.start)
        while self.offset < len(batches):
            batch = batches[self.offset]
            self.offset += 1
            self.read = batch[-1][1]
            yield self.collate([s for s, _ in batch])
        self.read = self.start = 0
        self.end_of_epoch()

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "source_read": self.read}


PIECES = [
    piece("datasets-7447", PersistentWorkerReappliesResumePoint, "SC10"),
    piece("datasets-8308", StateFrozenAfterLoad, "SC11"),
    piece("datasets-7901", ShuffleBufferNotSaved, "SC10"),
]
