"""Guarding the run against the code it tests: hangs and leftover worker processes.

A hung example must fail its clause and let the run go on. In the main thread of a
POSIX process that is done with ``SIGALRM``: the handler raises inside whatever the
loader was blocked in (a queue get, a sleep, a lock, a Python loop), the stack
unwinds and torch's DataLoader iterators shut their workers down. `LoaderHung` is a
``BaseException`` so that Hypothesis does not try to shrink a hang (every shrink
step would wait out the timeout again): it ends the clause at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from . import status

__all__ = ["LoaderHung", "can_interrupt", "deadline", "quick_worker_shutdown", "reap_children", "sigint_ignored"]


class LoaderHung(BaseException):
    """An example ran past its timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the example did not finish within {seconds:g} s")
        self.seconds = seconds


def can_interrupt() -> bool:
    """Whether `deadline` can interrupt a hang here (POSIX main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise `LoaderHung` in this thread if the block runs longer than ``seconds``.

    An outer timer on ``ITIMER_REAL`` (pytest-timeout's signal method, an enclosing
    `deadline`) keeps its time: its handler runs when the outer timer was due, if that is
    sooner, and on exit the timer is set again to what remains of it, with its interval.
    """
    if not seconds or not can_interrupt():
        yield
        return
    started = time.monotonic()
    ends = started + seconds
    outer_delay, outer_interval = signal.getitimer(signal.ITIMER_REAL)
    outer_due: float | None = started + outer_delay if outer_delay > 0 else None

    def arm() -> None:
        # Re-fire every second after the deadline: an alarm that lands in a __del__ or a
        # weakref callback is swallowed as "unraisable", and the hang would go on.
        due = ends if outer_due is None else min(ends, outer_due)
        signal.setitimer(signal.ITIMER_REAL, max(due - time.monotonic(), 1e-4), 1.0)

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        nonlocal outer_due
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
        raise LoaderHung(seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    arm()
    status.deadline_started(time.monotonic(), seconds)  # a supervisor ends what this alarm cannot
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        status.deadline_ended()
        if outer_due is not None:
            signal.setitimer(signal.ITIMER_REAL, max(outer_due - time.monotonic(), 1e-4), outer_interval)


def _call(handler: Any, signum: int, frame: FrameType | None) -> None:
    """Run the SIGALRM handler that was installed before ours, as the signal would have."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:  # the default action ends the process: let it
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGALRM)


def reap_children(keep: set[int], grace: float = 2.0) -> list[int]:
    """Terminate multiprocessing children started since ``keep`` was taken; returns their pids.

    Worker processes of a loader abandoned mid-iteration (a hang, an exception) would
    otherwise outlive the check.
    """
    reaped = []
    for child in multiprocessing.active_children():
        if child.pid is not None and child.pid not in keep:
            child.terminate()
            child.join(grace)
            if child.is_alive():
                child.kill()
                child.join(grace)
            reaped.append(child.pid)
    return reaped


def current_children() -> set[int]:
    return {c.pid for c in multiprocessing.active_children() if c.pid is not None}


@contextlib.contextmanager
def quick_worker_shutdown(seconds: float = 0.25) -> Iterator[None]:
    """Let torch give up on a worker that does not exit after ``seconds``, not 5 s.

    A loader dropped mid-epoch inside a reference cycle (a wrapper whose generator
    refers back to the wrapper, as MindSpeed-MM's does) is torn down by the garbage
    collector, which runs the weakref finalizers of its multiprocessing queues
    (stopping their feeder threads) before the iterator's ``__del__``: the shutdown
    message never reaches the workers and torch waits out its join timeout,
    ``MP_STATUS_CHECK_INTERVAL`` (5 s) per worker, before terminating them. Measured:
    10 s per dropped 2-worker loader. torch reads the value at call time; only the
    shutdown join uses it there (the polling timeouts were bound at import).
    """
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
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
