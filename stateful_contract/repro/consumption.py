"""The trainer's consumption, declared: the loader as a trainer that draws its batches through a pipeline sees it.

A trainer may not draw from the object whose state it saves: it draws from ``consume(loader)`` (a preloader,
a device prefetcher, a cyclic iterator over the loader) and saves ``loader.state_dict()``. What that pipeline
holds at a checkpoint is then lost or repeated at the resume, and only checking the pair shows it
(docs/quickstart.md, "A preloader"). `drawn_through` builds that pair from a factory: every ``iter()`` of its
loaders is ``consume(loader)``, and their ``state_dict`` and ``load_state_dict`` are the loader's own.

The state is taken as the trainer's save takes it: after its step, by when the background work the pipeline
started for the last batch (a preloader's thread fetching the next one) has finished. So before each
``state_dict()`` the threads started inside the last ``iter()`` or ``next()`` are waited for (`SETTLE`
seconds at most, for all of them together; one still running then, a long-lived producer, is not waited for
again; multiprocessing's queue feeder threads, which a worker loader starts, are not the pipeline's). Otherwise the
verdict would depend on how the checker's threads were scheduled, not on the pipeline.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..config import LoaderConfig

__all__ = ["Consume", "Drawn", "DrawnThrough", "Watched", "drawn_through", "loader_class"]

#: How a trainer draws batches: the loader -> the iterator (or iterable) it consumes.
Consume = Callable[[Any], Iterable[Any]]

#: Seconds a state waits for a thread the pipeline started in the last iter() or next() to finish.
SETTLE = 2.0


#: multiprocessing's own threads, which a worker loader's queues start (one per queue, living as long as it): they
#: forward puts to a pipe and never fetch a batch, so a state waits for none of them (it waited `SETTLE` seconds
#: for each, 4 s per worker loader of 2 workers, and a dev check with --consume took 12 times as long).
_NOT_THE_PIPELINES = frozenset({"QueueFeederThread"})


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name not in _NOT_THE_PIPELINES}


class Drawn:
    """``loader`` as its trainer uses it: batches from ``consume(loader)``, one call per ``iter()``; the
    state methods are the loader's own (their signatures unchanged, so a keyword-only ``load_state_dict``
    still refuses a positional state), ``state_dict`` called once the pipeline's last step settled (the
    module docstring); any other attribute (``set_epoch``, ``sampler``) is the loader's."""

    def __init__(self, loader: Any, consume: Consume) -> None:
        self.loader = loader
        self.consume = consume
        self._started: set[threading.Thread] = set()  # by the pipeline's last iter() or next()
        self._long_lived: set[threading.Thread] = set()  # still running after SETTLE: not waited for again

    def __iter__(self) -> Iterator[Any]:
        before = _threads()
        try:
            return Watched(iter(self.consume(self.loader)), self)
        finally:
            self._started = _threads() - before - self._long_lived

    @property
    def state_dict(self) -> Any:
        method = self.loader.state_dict

        @functools.wraps(method)
        def settled(*args: Any, **kwargs: Any) -> Any:
            self._settle()
            return method(*args, **kwargs)

        return settled

    @property
    def load_state_dict(self) -> Any:
        return self.loader.load_state_dict

    def _settle(self) -> None:
        deadline = time.monotonic() + SETTLE  # one wait for them all, not SETTLE seconds each
        for thread in self._started:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self._long_lived.add(thread)
        self._started = set()

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "consume", "_started", "_long_lived"):  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"{getattr(self.consume, '__name__', 'consume')}({self.loader!r})"


class Watched(Iterator[Any]):
    """The pipeline's iterator (``inner``), noting the threads each ``next()`` starts (`Drawn._settle` waits
    for them)."""

    def __init__(self, it: Iterator[Any], drawn: Drawn) -> None:
        self.inner = it
        self._drawn = drawn

    def __next__(self) -> Any:
        before = _threads()
        try:
            return next(self.inner)
        finally:
            self._drawn._started |= _threads() - before - self._drawn._long_lived


@dataclass(frozen=True)
class DrawnThrough:
    """A factory whose loaders are drawn through ``consume``; picklable when both functions are (a fresh
    process gets it as it gets the factory)."""

    factory: Callable[[LoaderConfig], Any]
    consume: Consume

    def __call__(self, config: LoaderConfig) -> Drawn:
        return Drawn(self.factory(config), self.consume)


def drawn_through(factory: Callable[[LoaderConfig], Any], consume: Consume) -> DrawnThrough:
    """``factory``'s loaders as a trainer that draws its batches through ``consume(loader)`` and saves
    ``loader.state_dict()`` sees them (the first line of a reproduction of a declared consumption)."""
    return DrawnThrough(factory, consume)


def loader_class(loader: Any) -> type:
    """The class a message or hint names: the user's loader's, also when it is drawn through a declared
    consumption (a `Drawn` is the contract's adapter, which no user wrote or can fix)."""
    return type(loader.loader) if isinstance(loader, Drawn) else type(loader)
