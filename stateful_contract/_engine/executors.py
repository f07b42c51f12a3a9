"""Executors: where the loader under test runs. The engine talks to all of them alike.

An executor runs examples (`stateful_contract._engine.example.run_example`) on the
loader and answers with one `ExampleRun` per rank. `InProcess` runs them in this
process; `stateful_contract._engine.ranks.Ranks` runs each one on every rank of a
torch.distributed run at once. The search loop, the judgement of what came back and
the report never know which one they have.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config import LoaderConfig
from . import steps
from .example import ClauseLike, ExampleRun, LoadFormProbe, probe_load_form, recorded_program, run_example
from .guard import LoaderHung, current_children, deadline, reap_children
from .impact import loud
from .outcome import ClauseViolation, Outcome, outcome_of
from .plans import Alignment
from .recording import recording
from .steps import Factory, LoaderError, LoadForm

__all__ = ["BUILDING", "Executor", "FactoryProblem", "InProcess", "StartFailed"]


class FactoryProblem(Exception):
    """The factory cannot build a loader at all; the message is one line for the user."""


class StartFailed(Exception):
    """Building the first loader hung, or took its process down: every clause fails with ``run``."""

    def __init__(self, run: ExampleRun) -> None:
        super().__init__(run.outcome.got if run.outcome else "")
        self.run = run


@dataclass(frozen=True)
class _NoClause:
    """A `ClauseLike` for messages about what ran when no clause was (building the first loader)."""

    id: str
    heading: str

    def scenario(self, example: Any, plan: Any) -> Any:
        raise NotImplementedError


#: What a crash while building and probing the first loader is reported under.
BUILDING = _NoClause("", "")


class Executor(Protocol):
    """What the engine asks of the place the loader runs in."""

    world_size: int
    load_form: LoadForm

    def start(self) -> None:
        """Build one loader (raising `FactoryProblem` if none can be built) and probe its load form."""

    def probe(self) -> LoadFormProbe:
        """How ``load_state_dict`` takes a state (`stateful_contract._engine.example.probe_load_form`)."""
        ...

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        """The uninterrupted run's epoch lengths (shortest over ranks), or the run that failed."""

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        """One example of ``clause`` on every rank: one `ExampleRun` per rank, by rank.

        On several ranks, a plan drawn from the lengths `lengths` last gave for ``config``
        runs on each rank as that rank takes it (`stateful_contract._engine.plans.on_rank`)."""

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """Go on in fresh processes, ``world_size`` of them (None: as many as before; a no-op where
        there are none)."""

    def close(self) -> None: ...


#: The config a loader is first built from: 4 batches per epoch (the last one short),
#: shuffled with an explicit generator, two windows of 2 batches.
PROBE_CONFIG = LoaderConfig(dataset_size=7, batch_size=2, shuffle=True, generator="explicit", seed=1,
                            grad_acc_step=2)


def factory_problem(factory: Factory, config: LoaderConfig, timeout: float | None, rank: int = 0,
                    world_size: int = 1) -> str | ExampleRun | None:
    """Why ``factory`` cannot build a loader for ``config`` at all (a hang: the run that hung), or None.

    A factory that returns the same object twice is refused too: every clause resumes a *new*
    loader from a state, and handed the old one back it would fail each of them, misleadingly.
    """
    again: Any = None
    try:
        with deadline(timeout):
            loader = steps.fresh(factory, config)
            if hasattr(loader, "__iter__"):
                again = steps.fresh(factory, config)
    except LoaderError as e:
        return f"the factory raised {type(e.error).__name__}: {e.error}"
    except LoaderHung as e:
        v = ClauseViolation("", heading="", expected="factory(config) to return a loader",
                            got=f"factory(config) did not return: {e}", rank=rank if world_size > 1 else None,
                            world_size=world_size, impact=loud("factory(config)", "hangs: the job stops"))
        return ExampleRun(rank, Outcome.of_violation(v), final=True)
    if not hasattr(loader, "__iter__"):
        return f"the factory returned {type(loader).__name__} {loader!r:.80}, not a loader (it is not iterable)"
    if again is loader:
        return (f"the factory returned the same {type(loader).__name__} object on two calls; it must build a new "
                "loader on every call (the contract resumes a fresh loader from a saved state)")
    return None


def reference_lengths(clause_id: str, heading: str, factory: Factory, config: LoaderConfig, timeout: float | None,
                      rank: int = 0, world_size: int = 1, factory_import: str = "") -> list[int] | ExampleRun:
    """The epoch lengths of the uninterrupted run, or the failed run when the loader cannot give it."""
    program = recorded_program(factory_import or "factory = ...  # your factory(config) -> loader", factory, config)
    try:
        with recording(program), deadline(timeout):
            return steps.uninterrupted(factory, config)[1]
    except (LoaderError, LoaderHung, steps.EndlessPass) as e:
        on = rank if world_size > 1 else None
        outcome: Outcome = outcome_of(e, clause_id=clause_id, heading=heading, rank=on, world_size=world_size)
        return ExampleRun(rank, outcome, reproduction=program.source(config.as_code()) if factory_import else "",
                          final=isinstance(e, (LoaderHung, steps.EndlessPass)))


@dataclass
class InProcess:
    """Runs the loader in this process: the fastest executor, and the one a debugger can follow."""

    factory: Factory
    factory_import: str
    alignment: Alignment = None
    timeout: float | None = None
    world_size: int = 1
    load_form: LoadForm = "positional"
    #: Every example runs in this process: there is none that has not seen the others.
    fresh_processes: bool = False
    _children: set[int] = field(default_factory=current_children)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self) -> None:
        self._stack.enter_context(steps.references_kept())
        self._workdir = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="stateful-contract-")))
        problem = factory_problem(self.factory, PROBE_CONFIG, self.timeout)
        reap_children(self._children)
        if isinstance(problem, ExampleRun):
            raise StartFailed(problem)
        if problem is not None:
            raise FactoryProblem(problem)

    def probe(self) -> LoadFormProbe:
        try:
            return probe_load_form(self.factory, PROBE_CONFIG, self.timeout, factory_import=self.factory_import)
        finally:
            reap_children(self._children)

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        return reference_lengths(clause.id, clause.heading, self.factory, config, self.timeout,
                                 factory_import=self.factory_import)

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        try:
            return [run_example(clause, self.factory, config, plan, factory_import=self.factory_import,
                                load_form=self.load_form, alignment=self.alignment, timeout=self.timeout,
                                workdir=self._workdir)]
        finally:
            if config.num_workers > 0:
                reap_children(self._children)  # workers of a loader abandoned mid-epoch

    def restart(self, phase: str, world_size: int | None = None) -> None:
        if world_size not in (None, 1):
            raise ValueError(f"a check in this process cannot resume on {world_size} ranks; use world_size > 1")

    def close(self) -> None:
        reap_children(self._children)
        self._stack.close()
