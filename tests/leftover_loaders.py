"""Correct loaders with two DataLoader workers, each but one broken after a resume: it hangs, exits or grows
its process, so the checker kills the loader's process and its workers. Imported by path
(``tests/leftover_loaders.py:NAME``) by the command line, the supervised child and every rank
(tests/isolation/test_leftovers.py counts what each kind of run leaves on the machine)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy.random  # noqa: F401  # before any worker forks: a worker that imports it itself once raised
import psutil  # KeyError in importlib's module lock (torchdata's worker seeds numpy), under the pytest mixin

from stateful_contract import LoaderConfig

#: A directory the loader writes, before it misbehaves, the /dev/shm names its processes hold (a file per
#: process): the test then knows which names were this run's, on a machine where other runs make the same kinds.
RECORD_ENV = "LEFTOVER_RECORD"


def record_shared_memory() -> None:
    """Write the /dev/shm names this process and its workers map (by inode: glibc maps a semaphore under a
    temporary name it unlinks) or, torch's, created (``torch_<pid>_...``) to `RECORD_ENV`'s directory."""
    if not (folder := os.environ.get(RECORD_ENV)):
        return
    pids = {os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))}
    inodes = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        inodes |= {int(f[4]) for f in (line.split(maxsplit=5) for line in lines)
                   if len(f) == 6 and f[5].startswith("/dev/shm/")}
    names = {entry.name for entry in os.scandir("/dev/shm") if entry.name.startswith(("sem.mp-", "torch_")) and (
        entry.inode() in inodes or any(entry.name.startswith(f"torch_{pid}_") for pid in pids))}
    record = Path(folder, f"{os.getpid()}.txt")
    if record.is_file():  # what this process recorded before: each must be gone at the end too
        names |= set(record.read_text(encoding="utf-8").split())
    record.write_text("\n".join(sorted(names)), encoding="utf-8")


class WorkerLoader:
    """A StatefulDataLoader with two workers (``context``: their start method); `misbehave` runs at every
    batch after a ``load_state_dict``. What its processes hold in /dev/shm is recorded at the first batch of
    every pass, and at every batch after a resume, before it misbehaves: recorded only there, a check whose
    verdict came before that batch had recorded nothing (spawned workers start in seconds under load, and a
    first ``next()`` silent for half the timeout is a hang: docs/supervision.md, "Slow is not hung")."""

    def __init__(self, config: LoaderConfig, context: str = "fork") -> None:
        self.base = config.stateful_dataloader(num_workers=2, multiprocessing_context=context)
        self.resumed = False

    def __iter__(self) -> Iterator[Any]:
        for n, batch in enumerate(self.base):
            if n == 0 or self.resumed:
                record_shared_memory()
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


#: The last iterator a `KeepsWorkers` loader started: a user's cache, or a reference cycle not yet collected.
_RUNNING: list[Any] = []


class KeepsWorkers(WorkerLoader):
    """Correct, but the last iterator it started stays referenced, so its two workers run until the process
    ends: the checker's supervised child (or rank) ends with live workers, which it terminates or kills."""

    def __iter__(self) -> Iterator[Any]:
        # The previous iterator goes first: started beside it, the new workers were forked while its queues'
        # feeder threads ran, and a child forked amid another thread's import can block for good (a rank of
        # the two-rank kind hung in next(iter(loader)) in CI; a worker under the mixin raised KeyError in
        # importlib's module lock). This loader's point is the last iterator left running at the end.
        _RUNNING.clear()
        it = iter(self.base)
        _RUNNING[:] = [it]
        yield from it


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


def keeps_workers(config: LoaderConfig) -> WorkerLoader:
    return KeepsWorkers(config)


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
