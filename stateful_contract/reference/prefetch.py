"""A gradient-accumulation prefetching wrapper that checkpoints exactly, mid-window included.

`PrefetchGradAccDataLoader` does the job of MindSpeed-MM's wrapper of the same name
(see `stateful_contract.reference.mindspeed` and MindSpeed-MM's bug report): for per-token loss the
trainer must know, before the first micro-step of an optimizer step, how many valid
tokens the whole step will see. So the wrapper reads one gradient-accumulation *window*
(``grad_acc_step`` micro-batches) from the base loader ahead of time, counts the window's
valid tokens, and yields the buffered batches one by one, each a new dict carrying the
window's count.

Why the state cannot simply be the base loader's state
------------------------------------------------------
While a window is being yielded, the base loader is *ahead* of the wrapper by the
un-yielded rest of the window: it has already produced those batches. A base state
taken mid-window therefore resumes after the window, and the rest of the window is lost
(the seed wrapper's second bug). Nor can the wrapper save the buffered batches: they
are arbitrary tensors, possibly large, and a state must stay small and loadable with
``torch.load(weights_only=True)``.

What this wrapper saves instead is *where the current window started*: a snapshot of
the base loader's state taken before the window was read, plus how many of the window's
batches were already yielded. Resuming loads the snapshot into the base loader, reads the
same window again (so its token count is computed from the same batches), drops the
batches already yielded and goes on. This relies only on the base loader resuming
exactly from its own states, which torchdata's `StatefulDataLoader` does.

The state layout (all keys are ``str``; leaves are ``int``/``bool``/``None`` or the
base loader's tensors, so it survives ``torch.save`` + ``torch.load(weights_only=True)``,
``pickle`` and ``copy.deepcopy``)::

    {
        "format_version": 1,
        "grad_acc_step": <int>,                 # refused if it differs at load time
        "base_state_at_window_start": {...},    # the base loader's own state_dict()
        "batches_yielded_in_window": <int>,     # 0 <= k < grad_acc_step
    }

A window whose batches were all yielded is recorded as the start of the next window with
0 batches yielded, so the usual checkpoint at an optimizer-step boundary does not re-read
anything on resume (the one exception, the short last window of an epoch before
``StopIteration``, is explained in `WindowIterator.position`).

Epoch semantics follow `StatefulDataLoader`: each ``iter()`` is one pass (epoch) of the
base loader and a window never spans two epochs (the last window of an epoch holds the
remaining batches; a window longer than the epoch is the whole epoch). At the end of an
epoch the wrapper resumes exactly as torchdata 0.11 does (measured): a state taken after
the last batch but before ``StopIteration`` resumes to an empty epoch, and the next
``iter()`` gives the next epoch; a state taken after ``StopIteration`` resumes straight
into the next epoch. With torchdata's ``StatefulDistributedSampler`` the base loader
itself resumes epoch-start and epoch-end states into an extra empty epoch (its count
resets only at an epoch's first index); the stream of batches is still exact, and the
one case where that quirk would lose batches here (a state mid-way through the first
window of a later epoch) is handled in `WindowIterator.read_window`.
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Callable, Iterator, Mapping, Sized
from typing import Any

from .window import StatefulBaseLoader, WindowIterator, copy_state, decorate_window, snapshot_of

__all__ = [
    "AVG_TOKEN_COUNT_KEY",
    "STATE_FORMAT_VERSION",
    "WINDOW_TOKEN_COUNT_KEY",
    "PrefetchGradAccDataLoader",
    "StatefulBaseLoader",
]

#: Default key of a yielded batch holding the window's number of valid tokens (a 0-d
#: ``int64`` tensor). Same name as MindSpeed-MM's ``GLOBAL_STEP_TOKEN_NUM``, so this
#: wrapper is a drop-in replacement for MindSpeed-MM's.
WINDOW_TOKEN_COUNT_KEY = "global_step_token_num"

#: Default key holding the window's tokens per micro-batch (window count divided by the
#: number of batches in the window, a 0-d float tensor). Same name as MindSpeed-MM's
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

# Top-level keys of torchdata StatefulDataLoader states (single- and multi-process), used
# only to give a better error message when such a bare state is loaded into the wrapper.
_BARE_BASE_STATE_HINTS = frozenset({"_snapshot", "_num_yielded", "_iterator_finished"})


def _current_pass(loader: weakref.ref[PrefetchGradAccDataLoader]) -> WindowIterator | None:
    # Weakly: the loader holds its pass, and the pass must not hold the loader (WindowIterator).
    owner = loader()
    return None if owner is None else owner._active


class PrefetchGradAccDataLoader:
    """Yield base batches with their gradient-accumulation window's valid-token count.

    Args:
        base_dataloader: the loader to wrap, usually a torchdata ``StatefulDataLoader``;
            it must resume exactly from its own states (see `StatefulBaseLoader`).
        grad_acc_step: micro-batches per window (gradient-accumulation steps), >= 1.
        token_count_key: key under which each yielded batch carries the window's number
            of valid tokens, a 0-d ``int64`` tensor.
        avg_token_count_key: key for the window's tokens per micro-batch (count divided
            by the number of batches actually in the window, which is smaller than
            ``grad_acc_step`` for the short last window of an epoch), a 0-d float tensor;
            ``None`` leaves it out.
        labels_key: key of the labels tensor in a base batch.
        ignore_index: labels ``<= ignore_index`` do not count as tokens. The seed wrapper
            counts ``labels > -1``, which is the same for ``-100`` padding and
            non-negative token ids.

    Batches are yielded as new dicts (the base batch is not modified). ``state_dict()``
    and ``load_state_dict(state)`` follow ``StatefulDataLoader``: callable at any point,
    loading is lazy, and a state resumes exactly, mid-window included. See the module
    docstring for how and for the state layout.
    """

    def __init__(
        self,
        base_dataloader: StatefulBaseLoader,
        grad_acc_step: int,
        *,
        token_count_key: str = WINDOW_TOKEN_COUNT_KEY,
        avg_token_count_key: str | None = AVG_TOKEN_COUNT_KEY,
        labels_key: str = "labels",
        ignore_index: int = -100,
    ) -> None:
        if isinstance(grad_acc_step, bool) or not isinstance(grad_acc_step, int) or grad_acc_step < 1:
            raise ValueError(f"grad_acc_step must be a positive int, got {grad_acc_step!r}")
        for name in ("__iter__", "state_dict", "load_state_dict"):
            if not callable(getattr(base_dataloader, name, None)):
                raise TypeError(
                    f"base_dataloader must provide {name}() like torchdata's StatefulDataLoader; "
                    f"{type(base_dataloader).__name__} does not"
                )
        if token_count_key == avg_token_count_key:
            raise ValueError(f"token_count_key and avg_token_count_key are both {token_count_key!r}")
        self.base_dataloader = base_dataloader
        self.grad_acc_step = grad_acc_step
        self.token_count_key = token_count_key
        self.avg_token_count_key = avg_token_count_key
        self.labels_key = labels_key
        self.ignore_index = ignore_index
        # A loaded state waiting for the next iter(), as StatefulDataLoader.next_iter_state.
        self._pending_state: dict[str, Any] | None = None
        # The pass whose position state_dict() reports; None before the first iter() and
        # right after a load (the loaded state is then the position).
        self._active: WindowIterator | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Start the next epoch, or resume from the state given to `load_state_dict`."""
        skip = 0
        pending, self._pending_state = self._pending_state, None
        if pending is not None:
            # The base loader keeps a reference to what it is given; hand it a copy so the
            # stored state (and the caller's dict) can never be touched.
            self.base_dataloader.load_state_dict(copy.deepcopy(pending[_BASE_STATE]))
            skip = pending[_YIELDED]
        self._active = None
        base_iter = iter(self.base_dataloader)
        # On a resume the window's start is the loaded base state itself. Asking the base
        # loader again here (after load + iter(), before the first next()) is not safe:
        # torchdata 0.11 with StatefulDistributedSampler reports the start of the epoch
        # at that point (docs/findings.md), which resumed with batches repeated.
        window_start = copy.deepcopy(pending[_BASE_STATE]) if pending is not None else self._snapshot_base()
        active = WindowIterator(
            self.base_dataloader, base_iter, window_start, skip, grad_acc_step=self.grad_acc_step,
            decorate=self._decorator(), current_pass=functools.partial(_current_pass, weakref.ref(self)),
        )
        self._active = active
        if skip:
            # Re-read the interrupted window now, so that a state that does not fit this
            # loader (fewer batches in the window than it says were yielded) is refused
            # at iter(), not silently a few steps later.
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
        """A snapshot of the position: base state at the current window's start + batches yielded.

        Callable at any point without changing the stream. Before the first ``iter()``
        it is the base loader's initial state (torchdata then creates its iterator, which
        the next ``iter()`` reuses); right after `load_state_dict` it is the loaded state.
        The returned dict is a deep copy: later iteration never changes it.
        """
        if self._pending_state is not None:
            pending: dict[str, Any] = copy_state(self._pending_state)
            return pending
        if self._active is None:
            return self._pack(self._snapshot_base(), 0)
        base_state, yielded = self._active.position()
        return self._pack(copy_state(base_state), yielded)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from `state_dict` at the next ``iter()`` (lazy, like ``StatefulDataLoader``).

        Positional or keyword (``state_dict=``), exactly as ``StatefulDataLoader`` accepts it.

        The argument is validated and copied, never modified. An iterator created before
        the load is detached: it keeps its own sequence but no longer moves this loader's
        position. Raises `TypeError` for a non-dict and `ValueError` for a dict that is
        not a state of this wrapper (``{}``, missing or unknown keys, another
        ``grad_acc_step``, a bare base-loader state) instead of silently restarting.
        """
        self._validate(state_dict)
        self._pending_state = copy.deepcopy(dict(state_dict))
        self._active = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self.base_dataloader).__name__}, "
            f"grad_acc_step={self.grad_acc_step}, token_count_key={self.token_count_key!r})"
        )

    # -- internals ---------------------------------------------------------------------

    def _snapshot_base(self) -> dict[str, Any]:
        return snapshot_of(self.base_dataloader)

    def _pack(self, base_state: dict[str, Any], yielded: int) -> dict[str, Any]:
        return {
            _VERSION: STATE_FORMAT_VERSION,
            _GRAD_ACC_STEP: self.grad_acc_step,
            _BASE_STATE: base_state,
            _YIELDED: yielded,
            _NUM_WORKERS: self._num_workers(),
        }

    def _num_workers(self) -> int | None:
        # torchdata's own check is a bare `assert` with no message (docs/findings.md), so
        # the wrapper records the count and refuses another one by name.
        workers = getattr(self.base_dataloader, "num_workers", None)
        return workers if isinstance(workers, int) else None

    def _validate(self, state: object) -> None:
        what = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state, Mapping):
            raise TypeError(f"{what}() expects a dict returned by state_dict(), got {type(state).__name__}")
        keys = set(state)
        if not keys:
            raise ValueError(f"{what}() got an empty state; refusing to silently restart from scratch")
        missing = sorted(_STATE_KEYS - keys)
        unknown = sorted(map(repr, keys - _STATE_KEYS))
        if missing or unknown:
            detail = []
            if missing:
                detail.append(f"missing keys {missing}")
            if unknown:
                detail.append(f"unknown keys [{', '.join(unknown)}]")
            hint = ""
            if keys & _BARE_BASE_STATE_HINTS:
                hint = (
                    "; this looks like a bare base-loader state (as saved by a wrapper that "
                    "returns base_dataloader.state_dict()), which does not say how much of "
                    "the buffered window was yielded"
                )
            raise ValueError(f"{what}(): not a state of this wrapper: {'; '.join(detail)}{hint}")
        version = state[_VERSION]
        if version != STATE_FORMAT_VERSION:
            raise ValueError(
                f"{what}(): {_VERSION} is {version!r}, this version reads {STATE_FORMAT_VERSION}"
            )
        if state[_GRAD_ACC_STEP] != self.grad_acc_step:
            raise ValueError(
                f"{what}(): state was saved with grad_acc_step={state[_GRAD_ACC_STEP]!r}, "
                f"this loader has grad_acc_step={self.grad_acc_step}"
            )
        if state[_NUM_WORKERS] != self._num_workers():
            raise ValueError(
                f"{what}(): state was saved with num_workers={state[_NUM_WORKERS]!r} worker processes, "
                f"this loader has num_workers={self._num_workers()!r}; the base loader cannot resume "
                "another number of workers"
            )
        yielded = state[_YIELDED]
        if isinstance(yielded, bool) or not isinstance(yielded, int) or not 0 <= yielded < self.grad_acc_step:
            raise ValueError(
                f"{what}(): {_YIELDED} must be an int in range(grad_acc_step={self.grad_acc_step}), "
                f"got {yielded!r}"
            )
        base_state = state[_BASE_STATE]
        if not isinstance(base_state, Mapping) or not base_state:
            raise ValueError(
                f"{what}(): {_BASE_STATE} must be a non-empty dict (the base loader's state), "
                f"got {base_state!r}"
            )

    def _decorator(self) -> Callable[[list[Mapping[str, Any]]], list[dict[str, Any]]]:
        return functools.partial(
            decorate_window,
            token_count_key=self.token_count_key,
            avg_token_count_key=self.avg_token_count_key,
            labels_key=self.labels_key,
            ignore_index=self.ignore_index,
        )
