"""Endless streams: a loader whose passes never end (it cycles over its data), checked as one stream.

Its uninterrupted run is one pass, `steps.REFERENCE_EPOCHS` epochs of the config's dataset long
(`steps.endless_reference`); checkpoints are drawn over its first half, as positions in the stream
(`plans.draw_position`), so each is followed by at least two epochs of the dataset, and the resumed stream is
compared with the uninterrupted one over all of them, losses and repeats counted by sample
(docs/clauses.md, "Endless streams").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from ..config import LoaderConfig
from .compare import Segment, batch_ids, first_difference, sample_ids, shift_of
from .impact import Impact, losses, loud, stream_impact
from .vocabulary import Point, batch_count, into_window

__all__ = ["StreamSegment", "checkpoint_span", "cycle_length", "describe", "endless_impact",
           "stream_losses"]



class StreamSegment(Segment):
    """A stretch of an endless stream, ``reference[start:stop]``: it has no epochs to name."""

    def __init__(self, batches: Sequence[Any] = (), start: int = 0) -> None:
        super().__init__(batches, start, ())


def checkpoint_span(lengths: Sequence[int]) -> int:
    """The last stream index a checkpoint may be taken at: the uninterrupted run's first half, so that at
    least two epochs of the config's dataset follow every checkpoint."""
    return sum(lengths) // 2


def describe(point: Point, config: LoaderConfig) -> str:
    """A point of an endless stream in words: how far into the stream, and which epoch of the dataset that is."""
    if point.before_iter:
        return "before iter() of the endless stream (the loader never iterated)"
    if point.batches == 0:
        return "after iter() of the endless stream, before its first batch"
    per_epoch = config.epoch_batches
    where = ""
    if per_epoch:
        epoch, into = divmod(point.batches, per_epoch)
        where = (f"; the dataset makes {batch_count(per_epoch)} an epoch, so this is "
                 + (f"the end of epoch {epoch - 1}" if into == 0 else f"batch {into} of epoch {epoch}"))
        if into := into_window(point.batches, config.grad_acc_step):
            start = point.batches - into
            spans = start // per_epoch != (start + config.grad_acc_step - 1) // per_epoch
            where += (f", inside a grad-acc window of {config.grad_acc_step}"
                      + (" that spans an epoch boundary" if spans else ""))
    return f"after {batch_count(point.batches)} of the endless stream (its iterator open{where})"


def endless_impact(expected: Sequence[Any], got: Sequence[Any]) -> Impact:
    """What resuming an endless stream with ``got`` instead of ``expected`` does to a run, counted by sample
    over the whole horizon: a stream that ends is loud (the trainer's ``next()`` raises StopIteration); one
    that resumes ahead or behind has lost or repeated that many samples (a cycle brings them back only in
    a later epoch); any other difference counts the samples the horizon lacks and those it has more often."""
    e_ids, g_ids = sample_ids(expected), sample_ids(got)
    at = getattr(expected, "start", None)
    if len(got) < len(expected) and all(first_difference(a, b) is None for a, b in zip(expected, got)):
        return loud("next(iter(loader))", "raises StopIteration: the resumed endless stream ended")
    if e_ids is None or g_ids is None:
        return stream_impact(expected, got)  # batches without sample indices: counted in batches
    lost, repeated = stream_losses(e_ids, g_ids)
    if not lost and not repeated:
        return stream_impact(expected, got)  # the same samples: another order, or changed contents
    return losses(lost, repeated, unit="sample", at=at)


def stream_losses(expected: Sequence[Any], got: Sequence[Any]) -> tuple[int, int]:
    """The samples lost and repeated where an endless stream's sample ids ``got`` came instead of
    ``expected`` over one horizon (`endless_impact`): a shift counts its length, anything else the samples
    the horizon lacks and those it has more often."""
    e = [i if isinstance(i, Hashable) else repr(i) for i in expected]
    g = [i if isinstance(i, Hashable) else repr(i) for i in got]
    first = next((i for i, (a, b) in enumerate(zip(e, g)) if a != b), min(len(e), len(g)))
    shift = shift_of(e[first:], g[first:])
    if shift is not None:
        return (shift, 0) if shift > 0 else (0, -shift)
    return sum((Counter(e) - Counter(g)).values()), sum((Counter(g) - Counter(e)).values())


def cycle_length(batches: Sequence[Any]) -> int | None:
    """How many batches one cycle of an endless stream's data takes: the period its batches repeat with
    (sample ids where they carry an ``index``, else whole batches), or None where they do not repeat
    (a stream reshuffled every cycle). Its first quarter is left out (a resumed or re-dealt stream may
    begin mid-cycle, or with a pass dealt otherwise); the rest must hold the period twice."""
    ids = [batch_ids(b) for b in batches]
    keyed = None not in ids

    def same(a: int, b: int) -> bool:
        return ids[a] == ids[b] if keyed else first_difference(batches[a], batches[b]) is None

    skip = len(batches) // 4
    span = len(batches) - skip
    return next((p for p in range(1, span // 2 + 1)
                 if all(same(i, i + p) for i in range(skip, len(batches) - p))), None)

