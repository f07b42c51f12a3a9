"""Steps of the trainer's epoch loop (``for epoch in range(start, n): set_epoch(epoch); for batch in
loader: ...``), and of a resume read pass by pass. Public through `stateful_contract.repro`.

The trainer's call at each epoch is ``set_epoch`` unless the check declares another (``hook``, the
``epoch_hook`` option: OLMo-core's trainer calls ``reshuffle(epoch)``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig
from ..spellings import Hint
from .compare import Segment
from .consumption import loader_class
from .recording import recorded
from .steps import DoesNotApply, Factory, LoaderError, _iter, _next, _user, fresh, state_of, stream, up_to
from .vocabulary import Point

__all__ = ["DEFAULT_HOOK", "LoopPoint", "epoch_loop", "epoch_setter", "loop_checkpoint", "set_epoch", "take_epochs",
           "uninterrupted_loop"]

#: Where trainers find ``set_epoch``, in the order they look: the loader itself (a wrapper
#: that forwards it), then the sampler, then the batch sampler the loader iterates.
SET_EPOCH_OWNERS = ("loader", "loader.sampler", "loader.batch_sampler")
#: The trainer's call at each epoch when none is declared.
DEFAULT_HOOK = "set_epoch"


def epoch_setter(loader: Any, hook: str = DEFAULT_HOOK) -> str | None:
    """Where ``loader``'s ``hook`` (``set_epoch``) is (``"loader.sampler"``, ...), or None when it has none."""
    for owner in SET_EPOCH_OWNERS:
        if callable(getattr(_owner(loader, owner), hook, None)):
            return owner
    return None


def _owner(loader: Any, where: str) -> Any:
    return functools.reduce(lambda target, attr: getattr(target, attr, None), where.split(".")[1:], loader)


@recorded()
def set_epoch(loader: Any, epoch: int, *, hook: str = DEFAULT_HOOK) -> None:
    """``set_epoch(epoch)`` (or the declared ``hook``) on the loader, its ``sampler`` or its ``batch_sampler``
    (the first that has it). A declared hook that none has fails as the trainer's call would."""
    where = epoch_setter(loader, hook)
    if where is None and hook == DEFAULT_HOOK:
        raise DoesNotApply(f"{loader_class(loader).__name__} has no set_epoch (not on the loader, its sampler or its "
                           "batch_sampler): the set_epoch loop does not apply to it (SC10 judges its epochs); if "
                           f"the trainer calls another method at each epoch, declare it ({Hint('epoch_hook', 'NAME')})")
    if where is None:
        raise LoaderError(f"loader.{hook}({epoch})", AttributeError(
            f"{loader_class(loader).__name__} has no {hook} (the declared epoch hook), not on the loader, its sampler "
            "or its batch_sampler: the trainer's call at each epoch fails"))
    _user(f"{where}.{hook}({epoch})", getattr(_owner(loader, where), hook), epoch)


@recorded("epochs")
def epoch_loop(loader: Any, start: int, stop: int, *, hook: str = DEFAULT_HOOK) -> dict[int, list[Any]]:
    """``for epoch in range(start, stop): set_epoch(epoch); for batch in loader``: each epoch's batches
    (``hook``: the trainer's call in place of ``set_epoch``)."""
    out: dict[int, list[Any]] = {}
    for epoch in range(start, stop):
        set_epoch(loader, epoch, hook=hook)
        out[epoch] = up_to(_iter(loader))
    return out


@recorded("reference")
def uninterrupted_loop(factory: Factory, config: LoaderConfig, stop: int, *, hook: str = DEFAULT_HOOK,
                       ) -> dict[int, list[Any]]:
    """The epoch loop of a fresh loader from epoch 0 to ``stop``, uninterrupted."""
    return epoch_loop(fresh(factory, config), 0, stop, hook=hook)


@dataclass(frozen=True)
class LoopPoint(Point):
    """A `Point` of the epoch loop: in epoch ``epoch``, after ``set_epoch(epoch)`` (with ``after_stop``,
    ``batches`` is the epoch's length)."""

    in_loop = True


@recorded("state")
def loop_checkpoint(loader: Any, point: LoopPoint, *, hook: str = DEFAULT_HOOK) -> Any:
    """Run the epoch loop from epoch 0 to ``point`` and return ``loader.state_dict()`` there."""
    epoch_loop(loader, 0, point.epoch, hook=hook)
    set_epoch(loader, point.epoch, hook=hook)
    if point.before_iter:
        return state_of(loader)
    it = _iter(loader)
    for _ in range(point.batches):
        _next(it)
    if point.after_stop and (extra := up_to(it)):
        raise LoaderError("next(iter(loader)) past the epoch's last batch",
                          RuntimeError(f"yielded {len(extra)} more batches where the uninterrupted loop had "
                                       "ended the epoch"))
    return state_of(loader)  # `it` is still open: the state is taken inside the pass


@recorded(("batches", "passes"))
def take_epochs(loader: Any, count: int, *, max_epochs: int) -> tuple[list[Any], list[int]]:
    """The next ``count`` batches over at most ``max_epochs`` passes, and how many each pass gave (an
    empty pass shows as a 0): `take`, with the passes kept apart."""
    batches = stream(loader, max_epochs, limit=count) if count else Segment()
    return batches, list(batches.lengths)  # the batches know their passes too (an impact is counted per pass)
