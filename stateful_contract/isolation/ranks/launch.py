"""Starting a phase's ranks the way ``torchrun`` starts them, talking to each one directly, ending what is left.

Each rank is a new interpreter started as every one is (`processes.start_python`: torchrun's way), given the
variables torchrun's agent gives a rank (torch v2.13.0: ``LocalElasticAgent._start_workers`` in
torch/distributed/elastic/agent/server/local_elastic_agent.py). The checker keeps one end
of a socket pair per rank (`multiprocessing.connection`: one transport, no port, no relay) and sends each
command to every rank itself; the ranks form their gloo group among themselves for the loader's collectives
only. Why, and how a hang is ended from outside: docs/distributed.md, "Ranks that raise, die or hang". What
a rank sees besides (torchrun's variables, `torchrun_env`; the user's command's directory, import path and
arguments, `of_caller`, set in the rank before any of the user's code runs): "What a rank sees". The first
message on a rank's connection is its spec (`Phase.start`), pickled as every command is.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import psutil

from ...repro import status
from ..processes import fault_excerpt, kill_sessions, start_python
from .failures import LaunchOutcome, RankFailure, order_failures

__all__ = ["JOINING", "STOP", "Phase", "board_path", "of_caller", "torchrun_env", "where_ranks_were"]

#: How a rank's status starts until it has joined.
JOINING = "joining the gloo process group"
#: The command that ends a rank's loop (a follower's in a launcher's world: `world.World.follow`).
STOP = "stop"
#: Seconds the other ranks get to end on their own once one rank is gone (their own error is then theirs).
SETTLE = 1.0


def board_path(run_dir: Path, rank: int) -> Path:
    """``rank``'s status log (`stateful_contract.repro.status`): its call into the loader, its program."""
    return run_dir / "status" / f"rank{rank}.board"


def of_caller() -> dict[str, Any]:
    """What the process that runs the check gives the user's code, for its ranks to give it too."""
    return {"cwd": os.getcwd(), "sys_path": list(sys.path), "argv": list(sys.argv)}


def torchrun_env(rank: int, world_size: int, port: int, run_id: str, error_file: Path) -> dict[str, str]:
    """What ``torchrun --nproc-per-node world_size`` adds to rank ``rank``'s environment on one node (torch
    v2.13.0: ``LocalElasticAgent._start_workers`` and ``_set_local_rank_env``, torch/distributed/run.py's
    ``OMP_NUM_THREADS``, ``elastic_launch``'s ``TORCHELASTIC_SIGNALS_TO_HANDLE``); ``port``: the store the
    checker hosts, as torchrun's agent hosts its own (`_store`)."""
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
           "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(world_size), "WORLD_SIZE": str(world_size),
           "GROUP_WORLD_SIZE": "1", "ROLE_WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
           "TORCHELASTIC_RUN_ID": run_id, "TORCH_NCCL_ASYNC_ERROR_HANDLING":
               os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
           "TORCHELASTIC_ERROR_FILE": str(error_file)}
    if (signals := _signals_to_handle()) is not None:
        env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = signals
    if "OMP_NUM_THREADS" not in os.environ and world_size > 1:
        env["OMP_NUM_THREADS"] = "1"
    return env


def _signals_to_handle() -> str | None:
    """What ``elastic_launch`` writes into its own environment, which torchrun's ranks inherit:
    ``LaunchConfig.signals_to_handle``'s default (torch/distributed/launcher/api.py; None in a torch without it)."""
    from torch.distributed.launcher.api import LaunchConfig

    found = {f.name: f for f in fields(LaunchConfig)}.get("signals_to_handle")
    return None if found is None else str(found.default)


def _store() -> Any:
    """The store a phase's ranks form their gloo group through, hosted in the checker as torchrun's agent
    hosts its rendezvous store for its ranks (``TORCHELASTIC_USE_AGENT_STORE``: every rank a client), on a
    port the kernel gives it as it listens. A port picked here and listened on later by rank 0 was taken in
    between under load (EADDRINUSE: a correct loader failed its search phase)."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined]  # exported at run time

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


@dataclass(eq=False)
class Phase:
    """One set of rank processes: the checker's end of each one's connection, its exit code and time."""

    name: str
    run_dir: Path
    procs: list[subprocess.Popen[bytes]]
    conns: list[Connection]
    logs: Path
    #: The answers to the command in flight, by rank (`collect`).
    answers: dict[int, Any] = field(default_factory=dict)
    #: When each rank's process was first seen gone (``time.time()``), by rank.
    exited_at: dict[int, float] = field(default_factory=dict)
    #: Ranks whose connection closed before they answered.
    lost: set[int] = field(default_factory=set)
    #: Idle phases whose processes run beside this one's (`park`): this one's `kill` spares them.
    beside: tuple[Phase, ...] = ()
    #: The ranks' store (`_store`), kept until they are gone.
    store: Any = None

    @classmethod
    def start(cls, run_dir: Path, name: str, world_size: int, spec: dict[str, Any],
              tmp_dir: Path | None = None) -> Phase:
        """The ranks, started, each sent ``spec`` with the caller's process (`of_caller`) first; ``tmp_dir``:
        their TMPDIR (`workspace.loaders_tmpdir`; None: the checker's)."""
        (run_dir / "status").mkdir(parents=True, exist_ok=True)
        logs = run_dir / "logs" / name
        store, procs, conns = _store(), [], []
        for rank in range(world_size):
            mine, theirs = socket.socketpair()
            error_file = logs / "attempt_0" / str(rank) / "error.json"
            error_file.parent.mkdir(parents=True, exist_ok=True)
            env = torchrun_env(rank, world_size, store.port, f"{run_dir.name}-{name}", error_file)
            if tmp_dir is not None:
                env["TMPDIR"] = str(tmp_dir)
            with open(error_file.with_name("stderr.log"), "wb") as out:
                procs.append(start_python("stateful_contract.isolation.ranks.world:rank_main", str(run_dir), name,
                                          str(theirs.fileno()), env=env, pass_fds=(theirs.fileno(),),
                                          run_dir=run_dir, output=out))
            theirs.close()
            conns.append(Connection(mine.detach()))
        phase = cls(name, run_dir, procs, conns, logs, store=store)
        phase.send({**spec, "process": of_caller()})  # no answer: the first command's is the next one read
        return phase

    def send(self, command: Any) -> None:
        """``command`` to every rank (plain pickle: tensors travel as data, not shared-memory handles)."""
        self.answers = {}
        data = pickle.dumps(command)
        for rank, conn in enumerate(self.conns):
            try:
                conn.send_bytes(data)
            except OSError:
                self.lost.add(rank)

    def collect(self) -> bool:
        """Read what has come (waiting up to `supervised.POLL` s): every rank answered, or one is gone."""
        from ..supervised import POLL

        waiting = {self.conns[r]: r for r in range(len(self.conns)) if r not in self.answers and r not in self.lost}
        for conn in wait(list(waiting), POLL) if waiting else []:
            rank = waiting[conn]  # type: ignore[index]
            try:
                self.answers[rank] = pickle.loads(conn.recv_bytes())  # type: ignore[union-attr]
            except (EOFError, OSError):
                self.lost.add(rank)
        for rank, proc in enumerate(self.procs):
            if proc.poll() is not None:
                self.exited_at.setdefault(rank, time.time())
        return len(self.answers) == len(self.conns) or bool(self.lost or self.exited_at)

    @property
    def failed(self) -> bool:
        return bool(self.lost or self.exited_at)

    def stop(self) -> bool:
        """Every rank told to leave (each has answered every command) and killed once it says it leaves (up to
        `SETTLE` s): a torch interpreter's teardown is no part of the check (it took the whole second at load
        9). Whether every rank said so."""
        self.send((STOP,))
        limit = time.monotonic() + SETTLE
        while len(self.answers) < len(self.conns) and not self.lost and time.monotonic() < limit:
            self.collect()
        clean = len(self.answers) == len(self.conns)
        self.kill()
        return clean

    def park(self, *, back: bool = False) -> None:
        """Leave the ranks idle while another phase runs (``back``: take them back): their status logs set
        apart, where the other phase's ranks write theirs (each rank keeps writing the file it opened)."""
        for rank in range(len(self.procs)):
            moves = (board_path(self.run_dir, rank), self.run_dir / "status" / f"parked-{self.name}-rank{rank}.board")
            with contextlib.suppress(FileNotFoundError):  # a rank that never opened its log
                os.replace(*(moves[::-1] if back else moves))

    def kill(self) -> None:
        """End every rank, its workers, and anything else carrying the run's marker but a parked phase's."""
        for conn in self.conns:
            conn.close()
        spare: set[int] = set()
        for proc in (proc for other in self.beside for proc in other.procs):
            with contextlib.suppress(psutil.Error):
                spare |= {proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))}
        # torchrun starts each rank in a session of its own: one signal each (a reaped rank's pid may be another's
        # now); then one sweep for what left its session (a rank's daemon, say), and what they left in /dev/shm.
        kill_sessions([proc.pid for proc in self.procs if proc.poll() is None], self.run_dir, frozenset(spare))
        for rank, proc in enumerate(self.procs):
            proc.wait()
            self.exited_at.setdefault(rank, time.time())
        self.store = None

    def down(self, *, timed_out: bool, timeout: float) -> LaunchOutcome:
        """Give the other ranks `SETTLE` s to end once one is gone, kill what is left, say what happened."""
        limit = time.monotonic() + (0 if timed_out else SETTLE)
        while time.monotonic() < limit and any(p.poll() is None for p in self.procs):
            self.collect()
        # Given up on (``timed_out``), the ranks still running are ended by the checker: their SIGKILL is the
        # run's limit, told as such, not a rank's own death (it once said "rank 0 was killed by signal SIGKILL").
        given_up = {rank for rank, p in enumerate(self.procs) if p.poll() is None} if timed_out else set()
        self.kill()
        doing, programs = where_ranks_were(self.run_dir, len(self.procs))
        failures = order_failures([self._failure(rank, doing.get(rank, "")) for rank, proc in enumerate(self.procs)
                                   if proc.returncode != 0 and rank not in given_up])
        return LaunchOutcome(failures=failures, doing=doing,
                             programs=programs, timed_out=timed_out and not failures, timeout=timeout)

    def _failure(self, rank: int, doing: str) -> RankFailure:
        from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

        error_file = self.logs / "attempt_0" / str(rank) / "error.json"
        proc = self.procs[rank]
        message: Any = ""
        with contextlib.suppress(ValueError, OSError):  # an error file cut short by the kill: no message
            message = ProcessFailure(local_rank=rank, pid=proc.pid, exitcode=proc.returncode,
                                     error_file=str(error_file) if error_file.is_file() else "").message
        if isinstance(message, dict):  # written by torch's @record wrapper
            message = message.get("message", "")
        if not isinstance(message, str) or message.startswith("To enable traceback"):
            message = ""
        return RankFailure(rank=rank, phase=self.name, exitcode=proc.returncode, error=message, doing=doing,
                           stderr_tail=_tail(error_file.with_name("stderr.log")), exited_at=self.exited_at.get(rank),
                           in_loader=status.read(board_path(self.run_dir, rank)).in_call)


def _tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` of a dead rank's output that say something."""
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    if fault := fault_excerpt(text):  # a fatal signal: the loader's frames
        return fault
    kept = [line for line in text.splitlines() if line.strip() and "Warning" not in line
            and "torch.set_vital" not in line]
    return "\n".join(kept[-lines:])


def where_ranks_were(run_dir: Path, world_size: int) -> tuple[dict[int, str], dict[int, str]]:
    """By rank, from its status log: what each was doing (and its call into the loader), and its reproduction
    up to where it stopped."""
    doing, programs = {}, {}
    for rank in range(world_size):
        board = status.read(board_path(run_dir, rank))
        doing[rank] = board.command + (f", {board.during}" if board.call else "")
        if board.program:
            programs[rank] = board.program + ("  # <- this rank stopped here" if board.in_call else "")
    return doing, programs
