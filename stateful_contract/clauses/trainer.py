"""Trainer usage (SC19-SC22; SC23 in `worker_change`): the ways real trainers drive loaders.

Each has shipped as a real resume bug: docs/clauses.md, "Trainer usage", and docs/museum.md.
"""

from __future__ import annotations

import functools
import traceback
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from ..config import ConfigSpace, LoaderConfig
from ..repro.compare import first_difference, same_batches
from ..repro.epoch_steps import epoch_loop, loop_checkpoint, uninterrupted_loop
from ..repro.impact import loud
from ..repro.outcome import ClauseViolation, last_frame
from ..repro.steps import LoaderError, Position, advance, checkpoint, state_of, take
from ..repro.trainer_steps import cut_short, dcp_changed, dcp_load, dcp_save, into_cut_short_pass
from ..repro.vocabulary import batch_count, pass_name
from ..search.coverage import NOT_A_CHECKPOINT
from ..search.epoch_plans import EpochLoop, epoch_loop_plan
from ..search.example import Example
from ..search.plans import ANYWHERE, Checkpoint, SavePoints, checkpoint_plan, draw_position
from ..spellings import Hint
from ..trainer_view import TrainerView
from .judgements import same_epochs, same_stream
from .registry import RESUMES, clause, violated
from .trainer_shape import TRAINER_SHAPES, WHOLE_PASSES

__all__ = ["CutShort", "Reload"]  # plans a replay builds; each clause registers itself

#: The fact of a trainer's shape under which SC20 is not judged: the trainer never reloads into a used loader.
FRESH_ONLY = "loads-fresh"


@clause("SC19", "template-then-load-resumes", tier="trainer", kills=15, cost=12, plan=checkpoint_plan, needs=RESUMES)
def template_then_load_resumes(example: Example, plan: Checkpoint) -> None:
    """`state_dict()` on a fresh loader first (as torch.distributed.checkpoint does to get a
    template), then `load_state_dict(saved)`, resumes exactly; so does a real DCP save and load
    of the loader wrapped as a `Stateful`."""
    expected = example.expected_after(plan.position)
    saved = checkpoint(example.fresh(), plan.position)
    loader = example.fresh()
    state_of(loader)  # the template DCP asks for before it loads
    example.load(loader, saved)
    where = f"state taken {example.where(plan.position)}"
    same_stream(expected, take(loader, len(expected), max_epochs=example.passes), clause_id="SC19",
                context=where + "; a fresh loader's state_dict() was taken before load_state_dict(state)")
    # The real thing: DCP fills the fresh loader's template in place, then loads it.
    source = example.fresh()
    advance(source, plan.position)
    path = example.scratch("dcp-checkpoint")
    saved = dcp_save(source, path)
    target = example.fresh()
    changed = dcp_changed(saved, dcp_load(target, path, example.load_form))
    same_stream(expected, take(target, len(expected), max_epochs=example.passes), clause_id="SC19",
                context=where + "; saved and loaded through torch.distributed.checkpoint (the loader as a Stateful)"
                + (f"; {changed}" if changed else ""))


@dataclass(frozen=True)
class Reload:
    """The state taken at ``position`` is loaded into a loader that already ran to ``used``."""

    position: Position
    #: Where the loader had run to before the load: no state is taken there (coverage counts no checkpoint).
    used: Position = field(metadata=NOT_A_CHECKPOINT)


def _reload_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints) -> Reload:
    position = draw_position(data, lengths, config, saves)
    used = draw_position(data, lengths, config, ANYWHERE, allow_before_iter=False)  # no save there
    return Reload(position, used)


@clause("SC20", "reload-into-a-used-loader", tier="trainer", kills=13, cost=9, plan=_reload_plan, needs=RESUMES,
        waived_by=(f"trainer_shape={FRESH_ONLY}", TRAINER_SHAPES[FRESH_ONLY]))
def reload_into_a_used_loader(example: Example, plan: Reload) -> None:
    """`load_state_dict(saved)` on a loader that already iterated (some batches, whole epochs, an
    open iterator, persistent workers) resumes exactly from `saved`."""
    expected = example.expected_after(plan.position)
    saved = checkpoint(example.fresh(), plan.position)
    loader = example.fresh()
    advance(loader, plan.used)  # rollback, retry, eval then resume: the loader has run
    context = (f"state taken {example.where(plan.position)}, loaded into a loader "
               f"that had already been iterated until {example.where(plan.used)}")
    try:
        example.load(loader, saved)
    except LoaderError as e:
        raise _refused_reload(e, context) from None
    same_stream(expected, take(loader, len(expected), max_epochs=example.passes), clause_id="SC20", context=context)


def _refused_reload(error: LoaderError, context: str) -> ClauseViolation:
    """A loader that refuses a load once it has iterated (a rule some trainers live by: Lightning restores a
    loader's state before its first iter()) crashes only the trainers that reload into the loader they have:
    the message says which, and how a trainer that never does declares it, instead of a bare exception."""
    failure = violated(
        "SC20", context=context,
        expected="load_state_dict(state) on a loader that already iterated to resume from the state, as "
                 "StatefulDataLoader does (a rollback after a loss spike, a retry, an evaluation pass, then resume)",
        got=(f"{error}{last_frame(error.error)}: a trainer that reloads into the loader it has stops here. If "
             "yours builds a fresh loader before every load (Lightning restores the state before the first "
             f"iter()), it never makes this call: declare it, {Hint('trainer_shape', FRESH_ONLY)}, and SC20 is "
             "not judged"),
        impact=loud(error.step, f"raises {type(error.error).__name__}"))
    tb = "".join(traceback.format_exception(type(error.error), error.error, error.error.__traceback__))
    failure.detail = f"\n\nTraceback of the loader's exception:\n{tb.rstrip()}"
    return failure



@clause("SC21", "set-epoch-loop-resumes-epoch-by-epoch", tier="trainer", kills=11, plan=epoch_loop_plan, needs=RESUMES,
        not_on_endless="the set_epoch loop calls iter() once an epoch, and an endless pass never ends")
def set_epoch_loop_resumes_epoch_by_epoch(example: Example, plan: EpochLoop) -> None:
    """In the loop `for epoch in range(start, n): set_epoch(epoch); for batch in loader`, with
    checkpoints mid-epoch, after the last batch and after `StopIteration` (the latter two resumed at
    the next epoch, as trainers do; a trainer that saves its epoch counter, a `TrainerView`, at the
    epoch its state holds), every epoch after the resume has exactly the uninterrupted run's
    batches: none empty, none lost, none replayed."""
    hook = plan.hook  # set_epoch, or the trainer's call the check declared (epoch_hook)
    reference = uninterrupted_loop(example.factory, example.config, plan.stop, hook=hook)  # not judged without it
    e = plan.epoch
    point = plan.point(len(reference[e]))  # this rank's own last batch, for the end-of-epoch points
    state = loop_checkpoint(example.fresh(), point, hook=hook)  # run 1
    loader = example.fresh(state)  # run 2: a new loader, load, the loop from the epoch the trainer resumes at
    start = _resumes_at(loader, plan)
    k = point.batches if start == e else 0
    name = example.program.render(reference)
    parts = {n: f"{name}[{n}]" for n in range(start, plan.stop)}
    if k:
        parts[e] = f"{name}[{e}][{k}:]"
    expected: dict[int, list[Any]] = example.program.expression(
        "expected", "{" + ", ".join(f"{n}: {text}" for n, text in parts.items()) + "}",
        {n: (reference[n][k:] if n == e else reference[n]) for n in range(start, plan.stop)})
    resumed = epoch_loop(loader, start, plan.stop, hook=hook)
    same_epochs(expected, resumed, clause_id="SC21", context=plan.describe(len(reference[e]), start),
                reference=reference)


def _resumes_at(loader: Any, plan: EpochLoop) -> int:
    """The epoch the trainer's loop resumes at: `EpochLoop.resume_at`, or, for a `TrainerView` (a trainer that
    saves its epoch counter and resumes at it), the epoch its restored state holds. A state saved after an
    epoch's last batch holds that epoch (the counter moves on once the pass ends), so the trainer runs the
    empty rest of it first: OLMo-core's Trainer saves ``self.epoch`` in ``state_dict()``, restores it in
    ``load_state_dict()`` and ``_fit_epoch()`` reshuffles that epoch and iterates it (olmo_core/train/
    trainer.py at allenai/OLMo-core fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d, ``state_dict``,
    ``load_state_dict``, ``_fit_epoch``). Only that epoch or `resume_at` is taken: a view whose restored
    counter is elsewhere is judged as any loader (the uninterrupted run's epochs from `resume_at`)."""
    if isinstance(loader, TrainerView) and loader.epoch in (plan.epoch, plan.resume_at):
        return loader.epoch
    return plan.resume_at


@dataclass(frozen=True)
class CutShort:
    """Passes that break after ``limit`` batches; the state is taken ``into`` batches into pass ``passes``."""

    limit: int
    passes: int
    into: int

    @property
    def right_after_a_new_iter(self) -> bool:
        """The state is taken right after the ``iter()`` that follows a pass cut short (`_attach_hints`)."""
        return self.into == 0 and self.passes > 0

    @property
    def at_the_break(self) -> bool:
        """The state is taken after the pass's last batch, before the trainer's ``break`` and its next ``iter()``:
        where a trainer that counts steps per epoch saves at an epoch's end (torchtune's recipe, `_at_the_break`)."""
        return self.into == self.limit


#: Cut-short passes the uninterrupted run makes: enough to cross an epoch boundary.
CUT_SHORT_PASSES = 6


def _cut_short_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                    ) -> CutShort:
    # A loader declared exact only at window boundaries is cut short, and checkpointed, only
    # there: a trainer's step limit counts optimizer steps, each one window of batches.
    window = saves.window(config)
    # Where no save falls right after iter() (`SavePoints.after_iter`), a pass has a window before its
    # checkpoint, and so at least two (one pass of one window has no other point inside it).
    first = 0 if saves.after_iter else 1
    steps = data.draw(st.integers(1 + first, max(1 + first, lengths[0] // window)), label="windows per cut-short pass")
    passes = data.draw(st.integers(0, 2), label="cut-short passes before the checkpoint")
    # `steps` windows into the pass is after its last batch, before the break (`CutShort.at_the_break`).
    into = data.draw(st.integers(first, steps), label="windows into the pass (0: right after iter(); all of them: "
                                                      "after its last batch, before the break)")
    return CutShort(steps * window, passes, into * window)


def _at_the_break_examples(space: ConfigSpace | None) -> list[tuple[LoaderConfig, Any]]:
    """SC22's explicit example: a shuffled epoch cut short near its middle, the state taken after the last batch of
    the second pass, before the break (`CutShort.at_the_break`, where torchtune saves), which a small search
    reaches only now and then: it needs a pass before and the last of the windows drawn."""
    space = space or ConfigSpace()
    config = space.fitted(LoaderConfig(dataset_size=12, batch_size=2, shuffle=True, seed=5))
    return [(config, functools.partial(_second_pass_at_the_break, config=config))]


def _second_pass_at_the_break(lengths: list[int], saves: SavePoints, *, config: LoaderConfig) -> CutShort:
    window = saves.window(config)
    steps = max(1 if saves.after_iter else 2, lengths[0] // window // 2)
    return CutShort(steps * window, 1, steps * window)


@clause("SC22", "cut-short-passes-resume", tier="trainer", kills=14, cost=11, plan=_cut_short_plan, needs=RESUMES,
        explicit=_at_the_break_examples,
        inside_a_pass="its every checkpoint is taken inside a pass cut short",
        not_on_endless="a pass cut short is one a trainer leaves for the next iter(), and a trainer draws from an "
                       "endless stream with one iter()",
        waived_by=(f"trainer_shape={WHOLE_PASSES}", TRAINER_SHAPES[WHOLE_PASSES]))
def cut_short_passes_resume(example: Example, plan: CutShort) -> None:
    """Passes that `break` after some batches (step limits, eval every N steps),
    checkpointed inside a pass, resume exactly."""
    reference = cut_short(example.fresh(), CUT_SHORT_PASSES, plan.limit)
    loader = example.fresh()
    into_cut_short_pass(loader, plan.passes, plan.limit, plan.into)
    state = state_of(loader)
    # The run had yielded the first `into` batches of pass `passes` (fewer if it ended sooner).
    k = min(plan.into, len(reference[plan.passes]))
    if plan.at_the_break and k == plan.into:
        _at_the_break(example, plan, reference, state)
        return
    expected = example.program.expression(
        "expected", f"[b for p in {example.program.render(reference)}[{plan.passes}:] for b in p][{k}:]",
        [b for p in reference[plan.passes:] for b in p][k:])
    if k < plan.into:
        # That pass ended (StopIteration) before `into` batches: the state is past it, and the resumed
        # run goes on with the passes after it (a loader whose iter() continues a pass cut short after an
        # epoch's last batch has an empty pass there).
        resumed = cut_short(example.fresh(state), CUT_SHORT_PASSES - plan.passes - 1, plan.limit)
    else:
        # The resumed run finishes the pass it was in (limit - k more batches), then cuts short as before.
        resumed = cut_short(example.fresh(state), CUT_SHORT_PASSES - plan.passes, plan.limit, first=plan.limit - k)
    got = example.program.expression("resumed", f"[b for p in {example.program.render(resumed)} for b in p]",
                                     [b for p in resumed for b in p])
    same_stream(expected, got, clause_id="SC22",
                context=f"passes cut short after {batch_count(plan.limit)} each; state taken "
                        + (f"after {batch_count(plan.into)} of {pass_name(plan.passes)}" if plan.into else
                           f"after iter() of {pass_name(plan.passes)}, before its first batch"),
                what="the resumed run to finish the pass it was in and go on as the uninterrupted cut-short run")


def _at_the_break(example: Example, plan: CutShort, reference: list[list[Any]], state: Any) -> None:
    """SC22 on a state taken after the last batch of a pass cut short, before the trainer's ``break`` and its
    next ``iter()``. torchtune's recipe saves there (pytorch/torchtune bd2a0fc7, recipes/
    full_finetune_distributed.py ``train``: the save after an optimizer step inside the pass, at the step that
    reaches ``max_steps_per_epoch``, its default ``save_every_n_steps``) and resumes with a new pass: the
    resumed loader's first ``iter()``, its batches drawn at once. StatefulDataLoader's state there is
    mid-pass, so that ``iter()`` goes on with the pass the state was taken in (measured: docs/clauses.md,
    SC22), where the uninterrupted run started the next pass. A state that resumes either way costs the run
    nothing a correct loader's would not: the judgement takes whichever the resumed run follows further.
    Anything else (that pass again from its start, a pass skipped, a batch lost) fails."""
    program, passes = example.program, plan.passes
    went_on = example.fresh()
    cut_short(went_on, passes, plan.limit)
    # The same loader had the trainer drawn on instead of breaking: pass `passes` to twice the limit.
    later = cut_short(went_on, CUT_SHORT_PASSES - passes - 1, plan.limit, first=2 * plan.limit)
    goes_on = program.expression("goes_on", f"[b for p in {program.render(later)} for b in p][{plan.limit}:]",
                                 [b for p in later for b in p][plan.limit:])
    next_pass = program.expression("next_pass", f"[b for p in {program.render(reference)}[{passes + 1}:] for b in p]",
                                   [b for p in reference[passes + 1:] for b in p])
    resumed = cut_short(example.fresh(state), CUT_SHORT_PASSES - passes - 1, plan.limit)
    got = program.expression("resumed", f"[b for p in {program.render(resumed)} for b in p]",
                             [b for p in resumed for b in p])
    follows_on = same_batches(goes_on, got) or _agreeing(goes_on, got) > _agreeing(next_pass, got)
    expected = goes_on if follows_on else next_pass
    same_stream(expected, got, clause_id="SC22",
                context=f"passes cut short after {batch_count(plan.limit)} each; state taken after the last batch "
                        f"of {pass_name(passes)}, before the trainer's break and its next iter(); the resumed "
                        f"trainer starts a new pass with iter() and draws {batch_count(plan.limit)} at once",
                what="the resumed run's first pass either to go on with the pass the state was taken in (as "
                     "StatefulDataLoader's does) or to be the pass the uninterrupted run started next, and the "
                     "passes after it to be the uninterrupted cut-short run's")


def _agreeing(expected: list[Any], got: list[Any]) -> int:
    """How many batches ``got`` has the same as ``expected`` before the first that differs."""
    return next((i for i, (e, g) in enumerate(zip(expected, got)) if first_difference(e, g) is not None),
                min(len(expected), len(got)))
