"""Drawing checkpoint plans: where in the stream states are taken, as frozen data (a replay records them).

A plan is drawn from the epoch lengths of the uninterrupted run (on several ranks, the shortest), so every
index of every epoch is reachable and Hypothesis shrinks towards the first batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, Literal

from hypothesis import strategies as st

from ..config import LoaderConfig
from ..repro.endless import checkpoint_span
from ..repro.steps import REFERENCE_EPOCHS, Position
from ..repro.vocabulary import Point, at_window_boundary
from .checkpoint_space import CHECKPOINT_EPOCHS  # re-exported

__all__ = ["ANYWHERE", "CHECKPOINT_EPOCHS", "EPOCH", "WHOLE_STREAM_EPOCHS", "Alignment", "Checkpoint", "Hops",
           "RankLengths", "SavePoints", "StateCalls", "allowed_batches", "checkpoint_plan", "draw_position",
           "epoch_ends_only", "expected_bounds", "hops_plan", "on_rank",
           "position_on_rank", "snapshot_plan", "state_calls_plan", "stream_position", "window_of"]

assert REFERENCE_EPOCHS >= CHECKPOINT_EPOCHS + 2, "the reference must cover two epochs past any checkpoint"
#: Epochs a check compares from the first batch on (SC12, SC14, SC18).
WHOLE_STREAM_EPOCHS = 3

#: The trainer's checkpoint policy, where the loader must be exact (docs/clauses.md, "Checkpoint policies"):
#: ``"window"``: only at grad-acc window boundaries (``config.grad_acc_step``); an int: only at multiples of
#: that many batches within an epoch; ``"epoch"``: only at epoch ends, after the pass's ``StopIteration``
#: (before the next ``iter()``: no call on the loader comes between the two), and before the first ``iter()``.
Alignment = Literal["window", "epoch"] | int | None
#: The policy under which the only checkpoints are at epoch ends.
EPOCH = "epoch"


def window_of(alignment: Alignment, config: LoaderConfig) -> int:
    """The batches between two checkpoints inside an epoch (under ``"epoch"``, none: see `epoch_ends_only`)."""
    if alignment is None or alignment == EPOCH:
        return 1
    if alignment == "window":
        return config.grad_acc_step
    return int(alignment)


def epoch_ends_only(alignment: Alignment) -> bool:
    """Whether the policy takes checkpoints only at epoch ends (after ``StopIteration``)."""
    return alignment == EPOCH


@dataclass(frozen=True)
class SavePoints:
    """Where the user's trainer saves, as every plan draws its checkpoints: the one place the points drawn are
    narrowed by what the user declared. ``alignment`` is the checkpoint policy (`Alignment`); ``after_iter``
    says whether a save can fall right after an ``iter()``, before that pass's first batch (`Point.kind`
    ``"after iter()"``). StatefulDataLoader's semantics say it can (its ``__iter__`` starts the pass at once:
    torchdata PR #1368), so both are the default; a trainer that draws each pass's first batch at once after
    its ``iter()`` never saves there (the trainer's shape ``iter-then-next``: clauses/trainer_shape.py)."""

    alignment: Alignment = None
    after_iter: bool = True

    def window(self, config: LoaderConfig) -> int:
        """The batches between two checkpoints inside an epoch (`window_of`)."""
        return window_of(self.alignment, config)

    @property
    def epoch_ends_only(self) -> bool:
        return epoch_ends_only(self.alignment)

    def allows(self, point: Point) -> bool:
        """Whether the trainer can save at ``point``."""
        return self.after_iter or point.kind() != "after iter()"


#: What a plan draws from when nothing is declared: every point StatefulDataLoader's semantics have.
ANYWHERE = SavePoints()


def allowed_batches(n: int, window: int) -> list[int]:
    """Batch counts within an epoch of ``n`` batches at which a checkpoint may be taken (every plan that picks one
    inside an epoch picks among these)."""
    return [k for k in range(n + 1) if at_window_boundary(k, window) or k == n]


def _epoch_end(data: st.DataObject, lengths: list[int], allow_before_iter: bool) -> Position:
    """A checkpoint under the ``"epoch"`` policy: after the ``StopIteration`` of one of the first
    `CHECKPOINT_EPOCHS` epochs, or before the first ``iter()`` (the boundary before epoch 0)."""
    epoch = data.draw(st.integers(0, CHECKPOINT_EPOCHS - 1), label="checkpoint epoch")
    if allow_before_iter and epoch == 0 and data.draw(st.booleans(), label="before the first iter()"):
        return Position(epoch=0, batches=0, before_iter=True)
    return Position(epoch=epoch, batches=lengths[epoch], after_stop=True)


def draw_position(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                  *, allow_before_iter: bool = True) -> Position:
    """A checkpoint point in one of the first `CHECKPOINT_EPOCHS` epochs, where ``saves`` allows one (of an
    endless stream: in its first half, `stream_position`)."""
    if config.endless:
        return stream_position(data, lengths, config, saves, allow_before_iter=allow_before_iter)
    if saves.epoch_ends_only:
        return _epoch_end(data, lengths, allow_before_iter)
    epoch = data.draw(st.integers(0, CHECKPOINT_EPOCHS - 1), label="checkpoint epoch")
    n = lengths[epoch]
    allowed = allowed_batches(n, saves.window(config))
    if not saves.after_iter and n and not (epoch == 0 and allow_before_iter):
        allowed = [k for k in allowed if k]  # no batch yet is only ever after iter() here (`_off_iter`)
    # With several workers, batches are handed out round-robin: a bug in a worker-count-dependent offset
    # shows only after a batch count the worker count does not divide, and a worker example is costly, so
    # each one asks for such a point half the time.
    uneven = [k for k in allowed if k % config.num_workers] if config.num_workers > 1 else []
    if uneven and bool(data.draw(st.booleans(), label="a batch count the worker count does not divide")):
        allowed = uneven
    batches = data.draw(st.sampled_from(allowed), label="batches yielded in that epoch")
    after_stop = batches == n and data.draw(st.booleans(), label="after StopIteration")
    before_iter = (allow_before_iter and epoch == 0 and batches == 0
                   and data.draw(st.booleans(), label="before the first iter()"))
    return _off_iter(Position(epoch=epoch, batches=batches, after_stop=after_stop, before_iter=before_iter),
                     saves, allow_before_iter)


def _off_iter(position: Position, saves: SavePoints, allow_before_iter: bool) -> Position:
    """``position``, or where a trainer that never saves right after ``iter()`` saves instead: before that
    ``iter()`` (the first epoch's), or after the ``StopIteration`` of a pass of no batch. The callers drew a
    batch count of 0 only where one of the two exists."""
    if saves.allows(position):
        return position
    return replace(position, before_iter=True) if allow_before_iter and position.epoch == 0 \
        else replace(position, after_stop=True)


def stream_position(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                    *, allow_before_iter: bool = True) -> Position:
    """A checkpoint point of an endless stream: after any number of batches of its one pass, up to
    `endless.checkpoint_span` (two epochs of the dataset); half the time near an epoch boundary, where the
    loader under a wrapper rolls over (and a grad-acc window may span the boundary)."""
    window = saves.window(config)
    allowed = [k for k in range(checkpoint_span(lengths) + 1) if at_window_boundary(k, window)]
    if not saves.after_iter and not allow_before_iter:
        allowed = [k for k in allowed if k] or allowed  # no batch yet is only ever after iter() here
    per_epoch, reach = config.epoch_batches, max(window, config.grad_acc_step, 2)
    # Either side of a boundary: a wrapper that buffers a window has already rolled its loader over there.
    rolled = [k for k in allowed if k and per_epoch and any(abs(k - m * per_epoch) < reach for m in (1, 2))]
    if rolled and bool(data.draw(st.booleans(), label="near an epoch boundary of the stream")):
        allowed = rolled
    uneven = [k for k in allowed if k % config.num_workers] if config.num_workers > 1 else []
    if uneven and bool(data.draw(st.booleans(), label="a batch count the worker count does not divide")):
        allowed = uneven
    batches = data.draw(st.sampled_from(allowed), label="batches yielded in the stream")
    before_iter = (allow_before_iter and batches == 0
                   and data.draw(st.booleans(), label="before the first iter()"))
    return _off_iter(Position(epoch=0, batches=batches, before_iter=before_iter), saves, allow_before_iter)


def expected_bounds(lengths: list[int], position: Position) -> tuple[int, int]:
    """The uninterrupted stream from ``position`` to the end of two further epochs, as stream indices."""
    return position.absolute(lengths), sum(lengths[: position.epoch + 3])


@dataclass(frozen=True)
class Checkpoint:
    """One state taken at ``position``; ``more`` batches iterated after it (SC15)."""

    position: Position
    more: int = 0


@dataclass(frozen=True)
class Hops:
    """Run 1 checkpoints at ``position``; each later run resumes and checkpoints again at ``stops``
    (``after_iter[i]``: hop ``i`` takes no batch but calls ``iter()`` before its state is taken; ``passes[i]``,
    under the ``"epoch"`` policy: hop ``i`` runs that many whole passes, each to its ``StopIteration``)."""

    position: Position
    stops: tuple[int, ...]
    after_iter: tuple[bool, ...] = ()
    passes: tuple[int, ...] = ()

    def on_rank(self, lengths: RankLengths) -> Hops:
        return replace(self, position=position_on_rank(self.position, lengths.own),
                       stops=lengths.indices(self.position.epoch, self.stops))


@dataclass(frozen=True)
class StateCalls:
    """``state_dict()`` before the ``next()`` calls numbered in ``at`` (and before the first ``iter()``)."""

    at: tuple[int, ...]
    every: bool
    before_iter: bool
    #: Only after each ``StopIteration`` (the ``"epoch"`` policy).
    epoch_ends: bool = False


def checkpoint_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                    ) -> Checkpoint:
    return Checkpoint(draw_position(data, lengths, config, saves))


def snapshot_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                  ) -> Checkpoint:
    position = draw_position(data, lengths, config, saves)
    start, end = expected_bounds(lengths, position)
    more = data.draw(st.integers(1, max(1, end - start)), label="batches iterated after the checkpoint")
    return Checkpoint(position, more)


def hops_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints) -> Hops:
    position = draw_position(data, lengths, config, saves)
    if saves.epoch_ends_only:
        return _epoch_end_hops(data, lengths, position)
    start = position.absolute(lengths)
    window = saves.window(config)
    # The stream indices where a hop may checkpoint, over the first `CHECKPOINT_EPOCHS` + 1 epochs (of an
    # endless stream, its first half: two epochs of the dataset follow the last hop too).
    points = sorted({p for e, n in enumerate(lengths[:CHECKPOINT_EPOCHS + 1])
                     for k in allowed_batches(n, window) if (p := sum(lengths[:e]) + k) >= start
                     and not (config.endless and p > checkpoint_span(lengths))})
    hops = data.draw(st.integers(1, 2), label="further hops")
    stops = [start]
    after_iter: list[bool] = []
    for _ in range(hops):
        later = [p for p in points if p >= stops[-1]]
        # A hop shorter than the worker count: the state is taken before every resumed worker delivered
        # (torchdata PR #1251).
        short = [p for p in later if 0 < p - stops[-1] < config.num_workers]
        if short and bool(data.draw(st.booleans(), label="a hop shorter than num_workers")):
            later = short
        stops.append(data.draw(st.sampled_from(later), label="next checkpoint"))
        # A hop that calls iter() and takes its state before the first batch: not where a trainer saves
        # that draws the first batch at once (`SavePoints.after_iter`).
        after_iter.append(saves.after_iter and stops[-1] == stops[-2] and bool(data.draw(
            st.booleans(), label="iter() before the state, no batch")))
    return Hops(position, tuple(stops[1:]), tuple(after_iter))


def _epoch_end_hops(data: st.DataObject, lengths: list[int], position: Position) -> Hops:
    """Hops under the ``"epoch"`` policy: each resumed run goes on for whole passes (none: it loads and
    saves again) and checkpoints after the last one's ``StopIteration``."""
    done = -1 if position.before_iter else position.epoch  # the last epoch run 1 finished
    stops, passes = [], []
    for _ in range(data.draw(st.integers(1, 2), label="further hops")):
        # At most the end of the last checkpoint epoch: the resume after the last hop still has an epoch to compare.
        end = data.draw(st.sampled_from(range(done, CHECKPOINT_EPOCHS)), label="epoch the next checkpoint ends")
        stops.append(sum(lengths[:end + 1]))
        passes.append(end - done)
        done = end
    return Hops(position, tuple(stops), passes=tuple(passes))


def state_calls_plan(data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                     ) -> StateCalls:
    # One call before each next() and one after each StopIteration.
    total_steps = sum(lengths[:WHOLE_STREAM_EPOCHS]) + WHOLE_STREAM_EPOCHS
    every = data.draw(st.booleans(), label="state_dict() at every step")
    at: Iterable[int]
    if saves.epoch_ends_only:  # the steps right after each StopIteration: each epoch takes n + 2 steps
        ends = [sum(n + 2 for n in lengths[:e + 1]) - 1 for e in range(WHOLE_STREAM_EPOCHS)]
        at = ends if every else data.draw(st.sets(st.sampled_from(ends), min_size=1), label="epoch ends calling state_dict()")
    elif not saves.after_iter:  # every step but the first of each pass, right after its iter()
        opened = {sum(n + 2 for n in lengths[:e]) for e in range(WHOLE_STREAM_EPOCHS)}
        steps = [s for s in range(total_steps + 1) if s not in opened]
        at = steps if every else data.draw(st.sets(st.sampled_from(steps), min_size=1),
                                           label="steps calling state_dict()")
    else:
        at = range(total_steps + 1) if every else data.draw(
            st.sets(st.integers(0, total_steps), min_size=1), label="steps calling state_dict()")
    before = data.draw(st.booleans(), label="state_dict() before the first iter()")
    return StateCalls(tuple(sorted(at)), every, before, saves.epoch_ends_only)


@dataclass(frozen=True)
class RankLengths:
    """The epoch lengths a plan was drawn from (the shortest over ranks) and one rank's own: each rank
    runs the drawn plan as it takes that step on its own stream (docs/distributed.md, "Uneven shards")."""

    drawn: list[int]
    own: list[int]

    @staticmethod
    def shortest(by_rank: list[list[int]]) -> list[int]:
        """Each epoch's length on the rank where it is shortest: what plans are drawn from."""
        return [min(e) for e in zip(*by_rank, strict=True)]

    def indices(self, epoch: int, indices: tuple[int, ...]) -> tuple[int, ...]:
        """Stream indices counted on the drawn lengths, from epoch ``epoch`` on, as the same points here. An
        index at an epoch's end is also the next epoch's start; each is read in the earliest epoch not before
        the previous point's, so the indices keep their order and an empty hop stays one."""
        out = []
        for index in indices:
            while epoch + 1 < len(self.drawn) and index > sum(self.drawn[: epoch + 1]):
                epoch += 1
            out.append(sum(self.own[:epoch]) + index - sum(self.drawn[:epoch]))
        return tuple(out)


def position_on_rank(position: Position, own: list[int]) -> Position:
    """The common checkpoint step as a rank with epoch lengths ``own`` takes it (see `RankLengths`)."""
    return replace(position, after_stop=position.after_stop and own[position.epoch] == position.batches)


def on_rank(plan: Any, lengths: RankLengths) -> Any:
    """``plan`` in this rank's own coordinates (see `RankLengths`). A plan with stream indices translates
    them in an ``on_rank(lengths)`` method (`Hops`); any other has its `Position` fields translated (plain
    counts hold: they were drawn from the shortest rank)."""
    if lengths.drawn == lengths.own:
        return plan
    if (translate := getattr(plan, "on_rank", None)) is not None:
        return translate(lengths)
    if is_dataclass(plan) and not isinstance(plan, type):
        moved = {f.name: position_on_rank(v, lengths.own) for f in fields(plan)
                 if isinstance(v := getattr(plan, f.name), Position)}
        return replace(plan, **moved) if moved else plan
    return plan
