"""Loaders that misbehave the way native extensions and careless code do: they kill, exit, hang or eat memory.

Each one is correct (a `zoo.EpochLoader`) except for one way of taking its process down
or never coming back. They are imported by path (``tests/misbehaving.py:NAME``) by the
CLI, the supervised child and every rank, so they live at module level. The zoo's own
loaders raise or return wrong batches; these kill, exit, hang for good or eat memory.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from zoo import EpochLoader

from stateful_contract import LoaderConfig


def segfault() -> None:
    """Read address 0: SIGSEGV, as a native extension's bug does."""
    ctypes.string_at(0)


class SegfaultsInLoad(EpochLoader):
    """``load_state_dict`` reads a null pointer."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        segfault()


class SegfaultsAfterResume(EpochLoader):
    """Loads fine; the first batch after a resume reads a null pointer."""

    def restore(self, state: dict[str, Any]) -> None:
        segfault()


class ExitsInLoad(EpochLoader):
    """``load_state_dict`` calls ``os._exit(7)`` (no exception, no cleanup)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        os._exit(7)


class LoopsInLoad(EpochLoader):
    """``load_state_dict`` loops forever in Python."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        while True:
            pass


class BlocksInLoad(EpochLoader):
    """``load_state_dict`` blocks SIGALRM and sleeps: no Python-level timeout reaches it."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)


class WaitsInLoad(EpochLoader):
    """``load_state_dict`` waits on an event nobody sets (a deadlock), SC02's example: few examples before it."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        threading.Event().wait()


class LoopsAfterResume(EpochLoader):
    """Iterating after a resume loops forever in Python."""

    def restore(self, state: dict[str, Any]) -> None:
        while True:
            pass


class WaitsAfterResume(EpochLoader):
    """Iterating after a resume waits on an event nobody sets."""

    def restore(self, state: dict[str, Any]) -> None:
        threading.Event().wait()


class AllocatesAfterResume(EpochLoader):
    """Iterating after a resume allocates without bound (64 MiB at a time, touched)."""

    def restore(self, state: dict[str, Any]) -> None:
        hoard = []
        while True:
            hoard.append(bytearray(b"x" * (64 << 20)))


class StateDictLoops(EpochLoader):
    """``state_dict()`` loops forever (SC03 and every resume clause meet it)."""

    def state_dict(self) -> dict[str, Any]:
        while True:
            pass


class DiesWithWorkers:
    """Starts two DataLoader worker processes, then ``os._exit(3)``: the workers must not outlive it."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader(num_workers=2, multiprocessing_context="fork")

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.base)
        next(it)
        os._exit(3)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


def segfaults_in_factory(config: LoaderConfig) -> EpochLoader:
    segfault()
    return EpochLoader(config)


_SHARED: dict[str, EpochLoader] = {}


def same_object(config: LoaderConfig) -> EpochLoader:
    """A factory that builds one loader and returns it on every call."""
    if "loader" not in _SHARED:
        _SHARED["loader"] = EpochLoader(config)
    return _SHARED["loader"]


def epoch_loader(config: LoaderConfig) -> EpochLoader:
    return EpochLoader(config)


#: The issue's table: loader -> the clause its misbehaviour fails and what the report says killed it.
TABLE: dict[str, tuple[str, str]] = {
    "SegfaultsInLoad": ("SC02", "SIGSEGV"),
    "SegfaultsAfterResume": ("SC10", "SIGSEGV"),
    "ExitsInLoad": ("SC02", "exit code 7"),
    "LoopsInLoad": ("SC02", "timeout"),
    "BlocksInLoad": ("SC02", "timeout"),
    "LoopsAfterResume": ("SC10", "timeout"),
    "WaitsAfterResume": ("SC10", "timeout"),
}
