"""Finding, measuring and killing the processes a loader runs in (Linux ``/proc``).

A supervised child starts a session of its own, so that it and every DataLoader worker it
forks share one session id (and process group); processes it starts with ``exec`` carry
`MARKER_ENV` in their environment. The ranks' processes carry the marker too (they are
started with ``exec``). Between them, nothing a loader starts escapes `kill_session` and
`kill_stragglers`, unless it both leaves the session and re-forks without ``exec``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "MARKER_ENV",
    "anon_rss",
    "descendants",
    "describe_exit",
    "fault_excerpt",
    "kill_session",
    "kill_stragglers",
    "live",
    "processes_of",
    "session_members",
]

#: Environment variable every process of a run carries (value: the run directory), so
#: that stragglers can be found and killed even if they left the process group.
MARKER_ENV = "STATEFUL_CONTRACT_RUN"
_PROC = Path("/proc")

#: Signals with which a program kills itself (a crash), as opposed to being stopped from outside.
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                           signal.SIGTRAP, signal.SIGSYS})


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None when gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def live(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (zombies left out: they are dead already)."""
    if not _PROC.is_dir():
        return []
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        fields = _stat(int(entry.name))
        # Fields after the name: state, ppid, pgrp, session, ...
        if fields is not None and len(fields) > 3 and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, ... (as the kernel lists them per thread)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list((_PROC / str(parent) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in out:
                    out.append(child)
                    todo.append(child)
    return out


def anon_rss(pid: int) -> int | None:
    """Resident anonymous memory of ``pid`` in bytes (heap, arrays, tensors), or None when gone."""
    try:
        text = (_PROC / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return None


def processes_of(run_dir: Path) -> list[int]:
    """Live processes carrying ``run_dir``'s marker in their environment (Linux only)."""
    if not _PROC.is_dir():
        return []
    needle = f"{MARKER_ENV}={run_dir}".encode() + b"\0"
    found = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ + b"\0" and live(int(entry.name)):
            found.append(int(entry.name))
    return found


def _kill(pids: Iterable[int]) -> list[int]:
    killed = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def kill_stragglers(run_dir: Path) -> list[int]:
    """Kill the run's processes that escaped its process group; returns their pids."""
    return _kill(processes_of(run_dir))


def kill_session(sid: int, marker: Path | None = None, wait: float = 2.0) -> list[int]:
    """Kill session ``sid`` (its process group, then any member or marked process left), and wait
    up to ``wait`` seconds until none of them is alive; returns the pids killed."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = _kill(session_members(sid))
    if marker is not None:
        killed += kill_stragglers(marker)
    limit = time.monotonic() + wait
    while time.monotonic() < limit:
        left = [p for p in session_members(sid) if p != sid]
        if marker is not None:
            left += processes_of(marker)
        if not left:
            break
        _kill(left)
        time.sleep(0.01)
    return killed


def describe_exit(exitcode: int) -> tuple[str, str]:
    """``(killed_by, how)`` for a process's exit code: ``("SIGSEGV", "was killed by signal SIGSEGV")``."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return name, f"was killed by {name}"
    return f"exit code {exitcode}", f"exited with code {exitcode}"


def fault_excerpt(text: str, frames: int = 12) -> str:
    """The crashing thread's innermost frames from a ``faulthandler`` dump in ``text``.

    A dump lists the crashing thread first, most recent call first: its top frames are the
    loader's; from the first frame of the checker's engine down, they are only the way to it.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if start is None:
        return ""
    out = [lines[start].strip()]
    current = next((i for i in range(start, len(lines))
                    if lines[i].startswith(("Current thread", "Thread 0x"))), None)
    if current is None:
        return out[0]
    body = []
    for line in lines[current + 1 :]:
        if not line.startswith("  File"):
            break
        if f"{os.sep}stateful_contract{os.sep}_engine{os.sep}" in line:
            body.append("  ... (the checker's own frames)")
            break
        body.append(line.rstrip())
    if len(body) > frames:
        body = [*body[:frames], "  ..."]
    return "\n".join([*out, *body])


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux), and exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(0)
