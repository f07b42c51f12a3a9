"""Clauses judged side by side, in forked engine processes (docs/supervision.md, "Parallel jobs").

Each job is forked after the load probe, with the verdicts so far, and searches a clause as one core does
(the same settings, the same seed); it dies with the checker (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, cast

from ..clauses import Clause, clause
from ..isolation.processes import die_with_parent
from ..repro.outcome import Outcome
from ..search.loop import Executor

__all__ = ["Speedup", "judge_apart"]


@dataclass
class Speedup:
    """What the parallel part of a run took: its clauses' own times, summed, against its wall time."""

    jobs: int
    clauses: int = 0
    clause_seconds: float = 0.0
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        ratio = self.clause_seconds / self.wall_seconds if self.wall_seconds > 0 else 1.0
        return (f"{self.clauses} clauses judged in {self.jobs} parallel processes: {self.clause_seconds:.1f} "
                f"s of clause time in {self.wall_seconds:.1f} s, {ratio:.2f}x one core")


Judge = Callable[[Clause, Executor], Outcome]
Done = Callable[[Clause, Outcome, float], None]


def judge_apart(clauses: Sequence[Clause], jobs: int, *, judge: Judge, executor: Callable[[], Executor],
                started: Callable[[Clause], None], done: Done, stop: Callable[[], bool] | None = None) -> Speedup:
    """Judge ``clauses`` in ``jobs`` forked processes, each with its own ``executor()``, started there.

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
                conn.send(("judge", c.id))
                running[conn] = c
            for ready in wait(list(running)):
                conn = cast(Connection, ready)
                c = running.pop(conn)
                try:
                    kind, payload, seconds = conn.recv()
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
            conn.send(("close", None))
            _, notes, _ = conn.recv()
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
    die_with_parent(parent, signal.SIGTERM)  # which closes the executor, as the checker's own ending does
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises KeyboardInterrupt
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the checker's; it ends the jobs
    with contextlib.suppress(KeyboardInterrupt):  # told to stop (SIGTERM, or the checker died)
        executor = make_executor()
        executor.start()
        try:
            while True:
                try:
                    kind, cid = conn.recv()
                except (EOFError, OSError):
                    return
                if kind == "close":
                    break
                begun = time.perf_counter()
                try:
                    answer: tuple[str, Any] = ("outcome", judge(clause(cid), executor))
                except Exception:
                    answer = ("error", traceback.format_exc())
                conn.send((*answer, time.perf_counter() - begun))
        finally:
            executor.close()
        conn.send(("closed", list(getattr(executor, "notes", [])), 0.0))
