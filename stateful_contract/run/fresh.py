"""A clause's fresh-process half: the examples that held resumed again in new processes (one process, the
check's own ranks started again, or worlds of other sizes), and which world sizes a check still needs. One
answer to "does this clause resume in fresh processes, and on which worlds" serves the clause loop, a resume
launch (`resumed.Resumed`) and the save launch's manifest (`faces.distributed.phases`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..clauses import Clause
from ..clauses.registry import LOAD
from ..config import LoaderConfig
from ..isolation.sibling import PendingSibling
from ..repro.outcome import Outcome
from ..search.loop import Executor, judge_runs
from ..terms import Unjudged

__all__ = ["beside_their_worlds", "fresh_worlds", "in_fresh_processes", "worlds_still_needed"]


def fresh_worlds(c: Clause, world_size: int) -> tuple[int | None, ...]:
    """The worlds ``c``'s fresh-process half resumes on, in a check of ``world_size`` ranks (None: the check's
    own number, in new processes); () when it has none there (SC10 on several ranks: SC30 resumes instead)."""
    return c.fresh_worlds(world_size) if c.restarted() is not None else ()


def worlds_still_needed(clauses: Iterable[Clause], world_size: int) -> frozenset[int]:
    """The other world sizes that ``clauses`` (those still to be judged) resume on: an idle world of any other
    size can be stopped (`Executor.keep_worlds`)."""
    return frozenset(size for c in clauses for size in fresh_worlds(c, world_size) if size is not None)


def beside_their_worlds(order: list[Clause], world_size: int) -> list[Clause]:
    """``order`` with each clause that resumes only on world sizes an earlier clause's fresh-process half opens
    moved to just after that clause, when everything it needs is judged by then: the idle world it reuses then
    lives from one to the other, not through every clause between (SC32 after SC31 at several ranks: SC32
    runs last by priority, and the world of ``N + 1`` held its ranks' memory through the whole check)."""
    pending, moved = list(order), []
    while pending:
        c = pending.pop(0)
        moved.append(c)
        opened = worlds_still_needed([c], world_size)
        done = {m.id for m in moved}
        for later in list(pending) if opened else []:
            sizes = worlds_still_needed([later], world_size)
            if sizes and sizes <= opened and all(need == LOAD or need in done for need in later.needs):
                pending.remove(later)
                moved.append(later)
                done.add(later.id)
    return moved


def _simplicity(config: LoaderConfig, plan: Any) -> tuple[Any, ...]:
    """Orders examples simplest first: no workers, few samples, small batches, an early checkpoint."""
    position = getattr(plan, "position", None)
    where = (position.epoch, position.batches) if position is not None else (0, 0)
    return (config.num_workers, config.dataset_size, config.batch_size, config.grad_acc_step, config.shuffle,
            config.drop_last, *where)


def in_fresh_processes(executor: Executor, c: Clause, examples: list[tuple[LoaderConfig, Any]], passed: Outcome,
                       worlds: tuple[int | None, ...] = (None,), pending: PendingSibling | None = None) -> Outcome:
    """Rerun every example that held in a fresh set of processes (the state must mean the same there).

    ``worlds``: the numbers of ranks to resume on, one fresh set of processes each (None: the
    check's own; another number is an elastic restart, after which the check goes on with its own).
    Examples are judged simplest first, so a failure is reported on the smallest example that shows it.
    """
    # Hypothesis runs some examples more than once (a derandomized search of a small space
    # does often); each is resumed again once.
    unique = {(config, repr(plan)): (config, plan) for config, plan in examples}
    examples = sorted(unique.values(), key=lambda e: _simplicity(*e))
    # One process: a sibling child resumes, in a new interpreter if it can, and this one keeps
    # the runs it took for later clauses.
    sibling = None
    if pending is not None:
        sibling, why_forked = pending.take()
        if why_forked:
            passed.notes.append(why_forked)
    runner = sibling if sibling is not None else executor
    unjudged: list[str] = []  # why, for each example the judgement held without judging
    try:
        for size in worlds:
            if sibling is None:
                runner.restart("resume" if size is None else f"world{size}-", world_size=size)
            for config, plan in examples:
                runs = runner.run(c, config, plan)
                failed = judge_runs(c, runs, config, plan)
                unjudged += [runs[0].unjudged] if failed is None and runs and runs[0].unjudged else []
                if failed is not None and failed.outcome is not None:
                    o = failed.outcome
                    if size is None:
                        o.detail += "\n(The same example resumed exactly inside the processes that saved it.)"
                        o.reproduction = ("# Fails only when the resume runs in a fresh set of processes: the "
                                          "lines below pass in one process.\n" + failed.reproduction)
                    else:
                        o.reproduction = failed.reproduction
                    o.examples, o.config, o.plan = passed.examples, config.as_code(), repr(plan)
                    return o
    finally:
        if sibling is not None:
            sibling.close()
        elif worlds != (None,):
            executor.restart("search", world_size=None)  # the check goes on with its own world
    place = getattr(executor, "restart_place", None)  # a launcher's world restarts nothing itself
    where = (place(worlds) if place is not None else
             ("a fresh process" if executor.world_size == 1 else "a fresh set of processes")
             if worlds == (None,) else
             " and ".join(f"{s} rank{'s' if s != 1 else ''}" for s in worlds if s is not None))
    if sibling is not None and sibling.hash_seed is not None:
        where += f" (a new interpreter, PYTHONHASHSEED={sibling.hash_seed})"
    if examples and len(unjudged) == len(examples) * len(worlds):  # it held everywhere, judging nothing: no pass
        # A gap: the judgement could not observe what it judges (no index field; an endless stream's epochs).
        kind: Unjudged = "endless" if examples[0][0].endless else "unobservable"
        return Outcome("not-judged", unjudged=kind, detail=f"{unjudged[0]} (so were all {len(examples)} examples, resumed again in "
                                            f"{where})")
    passed.notes.append(f"{len(examples)} examples resumed again in {where}")
    return passed
