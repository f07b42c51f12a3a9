"""Durations in tests charged as the package charges a loader's example limit: the seconds the processes ran
or slept, never the seconds they waited in the run queue for a CPU that other jobs held
(`stateful_contract.repro.progress`). On a quiet machine that is the wall time; at a load of 30 on 2 cores a
command whose CPU work takes 5 s takes a minute of wall time, and is still charged about 5 s. A command that
waits (a sleep, a hang, a join nobody answers) is charged every second of it, as on a quiet machine, so a
bound on the charge still fails a command that waits too long or works too long.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from stateful_contract.repro.progress import Clock

__all__ = ["charged", "charged_to_this_process", "communicate", "run"]

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


def run(command: Sequence[str], *, timeout: float, check: bool = False, capture_output: bool = False,
        input: str | bytes | None = None, **popen: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run`, its ``timeout`` charged on the command's processes (and their children): a command
    that hangs (asleep, or spinning) is killed after ``timeout`` seconds of it, as before, and one that merely
    waits for a CPU on a busy machine is not (at a load of 20 to 30 on 2 cores a fresh interpreter that
    imports torch takes a minute of wall time; tests whose limits were wall time failed there alone)."""
    if capture_output:
        popen["stdout"] = popen["stderr"] = subprocess.PIPE
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    with subprocess.Popen(command, **popen) as proc:
        out, err = communicate(proc, timeout=timeout, input=input)
    done = subprocess.CompletedProcess(command, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def communicate(proc: subprocess.Popen[Any], *, timeout: float, input: str | bytes | None = None,
                roots: Callable[[], Iterable[int]] | None = None) -> tuple[Any, Any]:
    """``proc.communicate(input)``, its ``timeout`` charged on ``roots()`` (default: ``proc`` and its children;
    name the other processes it waits on, another rank of its world) as `run` charges it."""
    clock = Clock(roots or (lambda: [proc.pid]))
    while True:
        try:  # retried after each second: communicate keeps what it read (its documentation says so)
            out, err = proc.communicate(input, timeout=1.0)
            return out, err
        except subprocess.TimeoutExpired:
            input = None  # sent with the first call
            if clock.sample() > timeout:
                proc.kill()
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
