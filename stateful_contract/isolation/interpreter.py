"""The supervised child, the loader's process (`child_main`): forked from the checker (milliseconds; the
factory, a closure too, and torch come with it) or, for SC10's fresh half, from a *zygote*, a new interpreter
with another ``PYTHONHASHSEED`` that imports torch once per checker process. What the child must not inherit
is put right first: docs/supervision.md, "What the child inherits, and what not", says why, and how the
zygote is shared."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import faulthandler
import importlib.util
import os
import pickle
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil

from ..repro import status, steps
from ..repro.guard import current_children
from .executors import Handler
from .leftovers import use_tmpdir
from .noise import ignore_set_vital
from .processes import MARKER_ENV, alive, die_with_parent, start_python
from .target import FILE_MODULE_PREFIX

__all__ = ["FRESH_INTERPRETER_ENV", "ChildSpec", "EngineError", "Interpreter",
           "another_hash_seed", "child_main", "prepare", "start", "zygote_main"]

#: Set in the new interpreter (and so in its DataLoader workers): a scenario may say where it runs.
FRESH_INTERPRETER_ENV = "STATEFUL_CONTRACT_FRESH_INTERPRETER"


def another_hash_seed(current: str | None = None) -> str:
    """A ``PYTHONHASHSEED`` giving another string hash secret than the checker's ``current`` (default: its
    environment's): a number pins it, so the next number differs; unset or ``random``, it is random, and
    any fixed one differs from it (but for a chance of one in 2**64)."""
    current = os.environ.get("PYTHONHASHSEED") if current is None else current
    if current and current.isdigit():
        return str((int(current) + 1) % 4294967296)
    return "1"


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """The parts of `multiprocessing.Process` the supervisor uses, for a child of the zygote."""

    zygote: _Zygote
    pid: int

    @property
    def exitcode(self) -> int | None:
        """None while it runs; else its exit code, or minus the signal that ended it (as multiprocessing's)."""
        return self.zygote.status(self.pid)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.01)


class _Zygote:
    """The checker's end of the zygote: asks it for children and for how they ended."""

    def __init__(self) -> None:
        self.hash_seed = another_hash_seed()
        mine, theirs = socket.socketpair()
        try:
            # Without the run's marker: it outlives every check's run (`close` ends it).
            self.popen = start_python("stateful_contract.isolation.interpreter:zygote_main",
                                      str(theirs.fileno()), pass_fds=(theirs.fileno(),),
                                      env={"PYTHONHASHSEED": self.hash_seed, FRESH_INTERPRETER_ENV: "1"},
                                      dies_with_this_process=True)
        finally:
            theirs.close()
        self.owner = os.getpid()
        self._sock = mine
        self._conn = Connection(os.dup(mine.fileno()))
        self._lock = threading.Lock()

    def fork(self, spec: bytes, child_end: int) -> int:
        """A new child running ``spec``, given ``child_end`` of its connection and this process's output."""
        with self._lock:
            files = {name: module.__file__ for name, module in list(sys.modules.items())
                     if name.startswith(FILE_MODULE_PREFIX) and getattr(module, "__file__", None)}
            self._conn.send_bytes(pickle.dumps(("fork", list(sys.path), files, spec)))
            reduction.sendfds(self._sock, [child_end, 1, 2])
            return int(pickle.loads(self._conn.recv_bytes()))

    def status(self, pid: int) -> int | None:
        with self._lock:
            try:
                self._conn.send_bytes(pickle.dumps(("status", pid)))
                return pickle.loads(self._conn.recv_bytes())  # type: ignore[no-any-return]
            except (OSError, EOFError):
                return -signal.SIGKILL  # the zygote is gone, and its children died with it

    def close(self) -> None:
        """End it now, not at the kernel's signal once this process is gone: ``python -X dev`` would warn
        of a socket left open and a subprocess still running."""
        self._conn.close()
        self._sock.close()
        self.popen.kill()
        self.popen.wait(5)


#: This process's zygote, kept for every later check (each import costs about 1.5 s of CPU). A process
#: forked from this one (a parallel job) inherits it but never asks it for children: their answers would
#: mix on its one pipe. It starts its own (`owner`).
_ZYGOTE: _Zygote | None = None


@atexit.register
def _close_own_zygote() -> None:
    if _ZYGOTE is not None and _ZYGOTE.owner == os.getpid():  # an inherited one: its starter ends it
        _ZYGOTE.close()


def prepare() -> _Zygote:
    """This process's zygote, started now (importing torch while the caller goes on) unless it runs."""
    global _ZYGOTE
    if _ZYGOTE is None or _ZYGOTE.owner != os.getpid() or not alive(_ZYGOTE.popen.pid):
        _ZYGOTE = _Zygote()
    return _ZYGOTE


def start(spec: Any) -> tuple[Interpreter, Connection]:
    """A child of the zygote running ``spec``, and the connection to it; raises what pickling ``spec``
    raises (a factory in a closure cannot be named in another interpreter): the caller forks instead."""
    payload = pickle.dumps(spec)  # before anything starts: an unpicklable factory fails here
    zygote = prepare()
    mine, theirs = socket.socketpair()
    try:
        pid = zygote.fork(payload, theirs.fileno())
    finally:
        theirs.close()
    return Interpreter(zygote, pid), Connection(mine.detach())


def zygote_main(line: str) -> None:
    """The zygote (`start_python`'s entry, which dies with the checker from its first line): import what a child
    needs, then fork one per request, and reap them."""
    conn = Connection(int(line))
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    ignore_set_vital()  # a new interpreter has none of the checker's warning filters
    import torch  # noqa: F401  (the import every child would otherwise pay)
    import torchdata.stateful_dataloader  # noqa: F401

    ended: dict[int, int] = {}
    while True:
        try:
            command = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return  # the checker is gone
        with contextlib.suppress(ChildProcessError):  # no child left
            while (reaped := os.waitpid(-1, os.WNOHANG))[0]:  # (0, 0): none has ended since
                ended[reaped[0]] = os.waitstatus_to_exitcode(reaped[1])  # -signal, as multiprocessing's
        if command[0] == "status":
            pid = command[1]
            conn.send_bytes(pickle.dumps(ended.get(pid, None if psutil.pid_exists(pid) else -signal.SIGKILL)))
            continue
        _, path, files, spec = command
        fds = reduction.recvfds(sock, 3)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                conn.close()
                sock.close()
                os.dup2(fds[1], 1)
                os.dup2(fds[2], 2)
                _child(fds[0], path, files, spec)
                code = 0
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        conn.send_bytes(pickle.dumps(pid))


def _child(fd: int, path: list[str], files: dict[str, str], spec_bytes: bytes) -> None:
    conn = Connection(fd)
    sys.path[:] = path
    try:
        for name, file in files.items():
            found = importlib.util.spec_from_file_location(name, file)
            assert found is not None and found.loader is not None, file
            sys.modules[name] = module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
        spec = pickle.loads(spec_bytes)
    except Exception as e:  # the factory's module does not import here: the answer to "start" says so
        conn.recv_bytes()
        conn.send_bytes(pickle.dumps(f"the factory cannot be rebuilt in a new interpreter: {type(e).__name__}: {e}"))
        return
    child_main(conn, None, dataclasses.replace(spec, parent_pid=os.getppid()))  # its parent is the zygote


@dataclass(frozen=True)
class ChildSpec:
    """What the child needs (pickled only for a new interpreter, `start`)."""

    handler: Handler
    run_dir: Path
    board: Path
    fault_file: Path
    parent_pid: int
    #: The TMPDIR of the loader's processes (`workspace.loaders_tmpdir`; None: the checker's).
    tmp_dir: Path | None = None


@dataclass(frozen=True)
class EngineError:
    """The child's own code failed (not the loader's): the supervisor raises it as a bug of the checker."""

    trace: str


def child_main(conn: Connection, other_end: Connection | None, spec: ChildSpec) -> None:
    """Put right what the child must not inherit, then answer commands until told to stop (or orphaned)."""
    if other_end is not None:
        other_end.close()  # the supervisor's end (a fork has it): holding it hides the supervisor's death
    os.setsid()  # Ctrl-C reaches the supervisor only, which kills the session as one
    die_with_parent(spec.parent_pid)
    os.environ[MARKER_ENV] = str(spec.run_dir)
    use_tmpdir(spec.tmp_dir)  # where a killed worker's pymp-* directory is removed with the workspace
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    import torch

    torch.set_num_threads(1)  # a forked child's first parallel tensor operation would block for good
    faulthandler.enable(open(spec.fault_file, "w", encoding="utf-8"), all_threads=True)  # it keeps the file
    status.install(status.Board(spec.board))
    handler = dataclasses.replace(spec.handler, keep=current_children())  # the child's own processes
    with steps.references_kept():
        while True:
            try:
                command = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if command[0] == "stop":
                conn.send_bytes(pickle.dumps("stopping"))
                return
            try:
                answer = handler(command)
            except Exception:
                answer = EngineError(traceback.format_exc())
            status.command("waiting for the next command")
            try:
                data = pickle.dumps(answer)
            except Exception as e:
                data = pickle.dumps(EngineError(f"the answer to {command[0]!r} cannot be pickled: "
                                                f"{type(e).__name__}: {e}"))
            conn.send_bytes(data)
