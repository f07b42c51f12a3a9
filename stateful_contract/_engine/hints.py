"""Hints: the likeliest cause of a failure, attached to whichever clause shows it.

A cause does not belong to one clause. The generator ``__iter__`` most wrappers are
written with shows up as SC22's pass cut short, as SC10's epoch lost, as SC20's reload,
wherever a state is taken right after an ``iter()`` that follows an earlier pass. So a
hint is matched on the failing *example* (its plan and the loader's class), once, in
`run_example`, for every clause, instead of inside the clause that met it first.

A plan says where its state was taken through ``right_after_a_new_iter`` (`Position`,
`LoopPoint` and the plans that are no `Position` define it); a plan with a ``position``
field is asked through that field.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from .._faces import hint_alignment
from .._links import doc
from ..config import LoaderConfig
from .outcome import ClauseViolation
from .plans import Alignment
from .steps import LoaderError, Position, last_loader_type


class Example(Protocol):
    """What a hint reads of the example it explains (`stateful_contract._engine.example.Example`,
    which calls `attach_hints`: named here as a protocol, not imported back)."""

    config: LoaderConfig
    alignment: Alignment

    def known_lengths(self) -> list[int] | None: ...

__all__ = ["GENERATOR_ITER", "attach_hints", "inside_a_window", "lazy_iter_applies", "right_after_a_new_iter"]

#: What a generator ``__iter__`` does to a state taken right after ``iter()``, and the fix.
GENERATOR_ITER = (
    "Hint: the loader's __iter__ is a generator function, so nothing in it runs until the first next(): a "
    "state taken right after iter() is still the one the previous pass left (a pass cut short, or an epoch "
    "already ended), not the new pass's. Start the inner loader's iterator in __iter__ itself "
    "(it = iter(self.base); return (f(b) for b in it)), as StatefulDataLoader.__iter__ does: "
    + doc("clauses.md", "sc22-cut-short-passes-resume"))


def right_after_a_new_iter(plan: Any) -> bool:
    """The example's state was taken right after an ``iter()`` that follows an earlier pass."""
    own = getattr(plan, "right_after_a_new_iter", None)
    if isinstance(own, bool):
        return own
    return bool(getattr(getattr(plan, "position", None), "right_after_a_new_iter", False))


def lazy_iter_applies(plan: Any, loader_type: type | None) -> bool:
    """The generator-``__iter__`` hint fits: such an ``__iter__``, and a state right after a new ``iter()``."""
    return (loader_type is not None and inspect.isgeneratorfunction(getattr(loader_type, "__iter__", None))
            and right_after_a_new_iter(plan))


def inside_a_window(plan: Any, example: Example) -> int | None:
    """How many batches into its grad-acc window the example's state was taken, when it was
    strictly inside one and no checkpoint alignment is declared (else None)."""
    position, window = getattr(plan, "position", None), example.config.grad_acc_step
    if example.alignment is not None or window <= 1 or not isinstance(position, Position):
        return None
    lengths = example.known_lengths()
    if position.kind(lengths) != "mid-epoch" or position.batches % window == 0:
        return None
    return position.batches % window


def _window_hint(into: int, window: int) -> str:
    return (f"Hint: this state was taken inside a grad-acc window (after {into} of its {window} batches). A "
            f"wrapper exact only at window boundaries can declare so ({hint_alignment()}; the report and the badge "
            "show it); otherwise its state must hold the position inside the window: "
            + doc("clauses.md", "sc10-resume-continues-the-stream"))


def attach_hints(error: BaseException, plan: Any, example: Example) -> None:
    """Add to ``error`` (a clause's violation) the hints its example matches."""
    if not isinstance(error, ClauseViolation) or isinstance(error.__context__, LoaderError):
        return  # a crash, a hang or a refusal (a violation raised over the loader's exception) tells its own story
    hints = []
    if lazy_iter_applies(plan, last_loader_type()):
        hints.append(GENERATOR_ITER)
    into = inside_a_window(plan, example)
    if into is not None:
        hints.append(_window_hint(into, example.config.grad_acc_step))
    for hint in hints:
        if hint not in error.got:
            error.got += "\n  " + hint
