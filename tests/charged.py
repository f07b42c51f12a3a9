"""Durations in tests charged as the package charges a loader's example limit: the seconds the processes ran
or slept, never the seconds they waited in the run queue for a CPU that other jobs held
(`stateful_contract.repro.progress`). On a quiet machine that is the wall time; at a load of 30 on 2 cores a
command whose CPU work takes 5 s takes a minute of wall time, and is still charged about 5 s. A command that
waits (a sleep, a hang, a join nobody answers) is charged every second of it, as on a quiet machine, so a
bound on the charge still fails a command that waits too long or works too long.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from stateful_contract.repro.progress import Clock

__all__ = ["charged", "charged_to_this_process"]

#: Seconds between two samples: the last interval before the processes end is not charged.
EVERY = 0.05


class Charge:
    """The seconds charged so far (`seconds`), read after the block that measured them."""

    seconds = 0.0


@contextmanager
def charged(roots: Callable[[], Iterable[int]], alive: Callable[[], bool] = lambda: True) -> Iterator[Charge]:
    """Charge the processes ``roots()`` names and their descendants for as long as the block runs and
    ``alive()`` holds (a process that ended, not yet reaped, would be charged as asleep: stop at its end)."""
    charge, clock, stop = Charge(), Clock(roots), threading.Event()

    def sample() -> None:
        while not stop.wait(EVERY) and alive():
            charge.seconds = clock.sample()

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield charge
    finally:
        stop.set()
        thread.join()
        if alive():
            charge.seconds = clock.sample()


def charged_to_this_process() -> Callable[[], Iterable[int]]:
    """This process (the check run in it) and the children it starts (its supervised child, its ranks)."""
    pid = os.getpid()
    return lambda: [pid]
