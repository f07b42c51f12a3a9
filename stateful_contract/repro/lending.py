"""The uninterrupted runs a check keeps, per config (configs repeat across clauses), and lends to its jobs.

The checker asks the process that judged SC18 for its runs (`lend`) before it forks the jobs, which inherit
them (else 31 of the 410 worker-pool starts of the reference wrapper's ci check on 2 jobs). Why a borrowed
run only lets an example pass (`watching`): docs/performance.md, "Why none of this hides a bug".
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable
from typing import Any

from .recording import bound

__all__ = ["forget_references", "keep", "kept", "kept_references", "lend", "references_kept", "watching"]

#: The runs lent to the jobs forked from this process, by `steps.uninterrupted`'s key.
_LENT: dict[Any, Any] = {}
#: The runs kept in this context (None: none are).
_KEPT: contextvars.ContextVar[dict[Any, Any] | None] = contextvars.ContextVar("stateful_contract_references",
                                                                              default=None)
#: The keys of the borrowed runs read by the example under way (None: no example is watched).
_USED: contextvars.ContextVar[set[Any] | None] = contextvars.ContextVar("stateful_contract_borrowed", default=None)
#: Runs kept per check: configs repeat across clauses in derandomized runs.
KEPT_RUNS = 128


def lend(runs: dict[Any, Any]) -> None:
    """Lend ``runs`` to the processes forked from this one from now on."""
    _LENT.clear()
    _LENT.update(runs)


def references_kept() -> contextlib.AbstractContextManager[dict[Any, Any]]:
    """Keep every uninterrupted run of this block, starting with the runs lent to this process."""
    return bound(_KEPT, dict(_LENT))


def kept(key: Any) -> Any:
    """The run kept for ``key``, or None (noting it if it is a borrowed one, for `watching`)."""
    run = (_KEPT.get() or {}).get(key)
    seen = _USED.get()
    if run is not None and seen is not None and _LENT.get(key) is run:
        seen.add(key)
    return run


def keep(key: Any, run: Any) -> None:
    """Keep ``run`` for ``key``, if runs are kept here."""
    if (cache := _KEPT.get()) is None:
        return
    if len(cache) >= KEPT_RUNS:
        # The oldest run without workers goes first: a worker config's run costs a hundred times
        # more, and the worker examples of every clause draw from one pool of them (`search.worker_pool`).
        cheap = next((k for k in cache if k[1].num_workers == 0), None)
        del cache[cheap if cheap is not None else next(iter(cache))]
    cache[key] = run


def kept_references() -> dict[Any, Any]:
    """The runs with workers kept so far, to lend to processes forked later (`lend`): only those are worth
    the transfer. A run without workers costs milliseconds to take again, and SC18's forty of them made its
    loan 1.8 MB of pickled batches, half a second of the check's serial time (docs/performance.md),
    against 0.1 MB for its four worker configs."""
    return {key: run for key, run in (_KEPT.get() or {}).items() if key[1].num_workers > 0}


def forget_references(keys: Iterable[Any]) -> None:
    """Take these runs afresh when next asked for, and lend them no more (borrowed ones an example failed on)."""
    for key in keys:
        _LENT.pop(key, None)
        (_KEPT.get() or {}).pop(key, None)


def watching() -> contextlib.AbstractContextManager[set[Any]]:
    """The keys of the borrowed runs read inside this block."""
    return bound(_USED, set())
