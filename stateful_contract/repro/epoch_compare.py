"""Comparing resumed runs epoch by epoch (SC21's loop, SC10's epoch alignment): which epoch is
empty, lost or replayed, as the paragraph a message shows and the public assertions raise."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .compare import first_difference, same_batches, shown_ids
from .steps import Position
from .vocabulary import batch_count, pass_name

__all__ = ["assert_no_epoch_lost", "assert_same_epochs", "epochs_difference", "lost_epoch"]


def _epoch_difference(epoch: int, expected: Sequence[Any], got: Sequence[Any],
                      reference: Mapping[int, Sequence[Any]]) -> str | None:
    if same_batches(expected, got):
        return None
    n, m = len(expected), len(got)
    if m == 0:
        return (f"epoch {epoch} is empty, but the uninterrupted run has {n} batch{'es' if n != 1 else ''} there: "
                f"epoch {epoch} is lost ({shown_ids(expected)})")
    if m < n and same_batches(expected[n - m:], got):
        return f"epoch {epoch} lost its first {n - m} of {n} batches: missing {shown_ids(expected[:n - m])}"
    if m < n and same_batches(expected[:m], got):
        return f"epoch {epoch} lost its last {n - m} of {n} batches: missing {shown_ids(expected[m:])}"
    if m > n and same_batches(expected, got[m - n:]):
        return f"epoch {epoch} replayed {m - n} batches before the checkpoint: extra {shown_ids(got[:m - n])}"
    for other, batches in reference.items():
        if other != epoch and batches and same_batches(batches[len(batches) - m:], got):
            return (f"epoch {epoch} replayed epoch {other}'s batches instead of its own: expected {shown_ids(expected)}, "
                    f"got {shown_ids(got)}")
    i = next((i for i, (e, g) in enumerate(zip(expected, got)) if first_difference(e, g) is not None), min(n, m))
    diff = first_difference(expected[i], got[i]) if i < min(n, m) else f"{m} batches instead of {n}"
    return f"epoch {epoch} differs at its batch {i}: {diff}.\n  expected: {shown_ids(expected)}\n  got:      {shown_ids(got)}"


def epochs_difference(expected: Mapping[int, Sequence[Any]], got: Mapping[int, Sequence[Any]],
                      reference: Mapping[int, Sequence[Any]] | None = None) -> str | None:
    """The first epoch of ``got`` that is not ``expected``'s, in words (None: every epoch matches);
    ``reference`` (every epoch of the uninterrupted loop) lets it say which epoch a wrong one replays."""
    missing = [e for e in expected if e not in got]
    if missing:
        return f"the resumed loop has no epoch {missing[0]} (it ran epochs {sorted(got)})"
    for epoch in expected:
        if (diff := _epoch_difference(epoch, expected[epoch], got[epoch], reference or expected)) is not None:
            return diff
    extra = sorted(set(got) - set(expected))
    return f"the resumed loop ran epochs {extra} that the uninterrupted one did not" if extra else None


def lost_epoch(lengths: Sequence[int], position: Position, passes: Sequence[int]) -> str | None:
    """An empty pass of a resumed loader where the uninterrupted run (epoch ``lengths``) has no empty epoch,
    in words; ``passes``: the batches of each pass resumed from ``position`` (`take_epochs`). Which empty
    passes are allowed: docs/clauses.md, SC10, "Epoch alignment"."""
    start = position.absolute(list(lengths))
    allowed: Counter[int] = Counter()
    if not position.after_stop and position.batches >= lengths[position.epoch]:
        allowed[start] += 1
    for j in range(position.epoch + 1, len(lengths)):
        if lengths[j] == 0:
            allowed[sum(lengths[:j])] += 1
    offset = 0
    for i, n in enumerate(passes):
        if n == 0:
            if allowed[start + offset] > 0:
                allowed[start + offset] -= 1
            else:
                epoch = position.epoch + i + (1 if position.after_stop else 0)
                return (f"epoch lost: the resumed loader's {pass_name(i)} yielded nothing, after "
                        f"{batch_count(offset)} of the resumed stream, where the uninterrupted run has no empty "
                        f"epoch (batches per pass, from pass 0: {list(passes)}); a trainer that counts one epoch per "
                        f"pass (for epoch in range(start, n): for batch in loader) sees epoch {epoch} empty and "
                        "silently trains one epoch less")
        offset += n
    return None


def assert_same_epochs(expected: Mapping[int, Sequence[Any]], got: Mapping[int, Sequence[Any]]) -> None:
    """Raise `AssertionError` naming the first epoch of ``got`` that is empty, lost or replayed."""
    __tracebackhide__ = True
    if (diff := epochs_difference(expected, got)) is not None:
        raise AssertionError(diff)


def assert_no_epoch_lost(lengths: Sequence[int], position: Position, passes: Sequence[int]) -> None:
    """Raise `AssertionError` when a resumed loader has an empty pass the uninterrupted run has not."""
    __tracebackhide__ = True
    if (diff := lost_epoch(lengths, position, passes)) is not None:
        raise AssertionError(diff)
