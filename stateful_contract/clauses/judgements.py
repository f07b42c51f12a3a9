"""The judgements clauses share: pure comparisons that raise a `ClauseViolation`.

Each records, in the example's reproduction, the public assertion that checks the same
thing outside the suite (``assert_same_stream(expected, resumed)``), so the printed
program ends on the line that fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._engine.compare import RESUME_WORDING, Wording, first_difference, stream_difference
from .._engine.impact import Impact, stream_impact
from .._engine.recording import asserts
from .registry import violated

__all__ = ["RESUMED", "same_stream", "unchanged"]

#: What a resume clause expects, in the words its messages use.
RESUMED = "the resumed loader to yield exactly the uninterrupted run's batches from the checkpoint on"


@asserts("assert_same_stream")
def same_stream(expected: Sequence[Any], got: Sequence[Any], *, clause_id: str, context: str,
                what: str = RESUMED, wording: Wording = RESUME_WORDING) -> None:
    """``got`` is exactly ``expected``, batch by batch and field by field."""
    diff = stream_difference(expected, got, wording)
    if diff is not None:
        raise violated(clause_id, context=context, expected=f"{what} ({len(expected)} batches)", got=diff,
                       impact=stream_impact(expected, got))


@asserts("assert_unchanged")
def unchanged(before: Any, after: Any, *, clause_id: str, context: str, expected: str, got: str,
              impact: str) -> None:
    """``after`` equals ``before``; ``got`` is completed with where it differs. ``impact``: what a
    state that changes does to a run, a silent one (the state is unusable later)."""
    diff = first_difference(before, after, "state")
    if diff is not None:
        raise violated(clause_id, context=context, expected=expected, got=got.format(diff=diff),
                       impact=Impact("silent", f"state unusable later: {impact}"))
