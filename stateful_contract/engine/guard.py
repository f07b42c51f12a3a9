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
from collections.abc import Iterator
from types import FrameType

__all__ = ["LoaderHung", "deadline", "reap_children", "can_interrupt"]


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
    """Raise `LoaderHung` in this thread if the block runs longer than ``seconds``."""
    if not seconds or not can_interrupt():
        yield
        return

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        raise LoaderHung(seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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
