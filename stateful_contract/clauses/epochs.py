"""Epoch alignment: resumes judged epoch by epoch, as trainers count them (SC21, and SC10's empty epochs).

A trainer does not see a stream: it sees passes, one per epoch, and it decides which
epoch a resumed pass is. SC21 runs the trainer's ``set_epoch`` loop and compares every
epoch after the resume with the uninterrupted loop's; `no_epoch_lost` is the judgement
SC10 uses to tell an empty pass torchdata has too from one that is an epoch lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._engine.epoch_compare import epochs_difference, lost_epoch
from .._engine.epoch_plans import EpochLoop, epoch_loop_plan
from .._engine.epoch_steps import epoch_loop, loop_checkpoint, uninterrupted_loop
from .._engine.example import Example
from .._engine.impact import epoch_lost, epochs_impact
from .._engine.recording import asserts
from .._engine.steps import Position
from .registry import RESUMES, clause, violated

__all__ = ["no_epoch_lost", "same_epochs", "set_epoch_loop_resumes_epoch_by_epoch"]

#: What SC10 expects of the passes of a resumed loader.
NO_EMPTY_EPOCH = ("the resumed loader to continue with no empty epoch where the uninterrupted run has none (the one "
                  "empty epoch torchdata's StatefulDataLoader has: the rest of an epoch whose state was taken after "
                  "its last batch but before StopIteration)")


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
        raise violated(clause_id, context=context, expected=NO_EMPTY_EPOCH, got=diff, impact=epoch_lost())


@clause("SC21", "set-epoch-loop-resumes-epoch-by-epoch", tier="trainer", kills=11, plan=epoch_loop_plan, needs=RESUMES)
def set_epoch_loop_resumes_epoch_by_epoch(example: Example, plan: EpochLoop) -> None:
    """In the loop `for epoch in range(start, n): set_epoch(epoch); for batch in loader`, with
    checkpoints mid-epoch, after the last batch and after `StopIteration` (the latter two resumed at
    the next epoch, as trainers do), every epoch after the resume has exactly the uninterrupted run's
    batches: none empty, none lost, none replayed.

    Judged for loaders with a ``set_epoch`` (on the loader, its ``sampler`` or its
    ``batch_sampler``); a loader without one is reported as not judged. See
    `stateful_contract._engine.epoch_plans` for the epoch a trainer resumes at.
    """
    reference = uninterrupted_loop(example.factory, example.config, plan.stop)  # not judged without set_epoch
    e, start = plan.epoch, plan.resume_at
    point = plan.point(len(reference[e]))  # this rank's own last batch, for the end-of-epoch points
    k = point.batches if start == e else 0
    name = example.program.render(reference)
    parts = {n: f"{name}[{n}]" for n in range(start, plan.stop)}
    if k:
        parts[e] = f"{name}[{e}][{k}:]"
    expected: dict[int, list[Any]] = example.program.expression(
        "expected", "{" + ", ".join(f"{n}: {text}" for n, text in parts.items()) + "}",
        {n: (reference[n][k:] if n == e else reference[n]) for n in range(start, plan.stop)})
    state = loop_checkpoint(example.fresh(), point)  # run 1
    resumed = epoch_loop(example.fresh(state), start, plan.stop)  # run 2: a new loader, load, the loop
    same_epochs(expected, resumed, clause_id="SC21", context=plan.describe(len(reference[e])), reference=reference)
