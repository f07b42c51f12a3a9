"""What the loader's processes leave on the machine when the checker kills them, and its removal.

A process ended by SIGKILL runs no finalizer: a DataLoader worker's ``multiprocessing`` temporary directory
(``$TMPDIR/pymp-*``, its ``resource_sharer`` socket; CPython 3.11 ``multiprocessing/util.py`` ``get_temp_dir``)
and torch's ``torch-shm-dir-*`` stay, and so do the names in ``/dev/shm`` whose owner would unlink them at
exit: the named semaphores of a ``spawn`` or ``forkserver`` context (``sem.mp-*``, unlinked by the resource
tracker, killed in the same session) and the tensors of torch's ``file_system`` sharing (``torch_<pid>_*``,
unlinked by ``torch_shm_manager``, killed too). On a CI runner checking every push they grew without bound
(docs/supervision.md, "Nothing is left behind", has the counts).

Two remedies, each attributing by the run's own processes, never by a name alone (another user's or another
run's files look the same): the loader's processes get a temporary directory of their own
(`workspace.loaders_tmpdir`), removed with everything in it when the run ends; and the ``/dev/shm`` names the killed processes mapped
(``/proc/<pid>/maps``) or created (torch's names carry the pid) are unlinked once no live process maps them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SHARED_MEMORY", "mapped_shared_memory", "remove_tmpdir", "restore_tmpdir", "unlink_orphans",
           "use_tmpdir"]

#: Where POSIX shared memory and named semaphores live (Linux).
SHARED_MEMORY = Path("/dev/shm")
#: The names a run's processes create there and their owner unlinks at exit: multiprocessing's semaphores
#: (``SemLock._make_name``: ``mp-`` and 8 letters, ``sem.`` added by glibc) and torch's ``file_system``
#: tensors (``torch_<pid>_<random>_<counter>``: torch v2.13.0, aten/src/ATen/MapAllocator.cpp,
#: ``NewProcessWideShmHandle``).
_OURS = re.compile(r"(sem\.mp-[a-z0-9_]{8}|torch_(\d+)_\d+_\d+)")


def use_tmpdir(path: Path | None) -> tuple[str | None, str | None]:
    """In a loader's process: its temporary files (``tempfile``, ``multiprocessing``'s ``pymp-*``, torch's)
    go under ``path``, and so do those of the processes it starts (fork or exec). A forked process inherits
    ``tempfile.tempdir`` from the checker, which read TMPDIR long before: the variable alone is not enough.
    What they were, for `restore_tmpdir`."""
    was = os.environ.get("TMPDIR"), tempfile.tempdir
    if path is not None:
        os.environ["TMPDIR"] = str(path)
        tempfile.tempdir = str(path)
    return was


def restore_tmpdir(was: tuple[str | None, str | None]) -> None:
    """Undo `use_tmpdir` (``was``: what it returned), in a process that goes on after the loader ran in it."""
    variable, tempfile.tempdir = was
    if variable is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = variable


def remove_tmpdir(*paths: Path | None) -> None:
    """Remove each of ``paths`` (a run's directory) with whatever the loader's
    processes left in it."""
    for path in paths:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def _inodes(pid: int) -> set[int]:
    """The inodes of the ``/dev/shm`` files process ``pid`` maps. By inode, not name: glibc's ``sem_open``
    maps a file it made under a temporary name, then links it to the semaphore's and unlinks the first, so
    ``/proc/<pid>/maps`` names a semaphore ``sem.XXXXXX (deleted)`` (glibc 2.36, nptl/sem_open.c)."""
    found: set[int] = set()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(f"{SHARED_MEMORY}/"):
                found.add(int(fields[4]))
    return found


def _ours() -> dict[str, int]:
    """The names of `_OURS` in ``/dev/shm``, and each one's inode (and its creator's pid, for torch's)."""
    found = {}
    with contextlib.suppress(OSError), os.scandir(SHARED_MEMORY) as entries:
        for entry in entries:
            if _OURS.fullmatch(entry.name):
                with contextlib.suppress(OSError):
                    found[entry.name] = entry.inode()
    return found


def mapped_shared_memory(pids: Iterable[int]) -> set[str]:
    """The ``/dev/shm`` names of `_OURS` that ``pids`` map or (torch's, by the pid in the name) created: read
    before they are killed, as what is theirs to clean up after."""
    pids = set(pids)
    if not pids:
        return set()
    inodes = set().union(*(_inodes(pid) for pid in pids))
    found = set()
    for name, inode in _ours().items():
        creator = _OURS.fullmatch(name).group(2)  # type: ignore[union-attr]  # `_ours` matched it
        if inode in inodes or (creator is not None and int(creator) in pids):
            found.add(name)
    return found


def unlink_orphans(names: Iterable[str]) -> int:
    """Unlink each of ``names`` (`mapped_shared_memory`) that no live process maps any more (a process outside
    the run may share one: it keeps it); how many were unlinked."""
    present = {name: inode for name, inode in _ours().items() if name in set(names)}
    if not present:
        return 0
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                live = _inodes(int(entry))
                present = {name: inode for name, inode in present.items() if inode not in live}
    gone = 0
    for name in present:
        with contextlib.suppress(OSError):
            (SHARED_MEMORY / name).unlink()
            gone += 1
    return gone
