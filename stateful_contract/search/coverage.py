"""What the search covered: the kinds of checkpoint points its examples reached, per example (also told
to Hypothesis as events). Every `Position` field of a plan counts as a checkpoint point, whatever the plan
type, unless the field says it is none (`NOT_A_CHECKPOINT`: SC20's ``used``, where the loader the state is
loaded into had run to), and `Hops` adds its later stops."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TYPE_CHECKING, Any

from ..repro.vocabulary import PointKind, at_window_boundary
from .checkpoint_space import CHECKPOINT_EPOCHS

# The plans and steps (and the config, through them) import torch: imported by the functions that read a plan,
# so that a face describing a saved report's coverage (pytest-xdist's controller, the badge) stays without it.
if TYPE_CHECKING:
    from ..config import LoaderConfig
    from ..repro.steps import Position

__all__ = ["EVENTS", "NOT_A_CHECKPOINT", "POINT_PREFIX", "coverage_of", "describe_coverage", "describe_space", "space_points"]

#: Every category, in the order they are shown: how a summary names it, and its Hypothesis event
#: (``--hypothesis-show-statistics`` shows their shares).
CATEGORIES: dict[str, tuple[str, str]] = {
    "mid-window": ("mid-window", "checkpoint mid-window"),
    "window-boundary": ("at window boundaries", "checkpoint at a window boundary"),
    "epoch-end": ("at epoch ends", "checkpoint at an epoch end"),
    "after-stop-iteration": ("after StopIteration", "checkpoint after StopIteration"),
    "before-first-iter": ("before the first iter()", "checkpoint before the first iter()"),
    "with-workers": ("examples with workers", "with worker processes"),
    "hops": ("hops", "resume hops"),
}
EVENTS = {category: event for category, (_, event) in CATEGORIES.items()}
#: The categories that count checkpoint points (the rest count examples and hops).
POINTS = ("mid-window", "window-boundary", "epoch-end", "after-stop-iteration", "before-first-iter")

#: The metadata of a plan's `Position` field that is not where a state is taken (``field(metadata=...)``):
#: coverage does not count it as a checkpoint point.
NOT_A_CHECKPOINT = {"checkpoint": False}


#: Coverage keys naming one point of the checkpoint space (`space_points`) start with this.
POINT_PREFIX = "point:"
#: The kinds of checkpoint point within an epoch, the space's batch positions × window phases.
KINDS = ("before-first-iter", "epoch-start", "mid-window", "window-boundary", "epoch-end", "after-stop-iteration")
#: Resume hops after the first checkpoint (SC11 draws 1 or 2; every other plan has none).
HOPS = (0, 1, 2)


def _cell(workers: int, epoch: int, kind: str, hops: int) -> str:
    return f"{POINT_PREFIX}w{workers}/e{epoch}/{kind}/h{hops}"


def space_points(worker_counts: tuple[int, ...] | list[int], aligned: bool | str | None, *,
                 after_iter: bool = True) -> frozenset[str]:
    """The checkpoint space a search can reach: epochs × batch positions × window phases × worker
    counts × hops. Before the first ``iter()`` exists in epoch 0 only; a loader declared exact only
    at some points (``aligned``: the declared policy) has no mid-window point, one exact only at epoch
    ends (``"epoch"``) only those after ``StopIteration`` and before the first ``iter()``; a trainer that
    never saves right after an ``iter()`` (``after_iter=False``: `plans.SavePoints`) no epoch start."""
    kinds = [k for k in KINDS if not (aligned and k == "mid-window")
             and (aligned != "epoch" or k in ("before-first-iter", "after-stop-iteration"))
             and (after_iter or k != "epoch-start")]
    return frozenset(_cell(w, e, k, h) for w in worker_counts for e in range(CHECKPOINT_EPOCHS) for k in kinds
                     for h in HOPS if e == 0 or k != "before-first-iter")


def describe_space(counts: dict[str, int], worker_counts: tuple[int, ...] | list[int], aligned: bool | str | None,
                   *, after_iter: bool = True) -> str:
    """``checkpoint space: 61 of 99 points (62%); every kind reached`` (or the kinds never reached; and, where
    the trainer never saves right after an ``iter()``, that those points were not drawn)."""
    space = space_points(worker_counts, aligned, after_iter=after_iter)
    seen = {k for k, v in counts.items() if v and k in space}
    share = f"checkpoint space: {len(seen)} of {len(space)} points ({100 * len(seen) / max(1, len(space)):.0f}%)"
    def parts(cell: str) -> list[str]:  # "point:w2/e1/mid-window/h1" -> its four dimensions' values
        workers, epoch, kind, hops = cell.removeprefix(POINT_PREFIX).split("/")
        return [f"epoch {epoch[1:]}", kind, f"{workers[1:]} workers", f"{hops[1:]} hop" + ("" if hops == "h1" else "s")]

    reached = {p for c in seen for p in parts(c)}
    missing = sorted({p for c in space for p in parts(c)} - reached)
    reach = "; every kind reached" if not missing else "; never reached: " + ", ".join(missing)
    return share + reach + ("" if after_iter else "; not drawn: epoch-start (right after iter(), before the "
                                                   "pass's first batch: the declared trainer never saves there)")


#: The categories of the kinds of point `Point.kind` names; the others by their window phase (`_category`).
_KIND_CATEGORIES: dict[PointKind, str] = {"after the last batch": "epoch-end",
                                          "after StopIteration": "after-stop-iteration"}


def _category(kind: PointKind, epoch: int, batches: int, window: int) -> str:
    """The category of a point of ``kind`` after ``batches`` batches of ``epoch``: before a later epoch's
    ``iter()`` is its start, a window boundary."""
    if kind == "before iter()" and epoch == 0:
        return "before-first-iter"
    return _KIND_CATEGORIES.get(kind) or ("window-boundary" if at_window_boundary(batches, window) else "mid-window")


def _point(position: Position, lengths: list[int], window: int) -> str:
    n = lengths[position.epoch] if position.epoch < len(lengths) else None
    if n == 0 and not (position.before_iter or position.after_stop):
        return "epoch-end"  # an epoch of no batch: its one point after iter() is its end too
    return _category(position.kind(n), position.epoch, position.batches, window)


def _stream_position(index: int, lengths: list[int]) -> Position:
    """The point after ``index`` batches of the stream (at an epoch's end rather than the next one's start)."""
    from ..repro.steps import Position

    start = 0
    for epoch, n in enumerate(lengths):
        if index <= start + n:
            return Position(epoch, index - start)
        start += n
    return Position(len(lengths), index - start)


def coverage_of(config: LoaderConfig, plan: Any, lengths: list[int] | None) -> Counter[str]:
    """The categories one example reaches, counted (a plan with two checkpoints counts two points)."""
    from ..repro.steps import Position
    from .epoch_plans import EpochLoop
    from .plans import Hops

    counts: Counter[str] = Counter()
    if config.num_workers > 0:
        counts["with-workers"] += 1
    if plan is None or not dataclasses.is_dataclass(plan) or isinstance(plan, type):
        return counts
    window = max(1, config.grad_acc_step)
    lengths = lengths or []
    hops = len(plan.stops) if isinstance(plan, Hops) else 0
    points = [(value.epoch, value.batches, _point(value, lengths, window)) for f in dataclasses.fields(plan)
              if isinstance(value := getattr(plan, f.name), Position) and f.metadata.get("checkpoint", True)]
    if isinstance(plan, EpochLoop):  # SC21: a kind of point in an epoch of the set_epoch loop
        points.append((plan.epoch, plan.batches, _category(plan.kind, plan.epoch, plan.batches, window)))
    for epoch, batches, kind in points:
        counts[kind] += 1
        if epoch < CHECKPOINT_EPOCHS:  # in the checkpoint space, a window boundary at batch 0 is the epoch's start
            counts[_cell(config.num_workers, epoch, "epoch-start" if kind == "window-boundary" and batches == 0
                         else kind, hops)] += 1
    if getattr(plan, "before_iter", False) is True and not isinstance(plan, Position):
        counts["before-first-iter"] += 1  # StateCalls: a state_dict() before the first iter()
    if isinstance(plan, Hops):
        counts["hops"] += len(plan.stops)
        for stop, opened in zip(plan.stops, plan.after_iter or (False,) * len(plan.stops)):
            if plan.passes:  # the epoch-end policy's hops: each state is taken after a StopIteration
                counts["after-stop-iteration"] += 1
            elif not opened:
                counts[_point(_stream_position(stop, lengths), lengths, window)] += 1
    return counts


def describe_coverage(counts: dict[str, int]) -> str:
    """``12 checkpoints mid-window, 30 at window boundaries, ...; 8 examples with workers; 20 hops``."""
    points = [f"{counts[k]} {CATEGORIES[k][0]}" for k in POINTS if counts.get(k)]
    text = ("checkpoints " + ", ".join(points)) if points else "no checkpoints"
    # In the number each count takes: a search that hopped once reads "1 hop", not "1 hops".
    counted = {"with-workers": ("example with workers", "examples with workers"), "hops": ("hop", "hops")}
    text += "".join(f"; {counts[k]} {counted[k][counts[k] != 1]}" for k in counted if counts.get(k))
    if extra := sorted(k for k in set(counts) - set(CATEGORIES) if not k.startswith(POINT_PREFIX)):
        text += "; " + ", ".join(f"{counts[k]} {k}" for k in extra)
    return text
