"""SC32 ranks-stay-in-step: every rank yields as many batches as every other, stretch by stretch.

Data-parallel training takes one step on every rank at once: each step's gradient all-reduce (and every other
collective) waits until every rank reaches it. A rank whose epoch ends a batch early leaves the others
waiting in that collective for ever (or, where the trainer loops on, spinning), unless the trainer handles
uneven inputs (DDP's ``Join``), which it declares (`CheckOptions.joins_uneven_inputs`). Why and how:
docs/clauses.md, SC32.

The judgement (`every_rank_takes_as_many_steps`) compares labelled stretches, each one the steps every rank
must take together before the next checkpoint or epoch boundary: the fresh epochs, the passes after a resume,
the passes after a world-size change. On an endless stream no rank runs out while its stream goes on: the
stretches are the steps after a resume (a stream that ends is short) and the cycle of each rank's data, the
period its batches repeat with (`endless.cycle_length`); ranks whose cycles differ drift apart, silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ..config import LoaderConfig
from ..repro.advice import advise
from ..repro.endless import describe as in_the_stream
from ..repro.impact import Impact
from ..repro.in_step import (
    RESUMED_PASSES,
    RankSteps,
    Stretch,
    Uneven,
    first_uneven,
    rank_stretches,
    resumed_stretches,
)
from ..repro.recording import unrecorded
from ..repro.state_steps import load_checkpoint, save_checkpoint
from ..repro.steps import LoaderError, Position, checkpoint, stream
from ..search.example import Example
from ..search.plans import Checkpoint, checkpoint_plan, position_on_rank
from ..spellings import Hint
from .rank_streams import example_folder
from .registry import LOAD, clause, violated
from .world_change import new_worlds, resumed_config, uneven_global_batch

__all__ = ["RankSteps", "Stretch", "every_rank_takes_as_many_steps", "ranks_stay_in_step"]


def every_rank_takes_as_many_steps(values: Sequence[RankSteps], *, what: str) -> None:
    """Every rank yielded as many batches as every other in each stretch; otherwise the first stretch where
    they differ names the ranks that run out first, and the step at which every collective waits for them."""
    uneven = first_uneven(values)
    if uneven is None:
        return  # in step; or a rank raised (another clause's failure), or one rank (always in step)
    label, counts, short = uneven.label, uneven.counts, uneven.short
    fewest, most = min(counts.values()), max(counts.values())
    named = " and ".join(f"rank {r}" for r in short)
    if uneven.cycle:
        _cycles_drift_apart(uneven, named, what=what, ranks=len(values))
    step = fewest + 1
    violation = violated(
        "SC32", context=f"{what}; every rank counted its batches in each stretch",
        expected=f"every one of the {len(values)} ranks to yield as many batches as the others in {label}",
        got=(uneven.counted() + f": at step {step} {named} {'has' if len(short) == 1 else 'have'} no batch while the others "
             f"train on, so the collectives of step {step} (the gradient all-reduce) wait for ever, or a "
             f"loop that skips the missing batch spins ({most - fewest} step{'s' if most - fewest != 1 else ''} "
             f"of the longer rank{'s' if len(counts) - len(short) != 1 else ''} without a partner). Deal every rank as many batches (pad or drop as "
             "DistributedSampler does), or, if the trainer joins uneven inputs (DDP's Join), declare it: "
             f"{Hint('joins_uneven_inputs', True)}"),
        impact=Impact("loud", f"{named} {'has' if len(short) == 1 else 'have'} no batch at step {step}"
                              f"{'' if label.startswith('epoch 0') else ' of ' + label}: every collective "
                              "waits", where="next()", epoch=int(label.split()[1]) if label.startswith("epoch") else None))
    violation.reproduce_on = short[0]  # type: ignore[attr-defined]  # the rank that runs out
    raise violation


def _cycles_drift_apart(uneven: Uneven, named: str, *, what: str, ranks: int) -> None:
    """SC32's failure where ranks' endless streams cycle through their data at different periods: no
    collective waits (every rank always has a batch), but the ranks train different epochs of the data at
    the same step, further apart every cycle, and the ranks of the shorter cycle train their samples more
    often."""
    label, counts, short = uneven.label, uneven.counts, uneven.short
    fewest, most = min(counts.values()), max(counts.values())
    one = len(short) == 1
    violation = violated(
        "SC32", context=f"{what}; every rank's endless stream repeats its data with a period it counted",
        expected=(f"every one of the {ranks} ranks to cycle through its share of the data in as many batches as "
                  f"the others ({label}), so that at every step every rank trains the same epoch of the data"),
        got=(uneven.counted() + f": {named} start{'s' if one else ''} {'its' if one else 'their'} next cycle at step {fewest + 1}, the "
             f"others at step {most + 1}, and the ranks drift further apart every cycle; in any {fewest * most} steps "
             f"{named} train{'s' if one else ''} {'its' if one else 'their'} samples {most} times for every "
             f"{fewest} of the others'. Deal every rank as many batches an epoch (pad or drop as DistributedSampler "
             "does)"),
        impact=Impact("silent", f"ranks out of step: {named} train{'s' if one else ''} {'its' if one else 'their'} "
                                f"samples {most} times for every {fewest} of the others'"))
    violation.reproduce_on = short[0]  # type: ignore[attr-defined]
    raise violation


def _endless_stretches(loader: Any, limit: int, label: str) -> list[Stretch]:
    """An endless stream after a resume: the batches it yields up to ``limit`` (the same on every rank) and
    its cycle (`resumed_stretches`)."""
    return resumed_stretches(stream(loader, 1, limit=limit), label, endless=True, limit=limit)


def _horizon(config: LoaderConfig) -> int:
    """The steps counted after a resume of an endless stream: four epochs of the config's dataset (as its
    uninterrupted run), enough for a cycle to repeat twice past the first quarter; the same on every rank."""
    return 4 * (config.epoch_batches + 1)


def _passes(loader: Any, limit: int, label: str) -> list[Stretch]:
    """The batches of the next `RESUMED_PASSES` passes of ``loader``, one stretch each."""
    return resumed_stretches(stream(loader, RESUMED_PASSES, limit=limit), label, endless=False, limit=limit)


def _judge_fresh_and_resumed(values: Sequence[RankSteps], config: Any, plan: Checkpoint) -> None:
    every_rank_takes_as_many_steps(values, what=values[0].where if values else "")


def resume_in_step_on_another_world(example: Example, plan: Checkpoint, *,
                                    fixed_global_batch: bool = False) -> RankSteps:
    """SC32's second half, on each rank of a world of another size: load an old rank's state (as SC31 does),
    count the batches of the rest of the epoch and the next (of an endless stream: the steps up to its horizon,
    and its cycle)."""
    world = example.world
    assert world is not None
    folder = example_folder(example, "SC32")
    saved = len(list(folder.glob("saved-rank*.json")))
    source = world.rank % saved
    old = json.loads((folder / f"saved-rank{source}.json").read_text(encoding="utf-8"))
    saved_at = Position(**old["position"])
    # An endless stream has no epoch to name the save by: it is a point in the stream.
    at = in_the_stream(saved_at, example.config) if example.config.endless else saved_at.describe()
    result = RankSteps(world.rank, where=(f"every one of {saved} ranks saved its state {at}, and "
                                          f"a fresh world of {world.world_size} ranks resumed, rank r loading "
                                          f"rank{{r % {saved}}}.pt"))
    config = resumed_config(example.config, saved, fixed_global_batch=fixed_global_batch)
    if config is None:
        result.skipped = uneven_global_batch(example.config, saved)
        return result
    path = str(folder / f"rank{source}.pt")
    example.program.bind(path, repr(f"rank{source}.pt"))
    limit = RESUMED_PASSES * (config.dataset_size + world.world_size + 1)
    try:
        loader = example.fresh(load_checkpoint(path), config=config)
        label = f"the resume on {world.world_size} ranks"
        if config.endless:
            result.stretches = _endless_stretches(loader, _horizon(config), label)
            return result
        result.stretches = _passes(loader, limit, label)
        # torchdata resumes a state taken after the last batch, before StopIteration, into an empty epoch
        # (docs/findings.md, F5): the passes that count are the two after it.
        if old["finished"] and not saved_at.after_stop and not result.stretches[0].batches:
            result.stretches = [Stretch(s.label, n) for s, n in zip(
                result.stretches, [result.stretches[1].batches, _passes(loader, limit, label)[0].batches])]
    except LoaderError as e:
        result.error = str(e)
    return result


def _judge_on_another_world(values: Sequence[RankSteps], config: Any, plan: Checkpoint) -> None:
    if skipped := next((r.skipped for r in values if r.skipped), ""):
        advise(skipped)
        return
    every_rank_takes_as_many_steps(values, what=values[0].where)


def worlds_of_several_ranks(world_size: int) -> tuple[int, ...]:
    """SC31's new world sizes (`new_worlds`) of two ranks or more: one rank is always in step."""
    return tuple(m for m in new_worlds(world_size) if m > 1)


@clause("SC32", "ranks-stay-in-step", tier="distributed", cost=8, plan=checkpoint_plan, needs=("SC01", LOAD),
        world=_judge_fresh_and_resumed, reads=("fixed_global_batch",),
        waived_by=("joins_uneven_inputs", "the trainer handles ranks with uneven batch counts (DDP's Join)"),
        judged_on_endless=("the stream is endless, so no rank runs out of batches, which is all DDP's Join "
                           "handles; ranks whose cycles differ drift apart, which Join does not see"),
        after_restart=(resume_in_step_on_another_world, _judge_on_another_world), restart_worlds=worlds_of_several_ranks)
def ranks_stay_in_step(example: Example, plan: Checkpoint) -> RankSteps:
    """Every rank yields as many batches as every other in each epoch: fresh, after a resume, and after a
    world-size change; otherwise a collective (the gradient all-reduce) waits for ever for the rank that ran
    out. Not judged where the trainer declares it handles uneven inputs (DDP's `Join`), unless the stream is
    endless."""
    world = example.world
    assert world is not None, "SC32 runs on the ranks of a multi-rank executor only"
    endless = example.config.endless
    folder = example_folder(example, "SC32")
    path = str(folder / f"rank{world.rank}.pt")
    example.program.bind(path, repr(f"rank{world.rank}.pt"))
    # The steps run unrecorded: the reproduction is the replay of every rank below (`_print_world_replay`),
    # whichever rank prints it (the one that runs out).
    with unrecorded():
        reference, lengths = example.reference()
        position = position_on_rank(plan.position, lengths)
        state = checkpoint(example.fresh(), position)
        save_checkpoint(state, path)
        # An endless stream: the stretch from this save to the horizon, and the cycle of the resumed stream.
        limit = (_horizon(example.config) if endless
                 else RESUMED_PASSES * (example.config.dataset_size + world.world_size + 1))
        after = f"the resume {example.where(plan.position) if endless else plan.position.describe()}"
        resumed = stream(example.fresh(state), 1 if endless else RESUMED_PASSES, limit=limit)
    record = {"position": asdict(position), "finished": position.batches == lengths[position.epoch]}
    (folder / f"saved-rank{world.rank}.json").write_text(json.dumps(record), encoding="utf-8")
    _print_world_replay(example, plan.position, after=after, limit=limit)
    return RankSteps(world.rank, [*rank_stretches((reference, lengths), endless=endless),
                                  *resumed_stretches(resumed, after, endless=endless, limit=limit)],
                     where=f"fresh {'endless streams' if endless else 'loaders'} on {world.world_size} ranks, "
                           "then each resumed from its own state")


def _print_world_replay(example: Example, at: Position, *, after: str, limit: int) -> None:
    """The reproduction, in one process: every rank of the world (its config's ``rank``) runs uninterrupted, then
    checkpoints at ``at`` (as that rank takes it: `position_on_rank`), resumes from its own state and streams on;
    `assert_ranks_in_step` counts them as SC32 did. A loader that takes its rank from ``torch.distributed``
    rather than from its config needs the real ranks: the command printed below it."""
    world = example.world
    assert world is not None
    config = example.config
    # A checkpoint after StopIteration is one only on a rank whose epoch ends there (`position_on_rank`).
    positions = (f"[dataclasses.replace({at.as_code()}, after_stop=lengths[{at.epoch}] == {at.batches}) "
                 "for _, lengths in ranks]" if at.after_stop else f"[{at.as_code()}] * {world.world_size}")
    load_form = "" if example.load_form == "positional" else f", load_form={example.load_form!r}"
    for line in (f"# The {world.world_size}-rank world, one rank after the other (each its own process in "
                 "training): every rank runs uninterrupted, checkpoints, resumes from its own state",
                 f"world = [dataclasses.replace(config, rank=r) for r in range({world.world_size})]",
                 "ranks = [uninterrupted(factory, c) for c in world]",
                 f"at = {positions}",
                 f"resumed = [stream(fresh(factory, c, state=checkpoint(fresh(factory, c), p){load_form}), "
                 f"{1 if config.endless else RESUMED_PASSES}, limit={limit}) for c, p in zip(world, at)]",
                 f"assert_ranks_in_step(ranks, resumed, after={after!r}, limit={limit}"
                 + (", endless=True)" if config.endless else ")")):
        example.program.add(line)
    example.program.names_used.update({"Position", "assert_ranks_in_step", "checkpoint", "fresh", "stream",
                                       "uninterrupted"})
