"""SC32's count of each rank's batches, stretch by stretch: the one judgement the clause makes on its real ranks
(clauses/in_step.py) and the reproduction it prints ends in (`assert_ranks_in_step`, every rank of the world
replayed one after the other in one process). Why and how: docs/clauses.md, SC32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .endless import cycle_length

__all__ = ["RESUMED_PASSES", "RankSteps", "Stretch", "Uneven", "assert_ranks_in_step", "first_uneven",
           "rank_stretches", "resumed_stretches"]

#: Passes counted after a resume: the rest of the interrupted epoch and the next one.
RESUMED_PASSES = 2


@dataclass(frozen=True)
class Stretch:
    """Steps every rank must take together: ``label`` (``"epoch 1"``, ``"pass 1 after the resume"``) and
    how many batches this rank yielded in it."""

    label: str
    batches: int
    #: ``batches`` is how many batches one cycle of the rank's data takes in an endless stream (its period,
    #: `endless.cycle_length`), not a count of steps before a save or an epoch's end.
    cycle: bool = False


@dataclass
class RankSteps:
    """What one rank yielded, stretch by stretch (the same labels, in the same order, on every rank)."""

    rank: int
    stretches: list[Stretch] = field(default_factory=list)
    #: The resume raised on this rank (SC30 and SC31 judge that): its passes are not counted.
    error: str | None = None
    #: Not resumed on this world, and why (a fixed global batch that does not split over its ranks).
    skipped: str = ""
    #: Where the stretches come from, for the message: ``"fresh loaders on 2 ranks"``.
    where: str = ""


@dataclass(frozen=True)
class Uneven:
    """The first stretch in which the ranks' counts differ: ``counts`` (rank -> batches) of ``label``."""

    label: str
    counts: dict[int, int]
    #: The counts are the periods of the ranks' endless streams (`Stretch.cycle`), not batches before a stop.
    cycle: bool

    @property
    def short(self) -> list[int]:
        """The ranks with the fewest batches: those that run out first (or cycle soonest)."""
        return [rank for rank, n in self.counts.items() if n == min(self.counts.values())]

    def counted(self) -> str:
        """``in epoch 0, rank 0 yielded 4 batches, rank 1 yielded 3 batches`` (of a cycle: ``rank 0 every 4
        batches``)."""
        if self.cycle:
            return f"{self.label}: " + ", ".join(f"rank {r} every {n} batch{'es' if n != 1 else ''}"
                                                 for r, n in sorted(self.counts.items()))
        return f"in {self.label}, " + ", ".join(f"rank {r} yielded {n} batch{'es' if n != 1 else ''}"
                                                for r, n in sorted(self.counts.items()))


def first_uneven(values: Sequence[RankSteps]) -> Uneven | None:
    """The first stretch every counted rank counted in which they yielded different numbers of batches; None
    where every rank is in step, or a rank raised or was skipped (another clause's failure, or not judged here),
    or there is one rank (always in step)."""
    counted = [r for r in values if r.error is None and not r.skipped]
    if len(counted) < len(values) or len(values) < 2:
        return None
    # A stretch every rank counted (an endless stream's cycle is counted only where it repeats: `_cycle`).
    of_rank = [{s.label: s for s in r.stretches} for r in counted]
    for label in (s.label for s in counted[0].stretches if all(s.label in own for own in of_rank)):
        counts = {r.rank: own[label].batches for r, own in zip(counted, of_rank)}
        if len(set(counts.values())) > 1:
            return Uneven(label, counts, of_rank[0][label].cycle)
    return None


def _cycle(batches: Sequence[Any], label: str) -> list[Stretch]:
    """The stretch of one cycle of an endless stream's data, where its batches repeat (else none: a stream
    reshuffled every cycle shows no period, and no rank is compared on it)."""
    period = cycle_length(batches)
    return [] if period is None else [Stretch(f"each cycle of the data {label}", period, cycle=True)]


def resumed_stretches(resumed: Any, after: str, *, endless: bool, limit: int) -> list[Stretch]:
    """The stretches of a resumed loader's `stream` (`RESUMED_PASSES` passes, or of an endless stream one pass
    up to ``limit`` steps), ``after`` the resume named so: one per pass (a pass it never reached yields 0);
    of an endless stream, the steps it yielded before ``limit`` (a stream that ends is short) and its cycle."""
    if endless:
        return [Stretch(f"the {limit} steps after {after}", len(resumed)), *_cycle(resumed, f"after {after}")]
    counts = list(resumed.lengths) + [0] * (RESUMED_PASSES - len(resumed.lengths))
    return [Stretch(f"pass {k + 1} after {after}", n) for k, n in enumerate(counts)]


def rank_stretches(uninterrupted: tuple[Sequence[Any], list[int]], *, endless: bool) -> list[Stretch]:
    """The stretches of a rank's uninterrupted run (`uninterrupted`): its epochs, or its endless stream's cycle."""
    reference, lengths = uninterrupted
    return _cycle(reference, "in the uninterrupted stream") if endless else [
        Stretch(f"epoch {e}", n) for e, n in enumerate(lengths)]


def assert_ranks_in_step(ranks: Sequence[tuple[Sequence[Any], list[int]]], resumed: Sequence[Any], *, after: str,
                         limit: int, endless: bool = False) -> None:
    """SC32's judgement replayed in one process: ``ranks``, each rank's uninterrupted run (`uninterrupted`, rank
    r of the world); ``resumed``, what each rank streamed (`stream`) after loading its own state, ``after`` the
    resume named so, up to ``limit`` batches. Every rank must yield as many batches as every other in each epoch
    and pass (of an endless stream: in the steps after the resume, and in each cycle of its data); else a
    collective (the gradient all-reduce) waits for the rank that ran out. Raises AssertionError naming them."""
    values = [RankSteps(r, [*rank_stretches(run, endless=endless),
                            *resumed_stretches(more, after, endless=endless, limit=limit)])
              for r, (run, more) in enumerate(zip(ranks, resumed, strict=True))]
    uneven = first_uneven(values)
    assert uneven is None, (
        f"SC32: {uneven.counted()}: "
        + (f"rank {uneven.short[0]}'s data cycles sooner, so the ranks train different epochs of the data at the "
           "same step" if uneven.cycle else
           f"at step {min(uneven.counts.values()) + 1} rank {uneven.short[0]} has no batch while the others train "
           "on, so that step's collectives (the gradient all-reduce) wait for ever"))
