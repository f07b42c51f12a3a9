"""Correct loaders with two DataLoader workers, each but one broken after a resume: it hangs, exits or grows
its process, so the checker kills the loader's process and its workers. Imported by path
(``tests/leftover_loaders.py:NAME``) by the command line, the supervised child and every rank
(tests/isolation/test_leftovers.py counts what each kind of run leaves on the machine)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

from stateful_contract import LoaderConfig


class WorkerLoader:
    """A StatefulDataLoader with two workers (``context``: their start method); `misbehave` runs at every
    batch after a ``load_state_dict``."""

    def __init__(self, config: LoaderConfig, context: str = "fork") -> None:
        self.base = config.stateful_dataloader(num_workers=2, multiprocessing_context=context)
        self.resumed = False

    def __iter__(self) -> Iterator[Any]:
        for batch in self.base:
            if self.resumed:
                self.misbehave()
            yield batch

    def __len__(self) -> int:
        return len(self.base)

    def misbehave(self) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)
        self.resumed = True


class Hangs(WorkerLoader):
    def misbehave(self) -> None:
        threading.Event().wait()


class Exits(WorkerLoader):
    def misbehave(self) -> None:
        os._exit(3)


class Grows(WorkerLoader):
    def misbehave(self) -> None:
        hoard = []
        while True:
            hoard.append(bytearray(b"x" * (64 << 20)))


def correct(config: LoaderConfig) -> WorkerLoader:
    return WorkerLoader(config)


def hangs(config: LoaderConfig) -> WorkerLoader:
    return Hangs(config)


def exits(config: LoaderConfig) -> WorkerLoader:
    return Exits(config)


def grows(config: LoaderConfig) -> WorkerLoader:
    return Grows(config)


def hangs_spawned(config: LoaderConfig) -> WorkerLoader:
    """Workers started by ``spawn``: their queues' semaphores are named (``/dev/shm/sem.mp-*``)."""
    return Hangs(config, context="spawn")


def hangs_file_system(config: LoaderConfig) -> WorkerLoader:
    """torch's ``file_system`` sharing: each batch's tensors in ``/dev/shm/torch_*`` files."""
    import torch.multiprocessing

    torch.multiprocessing.set_sharing_strategy("file_system")
    return Hangs(config)
