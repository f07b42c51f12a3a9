"""The supervised executor: the loader runs in a child process that this process watches.

Nothing the loader does can take the check down. The engine (the search, Hypothesis, the
report) stays in the caller's process; the loader lives in a child forked from it
(`stateful_contract._engine.child`), which answers one pickled command at a time, as the
ranks' rank 0 does. While it waits for an answer the supervisor watches three things:

- the child's death (a pidfd: noticed at once, even while its DataLoader workers live on):
  a signal (SIGSEGV from a native extension, SIGKILL from the kernel's OOM killer) or an
  exit code (``os._exit(7)``);
- the example timeout: the child interrupts ordinary hangs itself (``SIGALRM``, and the
  clause fails as in-process); when that cannot work (the signal is blocked, or native
  code never returns to Python) the child stops answering, and once its status log
  shows the timeout passed by `grace` seconds the supervisor kills it;
- memory: what the child and its workers gained during the example, against the memory
  limit, five times a second.

Either way the supervisor kills the child's whole session (no worker is left behind),
reads the status log to say what the loader was doing, and answers the engine with a
failed `ExampleRun`: the clause fails with "the loader killed the process with SIGSEGV
during loader.load_state_dict(state)" and the reproduction up to that line. The next
command starts a fresh child. A crash is cheap to repeat, so it shrinks like any failure
(up to `SHRINK_CRASHES` crashes per clause); a hang or a memory blow-up ends the clause
unshrunk, as each re-run would wait it out again.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal

from ..config import LoaderConfig
from . import interpreter, status
from .child import ChildSpec, EngineError, child_main
from .example import ClauseLike, ExampleRun, LoadFormProbe
from .executors import BUILDING, FactoryProblem, StartFailed
from .impact import died
from .outcome import ClauseViolation, Outcome
from .plans import Alignment
from .processes import CRASH_SIGNALS, anon_rss, describe_exit, fault_excerpt, gained, kill_session
from .steps import Factory, LoadForm

__all__ = ["DEFAULT_MEMORY_LIMIT", "SHRINK_CRASHES", "Isolation", "Supervised", "choose_isolation", "grace",
           "supported"]

#: Where the loader runs for one rank: ``"supervised"`` (a child process this one watches:
#: nothing the loader does takes the check down) or ``"in-process"`` (this process: a little
#: faster, and a debugger can follow the loader, but a crash or an uninterruptible hang is
#: the check's own). Several ranks always run in processes of their own.
Isolation = Literal["supervised", "in-process"]

#: What the loader's processes may gain during one example, by default: far more than any
#: loader of the contract's small datasets needs, far less than it takes to bring a machine down.
DEFAULT_MEMORY_LIMIT = 4 << 30
#: Crashes of one clause's examples re-run in fresh children while shrinking; then the
#: smallest crashing example found so far is reported, saying the shrinking stopped.
SHRINK_CRASHES = 30
#: Seconds between looks at a child that has not answered yet.
POLL = 0.1
#: Seconds between memory readings of the loader's processes.
MEMORY_EVERY = 0.2


def grace(timeout: float) -> float:
    """Seconds past the example timeout before a child that has not answered is killed as hung.

    The child's own alarm ends ordinary hangs at the timeout; this is the time it may take to
    unwind (worker shutdown) before the supervisor concludes the alarm could not reach it.
    """
    return min(max(1.0, 0.25 * timeout), 10.0)


def supported() -> bool:
    """Supervision forks the child from the checker's process: POSIX with ``fork``."""
    return hasattr(os, "fork") and "fork" in multiprocessing.get_all_start_methods()


def choose_isolation(isolation: Isolation | None) -> Isolation:
    """``isolation``, or the default: supervised on Linux (elsewhere ``fork`` is not safe with
    the system's frameworks, and the clean-up reads ``/proc``)."""
    if isolation is None:
        return "supervised" if sys.platform.startswith("linux") and supported() else "in-process"
    if isolation not in ("supervised", "in-process"):
        raise ValueError(f"isolation must be 'supervised' or 'in-process', got {isolation!r}")
    return isolation


@dataclass
class Death:
    """How the child ended and what its loader was doing."""

    killed_by: str  # "SIGSEGV", "exit code 7", "timeout", "memory limit"
    got: str
    final: bool
    board: status.BoardView
    fault: str = ""

    def reproduction(self) -> str:
        program = self.board.program
        if program and self.board.in_call:
            how = "was killed" if self.final else "died"
            program += f"  # <- the process {how} here ({self.killed_by})"
        return program


class Supervised:
    """Runs the loader in a supervised child process; survives whatever the loader does."""

    world_size = 1

    def __init__(self, factory: Factory, factory_import: str, alignment: Alignment = None,
                 timeout: float | None = None, memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
                 new_interpreter: bool = False) -> None:
        if not supported():
            raise RuntimeError("supervised checks need os.fork (Linux, macOS); use isolation='in-process'")
        self.factory = factory
        self.factory_import = factory_import
        self.alignment: Alignment = alignment
        self.timeout = timeout or None
        self.memory_limit = memory_limit or None
        self.load_form: LoadForm = "positional"
        self.notes: list[str] = []
        self.run_dir = Path(tempfile.mkdtemp(prefix="stateful-contract-"))
        #: Where the examples write their files (a sibling shares its elder's).
        self.scratch = self.run_dir / "scratch"
        #: A process that never ran an example of this check: its examples resume in it.
        self.fresh_processes = True
        #: The child is a new interpreter (`interpreter.start`), not a fork: another string hash secret.
        self.new_interpreter = new_interpreter
        #: The ``PYTHONHASHSEED`` of the new interpreter, once started.
        self.hash_seed: str | None = None
        self._proc: Any = None  # multiprocessing.Process
        self._conn: Connection | None = None
        self._pidfd: int | None = None
        self._spec: ChildSpec | None = None
        self._children = 0
        self._crashes: dict[str, int] = {}
        self._spawned_rss = 0

    # -- the child's life ----------------------------------------------------------------

    def _spawn(self) -> None:
        self._children += 1
        n = self._children
        self._spec = ChildSpec(self.factory, self.factory_import, self.alignment, self.timeout, self.run_dir,
                               self.run_dir / f"board-{n}", self.run_dir / f"fault-{n}.txt", os.getpid(),
                               self.scratch)
        for stream in (sys.stdout, sys.stderr):  # or the child would print the parent's buffered text again
            with contextlib.suppress(Exception):
                stream.flush()
        if self.new_interpreter:
            self._proc, self._conn = interpreter.start(self._spec)
            self.hash_seed = self._proc.hash_seed
        else:
            ctx = multiprocessing.get_context("fork")
            mine, theirs = ctx.Pipe(duplex=True)
            # Not a daemon: a daemonic process may not start DataLoader workers.
            proc = ctx.Process(target=child_main, args=(theirs, mine, self._spec),
                               name=f"stateful-contract-loader-{n}")
            proc.start()
            theirs.close()
            self._proc, self._conn = proc, mine
        pid = self._proc.pid
        assert pid is not None
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None
        self._spawned_rss = anon_rss(pid) or 0

    def _kill(self) -> None:
        """Kill the child's session (the child, its workers, whatever they forked) and reap the child."""
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return
        kill_session(proc.pid, marker=self.run_dir)  # before reaping: the pid stays the group's until then
        proc.join(5)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _dead(self) -> bool:
        if self._pidfd is not None:
            return bool(wait([self._pidfd], 0))
        return self._proc is None or self._proc.exitcode is not None

    def _call(self, command: tuple[Any, ...]) -> Any:
        """The child's answer to ``command``, or the `Death` that ended the child instead."""
        if self._proc is not None and self.memory_limit and self._grown() > self.memory_limit:
            self.notes.append("the loader's process had grown past the memory limit over several examples "
                              "and was replaced by a fresh one")
            self.stop()
        if self._proc is None:
            self._spawn()
        try:
            return self._await(command)
        except BaseException:  # Ctrl-C: nothing of the loader outlives the check
            self._kill()
            raise

    def _grown(self) -> int:
        return (anon_rss(self._proc.pid) or 0) - self._spawned_rss

    def _await(self, command: tuple[Any, ...]) -> Any:
        assert self._conn is not None and self._proc is not None and self._spec is not None
        sent = time.monotonic()
        timeout = self.timeout
        cap = sent + 2 * timeout + 60 if timeout else float("inf")
        baseline: dict[int, int] = {self._proc.pid: anon_rss(self._proc.pid) or 0}
        next_memory = sent + MEMORY_EVERY
        handles: list[Any] = [self._conn] + ([self._pidfd] if self._pidfd is not None else [])
        try:
            self._conn.send_bytes(pickle.dumps(command))
        except OSError:
            return self._died()
        while True:
            ready = wait(handles, POLL)
            if self._conn in ready:
                try:
                    answer = pickle.loads(self._conn.recv_bytes())
                except (EOFError, OSError):
                    return self._died()
                if isinstance(answer, EngineError):
                    raise RuntimeError(f"the supervised child failed (a bug of stateful-contract):\n{answer.trace}")
                return answer
            if ready or self._dead():
                return self._died()
            now = time.monotonic()
            board = status.read(self._spec.board)
            if board.deadline is not None and timeout:
                started, seconds = board.deadline
                if now > started + seconds + grace(seconds):
                    return self._died(hung=now - started)
            elif now > cap:
                return self._died(hung=now - sent)
            if self.memory_limit and now >= next_memory:
                next_memory = now + MEMORY_EVERY
                grown = gained(self._proc.pid, baseline)
                if grown > self.memory_limit:
                    return self._died(memory=grown)

    def _died(self, hung: float | None = None, memory: int | None = None) -> Death:
        assert self._proc is not None and self._spec is not None
        proc, spec = self._proc, self._spec
        self._kill()
        board = status.read(spec.board)
        try:
            fault = fault_excerpt(spec.fault_file.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            fault = ""
        during = board.during
        if hung is not None:
            limit = f"{self.timeout:g} s" if self.timeout else "the command limit"
            return Death("timeout", (
                f"the example did not finish within {limit}, and the process stopped answering {during}: the "
                "timeout could not interrupt it (SIGALRM blocked, or native code that never returns to Python), "
                f"so the checker killed it and its workers after {hung:.1f} s"), True, board)
        if memory is not None:
            assert self.memory_limit is not None
            return Death("memory limit", (
                f"the loader's processes grew by {_size(memory)} {during}, over the memory limit of "
                f"{_size(self.memory_limit)}; the checker killed them (memory_limit= / --memory-limit sets it)"),
                True, board)
        code = proc.exitcode if proc.exitcode is not None else -signal.SIGKILL
        killed_by, _ = describe_exit(code)
        if code >= 0:
            got = f"the loader ended the process with exit code {code} {during} (os._exit, or exit() in native code)"
        elif -code in CRASH_SIGNALS:
            got = f"the loader killed the process with {killed_by} {during}"
        else:
            got = f"the process was killed by {killed_by} {during}, not by the checker"
            if -code == signal.SIGKILL:
                got += " (the kernel's out-of-memory killer sends SIGKILL when the machine runs out of memory)"
        return Death(killed_by, got, False, board, fault)

    def _crashed(self, clause: ClauseLike, death: Death) -> ExampleRun:
        crashes = self._crashes[clause.id] = self._crashes.get(clause.id, 0) + 1
        final = death.final or crashes > SHRINK_CRASHES
        v = ClauseViolation(clause.id, heading=clause.heading,
                            expected="the example to finish, with the loader's process alive", got=death.got,
                            impact=died(death.board.call if death.board.in_call else "", death.killed_by))
        message = v.message
        if death.board.command:
            message += f"\nDoing: {death.board.command}"
        if death.fault:
            message += f"\n\nPython stack at the crash (faulthandler, most recent call first):\n{death.fault}"
        outcome = Outcome.of_violation(v, message=message + "\n(The check went on in a fresh process.)",
                                       killed_by=death.killed_by)
        if death.final:
            outcome.notes.append(f"not shrunk: every re-run of a smaller example would wait out the "
                                 f"{'timeout' if death.killed_by == 'timeout' else 'memory limit'} again")
        elif final:
            outcome.notes.append(f"shrinking stopped after {SHRINK_CRASHES} crashes: this is the smallest "
                                 "crashing example found by then")
        return ExampleRun(0, outcome, reproduction=death.reproduction(), final=final)

    # -- the executor --------------------------------------------------------------------

    def start(self) -> None:
        answer = self._call(("start",))
        if self.new_interpreter and self._proc is not None:  # its imports are not the loader's growth
            self._spawned_rss = anon_rss(self._proc.pid) or 0
        if isinstance(answer, Death):
            raise StartFailed(self._crashed(BUILDING, answer))
        if isinstance(answer, ExampleRun):
            raise StartFailed(answer)
        if answer is not None:
            raise FactoryProblem(answer)

    def probe(self) -> LoadFormProbe:
        answer = self._call(("probe",))
        if isinstance(answer, Death):
            return LoadFormProbe("unusable", answer.got, self._crashed(BUILDING, answer))
        assert isinstance(answer, LoadFormProbe)
        return answer

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        answer = self._call(("lengths", clause, config))
        return self._crashed(clause, answer) if isinstance(answer, Death) else answer

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        answer = self._call(("run", clause, config, plan, self.load_form))
        return [self._crashed(clause, answer) if isinstance(answer, Death) else answer]

    def stop(self) -> None:
        """End the child (politely, then by force); the next command starts a fresh one."""
        if self._conn is not None and self._proc is not None:
            with contextlib.suppress(OSError, EOFError):
                self._conn.send_bytes(pickle.dumps(("stop",)))
                if self._conn.poll(2):
                    self._conn.recv_bytes()
            if self._pidfd is not None:  # exited, but not reaped: its session is still its own to kill
                wait([self._pidfd], 2)
        self._kill()

    def restart(self, phase: str, world_size: int | None = None) -> None:
        # The next command starts a fresh child: SC30's fresh-process half, on one process.
        # (Other world sizes are the multi-rank executor's; one rank has no SC31.)
        self.stop()

    def sibling(self, new_interpreter: bool = False) -> Supervised:
        """A second child beside this one, reading the files this one's examples wrote.

        A resume in a fresh process (SC10's second half) runs there, so this child keeps the
        uninterrupted runs it has taken for the clauses still to come (with workers, about
        0.4 s each). Its own directory, status logs and process marker keep the two apart.
        ``new_interpreter``: started anew rather than forked (`interpreter`), about 2 s of
        imports, for a string hash secret of its own; `start` it to know it could be.
        """
        other = Supervised(self.factory, self.factory_import, self.alignment, self.timeout, self.memory_limit,
                           new_interpreter=new_interpreter)
        other.scratch = self.scratch
        other.load_form = self.load_form
        return other

    def close(self) -> None:
        self.stop()
        restarts = sum(self._crashes.values())
        if restarts:
            self.notes.append(f"the loader's process crashed or hung {restarts} time{'s' if restarts != 1 else ''}; "
                              "each time the check went on in a fresh one")
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"
