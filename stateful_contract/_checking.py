"""`check`: run the contract against a loader factory and return a `Report`.

The one place a run is put together: it chooses the executor (this process for one
rank, torch.distributed ranks for several), runs each selected clause after the
clauses it needs (a clause whose prerequisite failed is reported as not judged,
saying which and why), applies the declared expected failures, and assembles the
report. When only the keyword form ``load_state_dict(state_dict=...)`` works (the
MindSpeed-MM wrapper's bug), the clauses still run through that form, so a single run
reveals every bug.
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._engine.example import ExampleRun, LoadFormProbe, LoadProbe
from ._engine.executors import Executor, FactoryProblem, InProcess, StartFailed
from ._engine.guard import quick_worker_shutdown, sigint_ignored
from ._engine.outcome import ClauseViolation, Outcome
from ._engine.plans import Alignment
from ._engine.search import judge_runs, replay_one, search
from ._engine.supervised import DEFAULT_MEMORY_LIMIT, Isolation, Supervised, choose_isolation
from ._storage import no_hypothesis_files
from ._target import describe_factory, factory_import_line, import_line, load_target
from .clauses import CLAUSES, Clause, clause, run_order
from .clauses.registry import LOAD, load_blocks
from .config import ConfigSpace, LoaderConfig
from .profiles import get_profile
from .report import ClauseResult, Report, Status

__all__ = ["DEFAULT_MEMORY_LIMIT", "CheckInterrupted", "FactoryError", "Isolation", "Progress", "check"]

class FactoryError(Exception):
    """The factory cannot build a loader at all (raises, returns a non-iterable, or returns one object twice)."""


class CheckInterrupted(KeyboardInterrupt):
    """The check was stopped (Ctrl-C); ``report`` is what it had judged by then, marked interrupted."""

    def __init__(self, report: Report) -> None:
        super().__init__("the check was interrupted")
        self.report = report


@dataclass(frozen=True)
class Progress:
    """What `check` is doing, for a face that shows it live.

    One event per example while a clause runs (``status`` None), and one when it ends,
    with its final status and time.
    """

    clause_id: str
    name: str
    done: int
    total: int
    status: Status | None = None
    seconds: float = 0.0


def _alignment_text(alignment: Alignment) -> str | None:
    if alignment is None:
        return None
    return "window" if alignment == "window" else str(int(alignment))


def selected_clauses(clauses: Iterable[str] | None, strict: bool, world_size: int) -> list[str]:
    """The clause IDs a run judges: the named ones, or every clause of the tiers that apply."""
    if clauses is None:
        tiers = {"structure", "core", "trainer"} | ({"strict"} if strict else set()) | (
            {"distributed"} if world_size > 1 else set())
        return [c.id for c in CLAUSES if c.tier in tiers]
    return [clause(c).id for c in clauses]


def _simplicity(config: LoaderConfig, plan: Any) -> tuple[Any, ...]:
    """Orders examples simplest first: no workers, few samples, small batches, an early checkpoint."""
    position = getattr(plan, "position", None)
    where = (position.epoch, position.batches) if position is not None else (0, 0)
    return (config.num_workers, config.dataset_size, config.batch_size, config.grad_acc_step, config.shuffle,
            config.drop_last, *where)


@contextlib.contextmanager
def _engine_quiet() -> Iterator[None]:
    """The process-wide settings a run needs, restored afterwards."""
    # Everything alive now (torch, Hypothesis, the user's modules) is left out of the
    # collections the engine runs before each worker loader: a full collection then
    # costs milliseconds instead of ~0.3 s.
    gc.freeze()
    try:
        # Hypothesis would write .hypothesis/constants/ into the user's directory.
        with no_hypothesis_files(), quick_worker_shutdown(), warnings.catch_warnings():
            # torchdata 0.11 calls torch.set_vital on every loader, which torch 2.13
            # deprecates: noise about the base loader, not the loader under test.
            warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
            yield
    finally:
        gc.unfreeze()


class _Run:
    """One call of `check`: the clauses in order, each judged once."""

    def __init__(self, executor: Executor, *, selected: list[str], expected: dict[str, str], profile: str,
                 space: ConfigSpace, alignment: Alignment, progress: Callable[[Progress], None] | None,
                 replay: tuple[LoaderConfig, Any] | None, notes: list[str], seed: int | None = None) -> None:
        self.executor = executor
        self.selected = selected
        self.expected = expected
        self.profile = get_profile(profile)
        self.space = space
        self.alignment = alignment
        self.progress = progress
        self.replay = replay
        self.notes = notes
        self.seed = seed
        self.results: dict[str, ClauseResult] = {}
        self.load_probe: LoadProbe = "positional"
        self.load_detail = ""
        #: The load probe's run when ``load_state_dict`` itself hung or took its process down.
        self.load_failed: ExampleRun | None = None
        #: The clause being judged (named as interrupted if the run is stopped there).
        self.current: Clause | None = None

    def emit(self, c: Clause, done: int, total: int, status: Status | None = None, seconds: float = 0.0) -> None:
        if self.progress is not None:
            self.progress(Progress(c.id, c.name, done, total, status, seconds))

    def blocked(self, c: Clause) -> str | None:
        """Why ``c`` cannot be judged, when something it needs does not hold."""
        for need in c.needs:
            if need == LOAD:
                if self.load_probe == "unusable":
                    return load_blocks(self.load_detail)
                continue
            before = self.results[need]
            if before.status in ("failed", "expected-failure"):
                return f"{clause(need).blocks or f'{need} failed'}; see {need}"
            if before.status == "not-judged":
                return before.message
        return None

    def judge(self, c: Clause) -> Outcome:
        if c.id == "SC02" and self.load_failed is not None:
            # The probe was SC02's example: running it again would hang or crash the same way.
            return self.outcome_of_run(c, self.load_failed)
        if self.replay is not None and c.budget != "once":
            config, plan = self.replay[0], self.replay[1] if c.has_plan else None  # SC18: the config alone
            failed = replay_one(c, self.executor, config, plan)
            outcome = Outcome("passed", examples=1) if failed is None or failed.outcome is None else Outcome(
                **{**failed.outcome.__dict__, "reproduction": failed.reproduction, "examples": 1})
            passed = [(config, plan)] if outcome.status == "passed" else []
        else:
            passed = []
            outcome = search(c, self.executor, space=self.space, profile=self.profile, alignment=self.alignment,
                             on_example=lambda done, total: self.emit(c, done, total), passed=passed,
                             search_seed=self.seed)
        restarted = c.restarted()
        if outcome.status == "passed" and restarted is not None and passed:
            outcome = self.in_fresh_processes(restarted, passed, outcome, c.fresh_worlds(self.executor.world_size))
        return outcome

    def in_fresh_processes(self, c: Clause, examples: list[tuple[LoaderConfig, Any]], passed: Outcome,
                           worlds: tuple[int | None, ...] = (None,)) -> Outcome:
        """Rerun every example that held in a fresh set of processes (the state must mean the same there).

        ``worlds``: the numbers of ranks to resume on, one fresh set of processes each (None: the
        check's own; another number is an elastic restart, after which the check goes on with its own).
        Examples are judged simplest first, so a failure is reported on the smallest example that shows it.
        """
        examples = sorted(examples, key=lambda e: _simplicity(*e))
        try:
            for size in worlds:
                self.executor.restart("resume" if size is None else f"world{size}-", world_size=size)
                for config, plan in examples:
                    failed = judge_runs(c, self.executor.run(c, config, plan), config, plan)
                    if failed is not None and failed.outcome is not None:
                        o = failed.outcome
                        if size is None:
                            o.message += ("\n(The same example resumed exactly inside the processes that saved it: "
                                          "the state is only good in the process that took it.)")
                            o.reproduction = ("# Fails only when the resume runs in a fresh set of processes: the "
                                              "lines below pass in one process\n# (the state depends on the process "
                                              "that took it).\n" + failed.reproduction)
                        else:
                            o.reproduction = failed.reproduction
                        o.examples, o.config, o.plan = passed.examples, config.as_code(), repr(plan)
                        return o
        finally:
            if worlds != (None,):
                self.executor.restart("search", world_size=None)  # the check goes on with its own world
        where = ("a fresh set of processes" if worlds == (None,) else
                 " and ".join(f"{s} rank{'s' if s != 1 else ''}" for s in worlds if s is not None))
        passed.notes.append(f"{len(examples)} examples resumed again in {where}")
        return passed

    def probe(self) -> None:
        """Find the load form, if a clause to judge needs a state loaded."""
        if not any(LOAD in c.needs for c in run_order(self.selected)):
            return
        started = time.perf_counter()
        found: LoadFormProbe = self.executor.probe()
        if found.failed is not None:
            found.failed.seconds = time.perf_counter() - started
        self.load_probe, self.load_detail, self.load_failed = found.form, found.detail, found.failed
        if self.load_probe in ("positional", "keyword"):
            self.executor.load_form = self.load_probe
        if self.load_probe == "unusable" and "SC02" not in self.selected:
            # Otherwise every clause selected would be "not judged" and the run would pass.
            self.selected.append("SC02")
            self.notes.append("SC02 was judged too: load_state_dict cannot take a state, which every clause "
                              "selected needs")

    def run(self) -> None:
        try:
            self.executor.start()
        except StartFailed as e:
            self.fail_all(e.run)
            return
        self.probe()
        keyword_note = ""
        if self.load_probe == "keyword" and any(LOAD in clause(s).needs for s in self.selected):
            keyword_note = ("load_state_dict(state) rejects a positional state (SC02); the other clauses ran "
                            "through load_state_dict(state_dict=state)")
            self.notes.append(keyword_note)
        for c in run_order(self.selected):
            why = self.blocked(c)
            started = time.perf_counter()
            if why is not None:
                outcome = Outcome("not-judged", message=why)
            else:
                self.current = c
                self.emit(c, 0, 1)
                outcome = self.judge(c)
                self.current = None
            if c.id == "SC02" and keyword_note:
                outcome.notes.append(keyword_note)
            seconds = time.perf_counter() - started
            if c.id == "SC02" and self.load_failed is not None:
                seconds += self.load_failed.seconds  # its example was the probe's
            self.record(c, outcome, seconds)

    def outcome_of_run(self, c: Clause, failed: ExampleRun) -> Outcome:
        """``c``'s outcome from a run of the engine's own (building the first loader, the load probe)."""
        o = failed.outcome
        assert o is not None
        v = ClauseViolation(c.id, heading=c.heading, expected=o.expected, got=o.got, rank=o.rank,
                            world_size=self.executor.world_size)
        # The run's own message, headed by this clause: it may add what the loader's process was
        # doing and the Python stack of a crash.
        _, _, detail = o.message.partition("\n")
        message = v.message if not detail or o.got not in detail else f"{c.heading}\n{detail}"
        return Outcome.of_violation(v, message=message, reproduction=failed.reproduction, notes=list(o.notes),
                                    killed_by=o.killed_by, examples=1)

    def fail_all(self, failed: ExampleRun) -> None:
        """The first loader could not even be built (a hang, a dead rank): every clause fails with that."""
        for c in run_order(self.selected):
            self.record(c, self.outcome_of_run(c, failed), failed.seconds)

    def record(self, c: Clause, outcome: Outcome, seconds: float) -> None:
        result = ClauseResult.from_outcome(c, outcome, seconds=round(seconds, 3))
        if c.id in self.expected:  # a declaration holds for a clause run as a prerequisite too
            result.declare_expected_failure(self.expected[c.id])
        self.results[c.id] = result
        # Also for a prerequisite run but not selected (SC18 before a resume clause): the
        # work shows, though the report lists it as skipped.
        self.emit(c, 1, 1, result.status, result.seconds)

    def report(self, c: Clause, interrupted: bool = False) -> ClauseResult:
        result = self.results.get(c.id)
        if result is not None and c.id in self.selected:
            return result
        if result is not None and result.status in ("failed", "expected-failure"):
            # A prerequisite that failed is why the clauses selected were not judged: hiding it
            # would let the run pass (`--clause SC10` on a loader whose every stream differs).
            result.notes.append("judged because a selected clause needs it")
            return result
        if interrupted and c in run_order(self.selected):
            why = ("the check was interrupted while this clause ran" if c == self.current
                   else "the check was interrupted before this clause")
            return ClauseResult(c.id, c.name, c.tier, "not-judged", why)
        return ClauseResult(c.id, c.name, c.tier, "skipped", c.skip_reason)


def check(
    factory: Callable[[LoaderConfig], Any] | str,
    *,
    profile: str = "ci",
    clauses: Iterable[str] | None = None,
    expected_failures: Mapping[str, str] | None = None,
    checkpoint_alignment: Alignment = None,
    strict: bool = False,
    space: ConfigSpace | None = None,
    timeout: float | None = None,
    target: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    world_size: int = 1,
    factory_import: str | None = None,
    replay: tuple[LoaderConfig, Any] | None = None,
    run_dir: str | Path | None = None,
    run_timeout: float | None = None,
    seed: int | None = None,
    isolation: Isolation | None = None,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
) -> Report:
    """Run the StatefulLoader contract against ``factory`` and return one record per clause.

    ``factory(config)`` must return a fresh loader on each call; it may also be given
    as a ``"module:factory"`` / ``"path/file.py:factory"`` string (required for
    ``world_size > 1``: every rank imports it by name). ``expected_failures`` maps clause
    IDs to reasons: such a clause that fails is an expected failure, one that passes is
    reported as an unexpected pass (the list must stay current).
    ``checkpoint_alignment="window"`` (or an int) declares that the loader is exact only
    at window boundaries: checkpoints are then drawn only there, and the report says so.
    ``world_size=N`` runs every example on N ranks of torch.distributed (gloo) at once and
    adds the multi-rank clauses. ``factory_import`` is the line a reproduction uses to
    get the factory (the faces pass theirs); ``replay=(config, plan)`` runs that one
    example instead of searching. ``seed`` seeds the search (recorded; `Profile.draw_seed`).

    ``isolation="supervised"`` (the default where ``os.fork`` exists) runs the loader in a
    child process: a loader that kills its process (a segfault, ``os._exit``, the OOM
    killer), hangs where the ``timeout`` cannot interrupt it, or allocates more than
    ``memory_limit`` bytes during an example (default `DEFAULT_MEMORY_LIMIT`, 4 GiB; None:
    no limit) fails the clause it was running, and the check goes on in a fresh child.
    ``isolation="in-process"`` runs it in this process: a little faster, and what a
    debugger needs, but such a loader then takes the check down with it (and no memory
    limit applies). See docs/supervision.md.

    Raises `FactoryError` when the factory cannot build a loader at all, and
    `CheckInterrupted` (a `KeyboardInterrupt`, with the partial report) on Ctrl-C.
    """
    prof = get_profile(profile)
    spec = factory if isinstance(factory, str) else None
    if isinstance(factory, str):
        target = target or factory
        factory = load_target(factory)
        if factory_import is None:
            factory_import = import_line(spec or "") + (
                "().make_loader" if getattr(factory, "__name__", "") == "make_loader" else "")
    target = target or describe_factory(factory)
    factory_import = factory_import or factory_import_line(factory)
    expected = {k.upper(): v for k, v in (expected_failures or {}).items()}
    notes: list[str] = []
    for unknown in sorted(set(expected) - {c.id for c in CLAUSES}):
        warnings.warn(f"expected failure {unknown!r} names no clause", stacklevel=2)
        notes.append(f"expected failure {unknown!r} names no clause")
    selected = selected_clauses(clauses, strict, world_size)
    example_timeout = prof.timeout if timeout is None else timeout
    executor: Executor
    if world_size > 1:
        from ._engine.ranks import Ranks

        if spec is None:
            raise TypeError("a multi-rank check needs the factory as a 'module:factory' or "
                            "'path/file.py:factory' string: every rank process imports it by name")
        executor = Ranks(spec, world_size=world_size, factory_import=factory_import, alignment=checkpoint_alignment,
                         timeout=example_timeout, profile=prof, clauses=len(selected), run_dir=run_dir,
                         run_timeout=run_timeout, memory_limit=memory_limit)
    elif choose_isolation(isolation) == "supervised":
        executor = Supervised(factory, factory_import, checkpoint_alignment, example_timeout, memory_limit)
    else:
        executor = InProcess(factory, factory_import, checkpoint_alignment, example_timeout)
        notes.append("the loader ran in the checker's own process (isolation='in-process'): no memory limit, "
                     "and a crash or an uninterruptible hang would have ended the check")
    seed = seed if replay is not None else prof.draw_seed(seed)
    run = _Run(executor, selected=selected, expected=expected, profile=prof.name, space=space or ConfigSpace(),
               alignment=checkpoint_alignment, progress=progress, replay=replay, notes=notes, seed=seed)
    interrupted = False
    try:
        with _engine_quiet():
            try:
                run.run()
            except BaseException:
                with sigint_ignored():  # a second Ctrl-C must not leave the loader's processes behind
                    executor.close()
                raise
            executor.close()
    except FactoryProblem as e:
        raise FactoryError(str(e)) from None
    except KeyboardInterrupt:
        interrupted = True
    notes.extend(getattr(executor, "notes", []))
    if interrupted:
        current = f" during {run.current.id}" if run.current is not None else ""
        notes.append(f"interrupted{current}: the clauses not judged by then are reported as not judged")
    report = Report(target=target, results=[run.report(c, interrupted) for c in CLAUSES], profile=prof.name,
                    strict=strict or "SC40" in selected, world_size=world_size, seed=seed,
                    checkpoint_alignment=_alignment_text(checkpoint_alignment), notes=notes, interrupted=interrupted)
    if interrupted:
        raise CheckInterrupted(report)
    return report
