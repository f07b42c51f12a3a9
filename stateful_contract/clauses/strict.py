"""Strict tier (SC40, SC41): beyond StatefulDataLoader, which accepts all of these silently; reported and
badged apart from the core clauses, and run only when asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from ..config import ConfigSpace, LoaderConfig
from ..links import doc
from ..repro.compare import describe_batch
from ..repro.impact import Impact, loud
from ..repro.recording import asserts
from ..repro.refusals import names_the_worker_counts
from ..repro.state_steps import BAD_STATES, bad_state, load_and_iterate
from ..repro.steps import OutsideTheSpace
from ..search.example import Example
from ..search.plans import Checkpoint, SavePoints, draw_position
from .registry import LOAD, RESUMES, clause, violated
from .worker_change import (
    WorkerChange,
    _worker_change_plan,
    raised_in_torchdata,
    resume_with_other_workers,
    worker_change_examples,
)
from .world_change import (
    WorldResume,
    new_worlds,
    resume_on_another_world,
    world_size_change_is_exact_or_refused,
)

__all__: list[str] = []  # each clause registers itself (`clause`): nothing here is imported


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


def _refusal_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints, *,
                  space: ConfigSpace | None = None) -> WorkerChange | Checkpoint:
    """SC23's plan (a checkpoint resumed with another worker count); where the space allows one count
    only, a checkpoint alone, which a world-size change (SC31's, on several ranks) still resumes."""
    return (_worker_change_plan(data, lengths, config, saves, space=space)
            or Checkpoint(draw_position(data, lengths, config, saves)))


def _unnamed(what: str) -> Impact:
    """A refusal that does not name the mismatch: loud, and the job stops with no hint why."""
    return Impact("loud", f"resume refused without naming the two {what}: the job stops, unexplained")


def _names_the_world_sizes(values: Sequence[WorldResume], config: LoaderConfig, plan: Any) -> None:
    """Over the new world: where the resume was refused, some rank's exception names the world sizes."""
    refusals = [r for r in values if r.refused]
    if refusals and not any(r.named for r in refusals):
        first = refusals[0]
        raise violated("SC41", context=(
            f"a state saved on {first.saved_world_size} ranks, resumed on {len(values)} (an elastic restart, as "
            "SC31 runs it)"), expected=(
            f"the refusal to name the two world sizes ({first.saved_world_size} and {len(values)}), e.g. ValueError("
            f"'state saved on world_size={first.saved_world_size}, this run has world_size={len(values)}')"), got=(
            f"{first.error}: it does not name the two world sizes, so whoever restarts an elastic job on another "
            "number of ranks is not told why it fails"), impact=_unnamed("world sizes"))


def _ends_in_the_naming_assertion(example: Example, saved: int, resumed: int) -> None:
    """The reproduction's last line, the step the loader refused in, caught and its refusal held to name both
    counts: pasted, it raises where the clause fails and runs clean on a refusal that names them."""
    program = example.program
    refusing = program.lines.pop()
    program.names_used.update({"LoaderError", "assert_names_the_worker_counts"})
    program.add(f"try:\n    {refusing}\nexcept LoaderError as refusal:\n"
                f"    assert_names_the_worker_counts(refusal, {saved}, {resumed})")


@clause("SC41", "refusals-name-the-mismatch", tier="strict", plan=_refusal_plan, needs=RESUMES, budget="workers",
        explicit=worker_change_examples,
        after_restart=(resume_on_another_world, _names_the_world_sizes), reads=("fixed_global_batch",),
        restart_worlds=new_worlds)
def refusals_name_the_mismatch(example: Example, plan: WorkerChange | Checkpoint) -> None:
    """Where a worker-count change (SC23) or, on several ranks, a world-size change (SC31) is refused,
    the exception names what differs: the two worker counts, the two world sizes. torchdata 0.11's bare
    `assert` (F13) does not."""
    several = example.world is not None and example.world.world_size > 1
    if isinstance(plan, WorkerChange):
        outcome, _, _ = resume_with_other_workers(example, plan)
        error, saved, resumed = outcome.refusal, example.config.num_workers, plan.workers
        if error is not None:  # a resume that is not refused has nothing to name (SC23 judges it)
            _ends_in_the_naming_assertion(example, saved, resumed)
        if error is not None and not names_the_worker_counts(error, saved, resumed):
            shown = (f"{type(error).__name__}: {error}" if str(error).strip()
                     else f"a bare {type(error).__name__} with no message")
            raise violated("SC41", context=plan.context(example.config), expected=(
                f"the refusal to name the two worker counts ({saved} and {resumed}), e.g. "
                f"ValueError('state saved with num_workers={saved}, this loader has num_workers={resumed}')"),
                got=f"{shown}: it does not name the two worker counts, so someone whose job is restarted "
                    "with another num_workers is not told why it fails" + (
                    " (raised inside torchdata's StatefulDataLoader, F13 in "
                    f"{doc('findings.md', 'f13')}: record num_workers in your state and check it in "
                    "load_state_dict before the base loader does)" if raised_in_torchdata(error) else ""),
                impact=_unnamed("worker counts"))
    elif not several:
        raise OutsideTheSpace("the configuration space allows one number of worker processes only "
                           "(ConfigSpace.num_workers) and the check runs on one rank: no change to refuse")
    if several:  # the world-size half: saved here, resumed on other world sizes (SC31's scenario)
        world_size_change_is_exact_or_refused(example, Checkpoint(plan.position))
