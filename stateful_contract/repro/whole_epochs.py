"""Whether an uninterrupted epoch yields each sample of the config's dataset once (SC42), counted by sample.

What an epoch may lack or repeat without a bug is what torch's own samplers do, measured on torchdata's
`StatefulDataLoader` (docs/clauses.md, SC42): ``drop_last`` drops each rank's tail of fewer than a batch (and
``DistributedSampler(drop_last=True)`` the ``N % world_size`` samples that would make the ranks uneven), so
at most ``world_size * batch_size - 1`` samples; ``DistributedSampler`` pads the ranks to even by repeating
``world_size * ceil(N / world_size) - N`` samples. Anything beyond that is data a run never trains on, or
trains on twice, with no checkpoint at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig
from .compare import sample_ids

__all__ = ["EpochTally", "allowances", "assert_each_sample_once", "epochs_by_sample", "foreign", "tally"]

#: How many sample numbers a message lists before it says how many more.
_SHOWN = 8


@dataclass(frozen=True)
class EpochTally:
    """One uninterrupted epoch over every rank, counted against the config's dataset."""

    epoch: int
    #: The config's dataset size: samples ``0 .. due - 1`` are due once each.
    due: int
    #: The sample numbers the epoch never yielded, and those it yielded more than once (with the extra count).
    missing: tuple[Hashable, ...]
    repeated: tuple[tuple[Hashable, int], ...]
    #: What ``drop_last`` and the sampler's padding account for (`allowances`).
    may_miss: int
    may_repeat: int
    world_size: int = 1

    @property
    def lost(self) -> int:
        return len(self.missing)

    @property
    def extra(self) -> int:
        return sum(n for _, n in self.repeated)

    def holds(self) -> bool:
        return self.lost <= self.may_miss and self.extra <= self.may_repeat

    def describe(self) -> str:
        """``epoch 0 yielded 2 of its 10 samples: 8 never (samples 0, 1, 3, ...)``."""
        ranks = f" over all {self.world_size} ranks" if self.world_size > 1 else ""
        parts = []
        if self.lost:
            parts.append(f"{self.lost} never (sample{'s' if self.lost != 1 else ''} {_listed(self.missing)})")
        if self.extra:
            shown = _listed([f"{i} x{n + 1}" for i, n in self.repeated])
            parts.append(f"{self.extra} more than once ({shown})")
        return (f"epoch {self.epoch} yielded {self.due - self.lost} of the {self.due} samples of the config's "
                f"dataset{ranks}: " + "; ".join(parts))


def _listed(items: Sequence[Any]) -> str:
    shown = ", ".join(map(str, items[:_SHOWN]))
    return shown + (f", ... ({len(items) - _SHOWN} more)" if len(items) > _SHOWN else "")


def allowances(config: LoaderConfig) -> tuple[int, int]:
    """(samples an epoch may lack, samples it may repeat) on ``config``: a tail of fewer than a batch per
    rank under ``drop_last``, and the padding that evens the ranks."""
    n, ranks = config.dataset_size, config.world_size
    may_repeat = ranks * -(-n // ranks) - n
    may_miss = min(n, ranks * config.batch_size - 1) if config.drop_last else 0
    return may_miss, may_repeat


def epochs_by_sample(reference: Sequence[Any], lengths: Sequence[int]) -> list[list[Hashable]] | None:
    """The sample numbers of each epoch of an uninterrupted run, or None when a batch has no ``index``."""
    out, at = [], 0
    for n in lengths:
        ids = sample_ids(reference[at:at + n])
        if ids is None:
            return None
        out.append([i if isinstance(i, Hashable) else repr(i) for i in ids])
        at += n
    return out


def tally(ranks: Sequence[Sequence[Sequence[Hashable]]], config: LoaderConfig) -> list[EpochTally]:
    """Each epoch that every rank ran (``ranks[r][e]``: rank ``r``'s sample numbers of epoch ``e``), counted
    over the union of the ranks against samples ``0 .. dataset_size - 1``."""
    may_miss, may_repeat = allowances(config)
    out = []
    for epoch in range(min(map(len, ranks), default=0)):
        seen = Counter(i for rank in ranks for i in rank[epoch])
        missing = tuple(i for i in range(config.dataset_size) if i not in seen)
        repeated = tuple((i, n - 1) for i, n in sorted(seen.items(), key=lambda kv: repr(kv[0])) if n > 1)
        out.append(EpochTally(epoch, config.dataset_size, missing, repeated, may_miss, may_repeat, len(ranks)))
    return out


def foreign(ranks: Sequence[Sequence[Sequence[Hashable]]], config: LoaderConfig) -> list[Hashable]:
    """Sample numbers that are none of the config's dataset's (a loader reading a dataset of its own)."""
    due = set(range(config.dataset_size))
    return sorted({i for rank in ranks for epoch in rank for i in epoch if i not in due}, key=repr)


def assert_each_sample_once(reference: Sequence[Any], lengths: Sequence[int], config: LoaderConfig) -> None:
    """Raise `AssertionError` where an epoch of ``reference`` (an uninterrupted run of ``config`` on one rank,
    ``uninterrupted(factory, config)``) lacks or repeats more samples than drop_last and padding account for."""
    __tracebackhide__ = True
    epochs = epochs_by_sample(reference, lengths)
    if epochs is None:
        raise AssertionError("the batches carry no 'index' field: their samples cannot be counted")
    for epoch in tally([epochs], config):
        if not epoch.holds():
            raise AssertionError(epoch.describe())
