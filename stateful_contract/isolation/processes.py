"""Starting, finding, measuring and killing the processes a loader runs in (psutil).

Every new interpreter is started one way (`start_python`); a child's own session and `MARKER_ENV` (on a
process started with ``exec``) find them; what is killed, and what escapes `kill_session`:
docs/supervision.md, "Nothing is left behind" and "Limits".
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

from .leftovers import mapped_shared_memory, unlink_orphans

__all__ = ["CRASH_SIGNALS", "MARKER_ENV", "alive", "anon_rss", "death", "descendants", "describe_exit",
           "die_with_parent", "fault_excerpt", "gained", "growth", "hang", "kill_descendants", "kill_marked",
           "kill_marked_under", "kill_processes", "kill_session", "kill_sessions", "no_answer", "processes_of",
           "size", "start_python"]

#: Environment variable every process of a run carries (value: the run directory): stragglers that left
#: the process group are found and killed by it.
MARKER_ENV = "STATEFUL_CONTRACT_RUN"

#: The process torch starts for its ``file_system`` sharing (torch/lib/libshm), by its name.
TORCH_SHM_MANAGER = "torch_shm_manager"

#: Signals with which a program kills itself (a crash), as opposed to being stopped from outside.
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                           signal.SIGTRAP, signal.SIGSYS})


#: The folder this copy of the package is imported from: a new interpreter runs the checker's code.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: What a new interpreter runs: ``python -c _BOOT PACKAGE_ROOT module:function args...``. Its first lines, before
#: any import, ask the kernel to kill it when the process that started it dies (`DIE_WITH_ENV` names that pid;
#: Linux): set later, after the entry's imports, a checker ended by Ctrl-C while a zygote still imported left it
#: running, orphaned (seen at load 30). The pid check covers a parent that died before the request.
_BOOT = ("import os, sys\n"
         f"if (parent := os.environ.pop({'STATEFUL_CONTRACT_DIE_WITH'!r}, '')) and sys.platform.startswith('linux'):\n"
         "    import ctypes; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL\n"
         "    if os.getppid() != int(parent): os._exit(0)\n"
         "import importlib; sys.path.insert(0, sys.argv.pop(1)); module, _, name = sys.argv.pop(1).partition(':')\n"
         "sys.exit(getattr(importlib.import_module(module), name)(*sys.argv[1:]))")
#: The environment variable `_BOOT` reads the pid to die with from.
DIE_WITH_ENV = "STATEFUL_CONTRACT_DIE_WITH"


def start_python(entry: str, *args: str, env: Mapping[str, str], pass_fds: Sequence[int] = (),
                 run_dir: Path | None = None, output: IO[bytes] | None = None,
                 dies_with_this_process: bool = False) -> subprocess.Popen[bytes]:
    """A new interpreter calling ``entry`` (``"module:function"``) with ``args``, the one way the checker starts
    one (a rank, the zygote): as torchrun's agent starts a rank (torch v2.13.0, ``SubprocessHandler._popen`` in
    torch/distributed/elastic/multiprocessing/subprocess_handler/subprocess_handler.py), in a session of its
    own, with this environment updated by ``env``, no standard input and no file of this process's but
    ``pass_fds``; its output to ``output`` (None: this process's). ``run_dir``: the run's marker (`MARKER_ENV`)
    for the final sweep; None for a process that outlives every run (the zygote), which carries none.
    ``dies_with_this_process``: killed by the kernel when this process ends, from its first line on (`_BOOT`)."""
    environ = {k: v for k, v in os.environ.items() if k not in (MARKER_ENV, DIE_WITH_ENV)}
    environ.update(env)
    if dies_with_this_process:
        environ[DIE_WITH_ENV] = str(os.getpid())
    if run_dir is not None:
        environ[MARKER_ENV] = str(run_dir)
    return subprocess.Popen([sys.executable, "-c", _BOOT, PACKAGE_ROOT, entry, *args], env=environ,
                            stdin=subprocess.DEVNULL, stdout=output,
                            stderr=subprocess.STDOUT if output is not None else None,
                            pass_fds=tuple(pass_fds), close_fds=True, start_new_session=True)


def _alive(select: Callable[[psutil.Process], bool]) -> list[psutil.Process]:
    """The live processes (zombies are dead already) but this one that ``select`` picks."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.status() != psutil.STATUS_ZOMBIE and select(p):
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def _marked(p: psutil.Process, marker: Path | None) -> bool:
    return marker is not None and p.environ().get(MARKER_ENV) == str(marker)


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited and not yet reaped by its parent, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.AccessDenied:
        return True
    except psutil.NoSuchProcess:
        return False


def processes_of(run_dir: Path) -> list[int]:
    """Live processes carrying ``run_dir``'s marker in their environment."""
    return [p.pid for p in _alive(lambda p: _marked(p, run_dir))]


def anon_rss(pid: int) -> int | None:
    """Resident anonymous memory of ``pid`` in bytes (heap, arrays, tensors), or None when gone: on Linux
    psutil's ``rss - shared`` is ``RssAnon`` (no file-backed pages); elsewhere the resident set."""
    try:
        info = psutil.Process(pid).memory_info()
    except psutil.Error:
        return None
    return int(info.rss - getattr(info, "shared", 0))


def gained(root: int, baseline: dict[int, int]) -> int:
    """Bytes ``root`` and its descendants gained (`anon_rss`) since ``baseline`` (a process: since first seen)."""
    try:
        top = psutil.Process(root)
        pids = [root, *(c.pid for c in top.children(recursive=True))]
    except psutil.Error:
        return 0
    total = 0
    for pid in pids:
        if (rss := anon_rss(pid)) is not None:
            total += max(0, rss - baseline.setdefault(pid, rss))
    return total


def kill_session(sid: int, marker: Path | None = None, wait: float = 2.0) -> None:
    """Kill session ``sid`` (its process group, then any member or marked process left), and wait up to
    ``wait`` seconds until none is alive."""
    kill_sessions((sid,), marker, wait=wait)


def kill_marked(marker: Path, spare: frozenset[int] = frozenset(), wait: float = 2.0) -> None:
    """Kill every live process carrying ``marker``'s `MARKER_ENV` but ``spare``; wait as `kill_session`."""
    kill_sessions((), marker, spare, wait)


def kill_sessions(sids: Collection[int], marker: Path | None = None, spare: frozenset[int] = frozenset(),
                  wait: float = 2.0) -> None:
    """Kill sessions ``sids`` (each one's process group, then any member left) and every process carrying
    ``marker``'s `MARKER_ENV`, but ``spare``; wait up to ``wait`` seconds until none is alive, then unlink the
    ``/dev/shm`` names they alone held (`_kill`)."""
    def select(p: psutil.Process) -> bool:
        return p.pid not in spare and (os.getsid(p.pid) in sids or _marked(p, marker))

    _kill(select, wait, groups=sids)


def kill_marked_under(folder: Path, wait: float = 2.0) -> None:
    """Kill every live process whose `MARKER_ENV` names a run directory under ``folder`` (the workspace of a
    checker that was killed: its loader's processes that outlived it), as `_kill` kills."""
    under = f"{folder}{os.sep}"
    _kill(lambda p: p.environ().get(MARKER_ENV, "").startswith(under), wait)


def descendants(pids: Collection[int]) -> set[int]:
    """The live descendants of ``pids``."""
    found = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found |= {child.pid for child in psutil.Process(pid).children(recursive=True)}
    return found


def kill_processes(pids: Collection[int], wait: float = 2.0) -> None:
    """Kill those of ``pids`` still alive, as `_kill` kills."""
    if pids:
        _kill(lambda p: p.pid in pids, wait)


def kill_descendants(wait: float = 2.0) -> None:
    """Kill this process's descendants (a loader's workers still running when it leaves with ``os._exit``), as
    `_kill` kills, but the janitors (`_janitor`): this process maps what they would unlink too, so they are left
    to unlink it once it is gone, and then leave by themselves."""
    pids = descendants([os.getpid()])
    _kill(lambda p: p.pid in pids and not _janitor(p), wait)


def _janitor(p: psutil.Process) -> bool:
    """A process that unlinks its clients' shared memory once the last of them is gone, and then exits:
    ``torch_shm_manager`` (``file_system`` tensors) and multiprocessing's resource tracker (the named semaphores
    of a ``spawn`` or ``forkserver`` context, CPython 3.11 Lib/multiprocessing/resource_tracker.py ``main``)."""
    return p.name() == TORCH_SHM_MANAGER or "multiprocessing.resource_tracker" in " ".join(p.cmdline())


def _kill(select: Callable[[psutil.Process], bool], wait: float, groups: Collection[int] = ()) -> None:
    """Kill process groups ``groups`` and what ``select`` picks, the janitors (`_janitor`) last: given up to
    ``wait`` seconds to unlink what their killed clients registered and leave, which a kill forbids (measured,
    torch 2.13). Then unlink the ``/dev/shm`` names the killed processes mapped or created that no live process
    maps (`leftovers`): SIGKILL runs no finalizer."""
    def but_janitors(p: psutil.Process) -> bool:
        return select(p) and not _janitor(p)

    theirs = mapped_shared_memory(p.pid for p in _alive(select))  # read while they live: then it is gone
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    _kill_all(but_janitors, wait)
    limit = time.monotonic() + wait
    while _alive(select) and time.monotonic() < limit:
        time.sleep(0.02)
    _kill_all(select, wait)
    unlink_orphans(theirs)


def _kill_all(select: Callable[[psutil.Process], bool], wait: float) -> None:
    limit = time.monotonic() + wait
    while found := _alive(select):
        for p in found:
            with contextlib.suppress(psutil.Error):
                p.kill()
        if time.monotonic() > limit:
            return
        time.sleep(0.01)


def describe_exit(exitcode: int) -> tuple[str, str]:
    """``(killed_by, how)`` for a process's exit code: ``("SIGSEGV", "was killed by signal SIGSEGV")``."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return name, f"was killed by signal {name}"
    return f"exit code {exitcode}", f"exited with code {exitcode}"


# What the end of a process the loader ran in means, one function per way it ends: it died (`death`), hung
# (`hang`: its example timeout passed and its alarm could not end it; `no_answer`: the command's own limit
# passed) or grew past the memory limit (`growth`). A supervised child (`supervised.Supervised`) and a rank
# (`ranks.failures`) are told by the same sentences; the caller names its process (``subject``) and says what
# the checker did then (``then``). ``during``: the call it was in, with its leading space (or "").


def death(exitcode: int, subject: str = "the process", during: str = "", raised: str = "",
          in_loader: bool = True) -> tuple[str, str]:
    """``(killed_by, what happened)`` for a process that ended on its own or was killed, not by the checker;
    ``raised``: the error it exited with, when Python recorded one (a rank's error file); ``in_loader``: it
    was inside a call into the loader (its status log says so), else an exit is not the loader's doing."""
    killed_by, how = describe_exit(exitcode)
    said = f"{subject} {how}{during}"
    if raised:
        return killed_by, f"{said}: {raised}"
    if exitcode >= 0 and not in_loader:  # an interpreter that could not start, say (an import failed)
        return killed_by, f"{said}, outside any call into the loader: its output says why"
    if exitcode >= 0:
        return killed_by, f"{said}: the loader ended it (os._exit, or exit() in native code)"
    if -exitcode in CRASH_SIGNALS:
        return killed_by, f"{said}: the loader crashed it (a signal a process gets from its own fault)"
    if -exitcode == signal.SIGKILL:
        return killed_by, (f"{said}, not by the checker (the kernel's out-of-memory killer sends SIGKILL when the "
                           "machine runs out of memory)")
    return killed_by, f"{said}, not by the checker"


def hang(timeout: float, subject: str = "the process", during: str = "", then: str = "") -> str:
    """An example whose timeout passed, and whose process did not answer even after its alarm's grace."""
    return (f"the example did not finish within {timeout:g} s, and {subject} stopped answering{during}: the "
            f"timeout could not interrupt it (SIGALRM blocked, or native code that never returns to Python){then}")


def no_answer(seconds: float, subject: str = "the process", during: str = "", then: str = "") -> str:
    """A command not answered within its own limit (the example timeout may not have begun: start-up, a join)."""
    return (f"{subject} did not answer one command within {seconds:g} s{during}, a command's limit (twice the example "
            f"timeout, and a grace for start-up and collectives){then}")


def growth(gained: int, limit: int, subject: str = "the loader's processes", during: str = "", then: str = "") -> str:
    """Processes that gained more than the memory limit during one command."""
    return f"{subject} grew by {size(gained)}{during}, over the memory limit of {size(limit)}{then}"


def size(n: int) -> str:
    """Bytes as a message says them: ``4.1 GiB``, ``512 MiB``."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


#: A frame of the checker's own code, where a dump leaves the loader's: any module of the package but the
#: reference loaders (which a user may check). It named `_engine/` alone until the package's folders came,
#: and then matched nothing, so dumps ran on into the checker's frames.
_CHECKER = f"{os.sep}stateful_contract{os.sep}"
_REFERENCE = f"{_CHECKER}reference{os.sep}"


def fault_excerpt(text: str, frames: int = 12) -> str:
    """The crashing thread's innermost frames from a ``faulthandler`` dump (or a watchdog's,
    ``Timeout (0:01:00)!``) in ``text``: the loader's, down to the first frame of the checker's engine."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(("Fatal Python error", "Timeout ("))), None)
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
        if _CHECKER in line and _REFERENCE not in line:
            body.append("  ... (the checker's own frames)")
            break
        body.append(line.rstrip())
    if len(body) > frames:
        body = [*body[:frames], "  ..."]
    return "\n".join([*out, *body])


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux); exit now if it has."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(0)
