"""The one search loop: Hypothesis over configs and plans, on any executor (docs/architecture.md,
"What happens in one example")."""

from __future__ import annotations

import dataclasses
import functools
import random
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from contextvars import ContextVar
from typing import Any, Literal, Protocol, cast

from hypothesis import currently_in_test_context, event, given, seed, settings
from hypothesis import strategies as st

from ..config import ConfigSpace, LoaderConfig
from ..profiles import Profile, hypothesis_settings, without_local_constants
from ..repro.advice import advise
from ..repro.outcome import ClauseViolation, Outcome, outcome_of
from ..repro.recording import bound
from ..repro.steps import LoadForm
from .coverage import EVENTS, coverage_of
from .example import ClauseLike, ExampleRun, LoadFormProbe
from .interrupts import Carried, NotTheLoaders, not_the_loaders_within, pass_through, passed_on
from .plans import SavePoints
from .saved import SavedFailures

__all__ = ["SEARCHING", "Budget", "Executor", "Watched", "judge_runs", "replay_one", "search", "worker_pool"]


class Executor(Protocol):
    """What the search asks of the place the loader runs in (`isolation.executors`, `isolation.supervised`,
    `isolation.ranks` implement it)."""

    world_size: int
    load_form: LoadForm

    def start(self) -> None:
        """Build one loader (raising `FactoryProblem` if none can be built, `StartFailed` if it hung)."""

    def probe(self) -> LoadFormProbe: ...

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        """The uninterrupted run's epoch lengths (shortest over ranks), or the run that failed."""

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        """One `ExampleRun` per rank, by rank (each takes the plan as `plans.on_rank` translates it)."""

    def restart(self, phase: str, world_size: int | None = None) -> None:
        """Go on in ``world_size`` fresh processes (None: as many as before; a no-op where there are none)."""

    def keep_worlds(self, world_sizes: Collection[int]) -> None:
        """Stop every idle world of another size than ``world_sizes`` (the sizes later clauses resume on): one
        `restart` left parked (a no-op where there are none)."""

    def close(self) -> None: ...


#: What the Hypothesis test running now searches: ``"SC10 resume-continues-the-stream"``, with
#: ``", worker examples"`` in the phase with workers (None outside a search). The pytest plugin
#: labels Hypothesis' statistics with it.
SEARCHING: ContextVar[str | None] = ContextVar("stateful_contract_searching", default=None)

#: How many examples a clause gets: ``once`` (one fixed example), ``search`` (the profile's in-process and
#: worker examples), ``strict`` (a few in-process examples), ``workers`` (twice the profile's worker-example
#: count in-process, and that count with workers: for a clause whose every example starts workers, SC23).
Budget = Literal["once", "search", "strict", "workers"]
#: Examples of the strict tier: each feeds seven bad states, and a refusal depends little on the config.
STRICT_EXAMPLES = 8


class SearchClause(ClauseLike, Protocol):
    @property
    def budget(self) -> Budget: ...

    @property
    def fixed_config(self) -> LoaderConfig | None: ...

    def draw_plan(self, data: st.DataObject, lengths: list[int], config: LoaderConfig,
                  saves: SavePoints, space: ConfigSpace | None = None, epoch_hook: str = "set_epoch") -> Any: ...

    @property
    def has_plan(self) -> bool: ...

    def explicit_examples(self, space: ConfigSpace) -> Sequence[tuple[LoaderConfig, Callable[[list[int], SavePoints], Any]]]: ...

    def judge_world(self, values: Sequence[Any], config: LoaderConfig, plan: Any) -> str | None: ...


class _Final(Carried):
    """An example hung or crashed: the search ends here, unshrunk."""

    def __init__(self, run: ExampleRun) -> None:
        super().__init__(run.outcome.message if run.outcome else "")
        self.run = run


class _Failed(_Final, Exception):
    """An example failed: an `Exception`, so Hypothesis shrinks it."""


def judge_runs(clause: SearchClause, runs: list[ExampleRun], config: LoaderConfig, plan: Any) -> ExampleRun | None:
    """The run that failed the example, or None when it holds on every rank."""
    for text in (text for r in runs for text in r.advisories):  # advised again where the caller collects
        advise(text)
    failed = [r for r in runs if r.outcome is not None]
    if not failed:
        try:
            if runs:
                # A judgement that could not judge this example says why: it held, but judged nothing.
                runs[0].unjudged = clause.judge_world([r.value for r in runs], config, plan) or ""
        except ClauseViolation as v:
            shown = getattr(v, "reproduce_on", 0) or 0
            return dataclasses.replace(runs[shown], outcome=v.plain())
        return None
    # A rank that waited in a collective for another, past its time, has no verdict of its own; and a failure
    # comes before a "not judged" (a rank too slow for the timeout beside one that failed).
    first = min(failed, key=lambda r: (r.waited, r.outcome is not None and r.outcome.status == "not-judged"))
    if len(runs) > 1:
        statuses = ", ".join(f"rank {r.rank} " + ("passed" if r.outcome is None else "waited for another rank"
                                                    if r.waited else r.outcome.status.replace("-", " "))
                             for r in runs)
        assert first.outcome is not None
        first.outcome.notes.append(f"per rank: {statuses}")
    return first


def search(clause: SearchClause, executor: Executor, *, space: ConfigSpace, profile: Profile, saves: SavePoints,
           on_example: Callable[[int, int], None] = lambda done, total: None,
           passed: list[tuple[LoaderConfig, Any]] | None = None, search_seed: int | None = None,
           database_key: str | None = None, epoch_hook: str = "set_epoch") -> Outcome:
    """Look for a counterexample to ``clause``; the minimal one comes back as a failed `Outcome`, which
    counts what the examples covered (`coverage_of`; Hypothesis gets them as events). ``passed`` collects
    the examples that held (a fresh-process half reruns them); ``search_seed`` seeds Hypothesis (``@seed``),
    else the profile decides (``ci`` is derandomized). ``database_key`` names the loader: a random profile's
    failure found once is tried first on the next run (`SavedFailures`); ``epoch_hook`` is the trainer's
    call at each epoch."""
    try:
        return _search(clause, executor, space=space, profile=profile, saves=saves, on_example=on_example,
                       passed=passed, search_seed=search_seed, database_key=database_key, epoch_hook=epoch_hook)
    except NotTheLoaders as e:  # Ctrl-C, SystemExit, a test runner's timeout: not a verdict
        raise e.error from None


def _search(clause: SearchClause, executor: Executor, *, space: ConfigSpace, profile: Profile, saves: SavePoints,
            on_example: Callable[[int, int], None] = lambda done, total: None,
            passed: list[tuple[LoaderConfig, Any]] | None = None, search_seed: int | None = None,
            database_key: str | None = None, epoch_hook: str = "set_epoch") -> Outcome:
    watched = executor if isinstance(executor, Watched) else Watched(executor)
    covered = watched.covered
    executor = cast(Executor, watched)
    if clause.budget == "once":
        assert clause.fixed_config is not None
        on_example(1, 1)
        return _covered(_verdict(run_one(clause, executor, space.fitted(clause.fixed_config), None), 1, 1), covered)
    worker_examples = profile.worker_examples
    in_process = {"strict": STRICT_EXAMPLES, "workers": 2 * worker_examples}.get(clause.budget, profile.examples)
    phases = [(False, in_process)]
    if clause.budget in ("search", "workers"):
        phases.append((True, worker_examples))
    saved = SavedFailures(profile, database_key, clause.id)
    kept = [(config, plan) for config, plan in saved if space.holds(config)]  # not one the space now excludes
    explicit = [(space.fitted(config), plan_of) for config, plan_of in clause.explicit_examples(space)]
    total = len(kept) + len(explicit) + sum(n for _, n in phases)
    examples = 0
    found_after: int | None = None
    for config, plan in kept:  # the failures an earlier run found, first, as Hypothesis' Phase.reuse
        examples += 1
        on_example(examples, total)
        if (failed := replay_one(clause, executor, config, plan)) is not None:
            return _covered(_verdict(failed, examples, examples), covered)
        saved.drop(config, plan)
    # The clause's explicit examples first, as Hypothesis runs @example: not shrunk (each is small
    # already), and the same on every run whatever the seed or the Hypothesis release.
    for config, plan_of in explicit:
        examples += 1
        on_example(examples, total)
        lengths = executor.lengths(clause, config)
        if isinstance(lengths, ExampleRun):
            return _covered(_verdict(lengths, examples, examples), covered)
        plan = plan_of(lengths, saves)
        if (failed := run_one(clause, executor, config, plan)) is not None:
            saved.keep(config, plan)
            return _covered(_verdict(failed, examples, examples), covered)
        if passed is not None:
            passed.append((config, plan))
    alignment = saves  # the name the example below draws its plans with (an edit there changes every ci example)
    for workers, budget in phases:
        # Worker examples draw from the check's pool (`worker_pool`): their uninterrupted runs are shared.
        strategy = (worker_configs(space, budget, search_seed) if workers and executor.world_size == 1
                    else space.configs(workers=workers, ranks=executor.world_size))
        if strategy.is_empty or budget == 0:
            continue
        base = hypothesis_settings(profile, workers=workers)

        # The body below is kept as it is: a derandomized run (ci) draws from a digest of
        # this function's source, so every edit to it changes every ci verdict's examples.
        # Coverage is counted by the executor wrapper; the seed is set on the test after.
        @settings(base, max_examples=budget)
        @given(config=strategy, data=st.data())
        def example(config: LoaderConfig, data: st.DataObject) -> None:
            nonlocal examples, found_after
            examples += 1
            on_example(min(examples, total), total)
            plan = None
            if clause.has_plan:
                lengths = executor.lengths(clause, config)
                if isinstance(lengths, ExampleRun):
                    found_after = found_after or examples
                    raise (_Final if lengths.final else _Failed)(lengths)
                plan = clause.draw_plan(data, lengths, config, alignment, space, epoch_hook)
            failed = run_one(clause, executor, config, plan)
            if failed is None and passed is not None:
                passed.append((config, plan))
            if failed is not None:
                found_after = found_after or examples
                raise (_Final if failed.final else _Failed)(failed)

        if search_seed is not None:  # overrides derandomize (hypothesis.seed)
            example = seed(search_seed)(example)
        pass_through(example)
        searching = clause.heading.split(":", 1)[0] + (", worker examples" if workers else "")
        try:
            # quiet (hypothesis_settings): Hypothesis prints nothing; its draws are the same whatever the
            # process imported (without_local_constants)
            with bound(SEARCHING, searching), without_local_constants():
                example()
        except _Final as e:  # _Failed too
            if watched.example is not None:  # the last run: the minimal one
                saved.keep(*watched.example)
            return _covered(_verdict(e.run, examples, found_after), covered)
        except Exception as e:  # Hypothesis' own verdicts, e.g. a flaky loader
            if (interrupt := not_the_loaders_within(e)) is not None:  # landed in Hypothesis' own draw
                raise interrupt from None
            outcome = outcome_of(e, heading=clause.heading)
            return _covered(dataclasses.replace(outcome, examples=examples, found_after=found_after), covered)
    return _covered(Outcome("passed", examples=examples), covered)


class Watched:
    """The executor a clause's examples run on, watched: what each example covers (told to Hypothesis as
    events), the example run last, and whether a first pass never ended (`ExampleRun.endless`: the clauses
    after this one are told the loader is endless)."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.covered: Counter[str] = Counter()
        self.last: list[int] | None = None
        #: The config and plan of the example run last (after a failure, Hypothesis' minimal one).
        self.example: tuple[LoaderConfig, Any] | None = None
        #: Whether a run's first pass never ended.
        self.endless = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.executor, name)

    # Not mere forwards: each keeps the example for the database, counts its coverage, notes an endless
    # pass, and tells an interrupt (Ctrl-C) from the loader's own failure.
    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        with passed_on():
            lengths = self.executor.lengths(clause, config)
        self.endless = self.endless or (isinstance(lengths, ExampleRun) and lengths.endless)
        self.last = lengths if isinstance(lengths, list) else None
        self.example = None  # an uninterrupted run that fails leaves no plan to keep
        return lengths

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        reached = coverage_of(config, plan, self.last if plan is not None else None)
        self.covered.update(reached)
        self.example = (config, plan)
        for category in sorted(reached) if currently_in_test_context() else ():  # not an explicit example
            event(EVENTS.get(category, category))
        with passed_on():
            runs = self.executor.run(clause, config, plan)
        self.endless = self.endless or any(r.endless for r in runs)
        return runs


def _covered(outcome: Outcome, covered: Counter[str]) -> Outcome:
    return dataclasses.replace(outcome, coverage={k: v for k, v in sorted(covered.items()) if v})


def replay_one(clause: SearchClause, executor: Executor, config: LoaderConfig, plan: Any) -> ExampleRun | None:
    """One recorded example, run as the search ran it: the uninterrupted run first."""
    try:
        if executor.world_size > 1 and plan is not None:  # each rank takes the plan on its own epoch lengths
            lengths = executor.lengths(clause, config)
            if isinstance(lengths, ExampleRun):
                return judge_runs(clause, [lengths], config, plan)
        return run_one(clause, executor, config, plan)
    except NotTheLoaders as e:  # on a `Watched` executor: Ctrl-C, SystemExit, a test runner's timeout
        raise e.error from None


def run_one(clause: SearchClause, executor: Executor, config: LoaderConfig, plan: Any) -> ExampleRun | None:
    runs = executor.run(clause, config, plan)
    failed = judge_runs(clause, runs, config, plan)
    if failed is not None and failed.outcome is not None:
        failed.outcome.config = config.as_code()
        failed.outcome.plan = repr(plan) if plan is not None else ""
    return failed


def _verdict(failed: ExampleRun | None, examples: int, found_after: int | None) -> Outcome:
    if failed is None or failed.outcome is None:
        return Outcome("passed", examples=examples)
    return dataclasses.replace(failed.outcome, reproduction=failed.reproduction, examples=examples,
                               found_after=found_after)


# The worker configurations of a check: one pool, shared by every clause's worker examples. A worker
# example costs its worker processes (0.1 to 0.3 s per epoch on 2 cores), and its uninterrupted run is taken
# once per configuration and check: drawn freely, configurations almost never repeat across clauses. The
# pool holds where worker bugs show: both worker counts, persistent workers and not, and epochs of an odd
# number of batches (`plans.draw_position` asks for those half the time).
#: Configurations in the pool at least (a search of n worker examples per clause has 2n): each meets many clauses.
POOL_SIZE = 24
#: Batches per epoch of a pool configuration, at most.
MAX_BATCHES = 6
#: The pool of a derandomized run (ci) is always this one.
DERANDOMIZED = 0


def _batches(size: int, batch: int, drop_last: bool) -> int:
    return size // batch if drop_last else -(-size // batch)


@functools.lru_cache(maxsize=8)
def worker_pool(space: ConfigSpace, size: int = POOL_SIZE, seed: int = DERANDOMIZED) -> tuple[LoaderConfig, ...]:
    """``size`` configurations with workers from ``space``, simplest first (Hypothesis shrinks towards the
    first), the same for the same arguments."""
    counts = sorted(n for n in space.num_workers if n > 0)
    if not counts:
        return ()
    rng = random.Random(seed)
    pool = []
    for i in range(size):
        workers = counts[i % len(counts)]
        batch = rng.randint(*space.batch_size)
        drop_last = rng.random() < 0.3
        # At most `MAX_BATCHES` batches an epoch: every batch crosses a process boundary, and an
        # example iterates up to ten epochs; worker-count offsets show in short epochs as well.
        # An endless loader over an epoch of no batch spins without yielding: its pool has none.
        sizes = [n for n in range(space.dataset_size[0], space.dataset_size[1] + 1)
                 if (0 if space.endless else -1) < _batches(n, batch, drop_last) <= MAX_BATCHES] \
            or [space.dataset_size[0] if not space.endless else max(space.dataset_size[0], batch)]
        # Half the pool: epochs of an odd number (3 or more) of batches, no worker count over 1 divides.
        odd = [n for n in sizes if _batches(n, batch, drop_last) % 2 == 1 and _batches(n, batch, drop_last) >= 3]
        dataset_size = rng.choice(odd if i % 4 < 2 and odd else sizes)
        pool.append(LoaderConfig(
            # Every worker count meets every combination of persistent workers and shuffling.
            dataset_size=dataset_size, batch_size=batch, shuffle=(i // (2 * len(counts))) % 2 == 1,
            generator=rng.choice(["default", "explicit"]), seed=rng.randint(0, 2**16), drop_last=drop_last,
            num_workers=workers, persistent_workers=(i // len(counts)) % 2 == 1,
            grad_acc_step=rng.randint(*space.grad_acc_step), endless=space.endless))
    return tuple(sorted(pool, key=lambda c: (c.num_workers, c.persistent_workers, c.dataset_size, c.batch_size,
                                             c.grad_acc_step, c.shuffle, c.drop_last, c.generator, c.seed)))


def worker_configs(space: ConfigSpace, examples: int, seed: int | None) -> st.SearchStrategy[LoaderConfig]:
    """The strategy the worker examples of a check draw from: its pool (empty without workers)."""
    pool = worker_pool(space, max(POOL_SIZE, 2 * examples), DERANDOMIZED if seed is None else seed)
    return st.sampled_from(pool) if pool else st.nothing()
