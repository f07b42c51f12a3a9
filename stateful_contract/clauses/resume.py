"""Core resume clauses (SC10-SC18): small pure judgements over streams and states.

The engine runs the loaders and hands each judgement what it observed; a judgement
only compares and, when the statement does not hold, raises a `ClauseViolation`
saying what was expected and what came instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..engine.compare import first_difference, stream_difference
from .violation import violated

__all__ = [
    "load_leaves_its_argument_alone",
    "resume_continues_the_stream",
    "resume_survives_several_hops",
    "same_config_same_stream",
    "state_after_load_is_the_loaded_state",
    "state_before_first_batch_resumes",
    "state_dict_does_not_disturb",
    "state_is_a_snapshot",
    "state_survives_serialization",
]

_RESUMED = "the resumed loader to yield exactly the uninterrupted run's batches from the checkpoint on"


def _same_stream(clause_id: str, expected: Sequence[Any], got: Sequence[Any], *,
                 context: str, what: str = _RESUMED) -> None:
    diff = stream_difference(expected, got)
    if diff is not None:
        raise violated(clause_id, context=context, expected=f"{what} ({len(expected)} batches)", got=diff)


def resume_continues_the_stream(expected: Sequence[Any], resumed: Sequence[Any], *, context: str) -> None:
    """SC10: a fresh loader given the state yields exactly the rest of the uninterrupted stream."""
    _same_stream("SC10", expected, resumed, context=context)


def resume_survives_several_hops(expected: Sequence[Any], resumed: Sequence[Any], *, context: str) -> None:
    """SC11: a state taken from a resumed loader resumes exactly too (run 1, run 2, run 3)."""
    _same_stream("SC11", expected, resumed, context=context)


def state_before_first_batch_resumes(expected: Sequence[Any], resumed: Sequence[Any]) -> None:
    """SC12: ``state_dict()`` before any iteration resumes to the full stream."""
    _same_stream("SC12", expected, resumed, context="state_dict() on a loader never iterated",
                 what="the resumed loader to yield the full stream from its first batch")


def state_after_load_is_the_loaded_state(expected: Sequence[Any], resumed: Sequence[Any], *,
                                         context: str) -> None:
    """SC13: ``state_dict()`` right after ``load_state_dict`` resumes to the loaded point."""
    _same_stream("SC13", expected, resumed, context=context,
                 what="a loader resumed from state_dict() taken right after load_state_dict(state) "
                      "to continue from the loaded point")


def state_dict_does_not_disturb(expected: Sequence[Any], observed: Sequence[Any], *, context: str) -> None:
    """SC14: calling ``state_dict()`` at any point leaves the stream unchanged."""
    _same_stream("SC14", expected, observed, context=context,
                 what="the same batches as a loader on which state_dict() is never called")


def state_is_a_snapshot(state_when_taken: Any, state_later: Any, *, context: str) -> None:
    """SC15: a returned state does not change when the loader iterates on."""
    diff = first_difference(state_when_taken, state_later, "state")
    if diff is not None:
        raise violated(
            "SC15", context=context,
            expected="the dict returned by state_dict() to stay as it was returned while the loader "
                     "iterates on (a checkpoint written later, e.g. asynchronously, must hold this point)",
            got=f"it changed under the caller: {diff} (the state holds live references into the loader)",
        )


def load_leaves_its_argument_alone(state_given: Any, state_after: Any, *, context: str) -> None:
    """SC16: ``load_state_dict`` does not modify the dict it is given."""
    diff = first_difference(state_given, state_after, "state")
    if diff is not None:
        raise violated(
            "SC16", context=context,
            expected="load_state_dict(state) and iterating the loader to leave `state` unchanged "
                     "(the same state is often loaded into several loaders, or kept for a retry)",
            got=f"the argument was modified: {diff}",
        )


def same_state_same_stream(first: Sequence[Any], second: Sequence[Any], *, context: str) -> None:
    """SC16 (second half): one state loaded into two loaders gives the same stream."""
    _same_stream("SC16", first, second, context=context,
                 what="a second loader given the same state dict to yield the same batches as the first")


def state_survives_serialization(fmt: str, error: BaseException | None, *, context: str) -> None:
    """SC17: the state round-trips through ``fmt`` (torch.save/torch.load(weights_only=True), pickle, deepcopy)."""
    if error is not None:
        raise violated(
            "SC17", context=context,
            expected=f"the state to round-trip through {fmt}",
            got=f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}",
        )


def round_tripped_state_resumes(fmt: str, expected: Sequence[Any], resumed: Sequence[Any], *,
                                context: str) -> None:
    """SC17 (second half): the round-tripped state resumes exactly."""
    _same_stream("SC17", expected, resumed, context=context,
                 what=f"a loader given the state after a {fmt} round trip to resume exactly")


def same_config_same_stream(first: Sequence[Any], second: Sequence[Any]) -> None:
    """SC18: two fresh loaders from one config yield the same stream."""
    diff = stream_difference(first, second)
    if diff is not None:
        raise violated(
            "SC18", context="two fresh loaders from one config, torch.manual_seed(config.seed) before each",
            expected="the same stream from both (otherwise no resume can be judged: there is no one "
                     "'uninterrupted run' to compare with)",
            got=diff.replace("after the checkpoint ", "").replace("resumed stream", "second stream")
                .replace("uninterrupted run", "first loader"),
        )
