"""The steps every clause is made of: build, iterate, checkpoint, resume, and the exceptions they end with.

Public through `stateful_contract.repro`; each records its own line of the reproduction as it runs. A
*stream* (the batches of consecutive epochs, compared as one) is defined in docs/clauses.md's terms.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ..config import LoaderConfig
from ..terms import Unjudged
from . import status
from .compare import Segment, batch_ids
from .consumption import loader_class
from .exception_text import exception_text
from .guard import answering, collect
from .recording import bound, recorded
from .vocabulary import Point, batch_count

__all__ = [
    "RESUME_EPOCHS",
    "DoesNotApply",
    "EndlessPass",
    "LoadForm",
    "LoaderError",
    "NotJudgeable",
    "OutsideTheSpace",
    "PassEnded",
    "Position",
    "WaitedForARank",
    "advance",
    "checkpoint",
    "epoch_lengths",
    "fresh",
    "is_the_loaders",
    "iterate_on",
    "load",
    "references_kept",
    "state_of",
    "stream",
    "stream_calling_state_dict",
    "take",
    "uninterrupted",
]

LoadForm = Literal["positional", "keyword"]
Factory = Callable[[LoaderConfig], Any]


class NotJudgeable(Exception):
    """The clause cannot be judged for this loader; the message points at the clause that can. A gap in what a
    pass covers (the user's run may meet what the clause judges), unless it is `DoesNotApply`."""

    unjudged: Unjudged = "unobservable"


class DoesNotApply(NotJudgeable):
    """The clause judges a call this loader does not offer, which a trainer makes only where it exists (SC21's
    ``set_epoch``): no training run meets what it judges, and a pass is complete without it."""

    unjudged: Unjudged = "no-call"


class OutsideTheSpace(DoesNotApply):
    """The declared configuration space holds nothing the clause judges (one number of worker processes: the
    loader supports no other, `ConfigSpace`), so the user's runs never make the change it judges."""

    unjudged: Unjudged = "declared"


class WaitedForARank(NotJudgeable):
    """This rank waited in one of the scenario's collectives for another rank, past its time: that rank's run
    holds the example's verdict (`search.loop.judge_runs`)."""


class EndlessPass(Exception):
    """One pass over the loader went on far past what the config's dataset can make (else a loader that
    cycles over its data would be reported, in every clause, as a hang)."""

    def __init__(self, batches: int, config: LoaderConfig) -> None:
        limit = pass_limit(config)
        tokens = config.dataset_size * config.seq_len
        super().__init__(
            f"one pass over the loader yielded {batches} batches and had not raised StopIteration; one epoch "
            f"of the config's dataset (dataset_size={config.dataset_size} samples of seq_len={config.seq_len}) "
            f"holds {tokens} tokens, so no pass over it comes near {limit} batches: the loader looks endless "
            "(it cycles over its data, or repeats it). A loader endless on its first config is checked as an "
            "endless stream; one whose passes end on some configs and not on others cannot be: declare it "
            "endless (endless=True) if a trainer draws from it without end, or end every pass")
        self.batches = batches
        self.limit = limit


class PassEnded(Exception):
    """A loader checked as an endless stream (`LoaderConfig.endless`: declared, or found on another config)
    ended a pass with StopIteration: a trainer drawing from it with ``next()`` stops there."""

    def __init__(self, batches: int, config: LoaderConfig) -> None:
        super().__init__(
            f"one pass over the loader ended with StopIteration after {batch_count(batches)}, on "
            f"{config.as_code()}; a loader checked as an endless stream (declared with endless=True, or found "
            "endless on another config) must never end a pass: a trainer that draws from it with next() "
            "stops there. Declare it endless only if it is, or make every pass endless")
        self.batches = batches


def pass_limit(config: LoaderConfig) -> int:
    """The most batches one pass on ``config`` may yield before it is called endless: every batch holds a
    token at least, so no pass has more than ``dataset_size * seq_len``; four times that (at least 64)
    leaves room for wrappers that split batches."""
    return max(64, 4 * config.dataset_size * config.seq_len)


class LoaderError(Exception):
    """Code of the loader under test raised; ``step`` says what the contract was doing."""

    #: Batches the `stream` (or `up_to`'s pass) it ended had yielded (None: raised outside one): a
    #: refusal comes before the first batch (SC23, SC31).
    batches_before: int | None = None

    def __init__(self, step: str, error: BaseException) -> None:
        super().__init__(f"{step} raised {type(error).__name__}: {exception_text(error)}")
        self.step = step
        self.error = error


#: The uninterrupted run covers the checkpoint's epochs plus two further epochs.
REFERENCE_EPOCHS = 4
#: iter() calls a resumed loader may use to deliver what the reference run had:
#: torchdata resumes a state taken after an epoch's last batch into one empty epoch.
RESUME_EPOCHS = REFERENCE_EPOCHS + 2

#: The config and class of the newest loader `fresh` built: every loader of an example shares its dataset,
#: whose `pass_limit` bounds a pass, and a hint may depend on how the class is written (`example`).
_NEWEST: contextvars.ContextVar[tuple[LoaderConfig, type] | None] = contextvars.ContextVar(
    "stateful_contract_newest_loader", default=None)


def _user(step: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    # A supervisor names this call if the process dies in it; the example timeout tells a hung loader from a
    # slow one by where and when calls began and returned (`guard.deadline`).
    with status.calling(step), answering():
        try:
            return fn(*args, **kwargs)
        except BaseException as e:
            if not is_the_loaders(e) or isinstance(e, NotJudgeable):
                # the user stopping the run, the example's own timeout, a test runner's timeout; or the checker
                # refusing a call of the loader's (a collective in an in-world turn: isolation/ranks/turns.py)
                raise
            raise LoaderError(step, e) from e


def is_the_loaders(error: BaseException) -> bool:
    """Whether ``error``, raised while the loader's code ran, is the loader's failure: an `Exception`, or the
    `BaseException` torch.distributed.checkpoint raises for a failed save or load (``CheckpointException``).
    Any other `BaseException` (KeyboardInterrupt, SystemExit, GeneratorExit, `LoaderHung`, pytest's outcomes
    as pytest-timeout's signal method raises them from its handler, wherever the alarm lands) stops the run;
    it is not the clause's verdict."""
    if isinstance(error, Exception):
        return True
    dcp = sys.modules.get("torch.distributed.checkpoint.api")  # not imported: the error cannot be one of its
    return dcp is not None and isinstance(error, getattr(dcp, "CheckpointException", ()))


@recorded("loader")
def fresh(factory: Factory, config: LoaderConfig, *, state: dict[str, Any] | None = None,
          load_form: LoadForm = "positional") -> Any:
    """A new loader from ``factory(config)``, optionally given ``state``. Seeds torch's global RNG with
    ``config.seed`` first, as a trainer does: loaders with the default generator draw their shuffle there."""
    if config.num_workers > 0:
        # Abandoned loader iterators linger in reference cycles: a worker forked while they are alive
        # collects them itself and, in their __del__, tries to shut down workers that are not its
        # children (tracebacks on stderr). What was alive before the run is frozen (`guard.frozen`), so
        # this costs milliseconds, not ~0.3 s.
        collect()
    _manual_seed(config.seed)
    loader = _user("factory(config)", factory, config)
    _NEWEST.set((config, loader_class(loader)))
    if state is not None:
        load(loader, state, load_form)
    return loader


def _manual_seed(seed: int) -> None:
    """``torch.manual_seed(seed)``; with no accelerator, only the CPU generator: ``torch.manual_seed``
    would queue a seed for CUDA, XPU and MTIA, formatting the stack for each (1.5 s of a ci check)."""
    if torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


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
           every_step: Callable[[], object] | None = None) -> Segment:
    """The batches of ``epochs`` consecutive epochs, stopping early at ``limit`` batches. ``every_step`` runs
    before every ``next()`` and after each epoch's ``StopIteration`` (SC14 calls ``state_dict()`` there)."""
    out: list[Any] = []
    passes: list[int] = []  # how many batches each pass gave: an impact is counted per pass
    for _ in range(epochs):
        try:
            got = up_to(_iter(loader), None if limit is None else limit - len(out), every_step=every_step)
        except LoaderError as e:
            e.batches_before = len(out) + (e.batches_before or 0)
            raise
        out += got
        passes.append(len(got))
        if limit is not None and len(out) >= limit:  # not at a StopIteration, which yields no batch
            break
    return Segment(out, 0, passes)


@recorded(("batches", "lengths"))
def epoch_lengths(loader: Any, epochs: int) -> tuple[list[Any], list[int]]:
    """The stream of ``epochs`` epochs and how many batches each epoch had."""
    batches = stream(loader, epochs)
    return batches, list(batches.lengths)


@dataclass(frozen=True)
class Position(Point):
    """A checkpoint point: after ``batches`` batches of epoch ``epoch`` (`Point` says how each is worded)."""

    def absolute(self, lengths: list[int]) -> int:
        """Index in the stream of the first batch after this point."""
        return sum(lengths[: self.epoch]) + self.batches


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
    if position.after_stop and (extra := up_to(it, 1)):
        raise LoaderError("next(iter(loader)) past the epoch's last batch", RuntimeError(
            f"yielded {extra[0]!r} where the uninterrupted run had ended the epoch"))
    return it


@recorded("state")
def checkpoint(loader: Any, position: Position) -> Any:
    """`advance` to ``position``, then ``loader.state_dict()``."""
    advance(loader, position)
    return state_of(loader)


@recorded("batches")
def take(loader: Any, count: int, *, max_epochs: int) -> list[Any]:
    """The next ``count`` batches of the stream, over at most ``max_epochs`` iter() calls (none for 0); stops
    mid-epoch, without exhausting the iterator, when ``count`` is reached."""
    return stream(loader, max_epochs, limit=count) if count else []


def up_to(it: Iterator[Any], count: int | None = None, *, every_step: Callable[[], object] | None = None,
          ) -> list[Any]:
    """At most ``count`` batches from the open iterator ``it``, fewer if its epoch ends first (None: the rest
    of its pass, which `pass_limit` bounds); ``every_step`` as for `stream`."""
    out: list[Any] = []
    while count is None or len(out) < count:
        if every_step is not None:
            every_step()
        if count is None and (newest := _NEWEST.get()) is not None and len(out) > pass_limit(newest[0]):
            raise EndlessPass(len(out), newest[0])
        try:
            out.append(_next(it))
        except LoaderError as e:
            if not isinstance(e.error, StopIteration):
                e.batches_before = len(out)
                raise
            if every_step is not None:
                every_step()
            break
    return out


@recorded("batches")
def iterate_on(loader: Any, it: Iterator[Any] | None, count: int, *, max_epochs: int) -> list[Any]:
    """``count`` more batches: from the open iterator ``it`` while it lasts, then new epochs."""
    out = up_to(it, count) if it is not None else []
    return out + take(loader, count - len(out), max_epochs=max_epochs)


#: The uninterrupted runs kept in this context, by `uninterrupted`'s key (None: none are kept).
_KEPT: contextvars.ContextVar[dict[Any, Any] | None] = contextvars.ContextVar("stateful_contract_references",
                                                                              default=None)
#: Runs kept per check: configs repeat across clauses in derandomized runs.
KEPT_RUNS = 128


def references_kept() -> contextlib.AbstractContextManager[dict[Any, Any]]:
    """Keep every uninterrupted run of this block (a check's process: the child, a rank, `InProcess`)."""
    return bound(_KEPT, {})


def _keep(key: Any, run: Any) -> None:
    if (cache := _KEPT.get()) is None:
        return
    if len(cache) >= KEPT_RUNS:
        # The oldest run without workers goes first: a worker config's run costs a hundred times
        # more, and the worker examples of every clause draw from one pool of them (`search.worker_pool`).
        cheap = next((k for k in cache if k[1].num_workers == 0), None)
        del cache[cheap if cheap is not None else next(iter(cache))]
    cache[key] = run


@recorded(("reference", "lengths"))
def uninterrupted(factory: Factory, config: LoaderConfig, epochs: int = REFERENCE_EPOCHS,
                  ) -> tuple[list[Any], list[int]]:
    """The uninterrupted stream of ``epochs`` epochs of a fresh loader, and each epoch's length."""
    key = (id(factory), config, epochs)  # kept per check (`references_kept`)
    got: tuple[list[Any], list[int]] | None = (_KEPT.get() or {}).get(key)
    if got is None:
        loader = fresh(factory, config)
        got = endless_reference(loader, config) if config.endless else epoch_lengths(loader, epochs)
        _keep(key, got)
    return got


def endless_reference(loader: Any, config: LoaderConfig) -> tuple[list[Any], list[int]]:
    """An endless loader's uninterrupted stream: one pass, `REFERENCE_EPOCHS` epochs of the config's dataset
    long (counted in samples where batches carry an ``index``, else in `LoaderConfig.epoch_batches`); its
    "lengths" are that one pass's. Checkpoints are drawn in its first half (`plans.stream_points`), so at
    least two epochs of the dataset follow each. A pass that ends raises `PassEnded`."""
    samples_due = REFERENCE_EPOCHS * min(-(-config.dataset_size // config.world_size),
                                         max(1, config.epoch_batches) * config.batch_size)
    batches_due = REFERENCE_EPOCHS * max(1, config.epoch_batches)
    out: list[Any] = []
    samples: int | None = 0  # None once a batch carries no sample index
    it = _iter(loader)
    while len(out) < REFERENCE_EPOCHS * pass_limit(config):
        if (samples is not None and samples >= samples_due) or (samples is None and len(out) >= batches_due):
            break
        try:
            out.append(_next(it))
        except LoaderError as e:
            if isinstance(e.error, StopIteration):
                raise PassEnded(len(out), config) from None
            e.batches_before = len(out)
            raise
        ids = batch_ids(out[-1])
        samples = None if ids is None or samples is None else samples + len(ids)
    return Segment(out, 0, [len(out)]), [len(out)]


@recorded("batches")
def stream_calling_state_dict(loader: Any, epochs: int, at: list[int], *, before_iter: bool = False,
                              limit: int | None = None) -> list[Any]:
    """`stream` (up to ``limit`` batches), calling ``state_dict()`` before the ``next()`` calls numbered in
    ``at`` (each epoch's ``StopIteration`` counts as one), and before the first ``iter()`` with ``before_iter``."""
    if before_iter:
        _user("loader.state_dict()", lambda: loader.state_dict())
    wanted = set(at)
    steps = itertools.count()
    return stream(loader, epochs, limit=limit, every_step=lambda: next(steps) in wanted and _user(
        "loader.state_dict()", loader.state_dict))
