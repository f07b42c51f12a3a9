"""Trainer usage, continued (SC23): a resume with another number of worker processes.

Why trainers do it, and what is exact or a refusal (torchdata's bare assert, F13): docs/clauses.md, SC23.
"""

from __future__ import annotations

import functools
import itertools
import traceback
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from ..config import ConfigSpace, LoaderConfig
from ..links import doc
from ..repro.advice import advise
from ..repro.compare import sample_ids, stream_difference
from ..repro.endless import checkpoint_span
from ..repro.impact import loud, samples_impact
from ..repro.multisets import assert_same_samples, id_list
from ..repro.refusals import names_the_worker_counts
from ..repro.steps import (
    RESUME_EPOCHS,
    LoaderError,
    NotJudgeable,
    OutsideTheSpace,
    Position,
    checkpoint,
    stream,
    take,
    uninterrupted,
)
from ..repro.vocabulary import at_window_boundary
from ..search.example import Example
from ..search.plans import SavePoints, allowed_batches, draw_position
from ..spellings import Hint
from .judgements import same_stream
from .registry import RESUMES, clause, violated

__all__ = ["WorkerChange", "raised_in_torchdata", "refusal_kind",
           "resume_with_other_workers", "worker_change_examples"]


@dataclass(frozen=True)
class WorkerChange:
    """The state taken at ``position`` is resumed by a loader with ``workers`` worker processes."""

    position: Position
    workers: int

    def context(self, config: LoaderConfig) -> str:
        return (f"state taken {self.position.describe()} with num_workers={config.num_workers}, "
                f"resumed with num_workers={self.workers}")

    def resumed_config(self, config: LoaderConfig) -> LoaderConfig:
        return replace(config, num_workers=self.workers)


def _worker_change_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints, *,
                        space: ConfigSpace | None = None) -> WorkerChange | None:
    """Another worker count the configuration space allows (None: it allows only one)."""
    others = [n for n in (space or ConfigSpace()).num_workers if n != config.num_workers]
    if not others:
        return None
    # A change between two worker pools (1 <-> 2) takes another path than one to or from the
    # main process (0 <-> n): torchdata checks the first with a bare assert (F13), and a
    # per-worker offset is remapped only there. Worker examples are few: ask for it half the time.
    pools = [n for n in others if n > 0] if config.num_workers > 0 else []
    if pools and len(pools) < len(others) and bool(data.draw(st.booleans(), label="a change between worker pools")):
        others = pools
    workers = data.draw(st.sampled_from(others), label="worker processes on resume")
    # Every example starts worker processes, so there are few: a checkpoint after the first
    # batch at least, where a worker-dependent offset (batches handed out per worker) shows.
    position = draw_position(data, lengths, config, saves)
    if saves.epoch_ends_only:  # the first epoch's end, where a trainer saving at epoch ends saves first
        return WorkerChange(Position(0, lengths[0], after_stop=True) if position.before_iter else position, workers)
    if position.epoch == 0 and position.batches == 0 and lengths[0] > 0:
        # Only where the policy lets the trainer save (a window's end, or the epoch's): a mid-window point would
        # fail a loader exact at every point its trainer saves at. Drawn as an index from 1, so that without a
        # policy (every count allowed) the examples are those of the draw among counts 1..n.
        # An endless stream's one pass: a checkpoint in its first half, as every plan draws one (`checkpoint_span`).
        first = checkpoint_span(lengths) if config.endless else lengths[0]
        counts = [k for k in allowed_batches(first, saves.window(config)) if k] or [first]
        k = data.draw(st.integers(1, len(counts)), label="batches before the checkpoint")
        position = Position(0, counts[k - 1])
    return WorkerChange(position, workers)


def _clamp(value: int, bounds: tuple[int, int]) -> int:
    return min(max(value, bounds[0]), bounds[1])


def _mid_epoch_change(lengths: list[int], saves: SavePoints, *, config: LoaderConfig,
                      workers: int) -> WorkerChange:
    """A checkpoint inside the first epoch, near its middle, where neither the batches so far nor those left
    are a multiple of the larger worker count (where one exists): a per-worker offset shows in the first, a
    rest of the epoch re-dealt or trimmed to whole rounds of workers (F26) in the second."""
    n = lengths[0]  # of an endless stream its one pass: the middle is where its checkpoints end (`checkpoint_span`)
    # The policy's checkpoint nearest the middle: the first epoch's end; so too in an epoch of no batch,
    # where the only other point is right after its iter(), when the trainer never saves there.
    if saves.epoch_ends_only or (n == 0 and not saves.after_iter):
        return WorkerChange(Position(0, n, after_stop=True), workers)
    inner = [k for k in range(1, n) if at_window_boundary(k, saves.window(config))] or [min(n, 1)]
    counts = max(2, config.num_workers, workers)
    uneven = [k for k in inner if k % counts and (n - k) % counts] or [k for k in inner if k % counts] or inner
    return WorkerChange(Position(0, min(uneven, key=lambda k: abs(2 * k - n))), workers)


def worker_change_examples(space: ConfigSpace | None) -> list[tuple[LoaderConfig, Any]]:
    """SC23's explicit examples: every ordered pair of worker counts the space allows, checkpointed
    mid-epoch, which a small search reaches only now and then (docs/clauses.md, SC23)."""
    space = space or ConfigSpace()
    size, batch = _clamp(12, space.dataset_size), _clamp(2, space.batch_size)
    examples: list[tuple[LoaderConfig, Any]] = []
    for saved, resumed in itertools.permutations(sorted(set(space.num_workers)), 2):
        config = LoaderConfig(dataset_size=size, batch_size=batch, shuffle=True, seed=5, num_workers=saved,
                              drop_last=resumed > saved)
        examples.append((config, functools.partial(_mid_epoch_change, config=config, workers=resumed)))
    return examples


def raised_in_torchdata(error: BaseException) -> bool:
    """The innermost frame of ``error`` is torchdata's StatefulDataLoader (its bare assert, F13)."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "torchdata/stateful_dataloader" in frames[-1].filename.replace("\\", "/")


def refusal_kind(error: BaseException) -> str:
    """The refusing exception as an advisory names it: its type only, so that one advisory covers
    every example (each example's message names its own keys and counts)."""
    return f"the exception ({type(error).__name__})"


def unnamed_worker_refusal(error: BaseException) -> str:
    """What a user is told where a worker-count change is refused without naming the counts."""
    where = (" It was raised inside torchdata's StatefulDataLoader, which refuses another worker count with a "
             f"bare assert or a message about its state keys (F13, {doc('findings.md', 'f13')}): a wrapper that hands "
             "its state through inherits it." if raised_in_torchdata(error) else "")
    return (f"a resume with another num_workers was refused before its first batch (nothing is lost, so SC23 "
            f"passes), but {refusal_kind(error)} does not name the two worker counts: whoever restarts "
            f"a job with another num_workers is not told why it fails.{where} Fix: record num_workers in "
            "state_dict() and, in load_state_dict(), raise e.g. ValueError(f\"state saved with num_workers={saved}, "
            f"this loader has num_workers={{now}}\"). SC41 ({Hint('strict', True)}) requires it.")


@dataclass
class WorkerResume:
    """What the state taken at ``plan.position`` came to in a loader with ``plan.workers`` workers."""

    state: Any
    #: The exception that refused the state before the resumed loader yielded any batch (None: not refused).
    refusal: BaseException | None = None
    #: The loader's exception after the resumed loader had yielded a batch: no refusal, a crash mid-run.
    crash: LoaderError | None = None


def resume_with_other_workers(example: Example, plan: WorkerChange,
                              ) -> tuple[WorkerResume, list[Any], list[Any]]:
    """The state taken at ``plan.position``, loaded into a loader with ``plan.workers`` workers: the
    refusal (an exception before the first batch) or crash, else the expected and the resumed stream."""
    expected = example.expected_after(plan.position)
    saved = checkpoint(example.fresh(), plan.position)
    result = WorkerResume(saved)
    try:
        return result, expected, take(example.fresh(saved, config=plan.resumed_config(example.config)),
                                      len(expected), max_epochs=RESUME_EPOCHS)
    except LoaderError as e:
        if e.batches_before:
            result.crash = e
        else:
            result.refusal = e.error
        return result, expected, []


@clause("SC23", "worker-count-change-is-exact-or-refused", tier="trainer", kills=13, cost=6, plan=_worker_change_plan,
        needs=RESUMES, budget="workers", explicit=worker_change_examples)
def worker_count_change_is_exact_or_refused(example: Example, plan: WorkerChange | None) -> None:
    """A state resumed with another `num_workers` either continues the stream exactly or is refused
    (an exception at `load_state_dict`, `iter()` or the first `next()`, before any batch); never a
    silent loss or repeat."""
    if plan is None:
        raise OutsideTheSpace("the configuration space allows one number of worker processes only "
                           "(ConfigSpace.num_workers), so there is no other count to resume with")
    outcome, expected, resumed = resume_with_other_workers(example, plan)
    if outcome.crash is not None:
        n = outcome.crash.batches_before
        raise violated("SC23", context=plan.context(example.config), expected=(
            "the resume to continue the stream exactly, or to be refused before its first batch (at "
            "load_state_dict, iter() or the first next())"), got=(
            f"{outcome.crash}, after {n} batch{'es' if n != 1 else ''} of the resumed stream: a run that had "
            "started training on the resumed data dies mid-run"),
            impact=loud(outcome.crash.step, f"raises {type(outcome.crash.error).__name__} mid-run, "
                                            "after resumed batches"))
    if outcome.refusal is not None:
        if not names_the_worker_counts(outcome.refusal, example.config.num_workers, plan.workers):
            advise(unnamed_worker_refusal(outcome.refusal))
        return  # refused before any batch: nothing lost, the job stops there
    if stream_difference(expected, resumed) is None:
        return  # the uninterrupted run's own stream
    new_run = uninterrupted(example.factory, plan.resumed_config(example.config))
    if stream_difference(example.reference()[0], new_run[0]) is None:  # same order with any num_workers
        same_stream(expected, resumed, clause_id="SC23", context=plan.context(example.config),
                    what="the loader resumed with another num_workers to continue the stream exactly (or to "
                         "refuse)")
        return
    _exact_with_the_new_count(example, plan, outcome.state, new_run)


def _exact_with_the_new_count(example: Example, plan: WorkerChange, state: Any,
                              new_run: tuple[list[Any], list[int]]) -> None:
    """For a loader whose order depends on ``num_workers``: the rest of the interrupted epoch holds
    exactly the samples still due (in any order), and each later epoch is the new count's."""
    if example.config.endless:
        raise NotJudgeable("the endless stream's order depends on num_workers, so the resumed stream cannot be held "
                           "to the uninterrupted one, and an endless pass never ends the interrupted epoch that the "
                           "samples still due would be counted to")
    p, where, program = plan.position, plan.context(example.config), example.program
    reference, lengths = example.reference()
    new_reference, new_lengths = new_run
    start = sum(lengths[:p.epoch])
    due = sample_ids([] if p.after_stop else reference[start + p.batches:start + lengths[p.epoch]], integers=True)
    first, stop = sum(new_lengths[:p.epoch + 1]), sum(new_lengths[:p.epoch + 3])
    later = program.expression("expected", f"{program.render(new_reference)}[{first}:{stop}]",
                               new_reference[first:stop])
    loader = example.fresh(state, config=plan.resumed_config(example.config))
    batches = stream(loader, 1) if due else []  # inside the epoch: its first pass is the rest of it
    rest = sample_ids(batches, integers=True)
    if due is None or rest is None:
        raise NotJudgeable("the loader's order depends on num_workers and its batches carry no 'index' field, "
                           "so the samples the resumed epoch holds cannot be counted")
    if due:
        try:  # the reproduction's own assertion (it records its line), here with the clause's message
            assert_same_samples(sorted(due), batches)
        except AssertionError:
            lost, extra = Counter(due) - Counter(rest), Counter(rest) - Counter(due)
            raise violated("SC23", context=where, expected=(
                f"the rest of epoch {p.epoch} to hold exactly the {len(due)} samples still due, once each, in any "
                f"order (the loader's order depends on num_workers): {id_list(Counter(due))}"), got=(
                f"the resumed epoch held {id_list(Counter(rest))}: lost {id_list(lost) if lost else 'none'}, "
                f"repeated {id_list(extra) if extra else 'none'}"),
                impact=samples_impact(due, rest, epoch=p.epoch)) from None
    # After the epoch's last batch (and after the rest of it), the later epochs; an empty pass first is
    # a state taken before StopIteration (F5), which take() goes past as the other resume clauses do.
    same_stream(later, take(loader, len(later), max_epochs=RESUME_EPOCHS), clause_id="SC23", context=where,
                what="each epoch after the interrupted one to equal that epoch of an uninterrupted loader built "
                     "with the new num_workers (the loader's order depends on num_workers)")
