"""One example of one clause: what a clause's scenario is handed, and `run_example`, which runs it
where the loader lives and turns whatever ended it into an `Outcome` there."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..config import LoaderConfig
from ..links import doc
from ..repro import endless, status, steps
from ..repro.advice import collecting
from ..repro.compare import Segment
from ..repro.consumption import Drawn, Watched
from ..repro.endless import StreamSegment
from ..repro.guard import LoaderHung, deadline
from ..repro.outcome import ClauseViolation, Outcome, outcome_of, raised_in_the_checker
from ..repro.recording import Program, recording
from ..repro.steps import RESUME_EPOCHS, Factory, LoaderError, LoadForm, Position
from ..repro.vocabulary import Point, into_window
from ..spellings import Hint
from .plans import Alignment, RankLengths, expected_bounds, on_rank

__all__ = ["GENERATOR_ITER", "ClauseLike", "Example", "ExampleRun", "LoadFormProbe", "World",
           "recorded_program", "run_example"]


class World(Protocol):
    """What a scenario may ask of the other ranks (only on a multi-rank executor)."""

    rank: int
    world_size: int
    workdir: Path
    #: The process group of the scenario's own collectives (DCP's save and load; None: the default group).
    collectives: Any

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

    @property
    def passes(self) -> int:
        """The ``iter()`` calls a resumed loader may use to deliver the uninterrupted run's batches: one for
        an endless stream (a trainer never calls ``iter()`` on it again)."""
        return 1 if self.config.endless else RESUME_EPOCHS

    def resumed(self, state: Any, count: int) -> list[Any]:
        """The first ``count`` batches of a fresh loader given ``state``."""
        return steps.take(self.fresh(state), count, max_epochs=self.passes)

    def segment(self, base: str, start: int, stop: int) -> list[Any]:
        """``reference[start:stop]``, recorded as such (a `Segment`: it knows the epoch of each batch; a
        stretch of an endless stream has none)."""
        reference, lengths = self.reference()
        part = (StreamSegment(reference[start:stop], start) if self.config.endless
                else Segment(reference[start:stop], start, lengths))
        if (where := part.epoch_of(0)) is not None:  # what a run interrupted here trained of this epoch (impact.py)
            part.before = reference[start - where[1]:start]  # type: ignore[attr-defined]
        return self.program.expression(base, f"reference[{start}:{stop}]", part)  # type: ignore[no-any-return]

    def where(self, point: Point) -> str:
        """``point`` in the words of a message: in its epoch, or in the endless stream."""
        return endless.describe(point, self.config) if self.config.endless else point.describe(self.reference()[1])

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
    #: What the scenario advised (`stateful_contract.repro.advice`), carried back to the caller.
    advisories: list[str] = field(default_factory=list)
    #: The uninterrupted run's first pass did not end (`steps.EndlessPass`): the check goes on with the
    #: loader as an endless stream (`run.clause_loop`).
    endless: bool = False
    #: It ended waiting for another rank in a collective (`steps.WaitedForARank`): the others' runs say why.
    waited: bool = False
    #: The world judgement held without judging this example, and why (SC31 on a world its global batch does
    #: not split over): a clause none of whose examples was judged is not judged (`run.fresh`).
    unjudged: str = ""


def run_example(clause: ClauseLike, factory: Factory, config: LoaderConfig, plan: Any, *,
                factory_import: str, load_form: LoadForm, alignment: Alignment, timeout: float | None,
                world: World | None = None, workdir: Path | None = None,
                rank_lengths: RankLengths | None = None) -> ExampleRun:
    """Run ``clause``'s scenario on one example; never raises for what the loader does. ``rank_lengths``:
    on several ranks, the plan runs as this rank takes that step (`plans.on_rank`)."""
    program = recorded_program(factory_import, factory, config)
    example = Example(factory, config, program, load_form, alignment, world, workdir, drawn_plan=plan)
    rank = world.rank if world is not None else 0
    run = ExampleRun(rank)
    started = time.perf_counter()
    own = plan
    try:
        with recording(program), deadline(timeout), collecting() as advised:
            if rank_lengths is not None and plan is not None:
                own = on_rank(plan, rank_lengths)
            run.value = clause.scenario(example, own)
    except (LoaderHung, Exception) as e:  # a violation, the loader raising or hanging, anything else
        _attach_hints(e, own, example, timeout)
        _attach_note(e, program.source(config.as_code()))
        run.outcome = outcome_of(e, heading=clause.heading, rank=rank,
                                 world_size=world.world_size if world is not None else 1)
        # A hang would be waited out again by every shrink step; a loader that cannot be judged,
        # or that never ends a pass, stays so in any smaller example.
        run.final = (isinstance(e, (LoaderHung, steps.NotJudgeable, steps.EndlessPass))
                     or raised_in_the_checker(e) is not None)  # the checker's own bug: no smaller example helps
        run.endless = isinstance(e, steps.EndlessPass)
        run.waited = isinstance(e, steps.WaitedForARank)
    run.advisories = advised
    run.reproduction = program.source(config.as_code())
    run.seconds = time.perf_counter() - started
    return run


#: What the contract saw of a generator ``__iter__`` at a state taken right after ``iter()``, and the fix.
GENERATOR_ITER = (
    "Hint: observed on a fresh loader driven to the same point: its state right after that iter() is the "
    "state it had before it, so the new pass had not started. Its __iter__ is a generator function (or returns "
    "a generator of its own, as return self._run() does), and nothing in a generator runs until "
    "the first next(): a state taken right after iter() is still the one the "
    "previous pass left (a pass cut short, or an epoch already ended), not the new pass's. If that is what "
    "this failure comes from, start the inner loader's iterator in __iter__ itself "
    "(it = iter(self.base); return (f(b) for b in it)), as StatefulDataLoader.__iter__ does: "
    + doc("clauses.md", "sc22-cut-short-passes-resume"))


#: The same, where the generator is the declared consumption's (``--consume``): the fix is in that function.
GENERATOR_CONSUME = (
    "Hint: observed on a fresh loader driven to the same point: its state right after that iter() is the "
    "state it had before it, so the new pass had not started. The declared consumption draws through {name}(), a "
    "generator function, and nothing in a generator runs until the first next(): a state taken right after "
    "iter() is still the one the previous pass left (a pass cut short, or an epoch already ended), not the "
    "new pass's. If that is what this failure comes from, start the loader's iterator when {name} is called "
    "(it = iter(loader); return (f(b) for b in it)), as StatefulDataLoader.__iter__ does: "
    + doc("clauses.md", "sc22-cut-short-passes-resume"))


def _a_generator_of_its_own(loader: Any, it: Any) -> str | None:
    """Which hint fits ``iter(loader)``: `GENERATOR_ITER` for a generator of the loader's own ``__iter__`` or of
    another method of its class (``return self._run()``, as common as a generator ``__iter__``),
    `GENERATOR_CONSUME` for a generator function's, not yet started, that the declared consumption returned (a
    drawn loader's iterator); None for any other shape, whose fix the hints do not show."""
    if isinstance(loader, Drawn) and isinstance(it, Watched):
        # A generator function's body has not run (a pytest class's consume method may return one of another
        # function's); a generator expression has: it called iter(loader) as it was made, eagerly.
        inner = it.inner
        if (inspect.isgenerator(inner) and inspect.getgeneratorstate(inner) == inspect.GEN_CREATED
                and inner.gi_code.co_name != "<genexpr>"):
            return GENERATOR_CONSUME.format(name=inner.gi_code.co_name)
        return None
    if not inspect.isgenerator(it):
        return None
    method = getattr(type(loader), it.__name__, None)
    return GENERATOR_ITER if getattr(method, "__code__", None) is it.gi_code else None


def _iter_leaves_the_state(example: Example, plan: Any, position: Any, timeout: float | None) -> str | None:
    """Whether a fresh loader, driven to the ``iter()`` at which the example took its state (after the passes
    cut short of a `CutShort` plan, or the whole epochs before ``position``), has the same state right before
    and right after that ``iter()``, which returned a generator of its own (`_a_generator_of_its_own`): what a
    lazy ``__iter__`` (or consumption) does; the hint for it, None otherwise and when anything fails. Unrecorded."""
    from ..repro.compare import first_difference
    from ..repro.trainer_steps import cut_short

    try:
        with deadline(timeout):
            loader = steps.fresh(example.factory, example.config)
            if isinstance(position, Position):
                for _ in range(position.epoch):
                    steps.stream(loader, 1)
            else:
                cut_short(loader, plan.passes, plan.limit)
            before = steps.state_of(loader)
            hint = _a_generator_of_its_own(loader, steps._iter(loader))
            return hint if first_difference(before, steps.state_of(loader)) is None else None
    except (LoaderHung, Exception):
        return None


def _attach_hints(error: BaseException, plan: Any, example: Example, timeout: float | None = None) -> None:
    """Add to ``error`` the causes its example was seen to match, whichever clause met them: a cause
    does not belong to one clause (docs/clauses.md, "Hints"). A hint says what the contract observed."""
    if not isinstance(error, ClauseViolation) or isinstance(error.__context__, LoaderError):
        return  # a crash, a hang or a refusal (a violation raised over the loader's exception) says why
    hints = []
    own = getattr(plan, "right_after_a_new_iter", None)  # a plan says where its state was taken...
    position = getattr(plan, "position", None)  # ... or its position does
    new_iter = own if isinstance(own, bool) else getattr(position, "right_after_a_new_iter", False)
    newest = steps._NEWEST.get()
    lazy = _iter_leaves_the_state(example, plan, position, timeout) if new_iter and newest is not None else None
    if lazy is not None:
        hints.append(lazy)
    window = example.config.grad_acc_step
    lengths = example._reference[1] if example._reference is not None else None  # if the example took it
    if (example.alignment is None and isinstance(position, Position)
            and (into := into_window(position.batches, window)) and position.kind(lengths) == "mid-epoch"):
        hints.append(f"Hint: this state was taken inside a grad-acc window (after {into}"
                     f" of its {window} batches). A wrapper exact only at window boundaries can declare so "
                     f"({Hint('checkpoint_alignment', 'window')}; the report and the badge show it); otherwise its state must hold "
                     "the position inside the window: "
                     + doc("clauses.md", "sc10-resume-continues-the-stream"))
    for hint in hints:
        if hint not in error.got:
            error.got += "\n  " + hint


def recorded_program(factory_import: str, factory: Factory, config: LoaderConfig) -> Program:
    """A program that knows ``factory`` and ``config`` by name, shown on the status board as it grows."""
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
    """How ``load_state_dict`` takes a state, as `Handler.probe` found it."""

    form: LoadProbe
    detail: str = ""
    #: ``load_state_dict`` itself hung (or, under supervision, took its process down): the run
    #: that shows it, SC02's verdict as it stands (running it again would only wait it out again).
    failed: ExampleRun | None = None
