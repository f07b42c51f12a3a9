"""The steps every clause is made of: build, iterate, checkpoint, resume.

They are public, through `stateful_contract.repro`: every reproduction the contract
prints is written with them, and each one records its own line of that reproduction
as it runs (`stateful_contract._engine.recording`), so a failing example replays in a
few lines outside the suite.

A *stream* is the concatenation of the batches of consecutive epochs (one epoch is
one ``for batch in loader``). Comparing streams rather than epochs is what
CONTRACT.md asks: torchdata resumes a state taken after the last batch into an
empty epoch, other loaders roll over, and both continue the same stream.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ..config import LoaderConfig
from . import status
from .compare import Segment
from .errors import EndlessPass, LoaderError, NotJudgeable, pass_limit
from .guard import LoaderHung
from .recording import recorded
from .vocabulary import PointKind, describe_point, point_code, point_kind

__all__ = [
    "RESUME_EPOCHS",
    "EndlessPass",
    "LoadForm",
    "LoaderError",
    "NotJudgeable",
    "Position",
    "advance",
    "checkpoint",
    "epoch_lengths",
    "fresh",
    "iterate_on",
    "load",
    "pass_limit",
    "references_kept",
    "state_of",
    "stream",
    "stream_calling_state_dict",
    "take",
    "uninterrupted",
]

LoadForm = Literal["positional", "keyword"]
Factory = Callable[[LoaderConfig], Any]

#: The uninterrupted run covers the checkpoint's epochs plus two further epochs.
REFERENCE_EPOCHS = 4
#: iter() calls a resumed loader may use to deliver what the reference run had:
#: torchdata resumes a state taken after an epoch's last batch into one empty epoch.
RESUME_EPOCHS = REFERENCE_EPOCHS + 2

#: Uninterrupted runs already taken in this check, keyed by (factory, config, epochs).
_REFERENCES: contextvars.ContextVar[dict[Any, tuple[list[Any], list[int]]] | None] = contextvars.ContextVar(
    "stateful_contract_references", default=None)


#: The config the newest loader was built on (`fresh` sets it; every loader of an example
#: shares the example's dataset), whose `pass_limit` bounds a pass.
_PASS_CONFIG: contextvars.ContextVar[LoaderConfig | None] = contextvars.ContextVar(
    "stateful_contract_pass_config", default=None)


#: The class of the newest loader `fresh` built: a hint may depend on how it is written
#: (`stateful_contract._engine.hints`).
_LOADER_TYPE: contextvars.ContextVar[type | None] = contextvars.ContextVar(
    "stateful_contract_loader_type", default=None)


def last_loader_type() -> type | None:
    """The class of the newest loader built in this context (None before any)."""
    return _LOADER_TYPE.get()


def check_pass_length(batches: int) -> None:
    """Raise `EndlessPass` once a pass has yielded more batches than its config allows."""
    config = _PASS_CONFIG.get()
    if config is not None and batches > pass_limit(config):
        raise EndlessPass(batches, config)


def _length(lengths: Sequence[int] | None, epoch: int) -> int | None:
    return lengths[epoch] if lengths is not None and 0 <= epoch < len(lengths) else None


def _user(step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    with status.calling(step):  # a supervisor names this call if the process dies in it
        try:
            return fn(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit, GeneratorExit, LoaderHung):
            raise  # the user stopping the run, or the example's own timeout
        except BaseException as e:  # anything else from user code is that clause's failure, even
            # a BaseException: torch.distributed.checkpoint raises CheckpointException(BaseException)
            raise LoaderError(step, e) from e


@recorded("loader")
def fresh(
    factory: Factory,
    config: LoaderConfig,
    *,
    state: dict[str, Any] | None = None,
    load_form: LoadForm = "positional",
) -> Any:
    """A new loader from ``factory(config)``, optionally given ``state``.

    Seeds torch's global RNG with ``config.seed`` first, as a trainer does at start-up:
    loaders with the default generator draw their shuffling seed from it.
    """
    if config.num_workers > 0:
        # Abandoned loader iterators linger in reference cycles. A worker forked while
        # they are alive inherits them, collects them itself and, in their __del__,
        # tries to shut down workers that are not its children (tracebacks on stderr).
        # Collect them here, before this loader forks any worker; check() freezes the
        # objects alive before it starts, so this costs milliseconds, not ~0.3 s.
        gc.collect()
    torch.manual_seed(config.seed)
    _PASS_CONFIG.set(config)
    loader = _user("factory(config)", factory, config)
    _LOADER_TYPE.set(type(loader))
    if state is not None:
        load(loader, state, load_form)
    return loader


@recorded()
def load(loader: Any, state: Any, load_form: LoadForm = "positional") -> None:
    """``loader.load_state_dict(state)``, positionally unless told otherwise."""
    if load_form == "keyword":
        _user("loader.load_state_dict(state_dict=state)", lambda: loader.load_state_dict(state_dict=state))
    else:
        _user("loader.load_state_dict(state)", lambda: loader.load_state_dict(state))


@recorded("state")
def state_of(loader: Any) -> Any:
    """``loader.state_dict()``."""
    return _user("loader.state_dict()", lambda: loader.state_dict())


def _next(it: Iterator[Any]) -> Any:
    return _user("next(iter(loader))", next, it)


def _iter(loader: Any) -> Iterator[Any]:
    return _user("iter(loader)", iter, loader)  # type: ignore[no-any-return]


@recorded("batches")
def stream(loader: Any, epochs: int, *, limit: int | None = None,
           every_step: Callable[[], object] | None = None) -> list[Any]:
    """The batches of ``epochs`` consecutive epochs, stopping early at ``limit`` batches.

    ``every_step`` runs before every ``next()`` and once after each epoch's
    ``StopIteration`` (clause SC14 calls ``state_dict()`` there).
    """
    out: list[Any] = []
    passes: list[int] = []  # how many batches each pass gave: an impact is counted per pass
    for _ in range(epochs):
        try:
            it = _iter(loader)
        except LoaderError as e:
            e.batches_before = len(out)
            raise
        started = len(out)
        while limit is None or len(out) < limit:
            if every_step is not None:
                every_step()
            if limit is None:
                check_pass_length(len(out) - started)
            try:
                out.append(_next(it))
            except LoaderError as e:
                if not isinstance(e.error, StopIteration):
                    e.batches_before = len(out)
                    raise
                if every_step is not None:
                    every_step()
                break
        else:
            passes.append(len(out) - started)
            break
        passes.append(len(out) - started)
    return Segment(out, 0, passes)


@recorded(("batches", "lengths"))
def epoch_lengths(loader: Any, epochs: int) -> tuple[list[Any], list[int]]:
    """The stream of ``epochs`` epochs and how many batches each epoch had."""
    batches: list[Any] = []
    lengths: list[int] = []
    for _ in range(epochs):
        epoch = stream(loader, 1)
        batches.extend(epoch)
        lengths.append(len(epoch))
    return batches, lengths


@dataclass(frozen=True)
class Position:
    """A checkpoint point: after ``batches`` batches of epoch ``epoch``.

    ``before_iter``: on a loader never iterated (only at epoch 0, batch 0).
    ``after_stop``: the epoch's iterator has already raised ``StopIteration``.
    Otherwise ``iter()`` of the epoch was called and its iterator is open.
    """

    epoch: int = 0
    batches: int = 0
    after_stop: bool = False
    before_iter: bool = False

    def absolute(self, lengths: list[int]) -> int:
        """Index in the stream of the first batch after this point."""
        return sum(lengths[: self.epoch]) + self.batches

    def kind(self, lengths: Sequence[int] | None = None) -> PointKind:
        """Which kind of point this is (`stateful_contract._engine.vocabulary`)."""
        return point_kind(self.batches, after_stop=self.after_stop, before_iter=self.before_iter,
                          length=_length(lengths, self.epoch))

    @property
    def right_after_a_new_iter(self) -> bool:
        """``iter()`` of an epoch after the first was called and no batch yet: the point a lazy
        ``__iter__`` gets wrong (`stateful_contract._engine.hints`)."""
        return self.epoch > 0 and self.kind() == "after iter()"

    def describe(self, lengths: Sequence[int] | None = None) -> str:
        """This point in the words every message uses; ``lengths`` (the uninterrupted run's
        epoch lengths) tell the last batch from the middle of an epoch."""
        return describe_point(self.epoch, self.batches, after_stop=self.after_stop, before_iter=self.before_iter,
                              length=_length(lengths, self.epoch))

    def as_code(self) -> str:
        return point_code("Position", self.epoch, self.batches, after_stop=self.after_stop, before_iter=self.before_iter)


@recorded("it")
def advance(loader: Any, position: Position) -> Iterator[Any] | None:
    """Iterate ``loader`` to ``position``; returns the open iterator (None before iter())."""
    if position.before_iter:
        return None
    for _ in range(position.epoch):
        stream(loader, 1)
    it = _iter(loader)
    for _ in range(position.batches):
        _next(it)
    if position.after_stop:
        try:
            extra = _next(it)
        except LoaderError as e:
            if not isinstance(e.error, StopIteration):
                raise
        else:
            raise LoaderError(
                "next(iter(loader)) past the epoch's last batch",
                RuntimeError(f"yielded {extra!r} where the uninterrupted run had ended the epoch"),
            )
    return it


@recorded("state")
def checkpoint(loader: Any, position: Position) -> Any:
    """``loader.state_dict()`` taken at ``position``."""
    advance(loader, position)
    return state_of(loader)


@recorded("batches")
def take(loader: Any, count: int, *, max_epochs: int) -> list[Any]:
    """The next ``count`` batches of the stream, over at most ``max_epochs`` iter() calls.

    Stops mid-epoch, without exhausting the iterator, when ``count`` is reached.
    """
    if count == 0:
        return []
    return stream(loader, max_epochs, limit=count)


def up_to(it: Iterator[Any], count: int) -> list[Any]:
    """At most ``count`` batches from the open iterator ``it``, fewer if its epoch ends first."""
    out: list[Any] = []
    for _ in range(count):
        try:
            out.append(_next(it))
        except LoaderError as e:
            if not isinstance(e.error, StopIteration):
                raise
            break
    return out


@recorded("batches")
def iterate_on(loader: Any, it: Iterator[Any] | None, count: int, *, max_epochs: int) -> list[Any]:
    """``count`` more batches: from the open iterator ``it`` while it lasts, then new epochs."""
    out = up_to(it, count) if it is not None else []
    return out + take(loader, count - len(out), max_epochs=max_epochs)


@contextlib.contextmanager
def references_kept() -> Iterator[None]:
    """Keep every `uninterrupted` run of this block, to serve later examples of the same config."""
    token = _REFERENCES.set({})
    try:
        yield
    finally:
        _REFERENCES.reset(token)


#: Reference runs kept per check: configs repeat across clauses in derandomized runs.
_REFERENCE_CACHE_SIZE = 128


@recorded(("reference", "lengths"))
def uninterrupted(factory: Factory, config: LoaderConfig, epochs: int = REFERENCE_EPOCHS,
                  ) -> tuple[list[Any], list[int]]:
    """The uninterrupted stream of ``epochs`` epochs of a fresh loader, and each epoch's length."""
    cache = _REFERENCES.get()
    key = (id(factory), config, epochs)
    if cache is not None and key in cache:
        return cache[key]
    got = epoch_lengths(fresh(factory, config), epochs)
    if cache is not None:
        if len(cache) >= _REFERENCE_CACHE_SIZE:
            # The oldest run without workers goes first: a worker config's run costs a hundred times
            # more, and the worker examples of every clause draw from one pool of them (`pool.py`).
            cheap = next((k for k in cache if k[1].num_workers == 0), None)
            del cache[cheap if cheap is not None else next(iter(cache))]
        cache[key] = got
    return got


@recorded("batches")
def stream_calling_state_dict(loader: Any, epochs: int, at: list[int], *, before_iter: bool = False) -> list[Any]:
    """`stream`, calling ``state_dict()`` before the ``next()`` calls numbered in ``at``.

    Each epoch's ``StopIteration`` counts as a step too; ``before_iter`` also calls it
    before the first ``iter()``.
    """
    if before_iter:
        _user("loader.state_dict()", lambda: loader.state_dict())
    wanted = set(at)
    steps = iter(range(10**9))
    return stream(loader, epochs, every_step=lambda: next(steps) in wanted and _user(
        "loader.state_dict()", loader.state_dict))
