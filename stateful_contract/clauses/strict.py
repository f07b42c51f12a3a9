"""Strict tier (SC40): beyond StatefulDataLoader, which accepts all of these silently.

Reported and badged apart from the core clauses, and run only when asked for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._engine.compare import describe_batch
from .._engine.example import Example
from .._engine.impact import Impact, loud
from .._engine.recording import asserts
from .._engine.state_steps import BAD_STATES, bad_state, load_and_iterate
from .registry import LOAD, clause, violated

__all__ = ["bad_state_is_refused"]


@asserts("assert_refused")
def _refused(error: BaseException | None, first: Any, *, kind: str) -> None:
    context = f"load_state_dict({kind})"
    if error is None:
        shown = "no batch" if first is None else describe_batch(first)
        raise violated("SC40", context=context,
                       expected="an exception at load_state_dict or at the next iter() that names the problem "
                                "(a silent restart re-trains on data the model has already seen)",
                       got=f"accepted silently; the loader then yielded {shown}",
                       impact=Impact("silent", "a bad state is accepted without an error"))
    if not str(error).strip():
        raise violated("SC40", context=context, expected="the exception to name the problem",
                       got=f"a bare {type(error).__name__} with no message",
                       impact=loud("loader.load_state_dict(state)", f"raises a bare {type(error).__name__}"))


@clause("SC40", "bad-state-is-refused", tier="strict", budget="strict", needs=("SC01", LOAD))
def bad_state_is_refused(example: Example, plan: None) -> None:
    """`None`, `{}`, a non-dict, a state with missing or unknown keys, and a state from another
    config or rank are refused with an exception that names the problem, at `load_state_dict` or
    at the next `iter()`, never a silent restart."""
    for kind in BAD_STATES:
        bad = bad_state(example.factory, example.config, kind)
        # A state of rank 1 is loaded by rank 0 of the same world.
        target = replace(example.config, world_size=2, rank=0) if "another rank" in kind else None
        error, first = load_and_iterate(example.fresh(config=target), bad, example.load_form)
        _refused(error, first, kind=kind)
