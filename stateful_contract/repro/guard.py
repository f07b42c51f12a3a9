"""Guarding the run against the code it tests: hangs, leftover worker processes, a lost Ctrl-C.

A hung example fails its clause: ``SIGALRM`` raises inside whatever the loader was blocked in, and
the stack unwinds. `LoaderHung` is a ``BaseException`` so that Hypothesis does not shrink a hang. The limit
is kept on the loader's own progress (`progress.Clock`): time its processes waited for a CPU other processes
held is not counted, so a starved loader is not called hung.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from . import progress, status

__all__ = ["LoaderHung", "LoaderSlow", "answered", "answering", "can_interrupt", "collect", "ctrl_c_kept", "deadline", "frozen", "quick_worker_shutdown",
           "raise_lost_ctrl_c", "reap_children", "sigint_ignored"]

#: A `KeyboardInterrupt` swallowed inside `ctrl_c_kept`, not yet raised again by `raise_lost_ctrl_c`.
_lost_ctrl_c = False
#: How many modules were loaded when `frozen` last froze (None: outside `frozen`).
_modules_frozen: int | None = None


#: Seconds at least between two readings of the clock once the wall limit passed (each walks the processes).
MIN_RECHECK = 0.05


class LoaderHung(BaseException):
    """An example ran past its timeout, the loader silent (`answered`) for at least half of it."""

    def __init__(self, seconds: float, waited: float | None = None) -> None:
        starved = "" if waited is None or waited < seconds * 1.25 else (
            f" ({waited:.0f} s of wall time, of which it was charged {seconds:g} s: the time its processes "
            "waited for a CPU is not counted)")
        super().__init__(f"the example did not finish within {seconds:g} s{starved}")
        self.seconds = seconds
        #: The loader's process had child processes (DataLoader workers) when it was called hung.
        self.had_children = False


class LoaderSlow(LoaderHung):
    """An example ran past its timeout while the loader kept answering: too slow to judge within it, which
    is no hang (a loader reading 0.2 s a batch from remote storage trains; a timeout is no verdict on it)."""

    def __init__(self, seconds: float, waited: float, quiet: float) -> None:
        super().__init__(seconds, waited)
        self.quiet = quiet


#: When the loader last showed life (``time.monotonic()``): a call into it began or returned (`answered`).
_last_answer = 0.0
#: Calls into the loader begun and not returned (`answering`): the alarm found the loader inside one.
_calls = 0
#: Set by an alarm that gave a running call patience (`deadline`): run as that call returns, it raises
#: `LoaderSlow` there. Waiting for the patience to run out instead let a slow rank go on into a collective
#: (SC30's DCP save) that the other ranks, their own alarms past, had left: stuck where no alarm reaches.
_on_return: Callable[[], None] | None = None


def answered() -> None:
    """A call into the loader begins or returns now (`steps._user`): the loader is not hung (`deadline`)."""
    global _last_answer
    _last_answer = time.monotonic()


@contextlib.contextmanager
def answering() -> Iterator[None]:
    """Around one call into the loader (`steps._user`): it began (`answered`), it is running (an alarm that
    finds it here waits for it: `deadline`), it returned or raised (`answered`)."""
    global _calls, _on_return
    answered()
    _calls += 1
    try:
        yield
    finally:
        _calls -= 1
        answered()
    if _calls == 0 and (slow := _on_return) is not None:  # it returned within its patience: only slow
        _on_return = None
        slow()


def can_interrupt() -> bool:
    """Whether `deadline` can interrupt a hang here (POSIX main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise `LoaderHung` in this thread once the block has been charged ``seconds`` on the `progress.Clock`
    of this process and its descendants (wall time less the time they waited for a CPU). The charge never
    runs ahead of wall time, so the alarm is first set for ``seconds`` of wall time; when it fires, the clock
    is read and the alarm set again for what remains. An outer timer on ``ITIMER_REAL`` (pytest-timeout's
    signal method, an enclosing `deadline`) keeps its time: its handler runs when it was due, and on exit it
    is set again to what remains of it."""
    if not seconds or not can_interrupt():
        yield
        return
    started = time.monotonic()
    ends = started + seconds
    clock = progress.Clock(progress.own_group())
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    outer_due: float | None = started + outer_delay if outer_delay > 0 else None

    def arm() -> None:
        # Re-fire every second after the deadline: an alarm that lands in a __del__ or a
        # weakref callback is swallowed as "unraisable", and the hang would go on.
        due = ends if outer_due is None else min(ends, outer_due)
        signal.setitimer(signal.ITIMER_REAL, max(due - time.monotonic(), 1e-4), 1.0)

    #: The charge the alarm waits for: ``seconds``, then, for a call that began late, the call's patience.
    limit = seconds
    #: `_last_answer` when the alarm found the loader in a call and gave it patience (None: it has not).
    waited_on: float | None = None

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        nonlocal outer_due, ends, limit, waited_on
        now = time.monotonic()
        if outer_due is not None and now >= outer_due - 1e-3:
            # The outer timer's moment: its handler decides (pytest-timeout fails the test).
            outer_due = now + outer_interval if outer_interval > 0 else None
            arm()
            _call(previous, signum, frame)
            return
        if now < ends - 1e-3:  # early (a timer set by someone else in the block): wait on
            arm()
            return
        try:
            charged = clock.sample()
        except Exception:  # the clock cannot be read here: wall time, as the limit was
            charged = limit
        if limit - charged > 1e-3:  # the processes waited for a CPU: not yet charged the limit
            ends = now + max(limit - charged, MIN_RECHECK)
            arm()
            return
        # Hung, or only slow? A hung loader is silent from the call it hangs in on; a slow one answers call
        # after call. Silent for at least half the example's wall time (the same share of its charge when the
        # load starved it evenly) is hung. Inside a call that began later, the call is given the rest of half
        # the limit, charged (`patience`): a loader that hangs for good after many batches is silent for less
        # than half the example when the limit comes, and was called slow, whatever the timeout.
        quiet = now - max(_last_answer, started)
        if waited_on is not None:  # the call's patience ran out: it returned meanwhile (slow), or it did not
            if _last_answer != waited_on:
                raise LoaderSlow(seconds, waited=now - started, quiet=quiet)
        elif quiet < (now - started) / 2:
            if not _calls:  # between calls: the loader answers
                raise LoaderSlow(seconds, waited=now - started, quiet=quiet)
            waited_on = _last_answer
            set_on_return(lambda: _raise(LoaderSlow(seconds, waited=time.monotonic() - started, quiet=quiet)))
            more = patience(seconds, quiet * min(1.0, charged / max(now - started, 1e-9)))
            limit = charged + more
            ends = now + more
            status.deadline(announced, seconds, more)  # the supervisor waits as long (`supervised.watch`)
            arm()
            return
        hung = LoaderHung(seconds, waited=now - started)
        hung.had_children = bool(current_children())  # its workers: a cause only they print may be named
        raise hung

    previous = signal.signal(signal.SIGALRM, on_alarm)
    announced = time.monotonic()
    arm()
    status.deadline(announced, seconds)  # a supervisor ends what this alarm cannot
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        set_on_return(None)
        status.deadline(0.0, 0.0)
        if outer_due is not None:
            signal.setitimer(signal.ITIMER_REAL, max(outer_due - time.monotonic(), 1e-4), outer_interval)


def set_on_return(action: Callable[[], None] | None) -> None:
    """What the next return of an outermost call into the loader runs (`answering`; None: nothing)."""
    global _on_return
    _on_return = action


def _raise(error: BaseException) -> None:
    raise error


def patience(seconds: float, silent: float) -> float:
    """Charged seconds past the limit an alarm gives a call that has been silent ``silent`` charged seconds,
    so that it is silent for half the limit before it is called hung: a call that returns within them was
    only slow. Never more than half the limit (a supervisor allows it: `supervised.watch`)."""
    return max(seconds / 2 - silent, MIN_RECHECK)


def _call(handler: Any, signum: int, frame: FrameType | None) -> None:
    """Run the SIGALRM handler installed before ours, as the signal would have."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:  # the default action ends the process: let it
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGALRM)


def reap_children(keep: set[int]) -> None:
    """Terminate the multiprocessing children started since ``keep`` was taken: the workers of a
    loader abandoned mid-iteration (a hang, an exception) would outlive the check."""
    for child in multiprocessing.active_children():
        if child.pid is not None and child.pid not in keep:
            child.terminate()
            child.join(2)
            if child.is_alive():
                child.kill()
                child.join(2)


def current_children() -> set[int]:
    return {c.pid for c in multiprocessing.active_children() if c.pid is not None}


@contextlib.contextmanager
def quick_worker_shutdown(seconds: float = 0.25) -> Iterator[None]:
    """Let torch give up on a worker that does not exit after ``seconds``, not 5 s (docs/findings.md, F9:
    a loader dropped mid-epoch in a reference cycle). Only the shutdown join reads
    ``MP_STATUS_CHECK_INTERVAL`` at call time (the polling timeouts were bound at import)."""
    from torch.utils.data import _utils

    previous = _utils.MP_STATUS_CHECK_INTERVAL
    _utils.MP_STATUS_CHECK_INTERVAL = min(previous, seconds)
    try:
        yield
    finally:
        _utils.MP_STATUS_CHECK_INTERVAL = previous


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ctrl-C ignored in this block (cleaning up after the first one must not be cut short)."""
    global _lost_ctrl_c
    _lost_ctrl_c = False  # the interrupt is being handled: the cleanup's waits must not raise it again
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_kept() -> Iterator[None]:
    """A Ctrl-C (or SIGTERM, which the CLI turns into one) that CPython swallows is raised again by
    `raise_lost_ctrl_c`: a `KeyboardInterrupt` raised in a callback CPython calls itself (a gc or weakref
    callback, ``__del__``) is "Exception ignored" (python/cpython#95959); Hypothesis keeps a gc callback."""
    global _lost_ctrl_c
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        global _lost_ctrl_c
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
            _lost_ctrl_c = True  # not printed: it is raised again, and seen as the interrupt it is
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
        _lost_ctrl_c = False


def raise_lost_ctrl_c() -> None:
    """Raise the `KeyboardInterrupt` CPython swallowed in `ctrl_c_kept`, if there was one."""
    global _lost_ctrl_c
    if _lost_ctrl_c:
        _lost_ctrl_c = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def frozen() -> Iterator[None]:
    """Leave everything alive out of the collections `collect` runs, until the end: with torch,
    Hypothesis and the user's modules frozen, a full collection costs milliseconds instead of ~0.3 s."""
    global _modules_frozen
    gc.freeze()
    _modules_frozen = len(sys.modules)
    try:
        yield
    finally:
        gc.unfreeze()
        _modules_frozen = None


def collect() -> None:
    """A full collection; inside `frozen`, what was imported since is frozen after it: a module a step
    imports on first use (DCP: 80,000 objects) would otherwise make every later collection cost ~55 ms
    instead of ~7 (importing them before freezing cost every run 0.85 s)."""
    global _modules_frozen
    gc.collect()
    if _modules_frozen is not None and len(sys.modules) != _modules_frozen:
        gc.freeze()
        _modules_frozen = len(sys.modules)
