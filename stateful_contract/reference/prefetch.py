"""A gradient-accumulation prefetching wrapper that checkpoints exactly, mid-window included.

`PrefetchGradAccDataLoader` does the job of MindSpeed-MM's wrapper of the same name (docs/index.md, "Why:
the seed report"): per-token loss needs the valid tokens of the whole optimizer step before its first micro-
step, so it reads one window ahead and yields each buffered batch as a new dict carrying the window's count.

Its state cannot be the base loader's, a window ahead mid-window (the seed wrapper's bug 2), nor can it
hold the buffered batches (arbitrary, possibly large tensors; a state must stay small and load with
``torch.load(weights_only=True)``). So it saves *where the current window started* (the base state before
the window was read) and how many of its batches were yielded; a resume loads that base state, reads the
same window again (the same token count), drops the batches already yielded and goes on. This needs only a
base loader that resumes exactly from its own states, as torchdata's `StatefulDataLoader` does. The state
(``str`` keys; leaves ``int``, ``bool``, ``None`` or the base loader's tensors)::

    {
        "format_version": 2,
        "grad_acc_step": <int>,                 # refused if it differs at load time
        "base_state_at_window_start": {...},    # the base loader's own state_dict()
        "batches_yielded_in_window": <int>,     # 0 <= k < grad_acc_step
        "num_workers": <int or None>,           # the base loader's; refused if it differs
    }

Epochs follow `StatefulDataLoader`: each ``iter()`` is one pass of the base loader, a window never
spans two epochs, and at an epoch's end the wrapper resumes as torchdata 0.11 does (measured;
`WindowIterator.position` and `WindowIterator.read_window`). With ``cyclic=True`` (MindSpeed-MM's default,
``mindspeed_mm/fsdp/data/dataloader/dataloader.py`` at ``57069cd5``) one ``iter()`` never ends: it starts
the base loader's next pass where one ends, so a window may span two epochs; the same state resumes it
(the window's start may then lie in the previous epoch: the resume re-reads it across the boundary).
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Iterator, Mapping, Sized
from typing import Any, cast

import torch
from typing_extensions import Protocol, runtime_checkable

__all__ = ["AVG_TOKEN_COUNT_KEY", "STATE_FORMAT_VERSION", "WINDOW_TOKEN_COUNT_KEY",
           "PrefetchGradAccDataLoader", "StatefulBaseLoader"]

#: Default key of the window's number of valid tokens (a 0-d ``int64`` tensor): MindSpeed-MM's
#: ``GLOBAL_STEP_TOKEN_NUM``, so this wrapper is a drop-in replacement for MindSpeed-MM's.
WINDOW_TOKEN_COUNT_KEY = "global_step_token_num"

#: Default key of the window's tokens per micro-batch (a 0-d float tensor): MindSpeed-MM's
#: ``AVG_PER_STEP_TOKEN_NUM``, which its per-token loss reads.
AVG_TOKEN_COUNT_KEY = "avg_per_step_token_num"

#: Version of the state layout; bumped on any incompatible change. Version 2 records the
#: base loader's worker count, so that a resume with another one is refused by name.
STATE_FORMAT_VERSION = 2

_VERSION = "format_version"
_GRAD_ACC_STEP = "grad_acc_step"
_BASE_STATE = "base_state_at_window_start"
_YIELDED = "batches_yielded_in_window"
_NUM_WORKERS = "num_workers"
_STATE_KEYS = frozenset({_VERSION, _GRAD_ACC_STEP, _BASE_STATE, _YIELDED, _NUM_WORKERS})

# Top-level keys of torchdata's states: a bare one loaded into the wrapper is refused as such.
_BARE_BASE_STATE_HINTS = frozenset({"_snapshot", "_num_yielded", "_iterator_finished"})

_ATOMIC = (int, float, bool, str, bytes, type(None))


@runtime_checkable
class StatefulBaseLoader(Protocol):
    """What the wrapper needs from its base loader: torchdata's `StatefulDataLoader` API (each
    ``iter()`` one epoch of mapping batches, a lazy ``load_state_dict``, exact resumes)."""

    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> None: ...


def copy_state(value: Any) -> Any:
    """`copy.deepcopy` for the usual state shapes, about 4x faster (taken once per window)."""
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


def snapshot_of(base: StatefulBaseLoader) -> dict[str, Any]:
    """A copy of the base loader's state: torchdata's states share live objects."""
    state = base.state_dict()
    if not isinstance(state, dict):
        raise TypeError(f"base loader's state_dict() returned {type(state).__name__}, expected a dict")
    return cast("dict[str, Any]", copy_state(state))


def decorate_window(batches: list[Mapping[str, Any]], *, token_count_key: str,
                    avg_token_count_key: str | None, labels_key: str, ignore_index: int,
                    ) -> list[dict[str, Any]]:
    """New dicts for one window, each with the window's token count (own tensors)."""
    labels = [batch[labels_key] for batch in batches]
    for one in labels:
        if not isinstance(one, torch.Tensor):
            raise TypeError(f"batch[{labels_key!r}] must be a tensor to count tokens, "
                            f"got {type(one).__name__}")
    total = torch.stack([(one > ignore_index).sum() for one in labels]).sum()
    counts = {token_count_key: total}
    if avg_token_count_key is not None:
        counts[avg_token_count_key] = total / len(batches)
    return [{**batch, **{key: count.clone() for key, count in counts.items()}} for batch in batches]


class PrefetchGradAccDataLoader:
    """Yield base batches with their gradient-accumulation window's valid-token count.

    Args:
        base_dataloader: the loader to wrap, usually a torchdata ``StatefulDataLoader``; it must
            resume exactly from its own states (see `StatefulBaseLoader`).
        grad_acc_step: micro-batches per window (gradient-accumulation steps), >= 1.
        token_count_key: key under which each yielded batch carries the window's number of valid
            tokens, a 0-d ``int64`` tensor.
        avg_token_count_key: key for the window's count divided by the number of batches actually
            in it (fewer in an epoch's short last window); ``None`` leaves it out.
        labels_key: key of the labels tensor in a base batch.
        ignore_index: labels ``<= ignore_index`` do not count as tokens. The seed wrapper counts
            ``labels > -1``, the same for ``-100`` padding and non-negative token ids.
        cyclic: one ``iter()`` cycles over the base loader's passes without end (the module docstring).

    Batches are yielded as new dicts (the base batch is not modified). ``state_dict()`` and
    ``load_state_dict(state)`` follow ``StatefulDataLoader``: callable at any point, loading is
    lazy, and a state resumes exactly, mid-window included.
    """

    def __init__(self, base_dataloader: StatefulBaseLoader, grad_acc_step: int, *, cyclic: bool = False,
                 token_count_key: str = WINDOW_TOKEN_COUNT_KEY,
                 avg_token_count_key: str | None = AVG_TOKEN_COUNT_KEY,
                 labels_key: str = "labels", ignore_index: int = -100) -> None:
        if isinstance(grad_acc_step, bool) or not isinstance(grad_acc_step, int) or grad_acc_step < 1:
            raise ValueError(f"grad_acc_step must be a positive int, got {grad_acc_step!r}")
        if not isinstance(base_dataloader, StatefulBaseLoader):
            raise TypeError("base_dataloader must provide __iter__(), state_dict() and load_state_dict() "
                            f"like torchdata's StatefulDataLoader; {type(base_dataloader).__name__} does not")
        if token_count_key == avg_token_count_key:
            raise ValueError(f"token_count_key and avg_token_count_key are both {token_count_key!r}")
        self.base_dataloader = base_dataloader
        self.grad_acc_step = grad_acc_step
        self.cyclic = cyclic
        self.token_count_key = token_count_key
        # Not a method: the passes hold it, and must not hold the loader (`WindowIterator`).
        self._decorate = functools.partial(decorate_window, token_count_key=token_count_key,
                                           avg_token_count_key=avg_token_count_key, labels_key=labels_key,
                                           ignore_index=ignore_index)
        # A loaded state waiting for the next iter(), as StatefulDataLoader.next_iter_state.
        self._pending_state: dict[str, Any] | None = None
        # The pass whose position state_dict() reports (None before the first iter() and after a load).
        self._active: WindowIterator | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Start the next epoch, or resume from the state given to `load_state_dict`."""
        pending, self._pending_state = self._pending_state, None
        if pending is not None:
            # The base loader keeps a reference to what it is given: a copy leaves the caller's dict alone.
            self.base_dataloader.load_state_dict(copy.deepcopy(pending[_BASE_STATE]))
        self._active = None
        base_iter = iter(self.base_dataloader)
        # On a resume the window starts at the loaded base state itself. Asking the base loader here
        # (after load + iter()) is not safe: torchdata 0.11 with StatefulDistributedSampler reports
        # the start of the epoch there (docs/findings.md), which resumed with batches repeated.
        if pending is not None:
            window_start, skip = copy.deepcopy(pending[_BASE_STATE]), pending[_YIELDED]
        else:
            window_start, skip = snapshot_of(self.base_dataloader), 0
        self._active = active = WindowIterator(self, base_iter, window_start, skip)
        if skip:
            # Re-read the interrupted window now: a state that does not fit this loader (fewer batches
            # in the window than it says were yielded) is refused at iter(), not a few steps later.
            active.read_window()
        return active

    def __len__(self) -> int:
        """Batches per epoch: the same as the base loader's (the wrapper only regroups)."""
        if not isinstance(self.base_dataloader, Sized):
            raise TypeError(f"{type(self.base_dataloader).__name__} base loader has no len()")
        return len(self.base_dataloader)

    @property
    def sampler(self) -> Any:
        """The base loader's sampler (None if it has none), where trainers call ``set_epoch``."""
        return getattr(self.base_dataloader, "sampler", None)

    @property
    def batch_sampler(self) -> Any:
        """The base loader's batch sampler (None if it has none), where trainers call ``set_epoch``."""
        return getattr(self.base_dataloader, "batch_sampler", None)

    def state_dict(self) -> dict[str, Any]:
        """A copy of the position: the base state at the current window's start + batches yielded.

        Before the first ``iter()``, the base loader's initial state (torchdata then creates its
        iterator, which the next ``iter()`` reuses); right after a load, the loaded state."""
        if self._pending_state is not None:
            return cast("dict[str, Any]", copy_state(self._pending_state))
        if self._active is None:
            base_state, yielded = snapshot_of(self.base_dataloader), 0
        else:
            start, yielded = self._active.position()
            base_state = copy_state(start)
        return {_VERSION: STATE_FORMAT_VERSION, _GRAD_ACC_STEP: self.grad_acc_step, _BASE_STATE: base_state,
                _YIELDED: yielded, _NUM_WORKERS: self._num_workers()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from `state_dict` at the next ``iter()`` (lazy, like ``StatefulDataLoader``).

        The argument is validated and copied, never modified; an iterator created before the load
        keeps its own sequence but no longer moves this loader's position. A state that is not
        this wrapper's is refused by name instead of silently restarting."""
        self._validate(state_dict)
        self._pending_state = copy.deepcopy(dict(state_dict))
        self._active = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({type(self.base_dataloader).__name__}, "
                f"grad_acc_step={self.grad_acc_step}, token_count_key={self.token_count_key!r})")

    def _num_workers(self) -> int | None:
        # torchdata's own check is a bare `assert` (docs/findings.md, F13): record it, refuse another by name.
        workers = getattr(self.base_dataloader, "num_workers", None)
        return workers if isinstance(workers, int) else None

    def _validate(self, state: object) -> None:
        what = f"{type(self).__name__}.load_state_dict()"
        if not isinstance(state, Mapping):
            raise TypeError(f"{what} expects a dict returned by state_dict(), got {type(state).__name__}")
        keys = set(state)
        if not keys:
            raise ValueError(f"{what} got an empty state; refusing to silently restart from scratch")
        missing, unknown = sorted(_STATE_KEYS - keys), sorted(map(repr, keys - _STATE_KEYS))
        if missing or unknown:
            detail = [f"missing keys {missing}"] if missing else []
            detail += [f"unknown keys [{', '.join(unknown)}]"] if unknown else []
            hint = ("; this looks like a bare base-loader state (as saved by a wrapper that returns "
                    "base_dataloader.state_dict()), which does not say how much of the buffered window "
                    "was yielded" if keys & _BARE_BASE_STATE_HINTS else "")
            raise ValueError(f"{what}: not a state of this wrapper: {'; '.join(detail)}{hint}")
        yielded, base_state, workers = state[_YIELDED], state[_BASE_STATE], self._num_workers()
        for wrong, problem in (
            (state[_VERSION] != STATE_FORMAT_VERSION,
             f"{_VERSION} is {state[_VERSION]!r}, this version reads {STATE_FORMAT_VERSION}"),
            (state[_GRAD_ACC_STEP] != self.grad_acc_step, f"state was saved with grad_acc_step="
             f"{state[_GRAD_ACC_STEP]!r}, this loader has grad_acc_step={self.grad_acc_step}"),
            (state[_NUM_WORKERS] != workers, f"state was saved with num_workers={state[_NUM_WORKERS]!r} "
             f"worker processes, this loader has num_workers={workers!r}; "
             "the base loader cannot resume another number of workers"),
            (type(yielded) is not int or not 0 <= yielded < self.grad_acc_step,  # a bool is no count
             f"{_YIELDED} must be an int in range(grad_acc_step={self.grad_acc_step}), got "
             f"{yielded!r}"),
            (not isinstance(base_state, Mapping) or not base_state,
             f"{_BASE_STATE} must be a non-empty dict (the base loader's state), got {base_state!r}"),
        ):
            if wrong:
                raise ValueError(f"{what}: {problem}")


class WindowIterator(Iterator[dict[str, Any]]):
    """One pass of the base loader, read one window at a time; `position` says where a state taken
    now resumes (``window_start``: the base state before the current window was read; ``next_start``:
    right after it).

    Only the loader's current pass records positions. It holds its loader weakly: the loader holds its
    current pass, and a cycle would keep a dropped loader's worker processes alive until the garbage
    collector runs, possibly inside a freshly forked worker."""

    def __init__(self, loader: PrefetchGradAccDataLoader, base_iter: Iterator[Mapping[str, Any]],
                 window_start: dict[str, Any], skip: int) -> None:
        self._loader = weakref.ref(loader)
        self._base = loader.base_dataloader
        self._grad_acc_step = loader.grad_acc_step
        self._cyclic = loader.cyclic
        self._decorate = loader._decorate
        self._base_iter = base_iter
        self._window_start = window_start
        self._consumed = skip
        self._window: list[dict[str, Any]] | None = None
        self._next_start: dict[str, Any] | None = None
        #: The base state after a short last window's last batch (`_next_start` is past its StopIteration).
        self._after_last_batch: dict[str, Any] | None = None
        self._base_exhausted = False
        self._done = False

    def __next__(self) -> dict[str, Any]:
        while not self._done and (self._window is None or self._consumed == len(self._window)):
            if self._window is not None:
                # The window is used up: the next one starts where it ended.
                assert self._next_start is not None or not self._is_active()
                self._window_start = self._next_start or {}
                self._window = None
                self._consumed = 0
            self._done = not self.read_window()
        if self._done or self._window is None:
            raise StopIteration
        self._consumed += 1
        return self._window[self._consumed - 1]

    def read_window(self) -> bool:
        """Read the current window from the base loader; False if the epoch has no batch left."""
        batches = self._read_batches()
        if not batches and self._consumed:  # a resume's first window, and only it
            # torchdata 0.11's StatefulDistributedSampler resumes a base state taken after iter() and before
            # a later epoch's first batch (a first window's start) into an empty epoch (docs/findings.md, F4).
            # A state with batches already yielded never has an empty window: it means the next.
            self._base_iter = iter(self._base)
            self._base_exhausted = False
            batches = self._read_batches()
        # A detached iterator (after a load or a newer iter()) must not ask the base loader for a state.
        self._next_start = snapshot_of(self._base) if self._is_active() else None
        if self._consumed > len(batches):
            raise ValueError(f"cannot resume: the state says {self._consumed} batches of the window were "
                             f"yielded, but the window has only {len(batches)} "
                             "(a state from another config?)")
        # At the end of the epoch, an empty window: the exhausted base state resumes into the next epoch.
        self._window = self._decorate(batches) if batches else []
        return bool(batches)

    def _read_batches(self) -> list[Mapping[str, Any]]:
        batches: list[Mapping[str, Any]] = []
        before = None
        empty_passes = 0  # cyclic: a base loader whose passes yield nothing ends the stream, not a spin
        while len(batches) < self._grad_acc_step:
            if self._base_exhausted:
                if not self._cyclic or empty_passes > 1:
                    break
                self._base_iter, self._base_exhausted = iter(self._base), False  # the next epoch's pass
                empty_passes += 1
            if batches and self._is_active() and not self._cyclic:
                # This next() may raise StopIteration: keep the base state after the last batch, which
                # says "epoch used up, not finished" (g - 1 snapshots per window of g; none for g = 1).
                before = snapshot_of(self._base)
            try:
                batches.append(next(self._base_iter))
                empty_passes = 0
            except StopIteration:
                self._base_exhausted = True
                self._after_last_batch = before
        return batches

    def position(self) -> tuple[dict[str, Any], int]:
        """(base state to resume from, batches of that window already yielded); not copied.

        A used-up window is reported as the start of the next one (the usual checkpoint at an optimizer
        step re-reads nothing on resume), except the epoch's short last window before StopIteration:
        there the base state would resume into the next epoch, where ``StatefulDataLoader`` resumes to
        an empty epoch first. That window reports the base state right after its last batch: it resumes
        to the same empty rest of the epoch, and a ``set_epoch`` after the load can tell that the epoch
        was used up (F12)."""
        if self._window is not None and self._consumed == len(self._window):
            if self._next_start is not None and (self._done or not self._base_exhausted):
                return self._next_start, 0
            if self._after_last_batch is not None and self._window:
                return self._after_last_batch, 0
        return self._window_start, self._consumed

    def _is_active(self) -> bool:
        loader = self._loader()
        return loader is not None and loader._active is self
