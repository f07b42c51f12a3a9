"""The supervised executor: the loader runs in a child process (`interpreter.child_main`) that this
process watches (`watch`: its death, a hang its own alarm could not end, the memory it gained); then
the child's session is killed, and its status log says what the loader was doing (docs/supervision.md)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

from ..config import LoaderConfig
from ..repro import progress, status
from ..repro.guard import raise_lost_ctrl_c
from ..repro.impact import died
from ..repro.outcome import Outcome
from ..repro.progress import RunLimit
from ..repro.steps import Factory
from ..search.example import ClauseLike, ExampleRun
from ..search.plans import Alignment
from ..spellings import Hint
from . import interpreter
from .executors import BUILDING, PROBE_CONFIG, Handler, OneProcess
from .interpreter import ChildSpec, EngineError, child_main
from .leftovers import remove_tmpdir
from .processes import anon_rss, death, fault_excerpt, gained, growth, hang, kill_session, no_answer
from .workspace import loaders_tmpdir, new_dir

__all__ = ["COMMAND_GRACE", "DEFAULT_MEMORY_LIMIT", "POLL", "SHRINK_CRASHES", "Isolation", "RunLimit",
           "Supervised", "choose_isolation", "command_limit", "grace", "supported", "watch"]

#: Where the loader runs for one rank: ``"supervised"`` (a child process this one watches) or
#: ``"in-process"`` (this process: a debugger can follow the loader, but a crash is the check's own).
Isolation = Literal["supervised", "in-process"]

#: What the loader's processes may gain during one example, by default (docs/supervision.md says why).
DEFAULT_MEMORY_LIMIT = 4 << 30
#: Crashes of a clause re-run in fresh children while shrinking; then the smallest so far is reported.
SHRINK_CRASHES = 30
#: Seconds between looks at a child that has not answered yet.
POLL = 0.1
#: Seconds between memory readings of the loader's processes.
MEMORY_EVERY = 0.2
#: Seconds between readings of the `progress.Clock` the timeouts are charged on.
PROGRESS_EVERY = 0.5
#: Seconds a command may take beyond twice the example timeout (process start-up, DCP, gathering).
COMMAND_GRACE = 60.0


def command_limit(timeout: float | None) -> float | None:
    """Charged seconds one command may take before the processes that run it are given up on as not answering
    (start-up, a join, the part of a command no example timeout covers): twice the example ``timeout`` and
    `COMMAND_GRACE`, for one rank and for several. None without an example timeout: whoever turned the timeout
    off (``--timeout 0``) asked that nothing be called hung, and a first command that imports and builds a slow
    loader must not be (several ranks still end at the run's limit, ``run_timeout``, a `RunLimit`)."""
    return 2 * timeout + COMMAND_GRACE if timeout else None


def grace(timeout: float) -> float:
    """Seconds past the example timeout before a child that has not answered is killed as hung: the
    time its own alarm may take to unwind (worker shutdown)."""
    return min(max(1.0, 0.25 * timeout), 10.0)


def supported() -> bool:
    """Supervision forks the child from the checker's process: POSIX with ``fork``."""
    return hasattr(os, "fork") and "fork" in multiprocessing.get_all_start_methods()


def choose_isolation(isolation: Isolation | None) -> Isolation:
    """``isolation`` (`CheckOptions` checked it), or the default: supervised on Linux (elsewhere ``fork``
    is not safe with the system's frameworks)."""
    return isolation or ("supervised" if sys.platform.startswith("linux") and supported() else "in-process")


@dataclass(frozen=True)
class Stall:
    """Why `watch` gave up on a command: a process (by its log's index) hung, or outgrew the memory limit."""

    rank: int
    #: Wall seconds since its example timeout began (or, past the command's limit, since the command was sent).
    waited: float
    #: The example timeout that passed (None: the command's limit did).
    timeout: float | None = None
    #: Bytes the processes gained together, past the memory limit (0: not the memory).
    memory: int = 0
    #: The command's own limit (charged seconds) passed, not the caller's wall ``limit``.
    command: bool = False


def _here(board: status.BoardView) -> bool:
    """Whether the process that writes ``board`` runs on this host (its pid means something here)."""
    return bool(board.pid) and board.host in ("", socket.gethostname())


def watch(answered: Callable[[], bool], logs: Callable[[], list[status.BoardView]], *, sent: float,
          timeout: float | None, memory_limit: int | None, command_seconds: float | None,
          limit: RunLimit | None = None, baseline: dict[int, int] | None = None,
          processes: Callable[[], Iterable[int]] = tuple) -> Stall | None:
    """Look (``answered()``, up to `POLL` s each) until the answer came, or say why the command is given up:
    a log's example timeout passed by the `grace` (its alarm could not end it), the command was charged
    ``command_seconds``, the run's ``limit`` passed (the command's charge is added to it), or the processes the
    logs name (and descendants) gained over ``memory_limit`` since ``sent`` (``baseline``: what each had then; one first seen later counts
    from then). Timeouts are charged on one `progress.Clock` of every process the logs name on this host, the
    ``processes()`` started for the command (a log may not name them yet: a rank still importing torch), and
    their descendants: time they waited for a CPU other processes held is not counted (docs/supervision.md)."""
    clock = progress.Clock(lambda: {*processes(), *(board.pid for board in logs() if _here(board))})
    try:
        return _watch(answered, logs, clock, sent=sent, timeout=timeout, memory_limit=memory_limit,
                      command_seconds=command_seconds, limit=limit, baseline=baseline)
    finally:
        if limit is not None:
            limit.charged += _final_charge(clock, sent)


def _final_charge(clock: progress.Clock, sent: float) -> float:
    """What ``clock`` charged a command that ended now: read once more, or, for a command shorter than one
    interval between readings (most are), its wall time: a reading walks the process table (~10 ms), which
    hundreds of short commands would pay for seconds that a starved run never spends in them."""
    if (wall := time.monotonic() - sent) < PROGRESS_EVERY:  # no reading yet
        return wall
    with contextlib.suppress(Exception):  # the processes are gone: what was charged until then
        clock.sample()
    return clock.charged


def _watch(answered: Callable[[], bool], logs: Callable[[], list[status.BoardView]], clock: progress.Clock, *,
           sent: float, timeout: float | None, memory_limit: int | None, command_seconds: float | None,
           limit: RunLimit | None, baseline: dict[int, int] | None) -> Stall | None:
    baseline = {} if baseline is None else baseline
    next_memory = sent + MEMORY_EVERY
    next_progress = sent + PROGRESS_EVERY
    #: Per log's example timeout (its index, its start): the clock's charge when first seen, less the time
    #: between its start and then (counted in full).
    marks: dict[tuple[int, float], float] = {}
    #: The clock's readings (when taken, the charge by then): what it had charged when an example began.
    read = [(sent, 0.0)]
    while not answered():
        raise_lost_ctrl_c()
        now = time.monotonic()
        boards = logs()
        if now >= next_progress:
            next_progress = now + PROGRESS_EVERY
            read.append((time.monotonic(), clock.sample()))
        alarms = [(marks[r, b.deadline[0]], *b.charged) for r, b in enumerate(boards) if b.deadline and b.charged and
                  b.charged[0] >= b.deadline[0] and _here(b) and (r, b.deadline[0]) in marks]
        for rank, board in enumerate(boards):
            if not timeout or board.deadline is None:
                continue
            started, seconds = board.deadline
            if (rank, started) not in marks:
                if started >= read[-1][0]:  # not read since it began: the next reading says what its start cost
                    continue
                marks[rank, started] = progress.charge_at(read, started, clock.charged - max(0.0, now - started))
            spent = progress.counted_on(clock.charged, marks[rank, started], alarms if _here(board) else [], read)
            if spent > (allowed := seconds + board.patience + grace(seconds)) and now > started + allowed:
                return Stall(rank, now - started, seconds)
        if limit is not None and limit.passed(clock.charged, now):  # the run's, named first when both passed
            return Stall(0, now - sent)
        if command_seconds is not None and clock.charged > command_seconds and now > sent + command_seconds:
            return Stall(0, now - sent, command=True)
        if memory_limit and now >= next_memory:
            next_memory = now + MEMORY_EVERY
            grown = {rank: gained(board.pid, baseline) for rank, board in enumerate(boards) if board.pid}
            if sum(grown.values()) > memory_limit:
                return Stall(max(grown, key=grown.__getitem__), now - sent, memory=sum(grown.values()))
    return None


class Supervised(OneProcess):
    """Runs the loader in a supervised child process; survives whatever the loader does."""

    #: A process that never ran an example of this check: its examples resume in it.
    fresh_processes = True

    def __init__(self, factory: Factory, factory_import: str, alignment: Alignment = None,
                 timeout: float | None = None, memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
                 new_interpreter: bool = False, *, probe_config: LoaderConfig = PROBE_CONFIG) -> None:
        if not supported():
            raise RuntimeError("supervised checks need os.fork (Linux, macOS); use isolation='in-process'")
        self.timeout = timeout or None
        self.memory_limit = memory_limit or None
        self.notes: list[str] = []
        self.run_dir, self.tmp_dir = new_dir("run-"), loaders_tmpdir()  # in the process's workspace
        #: What answers the commands in the child; its ``workdir``, the examples' files, a sibling shares.
        self.handler = Handler(factory, factory_import, alignment, self.timeout, self.run_dir / "scratch",
                               probe_config=probe_config)
        #: The child is a new interpreter (`interpreter.start`), not a fork: another string hash secret.
        self.new_interpreter = new_interpreter
        #: The ``PYTHONHASHSEED`` of the new interpreter, once started.
        self.hash_seed: str | None = None
        self._proc: Any = None  # multiprocessing.Process, or `interpreter.Interpreter`
        self._conn: Connection | None = None
        self._pidfd: int | None = None
        self._spec: ChildSpec | None = None
        self._children = 0
        self._crashes: Counter[str] = Counter()
        self._spawned_rss = 0

    def _spawn(self) -> None:
        n = self._children = self._children + 1
        self._spec = ChildSpec(self.handler, self.run_dir, self.run_dir / f"board-{n}",
                               self.run_dir / f"fault-{n}.txt", os.getpid(), self.tmp_dir)
        for stream in (sys.stdout, sys.stderr):  # or the child would print the parent's buffered text again
            with contextlib.suppress(Exception):
                stream.flush()
        if self.new_interpreter:
            self._proc, self._conn = interpreter.start(self._spec)
            self.hash_seed = self._proc.zygote.hash_seed
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
        with contextlib.suppress(AttributeError, OSError):  # no pidfd: `_await` polls the exit code
            self._pidfd = os.pidfd_open(pid)
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

    def _call(self, command: tuple[Any, ...], clause: ClauseLike = BUILDING) -> Any:
        # Not a mere forward to `_await`: it replaces a process grown past the memory limit, starts one when
        # none is alive, and kills the loader's processes when the wait is interrupted.
        if (self._proc is not None and self.memory_limit
                and (anon_rss(self._proc.pid) or 0) - self._spawned_rss > self.memory_limit):
            self.notes.append("the loader's process had grown past the memory limit over several examples "
                              "and was replaced by a fresh one")
            self.stop()
        if self._proc is None:
            self._spawn()
        try:
            return self._await(command, clause)
        except BaseException:  # Ctrl-C: nothing of the loader outlives the check
            self._kill()
            raise

    def _await(self, command: tuple[Any, ...], clause: ClauseLike) -> Any:
        """The transport: ``command`` sent, and the child's answer, or its failed run if it died or stalled."""
        assert self._conn is not None and self._proc is not None and self._spec is not None
        conn, board, proc = self._conn, self._spec.board, self._proc
        sent = time.monotonic()
        handles: list[Any] = [conn] + ([self._pidfd] if self._pidfd is not None else [])
        try:
            conn.send_bytes(pickle.dumps(command))
        except OSError:
            return self._crashed(clause)
        # Answered, or died (a look of up to `POLL` s; without a pidfd, its exit code says it).
        stall = watch(lambda: bool(wait(handles, POLL)) or (len(handles) == 1 and proc.exitcode is not None),
                      lambda: [status.read(board)], sent=sent, timeout=self.timeout,
                      memory_limit=self.memory_limit, baseline={proc.pid: anon_rss(proc.pid) or 0},
                      command_seconds=command_limit(self.timeout))
        if stall is not None or not conn.poll():
            return self._crashed(clause, stall)
        try:
            answer = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return self._crashed(clause)
        if isinstance(answer, EngineError):
            raise RuntimeError(f"the supervised child failed (a bug of stateful-contract):\n{answer.trace}")
        return answer

    def _crashed(self, clause: ClauseLike, stall: Stall | None = None) -> ExampleRun:
        """The failed run of ``clause`` when the child died, or was killed for ``stall``: said from its status
        log (the call in progress, the program so far) and its fatal-signal stack."""
        assert self._proc is not None and self._spec is not None
        proc, spec = self._proc, self._spec
        self._kill()
        board = status.read(spec.board)
        fault = ""
        if stall is None:
            with contextlib.suppress(OSError):
                fault = fault_excerpt(spec.fault_file.read_text(encoding="utf-8", errors="replace"))
        killed_by, got = self._why(stall, proc.exitcode, board.during, board.in_call)
        self._crashes[clause.id] += 1
        final = stall is not None or self._crashes[clause.id] > SHRINK_CRASHES
        detail = f"\nDoing: {board.command}" if board.command else ""
        if fault:
            detail += f"\n\nPython stack at the crash (faulthandler, most recent call first):\n{fault}"
        outcome = Outcome("failed", expected="the example to finish, with the loader's process alive", got=got,
                          heading=clause.heading, detail=detail + "\n(The check went on in a fresh process.)",
                          impact=died(board.call if board.in_call else "", killed_by), killed_by=killed_by)
        if stall is not None:
            outcome.notes.append(f"not shrunk: every re-run of a smaller example would wait out the "
                                 f"{'timeout' if killed_by == 'timeout' else 'memory limit'} again")
        elif final:
            outcome.notes.append(f"shrinking stopped after {SHRINK_CRASHES} crashes: this is the smallest "
                                 "crashing example found by then")
        program = board.program
        if program and board.in_call:
            how = "was killed" if stall is not None else "died"
            program += f"  # <- the process {how} here ({killed_by})"
        return ExampleRun(0, outcome, reproduction=program, final=final)

    def _why(self, stall: Stall | None, code: int | None, during: str, in_loader: bool) -> tuple[str, str]:
        """What ended the child, as the report names it (``killed_by``), and how a message says it
        (`processes`' sentences, which a rank's message shares)."""
        during = f" {during}" if during else ""
        if stall is not None and stall.memory:
            assert self.memory_limit is not None
            return "memory limit", growth(stall.memory, self.memory_limit, during=during, then=(
                f"; the checker killed them ({Hint('memory_limit')} sets it)"))
        killed = f", so the checker killed it and its workers after {0 if stall is None else stall.waited:.1f} s"
        if stall is not None and stall.timeout is not None:
            return "timeout", hang(stall.timeout, during=during, then=killed)
        if stall is not None:
            return "timeout", no_answer(command_limit(self.timeout) or 0.0, during=during, then=killed)
        return death(-signal.SIGKILL if code is None else code, during=during, in_loader=in_loader)

    def start(self) -> None:
        try:
            super().start()
        finally:
            if self.new_interpreter and self._proc is not None:  # its imports are not the loader's growth
                self._spawned_rss = anon_rss(self._proc.pid) or 0

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
        self.stop()  # the next command starts a fresh child (other world sizes are the multi-rank executor's)

    def close(self) -> None:
        self.stop()
        if restarts := self._crashes.total():
            self.notes.append(f"the loader's process crashed or hung {restarts} time{'s' if restarts != 1 else ''}; "
                              "each time the check went on in a fresh one")
        remove_tmpdir(self.run_dir)  # the children's TMPDIR goes with the workspace (`loaders_tmpdir`: one per checker)
