"""The judgements clauses share: pure comparisons that raise a `ClauseViolation`.

Each records in the example's reproduction the public assertion that checks the same thing outside
the suite (``assert_same_stream(expected, resumed)``), so the printed program ends on the failing line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..repro.compare import RESUME_WORDING, Wording, first_difference, stream_difference
from ..repro.endless import StreamSegment, endless_impact
from ..repro.epoch_compare import epochs_difference, lost_epoch
from ..repro.impact import Impact, epoch_lost, epochs_impact, stream_impact
from ..repro.recording import asserts
from ..repro.steps import Position
from .registry import violated

__all__ = ["no_epoch_lost", "same_epochs", "same_stream", "unchanged"]

#: What a resume clause expects, in the words its messages use.
RESUMED = "the resumed loader to yield exactly the uninterrupted run's batches from the checkpoint on"


@asserts("assert_same_stream")
def same_stream(expected: Sequence[Any], got: Sequence[Any], *, clause_id: str, context: str,
                what: str = RESUMED, wording: Wording = RESUME_WORDING) -> None:
    """``got`` is exactly ``expected``, batch by batch and field by field."""
    diff = stream_difference(expected, got, wording)
    if diff is not None:
        # A stretch of an endless stream has no epochs: its losses are counted over the whole horizon.
        impact = endless_impact(expected, got) if isinstance(expected, StreamSegment) else stream_impact(expected, got)
        raise violated(clause_id, context=context, expected=f"{what} ({len(expected)} batches)", got=diff,
                       impact=impact)


@asserts("assert_unchanged")
def unchanged(before: Any, after: Any, *, clause_id: str, context: str, expected: str, got: str,
              impact: str) -> None:
    """``after`` equals ``before``; ``got`` is completed with where it differs. ``impact``: what a
    state that changes does to a run, a silent one (the state is unusable later)."""
    diff = first_difference(before, after, "state")
    if diff is not None:
        raise violated(clause_id, context=context, expected=expected, got=got.format(diff=diff),
                       impact=Impact("silent", f"state unusable later: {impact}"))


@asserts("assert_same_epochs")
def same_epochs(expected: dict[int, list[Any]], got: dict[int, list[Any]], *, clause_id: str, context: str,
                reference: dict[int, list[Any]] | None = None) -> None:
    """Every epoch of ``got`` is ``expected``'s, batch by batch and field by field."""
    diff = epochs_difference(expected, got, reference)
    if diff is not None:
        shape = ", ".join(f"epoch {e}: {len(b)}" for e, b in expected.items())
        raise violated(clause_id, context=context, got=diff, impact=epochs_impact(expected, got),
                       expected=f"every epoch after the resume to have exactly the uninterrupted loop's batches "
                                f"({shape}): none empty, none lost, none replayed")


@asserts("assert_no_epoch_lost")
def no_epoch_lost(lengths: Sequence[int], position: Position, passes: Sequence[int], *, clause_id: str,
                  context: str) -> None:
    """No pass of the loader resumed from ``position`` is empty where the uninterrupted run has no empty epoch."""
    diff = lost_epoch(lengths, position, passes)
    if diff is not None:
        raise violated(clause_id, context=context, got=diff, impact=epoch_lost(), expected=(
            "the resumed loader to continue with no empty epoch where the uninterrupted run has none (the one "
            "empty epoch torchdata's StatefulDataLoader has: the rest of an epoch whose state was taken after "
            "its last batch but before StopIteration)"))
