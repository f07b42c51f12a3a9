"""Small correct loaders the museum pieces are built from, and the `Piece` record.

Every piece changes one thing in one of these bases, the way the reported code went
wrong. The bases are correct for the contract's core clauses (SC01-SC18): a base that
fails a clause would make its pieces look caught for the wrong reason. They model what
the reported libraries do, in a few lines, not how:

- `ShardedEpochLoader`: epoch number + batch offset, like zoo.EpochLoader, plus the two
  knobs the reports need: a rank's shard (``order[rank::world_size]``, as
  ``DistributedSampler`` deals indices) and ``set_epoch``;
- `WorkerPoolLoader`: the same stream served round-robin by ``max(1, num_workers)``
  simulated workers, each with its own cursor, the shape of torchdata's and Energon's
  per-worker states. The workers are bookkeeping in one process, not processes: the
  reported bugs live in that bookkeeping, and in-process pieces cost a millisecond
  an example instead of a tenth of a second;
- `ContinuingLoader`: a loader on which a pass cut short (``break``) is continued by the
  next ``iter()`` instead of abandoned, as torchdata.nodes' ``Loader`` and litdata's
  cycling datasets do.

This module imports nothing from the museum package: `ranked.py` is loaded by file
path in every rank process of a multi-rank check, and imports it by its plain name.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stateful_contract import LoaderConfig

# The one test base is tests/loader_base.py; rank processes put only this folder on sys.path.
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from loader_base import EpochOffsetLoader

__all__ = ["ContinuingLoader", "Piece", "ShardedEpochLoader", "WorkerPoolLoader", "piece"]


class ShardedEpochLoader(EpochOffsetLoader):
    """A correct stateful loader (`loader_base.EpochOffsetLoader`, the one base of the test loaders)
    plus what the reports need: ``set_epoch``, and a state that records the world size.

    Epoch ``e`` shuffles with ``torch.Generator().manual_seed(seed + e)`` (the
    ``DistributedSampler`` recipe) and rank ``r`` of ``w`` reads ``order[r::w]``. A new
    ``iter()`` abandons an unfinished epoch; a state taken after the last batch resumes
    into an empty epoch, one taken after ``StopIteration`` into the next epoch.
    ``set_epoch(e)`` chooses the epoch of the next fresh pass, as trainers call it.
    """

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next fresh pass; a loaded state at the end of an earlier epoch gives way to it.

        A trainer that checkpointed after an epoch's last batch resumes at the next
        epoch and calls ``set_epoch`` with it: the state then has nothing left to
        resume, and the pass must be that epoch, not an empty one (SC21).
        """
        if self.pending is not None:
            try:
                gives_way = epoch > self.pending["epoch"] and self.pending_is_exhausted()
            except KeyError:  # a piece with a state of its own shape: leave it to the piece
                gives_way = False
            if gives_way:
                self.pending = None
                self.epoch, self.offset = epoch, 0
            return
        if not self.in_progress and self.offset == 0:
            self.epoch = epoch

    def pending_is_exhausted(self) -> bool:
        """Whether the loaded state points at the end of its epoch."""
        assert self.pending is not None
        return bool(self.pending["offset"] >= len(self.batches(self.pending["epoch"])))

    # -- state ------------------------------------------------------------------------
    #: Whether the state records the world size, so that a resume on another one is refused (SC31).
    records_world_size = True

    def position(self) -> dict[str, Any]:
        state = {"epoch": self.epoch, "offset": self.offset}
        return {**state, "world_size": self.config.world_size} if self.records_world_size else state

    def restore(self, state: dict[str, Any]) -> None:
        self.refuse_another_world_size(state)
        self.epoch, self.offset = state["epoch"], state["offset"]

    def refuse_another_world_size(self, state: dict[str, Any]) -> None:
        if state.get("world_size", self.config.world_size) != self.config.world_size:
            raise ValueError(f"the state was saved on world size {state['world_size']}, this loader runs on "
                             f"world size {self.config.world_size}: resharding a loader state is not supported")


class WorkerPoolLoader(ShardedEpochLoader):
    """`ShardedEpochLoader` served by ``max(1, num_workers)`` simulated workers, round-robin.

    Batch ``j`` of an epoch is worker ``j % W``'s ``j // W``-th batch, as a map-style
    ``DataLoader`` deals batches to its workers. The state is per worker: each worker's
    cursor and the worker that yields next, which is what torchdata (``_worker_snapshots``,
    ``_last_yielded_worker_id``) and Energon (per-worker sample indexes) save.
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.workers = max(1, config.num_workers)
        self.cursors = [0] * self.workers
        self.next_worker = 0

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None and self.in_progress:
            # A new iter() abandons the unfinished epoch (`ShardedEpochLoader`): every worker starts
            # the next one afresh. (Without this, a pass cut short after an epoch's last batch left
            # the cursors at its end, and the next pass was empty and skipped an epoch: SC22 found it
            # once the worker examples drew epochs of three batches cut short after three.)
            self.cursors, self.next_worker = [0] * self.workers, 0
        return super().__iter__()

    def run(self) -> Iterator[Any]:
        batches = self.batches(self.epoch)
        while True:
            w = self.next_worker
            j = self.cursors[w] * self.workers + w
            if j >= len(batches):
                break
            self.cursors[w] += 1
            self.next_worker = (w + 1) % self.workers
            self.offset += 1
            yield self.collate(batches[j])
        self.end_of_epoch()

    def end_of_epoch(self) -> None:
        super().end_of_epoch()
        self.cursors, self.next_worker = [0] * self.workers, 0

    def pending_is_exhausted(self) -> bool:
        assert self.pending is not None
        cursors = self.pending["cursors"]
        done = sum(cursors.values()) if isinstance(cursors, dict) else sum(cursors)
        return bool(done >= len(self.batches(self.pending["epoch"])))

    def position(self) -> dict[str, Any]:
        state = {"epoch": self.epoch, "cursors": list(self.cursors), "next_worker": self.next_worker}
        return {**state, "world_size": self.config.world_size} if self.records_world_size else state

    def restore(self, state: dict[str, Any]) -> None:
        self.refuse_another_world_size(state)
        if len(state["cursors"]) != self.workers:
            raise ValueError(f"the state was saved with {len(state['cursors'])} workers, this loader has "
                             f"{self.workers}: resume with the same num_workers")
        self.epoch, self.cursors, self.next_worker = state["epoch"], list(state["cursors"]), state["next_worker"]
        self.offset = sum(self.cursors)


class ContinuingLoader(ShardedEpochLoader):
    """A loader on which ``iter()`` after a pass cut short continues that pass.

    Only a pass that ran to ``StopIteration`` ends its epoch; ``break`` then ``iter()``
    picks up at the next batch (torchdata.nodes' ``Loader`` before ``StopIteration``,
    litdata's cycling ``ParallelStreamingDataset``). Loading still starts a fresh pass
    at the loaded point.
    """

    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None:
            self.restore(self.pending)
            self.pending = None
        self.in_progress = True
        return self.run()


@dataclasses.dataclass(frozen=True)
class Piece:
    """One exhibit: a reported bug, the loader that reproduces it, and how to check it."""

    id: str
    report: str  # "owner/repo#number"
    title: str
    mechanism: str  # one sentence
    trigger: str  # the usage pattern that shows it
    should_catch: str  # the clause of CONTRACT.md v2 that should kill it
    factory: Callable[[LoaderConfig], Any]
    #: extra keyword arguments for `check` (world_size, space, ...)
    check_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: "module-file.py:function" for multi-rank checks, which import the factory by name
    target: str | None = None
    #: how many ranks the torchdata-pattern baseline plays (each rank in this process)
    baseline_world_size: int = 1

    @property
    def check_target(self) -> Any:
        return self.target if self.target is not None else self.factory


_FIELD = re.compile(r"^(Report|Mechanism|Trigger):\s*(.*)$")


def _docstring_fields(cls: Any) -> dict[str, str]:
    """``Report:``, ``Mechanism:`` and ``Trigger:`` paragraphs of a docstring, each joined into one line."""
    fields: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in inspect.getdoc(cls).splitlines():  # type: ignore[union-attr]
        m = _FIELD.match(line.strip())
        if m:
            current = fields.setdefault(m.group(1).lower(), [m.group(2)])
        elif not line.strip():
            current = None
        elif current is not None:
            current.append(line.strip())
    return {k: " ".join(v) for k, v in fields.items()}


def piece(piece_id: str, cls: Any, should_catch: str, *, factory: Callable[[LoaderConfig], Any] | None = None,
          **kwargs: Any) -> Piece:
    """A `Piece` whose report, title, mechanism and trigger are read from ``cls``'s docstring.

    The docstring says ``Report: owner/repo#N, "title"``, ``Mechanism: ...`` (one
    sentence) and ``Trigger: ...``: the table and the code cannot drift apart.
    """
    fields = _docstring_fields(cls)
    report, _, title = fields["report"].partition(",")
    return Piece(piece_id, report.strip(), title.strip().strip('"'), fields["mechanism"], fields["trigger"],
                 should_catch, factory or cls, **kwargs)
