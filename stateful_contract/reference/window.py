"""How `PrefetchGradAccDataLoader` walks its base loader: one buffered window at a time.

`WindowIterator` reads a whole gradient-accumulation window from the base iterator,
counts its tokens, and yields the window's batches one by one; `position` says where
a checkpoint taken now must resume. Kept apart from the wrapper's state handling,
which is in `stateful_contract.reference.prefetch` and builds on this module (never the
other way round): the iterator is handed what it reads, not the wrapper.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from typing_extensions import Protocol, runtime_checkable

__all__ = ["StatefulBaseLoader", "WindowIterator", "copy_state", "decorate_window", "snapshot_of"]


@runtime_checkable
class StatefulBaseLoader(Protocol):
    """What the wrapper needs from its base loader: torchdata's `StatefulDataLoader` API.

    Each ``iter()`` is one epoch of mapping batches; ``load_state_dict`` is lazy (the next
    ``iter()`` resumes from the loaded state) and a state taken at any point resumes
    exactly there.
    """

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> None: ...


def snapshot_of(base: StatefulBaseLoader) -> dict[str, Any]:
    """A deep copy of the base loader's state: torchdata's states share live objects."""
    state = base.state_dict()
    if not isinstance(state, dict):
        raise TypeError(f"base loader's state_dict() returned {type(state).__name__}, expected a dict")
    copied: dict[str, Any] = copy_state(state)
    return copied


_ATOMIC = (int, float, bool, str, bytes, type(None))


def copy_state(value: Any) -> Any:
    """`copy.deepcopy` for the usual state shapes, about 4x faster (taken once per window).

    Plain dicts, lists and tuples are rebuilt, tensors cloned (detached), atoms shared;
    anything else goes through `copy.deepcopy`.
    """
    kind = type(value)
    if kind is dict:
        return {k: copy_state(v) for k, v in value.items()}
    if kind in _ATOMIC:
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if kind is list or kind is tuple:
        return kind(copy_state(v) for v in value)
    return copy.deepcopy(value)


def decorate_window(
    batches: list[Mapping[str, Any]],
    *,
    token_count_key: str,
    avg_token_count_key: str | None,
    labels_key: str,
    ignore_index: int,
) -> list[dict[str, Any]]:
    """New dicts for one window, each with the window's token count (own tensors)."""
    counts = []
    for batch in batches:
        labels = batch[labels_key]
        if not isinstance(labels, torch.Tensor):
            raise TypeError(
                f"batch[{labels_key!r}] must be a tensor to count tokens, got {type(labels).__name__}"
            )
        counts.append((labels > ignore_index).sum())
    total = torch.stack(counts).sum()
    avg = total / len(batches)
    out = []
    for batch in batches:
        decorated = dict(batch)
        decorated[token_count_key] = total.clone()
        if avg_token_count_key is not None:
            decorated[avg_token_count_key] = avg.clone()
        out.append(decorated)
    return out


class WindowIterator(Iterator[dict[str, Any]]):
    """One pass of the base loader, read window by window.

    Position bookkeeping: ``window_start`` is the base state before the current window
    was read and ``consumed`` how many of its batches were yielded (or skipped on
    resume). Once a window is read, ``next_start`` is the base state right after it,
    i.e. the start of the next window; a fully yielded window reports that instead.

    ``current_pass`` returns the owning loader's current pass (None once the loader is
    gone): only that pass records positions. It must not hold the loader strongly: the
    loader holds its current pass strongly (its position lives here), and a cycle would
    keep a dropped loader's worker processes alive until the garbage collector runs,
    possibly inside a freshly forked worker.
    """

    def __init__(
        self,
        base: StatefulBaseLoader,
        base_iter: Iterator[Mapping[str, Any]],
        window_start: dict[str, Any],
        skip: int,
        *,
        grad_acc_step: int,
        decorate: Callable[[list[Mapping[str, Any]]], list[dict[str, Any]]],
        current_pass: Callable[[], object],
    ) -> None:
        self._current_pass = current_pass
        self._base = base
        self._grad_acc_step = grad_acc_step
        self._decorate = decorate
        self._base_iter = base_iter
        self._window_start = window_start
        self._consumed = skip
        self._window: list[dict[str, Any]] | None = None
        self._next_start: dict[str, Any] | None = None
        #: The base state right after the window's last batch, where the base then raised
        #: StopIteration (a short last window): `_next_start` is past that StopIteration.
        self._after_last_batch: dict[str, Any] | None = None
        self._base_exhausted = False
        self._done = False
        self._first_read_after_resume = skip > 0

    def __iter__(self) -> WindowIterator:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._done:
            raise StopIteration
        while self._window is None or self._consumed == len(self._window):
            if self._window is not None:
                # The window is used up: the next one starts where it ended.
                assert self._next_start is not None or not self._is_active()
                self._window_start = self._next_start if self._next_start is not None else {}
                self._window = None
                self._consumed = 0
            if not self.read_window():
                self._done = True
                raise StopIteration
        assert self._window is not None
        batch = self._window[self._consumed]
        self._consumed += 1
        return batch

    def read_window(self) -> bool:
        """Read the current window from the base loader; False if the epoch has no batch left."""
        batches = self._read_batches()
        if not batches and self._consumed and self._first_read_after_resume:
            # torchdata 0.11's StatefulDistributedSampler resets its count only when an
            # epoch's first index is drawn, so a base state taken after iter() and before
            # the first batch of a later epoch (which is where a first window starts)
            # still carries the previous epoch's count and resumes into an empty epoch.
            # A state of this wrapper with batches already yielded never has an empty
            # window, so the epoch it means is the one after: read it there.
            self._base_iter = iter(self._base)
            self._base_exhausted = False
            batches = self._read_batches()
        self._first_read_after_resume = False
        # Only the loader's current pass records positions: a detached iterator (after a
        # load or a newer iter()) must not ask the base loader for a state it does not own.
        self._next_start = snapshot_of(self._base) if self._is_active() else None
        if self._consumed > len(batches):
            raise ValueError(
                f"cannot resume: the state says {self._consumed} batches of the window were "
                f"yielded, but the window has only {len(batches)} (a state from another config?)"
            )
        if not batches:
            # End of epoch: report the exhausted base state, which resumes into the next epoch.
            self._window = []
            self._consumed = 0
            return False
        self._window = self._decorate(batches)
        return True

    def _read_batches(self) -> list[Mapping[str, Any]]:
        batches: list[Mapping[str, Any]] = []
        before = None
        while not self._base_exhausted and len(batches) < self._grad_acc_step:
            if batches and self._is_active():
                # This next() may be the one that raises StopIteration: keep the base state
                # after the last batch, which says "epoch used up, not finished" (g - 1
                # snapshots per window of g; none for windows of one batch).
                before = snapshot_of(self._base)
            try:
                batches.append(next(self._base_iter))
            except StopIteration:
                self._base_exhausted = True
                self._after_last_batch = before
        return batches

    def position(self) -> tuple[dict[str, Any], int]:
        """(base state to resume from, batches of that window already yielded); not copied.

        A used-up window is reported as the start of the next one, except the epoch's
        short last window before StopIteration: the base loader has already raised
        StopIteration there, and its state would resume into the next epoch, where
        ``StatefulDataLoader`` (and so this wrapper) resumes to an empty epoch first.
        That window reports the base state taken right after its last batch, before the
        base's StopIteration: it resumes to the same empty rest of the epoch, and a
        sampler's ``set_epoch`` after the load can tell that the epoch was used up (F12).
        """
        if self._window is not None and self._consumed == len(self._window):
            if self._next_start is not None and (self._done or not self._base_exhausted):
                return self._next_start, 0
            if self._after_last_batch is not None and self._window:
                return self._after_last_batch, 0
        return self._window_start, self._consumed

    def _is_active(self) -> bool:
        return self._current_pass() is self
