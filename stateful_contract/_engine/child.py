"""Inside the supervised child: the loader's process, answering the supervisor's commands.

The child is forked from the checker's process (it inherits the factory, so closures and
lambdas work, and torch is already imported: a child costs milliseconds, not an import).
What it must not inherit is put right before it runs anything:

- it starts a session of its own: Ctrl-C at the terminal reaches the supervisor only,
  and the child, its DataLoader workers and anything they fork share one session and
  process group, which the supervisor kills as one; processes started with ``exec``
  carry `stateful_contract._engine.processes.MARKER_ENV`;
- it dies with the supervisor (``PR_SET_PDEATHSIG``), so even a SIGKILL of the checker
  leaves no loader running;
- torch runs single-threaded in it, as in DataLoader workers: a forked process cannot use
  the OpenMP threads of its parent, and its first parallel tensor operation would block
  for good once the parent had run one;
- the parent's threads, timers (``setitimer``) and ``atexit`` handlers do not carry over
  (``fork`` and `multiprocessing`'s exit), and its signal handlers are reset;
- ``faulthandler`` writes the Python stack of a fatal signal to a file the supervisor
  quotes; the status log (`stateful_contract._engine.status`) says what it was doing.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from . import status, steps
from .example import ClauseLike, ExampleRun, probe_load_form, recorded_program, run_example
from .executors import PROBE_CONFIG, factory_problem, reference_lengths
from .guard import current_children, reap_children
from .plans import Alignment
from .processes import MARKER_ENV, die_with_parent
from .recording import recording
from .steps import Factory

__all__ = ["ChildSpec", "EngineError", "child_main"]


@dataclass(frozen=True)
class ChildSpec:
    """What the child needs (handed over by ``fork``; pickled only for a new interpreter, `interpreter.start`)."""

    factory: Factory
    factory_import: str
    alignment: Alignment
    timeout: float | None
    run_dir: Path
    board: Path
    fault_file: Path
    parent_pid: int
    #: Where examples write their files; shared by a sibling child (`Supervised.sibling`).
    scratch: Path


@dataclass(frozen=True)
class EngineError:
    """The child's own code failed (not the loader's): the supervisor raises it as a bug of the checker."""

    trace: str


def _isolate(spec: ChildSpec) -> Any:
    os.setsid()
    die_with_parent(spec.parent_pid)
    os.environ[MARKER_ENV] = str(spec.run_dir)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    import torch

    torch.set_num_threads(1)
    fault = open(spec.fault_file, "w", encoding="utf-8")
    faulthandler.enable(fault, all_threads=True)
    board = status.Board(spec.board)
    status.install(board)
    return fault


def child_main(conn: Connection, other_end: Connection | None, spec: ChildSpec) -> None:
    """The child's whole life: isolate, then answer commands until told to stop (or orphaned)."""
    if other_end is not None:
        other_end.close()  # the supervisor's end (a fork has it): holding it would hide the supervisor's death
    _isolate(spec)
    keep = current_children()
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
                answer = _answer(command, spec, keep)
            except Exception:
                answer = EngineError(traceback.format_exc())
            status.command("waiting for the next command")
            try:
                data = pickle.dumps(answer)
            except Exception as e:
                data = pickle.dumps(EngineError(f"the answer to {command[0]!r} cannot be pickled: "
                                                f"{type(e).__name__}: {e}"))
            conn.send_bytes(data)


def _answer(command: tuple[Any, ...], spec: ChildSpec, keep: set[int]) -> Any:
    kind = command[0]
    if kind == "start":
        status.command("building a loader: factory(config)")
        with recording(recorded_program(spec.factory_import, spec.factory, PROBE_CONFIG)):
            return factory_problem(spec.factory, PROBE_CONFIG, spec.timeout)
    if kind == "probe":
        status.command("probing how load_state_dict takes a state")
        return probe_load_form(spec.factory, PROBE_CONFIG, spec.timeout, factory_import=spec.factory_import)
    if kind == "lengths":
        _, clause, config = command
        status.command(f"{clause.id}: the uninterrupted run of {config.as_code()}")
        try:
            return reference_lengths(clause.id, clause.heading, spec.factory, config, spec.timeout,
                                     factory_import=spec.factory_import)
        finally:
            if config.num_workers > 0:
                reap_children(keep)
    if kind == "run":
        _, clause, config, plan, load_form = command
        return _run(clause, config, plan, load_form, spec, keep)
    raise ValueError(f"unknown command {kind!r}")


def _run(clause: ClauseLike, config: Any, plan: Any, load_form: Any, spec: ChildSpec, keep: set[int]) -> ExampleRun:
    status.command(f"{clause.id}: example {config.as_code()}" + (f", plan {plan!r}" if plan is not None else ""))
    try:
        scratch = spec.scratch  # a clause's checkpoint files (SC19's DCP directory, SC10's saved states)
        scratch.mkdir(parents=True, exist_ok=True)
        return run_example(clause, spec.factory, config, plan, factory_import=spec.factory_import,
                           load_form=load_form, alignment=spec.alignment, timeout=spec.timeout, workdir=scratch)
    finally:
        if config.num_workers > 0:
            reap_children(keep)  # workers of a loader abandoned mid-epoch
