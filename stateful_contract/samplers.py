"""`DistributedBatchSampler`: a distributed batch sampler that resumes exactly, epoch by epoch.

`LoaderConfig.stateful_dataloader()` passes it to torchdata's `StatefulDataLoader` as ``batch_sampler=``
whenever ``world_size > 1``. torchdata's ``StatefulDistributedSampler`` resets its count only when an epoch's
first index is drawn (a state taken between epochs resumes into an empty epoch or reports the epoch's start)
and, like torch's ``DistributedSampler``, loses the next epoch when a state taken after an epoch's last batch
is resumed at ``set_epoch(epoch + 1)`` (docs/findings.md, F4, F11, F12).

This sampler deals indices exactly as torch's ``DistributedSampler`` does (same padding, ``drop_last`` and
``seed + epoch`` shuffle) and batches them as torch's ``BatchSampler``. Its state is ``{"epoch", "batches",
"num_replicas"}``: the epoch of the pass in progress and how many of its batches were handed out. Three rules
make it exact:

1. The count belongs to the pass, and a pass starts at ``iter()``, not at its first batch.
2. A loaded state waits for the next ``iter()`` (the loader calls ``load_state_dict`` on this
   sampler only then), which resumes the loaded pass in the loaded epoch: a resumed loader on
   which nobody calls ``set_epoch`` continues as the saved one would have.
3. A loaded state whose pass had handed out every batch *gives way* to ``set_epoch``: if the
   epoch set before that ``iter()`` is later than the state's, the pass is the new epoch from its
   first batch (the trainer's end-of-epoch checkpoint resumed at the next epoch). Otherwise it is
   the empty rest of the finished epoch, exactly as ``StatefulDataLoader``'s default sampler resumes.

A state records the world size and is refused, naming both, by a sampler of another world size (an elastic
restart cannot reshard a per-rank position). It holds no rank, so one copy under a shared key
(``dcp.save({"dataloader": loader})``) loads on every rank: at the same step every rank's state is the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

from torch.utils.data import BatchSampler, DistributedSampler, Sampler

__all__ = ["DistributedBatchSampler"]

_KEYS = ("epoch", "batches", "num_replicas")


class _Pass(Iterator[list[int]]):
    """One pass over an epoch's batches, from ``start``; a plain object, so its count is exact at once."""

    def __init__(self, epoch: int, batches: list[list[int]], start: int) -> None:
        self.epoch = epoch
        self.batches = batches
        self.handed_out = start

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> list[int]:
        if self.handed_out >= len(self.batches):
            raise StopIteration
        batch = self.batches[self.handed_out]
        self.handed_out += 1
        return batch


class DistributedBatchSampler(Sampler[list[int]]):
    """Batches of one rank's share of ``dataset``, as ``BatchSampler(DistributedSampler(...))``, stateful.

    ``dataset`` (only its length is read), ``num_replicas``, ``rank``, ``shuffle``, ``seed``,
    ``drop_last`` and ``set_epoch`` are torch's ``DistributedSampler``'s; ``drop_last_batch`` drops each
    epoch's last batch when it is short, as ``BatchSampler(drop_last=True)`` does (default: ``drop_last``).
    ``state_dict()``/``load_state_dict()`` follow the module docstring's three rules.
    """

    def __init__(self, dataset: Sized, batch_size: int, *, num_replicas: int, rank: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, drop_last_batch: bool | None = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,  # type: ignore[arg-type]
            drop_last=drop_last)
        self.batch_size = batch_size
        self.drop_last_batch = drop_last if drop_last_batch is None else drop_last_batch
        self._pending: dict[str, int] | None = None
        self._pass: _Pass | None = None

    @property
    def epoch(self) -> int:
        """The epoch of the next pass (``set_epoch``, or the one a loaded state resumed)."""
        return int(self.sampler.epoch)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def batches(self, epoch: int) -> list[list[int]]:
        current = self.sampler.epoch
        self.sampler.epoch = epoch
        try:
            order = list(self.sampler)
        finally:
            self.sampler.epoch = current
        return list(BatchSampler(order, self.batch_size, self.drop_last_batch))

    def __len__(self) -> int:
        n = self.sampler.num_samples
        return n // self.batch_size if self.drop_last_batch else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        pending, self._pending = self._pending, None
        epoch, start = self.epoch, 0
        if pending is not None:
            finished = pending["batches"] >= len(self)
            if not (finished and pending["epoch"] < epoch):  # rule 3: else the state gives way
                epoch, start = pending["epoch"], pending["batches"]
                self.sampler.set_epoch(epoch)  # rule 2
        self._pass = _Pass(epoch, self.batches(epoch), start)
        return self._pass

    def state_dict(self) -> dict[str, int]:
        if self._pending is not None:
            return dict(self._pending)
        epoch, handed_out = (self.epoch, 0) if self._pass is None else (self._pass.epoch, self._pass.handed_out)
        return {"epoch": epoch, "batches": handed_out, "num_replicas": int(self.sampler.num_replicas)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, dict) or set(state_dict) != set(_KEYS):
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(f"DistributedBatchSampler.load_state_dict() expects the keys {list(_KEYS)}, got {got}")
        if state_dict["num_replicas"] != self.sampler.num_replicas:
            raise ValueError(f"the state was saved on world size {state_dict['num_replicas']}, this sampler runs on "
                             f"world size {self.sampler.num_replicas}: a per-rank position cannot be resharded")
        self._pending = {k: int(state_dict[k]) for k in _KEYS}

    def __repr__(self) -> str:
        s = self.sampler
        return (f"DistributedBatchSampler(batch_size={self.batch_size}, num_replicas={s.num_replicas}, "
                f"rank={s.rank}, shuffle={s.shuffle}, seed={s.seed}, drop_last={s.drop_last})")
