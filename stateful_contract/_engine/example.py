"""One example of one clause: what a clause's scenario is handed, and how it is run.

`run_example` is what every executor calls, in whatever process the loader lives in
(this one, a supervised child, each rank of a torch.distributed run): it builds the
`Example`, records the program while the clause's scenario runs under the example
timeout, and turns whatever ended it into an `Outcome` there, so nothing that cannot
cross a process boundary has to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..config import LoaderConfig
from . import status, steps
from .advice import advise, collecting
from .compare import Segment
from .guard import LoaderHung, deadline
from .outcome import ClauseViolation, Outcome, outcome_of
from .plans import Alignment, RankLengths, expected_bounds, on_rank
from .recording import Program, recording
from .steps import RESUME_EPOCHS, Factory, LoaderError, LoadForm, Position

__all__ = ["ClauseLike", "Example", "ExampleRun", "LoadFormProbe", "World", "probe_load_form", "recorded_program",
           "run_example"]


class World(Protocol):
    """What a scenario may ask of the other ranks (only on a multi-rank executor)."""

    rank: int
    world_size: int
    workdir: Path

    def status(self, doing: str) -> None: ...


class ClauseLike(Protocol):
    """What the engine needs of a clause (defined in `stateful_contract.clauses`)."""

    @property
    def id(self) -> str: ...

    @property
    def heading(self) -> str: ...

    def scenario(self, example: Example, plan: Any) -> Any: ...


@dataclass
class Example:
    """The factory, the config and the recorded program of the example being run."""

    factory: Factory
    config: LoaderConfig
    program: Program
    load_form: LoadForm = "positional"
    alignment: Alignment = None
    world: World | None = None
    #: A directory the example may write into (checkpoint files), the executor's own.
    workdir: Path | None = None
    #: The plan as drawn, the same on every rank (the scenario gets it as its rank takes it).
    drawn_plan: Any = None
    _reference: tuple[list[Any], list[int]] | None = None
    _scratch: int = 0

    def __post_init__(self) -> None:
        self.program.bind(self.factory, "factory")
        self.program.bind(self.config, "config")

    def fresh(self, state: Any = None, config: LoaderConfig | None = None) -> Any:
        """A new loader of this example's config (or ``config``), given ``state`` if any."""
        if state is None:
            return steps.fresh(self.factory, config or self.config)
        return steps.fresh(self.factory, config or self.config, state=state, load_form=self.load_form)

    def load(self, loader: Any, state: Any) -> None:
        steps.load(loader, state, self.load_form)

    def reference(self) -> tuple[list[Any], list[int]]:
        """The uninterrupted stream and its epoch lengths (taken once per config and check)."""
        if self._reference is None:
            self._reference = steps.uninterrupted(self.factory, self.config)
        return self._reference

    def resumed(self, state: Any, count: int) -> list[Any]:
        """The first ``count`` batches of a fresh loader given ``state``."""
        return steps.take(self.fresh(state), count, max_epochs=RESUME_EPOCHS)

    def segment(self, base: str, start: int, stop: int) -> list[Any]:
        """``reference[start:stop]``, recorded as such (a `Segment`: it knows the epoch of each batch)."""
        reference, lengths = self.reference()
        return self.program.expression(  # type: ignore[no-any-return]
            base, f"reference[{start}:{stop}]", Segment(reference[start:stop], start, lengths))

    def scratch(self, name: str) -> str:
        """A fresh path under the executor's directory; the reproduction shows it as ``name``."""
        if self.workdir is None:
            raise RuntimeError("this executor gives examples no directory to write into")
        self._scratch += 1
        path = str(self.workdir / f"{name}-{self._scratch}")
        self.program.bind(path, repr(name))
        return path

    def expected_after(self, position: Position) -> list[Any]:
        """The uninterrupted stream from ``position`` to the end of two further epochs."""
        _, lengths = self.reference()
        return self.segment("expected", *expected_bounds(lengths, position))


@dataclass
class ExampleRun:
    """What one example came to on one rank (or in one process)."""

    rank: int
    outcome: Outcome | None = None  # None: the scenario ran to its end
    value: Any = None  # what the scenario returned (a multi-rank clause judges these together)
    reproduction: str = ""
    #: The example must end the search at once (a hang): shrinking would wait it out again.
    final: bool = False
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    #: What the scenario advised (`stateful_contract._engine.advice`), carried back to the caller.
    advisories: list[str] = field(default_factory=list)

    def readvise(self) -> None:
        """Advise again, where the caller collects, what this run's scenario advised."""
        for text in self.advisories:
            advise(text)


def run_example(clause: ClauseLike, factory: Factory, config: LoaderConfig, plan: Any, *,
                factory_import: str, load_form: LoadForm, alignment: Alignment, timeout: float | None,
                world: World | None = None, workdir: Path | None = None,
                rank_lengths: RankLengths | None = None) -> ExampleRun:
    """Run ``clause``'s scenario on one example; never raises for what the loader does.

    ``rank_lengths``: on several ranks, the epoch lengths ``plan`` was drawn from (the
    shortest) and this rank's own: the plan runs as this rank takes that step
    (`stateful_contract._engine.plans.on_rank`).
    """
    import time

    program = Program(factory_import)
    status.watch(program, config.as_code())
    example = Example(factory, config, program, load_form, alignment, world, workdir)
    rank = world.rank if world is not None else 0
    run = ExampleRun(rank)
    started = time.perf_counter()
    advised: list[str] = []
    try:
        with recording(program), deadline(timeout), collecting() as advised:
            example.drawn_plan = plan
            if rank_lengths is not None and plan is not None:
                plan = on_rank(plan, rank_lengths)
            run.value = clause.scenario(example, plan)
    except (ClauseViolation, LoaderError, LoaderHung, steps.NotJudgeable, Exception) as e:
        _attach_note(e, program.source(config.as_code()))
        on = world.rank if world is not None and world.world_size > 1 else None
        run.outcome = outcome_of(e, clause_id=clause.id, heading=clause.heading, rank=on,
                                 world_size=world.world_size if world is not None else 1)
        # A hang would be waited out again by every shrink step; a loader that cannot be judged,
        # or that never ends a pass, stays so in any smaller example.
        run.final = isinstance(e, (LoaderHung, steps.NotJudgeable, steps.EndlessPass))
    run.advisories = advised
    run.reproduction = program.source(config.as_code())
    run.seconds = time.perf_counter() - started
    return run


def recorded_program(factory_import: str, factory: Factory, config: LoaderConfig) -> Program:
    """A program for steps the engine runs outside a clause, shown on the status board as it grows."""
    program = Program(factory_import)
    program.bind(factory, "factory")
    program.bind(config, "config")
    status.watch(program, config.as_code())
    return program


def _attach_note(error: BaseException, program: str) -> None:
    """The reproduction rides on the exception (PEP 678), as array-api-tests does."""
    note = "Reproduce with:\n" + program
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # Python 3.10: the attribute PEP 678 reads
        error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]


LoadProbe = Literal["positional", "keyword", "unusable"]


@dataclass
class LoadFormProbe:
    """How ``load_state_dict`` takes a state, as `probe_load_form` found it."""

    form: LoadProbe
    detail: str = ""
    #: ``load_state_dict`` itself hung (or, under supervision, took its process down): the run
    #: that shows it, SC02's verdict as it stands (running it again would only wait it out again).
    failed: ExampleRun | None = None


def probe_load_form(factory: Factory, config: LoaderConfig, timeout: float | None, *,
                    factory_import: str = "factory = ...  # your factory(config) -> loader", rank: int = 0,
                    world_size: int = 1) -> LoadFormProbe:
    """How ``load_state_dict`` takes a state: positionally, only by keyword, or not at all.

    Every clause that loads a state goes through the form found here, so that a loader
    whose only bug is a keyword-only ``load_state_dict`` (SC02) still has every other
    bug shown in the same run.
    """
    errors: list[str] = []
    forms: tuple[LoadForm, ...] = ("positional", "keyword")
    for form in forms:
        program = recorded_program(factory_import, factory, config)
        try:
            with recording(program), deadline(timeout):
                state = steps.state_of(steps.fresh(factory, config))
        except LoaderHung:
            # A hang is no verdict on the load form: the clauses meet it and fail on it.
            return LoadFormProbe("positional", "hung")
        except LoaderError as e:
            return LoadFormProbe("unusable", str(e))
        try:
            with recording(program), deadline(timeout):
                steps.load(steps.fresh(factory, config), state, form)
            return LoadFormProbe(form)
        except LoaderError as e:
            errors.append(str(e))
        except LoaderHung as e:
            on = rank if world_size > 1 else None
            outcome = outcome_of(e, clause_id="", heading="", rank=on, world_size=world_size)
            run = ExampleRun(rank, outcome, reproduction=program.source(config.as_code()), final=True)
            return LoadFormProbe("unusable", f"load_state_dict did not return: {e}", run)
    return LoadFormProbe("unusable", "; ".join(errors))


#: Signature of what builds a clause's plan from the uninterrupted run's epoch lengths.
PlanDrawer = Callable[[Any, list[int], LoaderConfig, Alignment], Any]
