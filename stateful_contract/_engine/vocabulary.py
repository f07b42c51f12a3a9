"""How a message names a point in a run: one vocabulary for every clause, plan and reproduction.

A reader meets these words once, in a failure, without having read the code, so each
point says which calls were made on the loader:

- epochs and passes are numbered from 0, as ``for epoch in range(n)`` and ``set_epoch``
  count them (a *pass* is one ``iter()`` and the batches it yields; a pass cut short is
  still one pass);
- batches are counted, never numbered, where a point is named: "after 3 batches of
  epoch 0" (three ``next()`` calls returned a batch);
- every point says whether ``iter()`` was called and whether ``StopIteration`` was raised:

  ==============================  ===================================================================
  point                           words
  ==============================  ===================================================================
  never iterated                  before iter() of epoch 0 (the loader never iterated)
  top of the set_epoch loop       after set_epoch(1), before iter() of epoch 1
  ``iter()``, no batch yet        after iter() of epoch 1, before its first batch
  mid-epoch                       after 3 of the 5 batches of epoch 0 (its iterator open)
  the last batch                  after the last batch of epoch 0 (5 batches), before its StopIteration
  past the end                    after StopIteration of epoch 0 (5 batches), before iter() of epoch 1
  ==============================  ===================================================================

`Position` (`stateful_contract._engine.steps`) and the epoch loop's `LoopPoint` both
describe themselves with `describe_point`, so no message words a point its own way.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["PointKind", "batch_count", "describe_point", "ordinal", "pass_name", "point_code", "point_kind"]

#: The kinds of points, as `point_kind` tells them apart.
PointKind = Literal["before iter()", "after iter()", "mid-epoch", "after the last batch", "after StopIteration"]

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


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


def point_kind(batches: int, *, after_stop: bool = False, before_iter: bool = False,
               length: int | None = None) -> PointKind:
    """Which of the points of the module docstring this is (``length``: the epoch's batches, if known)."""
    if before_iter:
        return "before iter()"
    if after_stop:
        return "after StopIteration"
    if length is not None and length > 0 and batches >= length:
        return "after the last batch"
    return "after iter()" if batches == 0 else "mid-epoch"


def describe_point(epoch: int, batches: int, *, after_stop: bool = False, before_iter: bool = False,
                   length: int | None = None, set_epoch: bool = False) -> str:
    """The point after ``batches`` batches of epoch ``epoch``, in the words of the module docstring.

    ``length``: the epoch's number of batches, where the caller knows it (it tells the
    last batch from the middle); ``set_epoch``: the point is in the trainer's ``set_epoch``
    loop, so ``set_epoch(epoch)`` was called before the epoch's ``iter()``.
    """
    kind = point_kind(batches, after_stop=after_stop, before_iter=before_iter, length=length)
    if kind == "before iter()":
        if set_epoch:
            return f"after set_epoch({epoch}), before iter() of epoch {epoch}"
        return f"before iter() of epoch {epoch}" + (" (the loader never iterated)" if epoch == 0 else "")
    if kind == "after StopIteration":
        return f"after StopIteration of epoch {epoch} ({batch_count(batches)}), before iter() of epoch {epoch + 1}"
    if kind == "after the last batch":
        return f"after the last batch of epoch {epoch} ({batch_count(batches)}), before its StopIteration"
    if kind == "after iter()":
        return f"after iter() of epoch {epoch}, before its first batch"
    of = f"{batches} of the {length} batches" if length is not None else batch_count(batches)
    return f"after {of} of epoch {epoch} (its iterator open)"


def point_code(kind: str, epoch: int, batches: int, *, after_stop: bool = False, before_iter: bool = False) -> str:
    """A point as the reproduction writes it: ``Position(epoch=1, batches=0, before_iter=True)``."""
    flags = [name for name, on in (("after_stop", after_stop), ("before_iter", before_iter)) if on]
    return f"{kind}({', '.join([f'epoch={epoch}', f'batches={batches}', *(f'{f}=True' for f in flags)])})"
