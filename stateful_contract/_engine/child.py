"""Inside the supervised child: the loader's process, answering the supervisor's commands.

Forked from the checker's process, it inherits the factory (closures and lambdas work) and
torch already imported: a child costs milliseconds. What it must not inherit is put right
first (`child_main`; docs/supervision.md, "What the child inherits, and what not", says why each).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import pickle
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from . import status, steps
from .executors import Handler
from .guard import current_children
from .processes import MARKER_ENV, die_with_parent

__all__ = ["ChildSpec", "EngineError", "child_main"]


@dataclass(frozen=True)
class ChildSpec:
    """What the child needs (handed over by ``fork``; pickled only for a new interpreter, `interpreter.start`)."""

    handler: Handler
    run_dir: Path
    board: Path
    fault_file: Path
    parent_pid: int


@dataclass(frozen=True)
class EngineError:
    """The child's own code failed (not the loader's): the supervisor raises it as a bug of the checker."""

    trace: str


def child_main(conn: Connection, other_end: Connection | None, spec: ChildSpec) -> None:
    """The child's whole life: put right what it must not inherit, then answer commands until told to
    stop (or orphaned)."""
    if other_end is not None:
        other_end.close()  # the supervisor's end (a fork has it): holding it hides the supervisor's death
    os.setsid()  # Ctrl-C reaches the supervisor only, which kills the session as one
    die_with_parent(spec.parent_pid)
    os.environ[MARKER_ENV] = str(spec.run_dir)
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
