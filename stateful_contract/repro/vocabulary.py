"""How a message names a point in a run: one vocabulary for every clause, plan and reproduction.

Each point says which calls were made on the loader (docs/clauses.md, "How a failure names a
point"); `Position` and the epoch loop's `LoopPoint` are both a `Point`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

__all__ = ["Point", "PointKind", "at_window_boundary", "batch_count", "into_window", "ordinal", "pass_name"]

#: The kinds of points, as `Point.kind` tells them apart.
PointKind = Literal["before iter()", "after iter()", "mid-epoch", "after the last batch", "after StopIteration"]

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def into_window(batches: int, window: int) -> int:
    """How many batches into its window of ``window`` (a grad-acc window, or the declared checkpoint interval)
    a point after ``batches`` batches is: 0 at a window boundary, more mid-window. Every plan, count and hint
    decides "mid-window" here."""
    return batches % max(1, window)


def at_window_boundary(batches: int, window: int) -> bool:
    """A point after ``batches`` batches is at a window boundary, where a loader exact only there may checkpoint."""
    return into_window(batches, window) == 0


def batch_count(n: int) -> str:
    """``"1 batch"``, ``"3 batches"``."""
    return f"{n} batch{'es' if n != 1 else ''}"


def ordinal(n: int) -> str:
    """``1 -> "first"``, ..., ``11 -> "11th"``: for counting calls ("its second iter()")."""
    if 1 <= n <= len(_ORDINALS):
        return _ORDINALS[n - 1]
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def pass_name(index: int) -> str:
    """Pass ``index`` (from 0) with the ``iter()`` call that opened it: ``"pass 1 (its second iter())"``."""
    return f"pass {index} (its {ordinal(index + 1)} iter())"


@dataclass(frozen=True)
class Point:
    """A checkpoint point: after ``batches`` batches of epoch ``epoch``, its iterator open; or before its
    ``iter()`` (``before_iter``), or after its ``StopIteration`` (``after_stop``)."""

    epoch: int = 0
    batches: int = 0
    after_stop: bool = False
    before_iter: bool = False
    #: In the trainer's ``set_epoch`` loop: ``set_epoch(epoch)`` was called before the epoch's ``iter()``.
    in_loop: ClassVar[bool] = False

    def _length(self, lengths: Sequence[int] | int | None) -> int | None:
        if isinstance(lengths, int) or lengths is None:
            return lengths
        return lengths[self.epoch] if 0 <= self.epoch < len(lengths) else None

    def kind(self, lengths: Sequence[int] | int | None = None) -> PointKind:
        """Which kind of point this is; ``lengths`` (the uninterrupted run's epoch lengths, or this
        epoch's alone) tell the last batch from the middle of an epoch."""
        length = self._length(lengths)
        if self.before_iter:
            return "before iter()"
        if self.after_stop:
            return "after StopIteration"
        if length is not None and length > 0 and self.batches >= length:
            return "after the last batch"
        return "after iter()" if self.batches == 0 else "mid-epoch"

    @property
    def right_after_a_new_iter(self) -> bool:
        """``iter()`` of an epoch after the first was called and no batch yet: the point a lazy
        ``__iter__`` gets wrong (`stateful_contract.search.example`)."""
        return self.epoch > 0 and self.kind() == "after iter()"

    def describe(self, lengths: Sequence[int] | int | None = None) -> str:
        """This point in the words every message uses (``lengths`` as for `kind`)."""
        epoch, batches, kind = self.epoch, self.batches, self.kind(lengths)
        if kind == "before iter()":
            if self.in_loop:
                return f"after set_epoch({epoch}), before iter() of epoch {epoch}"
            return f"before iter() of epoch {epoch}" + (" (the loader never iterated)" if epoch == 0 else "")
        if kind == "after StopIteration":
            return (f"after StopIteration of epoch {epoch} ({batch_count(batches)}), "
                    f"before iter() of epoch {epoch + 1}")
        if kind == "after the last batch":
            return f"after the last batch of epoch {epoch} ({batch_count(batches)}), before its StopIteration"
        if kind == "after iter()":
            return f"after iter() of epoch {epoch}, before its first batch"
        length = self._length(lengths)
        of = f"{batches} of the {length} batches" if length is not None else batch_count(batches)
        return f"after {of} of epoch {epoch} (its iterator open)"

    def as_code(self) -> str:
        """As the reproduction writes it: ``Position(epoch=1, batches=0, before_iter=True)``."""
        fields = [f"epoch={self.epoch}", f"batches={self.batches}"]
        fields += [f"{name}=True" for name in ("after_stop", "before_iter") if getattr(self, name)]
        return f"{type(self).__name__}({', '.join(fields)})"
