"""Steps of the trainer's epoch loop, and of a resume read pass by pass.

Public through `stateful_contract.repro`, and recorded like every step
(`stateful_contract._engine.recording`). The loop is the one trainers write::

    for epoch in range(start, n):
        set_epoch(epoch)            # on the loader, its sampler or its batch sampler
        for batch in loader:
            ...

`epoch_setter` finds ``set_epoch`` generically, `epoch_loop` runs the loop and returns
each epoch's batches, `loop_checkpoint` runs it up to a `LoopPoint` and takes the state
there, and `take_epochs` reads a resumed loader keeping where each of its passes ended
(SC10's epoch alignment: an empty pass is an epoch lost to a trainer that counts them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig
from .compare import Segment
from .recording import recorded
from .steps import Factory, LoaderError, NotJudgeable, _iter, _next, _user, check_pass_length, fresh, state_of
from .vocabulary import describe_point, point_code, point_kind

__all__ = [
    "LoopPoint",
    "epoch_loop",
    "epoch_setter",
    "loop_checkpoint",
    "set_epoch",
    "take_epochs",
    "uninterrupted_loop",
]

#: Where trainers find ``set_epoch``, in the order they look: the loader itself (a wrapper
#: that forwards it), then the sampler, then the batch sampler the loader iterates.
SET_EPOCH_OWNERS = ("loader", "loader.sampler", "loader.batch_sampler")


def epoch_setter(loader: Any) -> str | None:
    """Where ``loader``'s ``set_epoch`` is (``"loader.sampler"``, ...), or None when it has none."""
    for owner in SET_EPOCH_OWNERS:
        target = loader
        for attr in owner.split(".")[1:]:
            target = getattr(target, attr, None)
        if target is not None and callable(getattr(target, "set_epoch", None)):
            return owner
    return None


def _owner(loader: Any, where: str) -> Any:
    target = loader
    for attr in where.split(".")[1:]:
        target = getattr(target, attr)
    return target


@recorded()
def set_epoch(loader: Any, epoch: int) -> None:
    """``set_epoch(epoch)`` on the loader, its ``sampler`` or its ``batch_sampler`` (the first that has it)."""
    where = epoch_setter(loader)
    if where is None:
        raise NotJudgeable(f"{type(loader).__name__} has no set_epoch (not on the loader, its sampler or its "
                           "batch_sampler): the set_epoch loop does not apply to it (SC10 judges its epochs)")
    _user(f"{where}.set_epoch({epoch})", _owner(loader, where).set_epoch, epoch)


def _pass(loader: Any, it: Iterator[Any] | None = None) -> list[Any]:
    """The rest of one pass: every batch until ``StopIteration``."""
    it = _iter(loader) if it is None else it
    out: list[Any] = []
    while True:
        check_pass_length(len(out))
        try:
            out.append(_next(it))
        except LoaderError as e:
            if not isinstance(e.error, StopIteration):
                raise
            return out


@recorded("epochs")
def epoch_loop(loader: Any, start: int, stop: int) -> dict[int, list[Any]]:
    """``for epoch in range(start, stop): set_epoch(epoch); for batch in loader``: each epoch's batches."""
    out: dict[int, list[Any]] = {}
    for epoch in range(start, stop):
        set_epoch(loader, epoch)
        out[epoch] = _pass(loader)
    return out


@recorded("reference")
def uninterrupted_loop(factory: Factory, config: LoaderConfig, stop: int) -> dict[int, list[Any]]:
    """The epoch loop of a fresh loader from epoch 0 to ``stop``, uninterrupted."""
    return epoch_loop(fresh(factory, config), 0, stop)


@dataclass(frozen=True)
class LoopPoint:
    """A checkpoint point in the epoch loop: in epoch ``epoch``, after ``set_epoch(epoch)``.

    ``before_iter``: before that epoch's ``iter()``; otherwise after ``batches`` of its
    batches, and ``after_stop``: after its ``StopIteration`` too (``batches`` is then the
    epoch's length).
    """

    epoch: int = 0
    batches: int = 0
    after_stop: bool = False
    before_iter: bool = False

    @property
    def right_after_a_new_iter(self) -> bool:
        """``iter()`` of an epoch after the first was called and no batch yet (`Position`'s twin)."""
        return self.epoch > 0 and point_kind(self.batches, after_stop=self.after_stop,
                                             before_iter=self.before_iter) == "after iter()"

    def describe(self, length: int | None = None) -> str:
        """This point in the words every message uses (`stateful_contract._engine.vocabulary`)."""
        return describe_point(self.epoch, self.batches, after_stop=self.after_stop, before_iter=self.before_iter,
                              length=length, set_epoch=True)

    def as_code(self) -> str:
        return point_code("LoopPoint", self.epoch, self.batches, after_stop=self.after_stop, before_iter=self.before_iter)


@recorded("state")
def loop_checkpoint(loader: Any, point: LoopPoint) -> Any:
    """Run the epoch loop from epoch 0 to ``point`` and return ``loader.state_dict()`` there."""
    epoch_loop(loader, 0, point.epoch)
    set_epoch(loader, point.epoch)
    if point.before_iter:
        return state_of(loader)
    it = _iter(loader)
    for _ in range(point.batches):
        _next(it)
    if point.after_stop:
        extra = _pass(loader, it)
        if extra:
            raise LoaderError("next(iter(loader)) past the epoch's last batch",
                              RuntimeError(f"yielded {len(extra)} more batches where the uninterrupted loop had "
                                           "ended the epoch"))
    return state_of(loader)  # `it` is still open: the state is taken inside the pass


@recorded(("batches", "passes"))
def take_epochs(loader: Any, count: int, *, max_epochs: int) -> tuple[list[Any], list[int]]:
    """The next ``count`` batches over at most ``max_epochs`` passes, and how many each pass gave.

    Like `take` (it stops mid-pass once ``count`` is reached), but keeps the passes
    apart: an empty pass shows as a 0 in ``passes``.
    """
    batches: list[Any] = []
    passes: list[int] = []
    while len(batches) < count and len(passes) < max_epochs:
        it = _iter(loader)
        got = 0
        while len(batches) < count:
            try:
                batches.append(_next(it))
            except LoaderError as e:
                if not isinstance(e.error, StopIteration):
                    raise
                break
            got += 1
        passes.append(got)
    return Segment(batches, 0, passes), passes  # the batches know their passes too (an impact is counted per pass)
