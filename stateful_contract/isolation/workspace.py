"""One directory per checker process for everything a check makes on disk, and its removal however the process ends.

Every directory a check makes (a run's directory, the TMPDIR of the loader's processes, Hypothesis' home) is made
in this process's workspace, ``$TMPDIR/sc-XXXXXXXX`` (`workspace`), so one removal takes them all and whatever the
loader's processes left there: at the process's normal end, after ``multiprocessing`` has ended its daemonic
children (DataLoader workers of a loader still referenced: their ``pymp-*`` directories are in it); before an
``os._exit`` (`leave`: the command line interrupted, a rank in a launcher's world); and, for a checker killed by
SIGKILL (a CI job's timeout), by the next check on the machine (`sweep`).

A workspace is abandoned when no process holds the lock of its `LOCK` file: ``fcntl.flock``, which the kernel
releases when its holder dies however it dies, and which other pid namespaces sharing the directory see too (a
dead pid could be a live check in another container; a live pid, a reused one). Only this user's directories
are looked at, and a live check's never (it holds its lock). What ran under an abandoned workspace is found by
its run marker (`processes.MARKER_ENV` names a run directory inside it): a DataLoader worker started by
``spawn`` while its parent died (its watchdog took the orphan's new parent for its own, measured: torchdata
0.11) outlives the check for good, and with it the resource tracker that would unlink its semaphores.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from multiprocessing import util
from pathlib import Path

from ..repro.socket_dir import socket_dir_problem
from .processes import kill_descendants, kill_marked_under

__all__ = ["LOCK", "PREFIX", "launch_tmpdir", "leave", "loaders_tmpdir", "new_dir", "sweep", "workspace"]

#: A workspace's name: short, as the loader's TMPDIR inside it must leave room for a socket's path.
PREFIX = "sc-"
#: The file whose ``flock`` the workspace's checker holds while it lives; a workspace without it is not swept.
LOCK = ".stateful-contract-lock"

#: This process's workspace, the descriptor holding its lock, and the process that made it (a forked process
#: uses its parent's workspace and never removes it).
_made: tuple[Path, int, int] | None = None


def workspace() -> Path:
    """This process's workspace, made on first use (after sweeping the abandoned ones, `sweep`) under the
    user's temporary directory, locked until the process ends, and removed then (`leave`)."""
    global _made
    if _made is not None and _made[0].is_dir():
        return _made[0]
    if _made is not None and _made[2] == os.getpid() and _made[1] >= 0:  # removed (by hand): the old lock let go
        with contextlib.suppress(OSError):
            os.close(_made[1])
    tmp = Path(tempfile.gettempdir())
    sweep(tmp)
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=tmp))
    # Locked before it has its name: a sweep never sees the lock file free while this process lives.
    fd = os.open(path / f"{LOCK}.new", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(path / f"{LOCK}.new", path / LOCK)
    except OSError:  # a file system without locks: a workspace no sweep takes (left if this process is killed)
        os.close(fd)
        os.unlink(path / f"{LOCK}.new")
        fd = -1
    _made = (path, fd, os.getpid())
    # After multiprocessing's own exit function has ended its daemonic children and removed its pymp-* directory
    # (exitpriority -100): finalizers run from the highest priority down.
    util.Finalize(None, leave, exitpriority=-200)
    return path


def _forget_lock() -> None:
    """In a forked child: close its copy of the lock's descriptor, so that a process the check forked (a loader's
    worker orphaned for good) does not keep the workspace of a killed checker from being swept. Once: the number
    is the child's to reuse, and a process it forks in turn must not close what then has that number."""
    global _made
    if _made is not None and _made[2] != os.getpid() and _made[1] >= 0:
        with contextlib.suppress(OSError):
            os.close(_made[1])
        _made = (_made[0], -1, _made[2])


os.register_at_fork(after_in_child=_forget_lock)


def new_dir(prefix: str) -> Path:
    """A new directory in the workspace (a run's directory, Hypothesis' home), removed with it at the latest."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workspace()))


def loaders_tmpdir() -> Path | None:
    """The temporary directory of every process this checker runs a loader in (their TMPDIR): one per checker
    process, in its workspace, removed with it. One, not one per run: a job and its restart see the same
    TMPDIR, and a state that names a path under it (litdata's ``input_dir``, a cache under
    ``tempfile.gettempdir()``) was refused in the fresh-process half of the check, started by another run than
    the one that saved it: a false SC10 failure (tests/isolation/test_one_tmpdir.py). None when a
    multiprocessing socket under it would be too long where one under the user's fits (`socket_dir_problem`):
    the loader must not hang in the check where it would not in training; under a TMPDIR too long already it
    keeps the user's, whose hang the check explains."""
    return _tmpdir_in(workspace() / "t")  # 14 bytes more than the user's: most TMPDIRs have 50 to spare


def launch_tmpdir(run_dir: Path) -> Path | None:
    """The TMPDIR of the loaders of a launcher's world, in its run's directory, which every rank of the launch,
    and the resume launch given the same ``--dir``, agree on (`loaders_tmpdir`'s reason): removed with the
    run's directory, or kept with it. None as in `loaders_tmpdir` (the run's directory, 35 bytes longer than the
    user's TMPDIR when private, leaves room for a socket's path under most)."""
    return _tmpdir_in(run_dir / "t")


def _tmpdir_in(path: Path) -> Path | None:
    if socket_dir_problem(str(path)):
        return None
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def sweep(tmp: Path | None = None) -> list[Path]:
    """Remove the abandoned workspaces of this user in ``tmp`` (None: where this process's is, else the user's
    temporary directory), their lock free: their checker is dead; after killing the processes that ran under
    them (`processes.kill_marked_under`). The workspaces removed."""
    if tmp is None:
        tmp = _made[0].parent if _made is not None else Path(tempfile.gettempdir())
    candidates: list[Path] = []
    with contextlib.suppress(OSError), os.scandir(tmp) as entries:
        candidates = [Path(e.path) for e in entries if e.name.startswith(PREFIX) and e.is_dir(follow_symlinks=False)]
    removed = []
    for path in candidates:
        try:
            if path.lstat().st_uid != os.getuid():
                continue
            fd = os.open(path / LOCK, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:  # not a workspace (no lock file), or removed meanwhile
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a live check's
            os.close(fd)
            continue
        try:
            kill_marked_under(path)
            _remove(path)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def leave(*, end_children: bool = False) -> None:
    """Remove this process's workspace with everything in it (its maker only; at its normal end, by itself).
    ``end_children``: a process about to leave with ``os._exit``, which runs no finalizer, first kills its
    descendants (a loader's workers still running, `processes.kill_descendants`), whose files are in it."""
    global _made
    if end_children:
        kill_descendants()
    if _made is None or _made[2] != os.getpid():
        return
    path, fd, _ = _made
    _made = None
    _remove(path)
    if fd >= 0:
        os.close(fd)


def _remove(path: Path) -> None:
    """``path`` removed, its lock file last: a removal cut short (SIGKILL, which nothing blocks) leaves a
    workspace the next sweep takes, where a lock file removed first left one no sweep recognises."""
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in [e for e in entries if e.name != LOCK]:
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
    shutil.rmtree(path, ignore_errors=True)
