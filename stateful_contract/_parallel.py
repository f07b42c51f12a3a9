"""Clauses judged side by side, in forked engine processes: a run that uses every core.

Once the clauses every other clause needs have been judged (the structure clauses, SC18),
the rest depend on nothing but those verdicts, so they can be searched at once. Each
*job* is a process forked from the checker after the load probe: it has the factory, the
profile and the verdicts so far, and it builds an executor of its own (a supervised child
of its own, by default), so a loader that crashes or hangs takes down only that job's
child, as in a run on one core. The checker hands out one clause at a time, the slowest
first, to whichever job is free, and records each verdict as it comes back; the search of
one clause is exactly the search it would have in a run on one core (the same Hypothesis
settings, the same seed), so its verdict does not depend on the number of jobs.

The jobs die with the checker (``PR_SET_PDEATHSIG``) and, on Ctrl-C, are ended with the
executors they built.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, cast

from ._engine.executors import Executor
from ._engine.outcome import Outcome
from .clauses import Clause

__all__ = ["Speedup", "judge_apart"]


@dataclass
class Speedup:
    """What the parallel part of a run took: its clauses' own times, summed, against its wall time."""

    jobs: int
    clauses: int = 0
    clause_seconds: float = 0.0
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.clause_seconds / self.wall_seconds if self.wall_seconds > 0 else 1.0

    def describe(self) -> str:
        return (f"{self.clauses} clauses judged in {self.jobs} parallel processes: {self.clause_seconds:.1f} s of "
                f"clause time in {self.wall_seconds:.1f} s, {self.ratio:.2f}x one core")


Judge = Callable[[Clause, Executor], Outcome]
Done = Callable[[Clause, Outcome, float], None]


def judge_apart(clauses: Sequence[Clause], jobs: int, *, judge: Judge, executor: Callable[[], Executor],
                started: Callable[[Clause], None], done: Done, stop: Callable[[], bool] | None = None) -> Speedup:
    """Judge ``clauses`` in ``jobs`` forked processes, each with its own ``executor()``.

    ``judge(clause, executor)`` runs in the job; ``started`` and ``done(clause, outcome, seconds)``
    run here, in the order the clauses are handed out and come back. ``stop`` (exitfirst): asked
    after each verdict; once it says so, no clause is handed out and the jobs still judging one
    are ended, so those clauses have no verdict.
    """
    # The costliest first (`Clause.cost`): a long clause started last would leave the other cores
    # idle. Stopping at the first failure, the order given instead: the likeliest failure first.
    order = list(clauses) if stop is not None else sorted(clauses, key=lambda c: (-c.cost, c.id))
    speed = Speedup(jobs=min(jobs, len(order)), clauses=len(order))
    began = time.perf_counter()
    ctx = multiprocessing.get_context("fork")
    workers: list[tuple[Any, Connection]] = []
    for stream in (sys.stdout, sys.stderr):  # or each job would print the buffered text again
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        for _ in range(speed.jobs):
            mine, theirs = ctx.Pipe(duplex=True)
            # Not a daemon: a daemonic process may not start children (the supervised child, workers).
            proc = ctx.Process(target=_job, args=(theirs, mine, judge, executor, os.getpid()),
                               name="stateful-contract-job")
            proc.start()
            theirs.close()
            workers.append((proc, mine))
        running: dict[Connection, Clause] = {}
        todo = list(order)
        idle = [conn for _, conn in workers]
        while todo or running:
            while todo and idle:
                conn, c = idle.pop(), todo.pop(0)
                started(c)
                conn.send_bytes(pickle.dumps(("judge", c.id)))
                running[conn] = c
            for ready in wait(list(running)):
                conn = cast(Connection, ready)
                c = running.pop(conn)
                try:
                    kind, payload, seconds = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    raise RuntimeError(f"a parallel job died while judging {c.id} (a bug of stateful-contract)"
                                       ) from None
                if kind == "error":
                    raise RuntimeError(f"a parallel job failed while judging {c.id} (a bug of stateful-contract):"
                                       f"\n{payload}")
                speed.clause_seconds += seconds
                done(c, payload, seconds)
                idle.append(conn)
            if stop is not None and stop():
                speed.clauses -= len(todo) + len(running)
                return speed  # the jobs still judging are ended below, their executors closed
        for _, conn in workers:
            conn.send_bytes(pickle.dumps(("close", None)))
            _, notes, _ = pickle.loads(conn.recv_bytes())
            speed.notes.extend(n for n in notes if n not in speed.notes)
    finally:
        _end(workers)
        speed.wall_seconds = time.perf_counter() - began
    return speed


def _end(workers: list[tuple[Any, Connection]]) -> None:
    """Join the jobs; those still running (Ctrl-C, an error) are told to stop, then killed."""
    for proc, conn in workers:
        conn.close()
        proc.join(0.1)
        if proc.is_alive():
            proc.terminate()  # SIGTERM: the job closes its executor (its loader's processes) first
    for proc, _ in workers:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def _job(conn: Connection, other_end: Connection, judge: Judge, make_executor: Callable[[], Executor],
         parent: int) -> None:
    """One job's life: build an executor, judge the clauses it is handed, close it."""
    other_end.close()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the checker's; it ends the jobs
    try:
        _serve(conn, judge, make_executor)
    except KeyboardInterrupt:  # told to stop (SIGTERM, or the checker died): its executor is closed
        pass


def _serve(conn: Connection, judge: Judge, make_executor: Callable[[], Executor]) -> None:
    from .clauses.registry import lookup

    executor = make_executor()
    try:
        while True:
            try:
                kind, cid = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            if kind == "close":
                break
            c = lookup(cid)
            begun = time.perf_counter()
            try:
                answer: tuple[str, Any, float] = ("outcome", judge(c, executor), 0.0)
            except Exception:
                answer = ("error", traceback.format_exc(), 0.0)
            conn.send_bytes(pickle.dumps((answer[0], answer[1], time.perf_counter() - begun)))
    finally:
        executor.close()
    conn.send_bytes(pickle.dumps(("closed", list(getattr(executor, "notes", [])), 0.0)))
