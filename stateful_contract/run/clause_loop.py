"""One call of `check` put together: the clauses in order, each judged once (docs/architecture.md);
a clause whose prerequisite failed is not judged, saying which and why."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..clauses import Clause, clause, load_prober, run_order
from ..clauses.registry import LOAD, load_blocks
from ..config import LoaderConfig
from ..isolation.executors import StartFailed
from ..isolation.sibling import PendingSibling
from ..isolation.supervised import Supervised
from ..profiles import get_profile
from ..report.results import ClauseResult, Status
from ..repro.advice import collecting
from ..repro.guard import raise_lost_ctrl_c
from ..repro.outcome import Outcome, unjudged_by
from ..search.example import ExampleRun, LoadFormProbe, LoadProbe
from ..search.loop import Executor, Watched, replay_one, search
from ..search.plans import epoch_ends_only
from ..spellings import Hint
from .fresh import beside_their_worlds, fresh_worlds, in_fresh_processes, worlds_still_needed
from .options import CheckOptions
from .resumed import Resumed

__all__ = ["Progress"]


@dataclass(frozen=True)
class Progress:
    """What `check` is doing, for a face that shows it live: one event per example while a clause
    runs (``status`` None), and one when it ends, with its final status and time."""

    clause_id: str
    name: str
    done: int
    total: int
    status: Status | None = None
    seconds: float = 0.0


class _Run:
    def __init__(self, executor: Executor, options: CheckOptions, *, notes: list[str],
                 progress: Callable[[Progress], None] | None = None, seed: int | None = None,
                 replay: tuple[LoaderConfig, Any] | Resumed | None = None,
                 make_executor: Callable[[], Executor] | None = None, database_key: str | None = None) -> None:
        self.executor = executor
        self.options = options
        #: Processes the clauses no other clause needs are judged in (`stateful_contract.run.jobs`),
        #: each with an executor of its own from ``make_executor``.
        self.jobs = (options.jobs or 1) if make_executor is not None and replay is None else 1
        self.make_executor = make_executor
        self.selected = options.selected
        self.profile = get_profile(options.profile)
        self.progress = progress
        self.replay = replay
        self.notes = notes
        self.seed = seed
        self.database_key = database_key  # the loader's name in a random search's kept failures (search/saved.py)
        self.results: dict[str, ClauseResult] = {}
        self.load_probe: LoadProbe = "positional"
        self.load_detail = ""
        #: The load probe's run when ``load_state_dict`` itself hung or took its process down.
        self.load_failed: ExampleRun | None = None
        #: The clause being judged (named as interrupted if the run is stopped there).
        self.current: Clause | None = None
        #: The clause whose failure stopped the run (`CheckOptions.exitfirst`).
        self.stopped_at: str | None = None
        #: ``"declared"`` or ``"found"`` once the loader is checked as an endless stream (`Report.endless`).
        self.endless: str | None = None
        self.endless_seen = False
        if options.endless or options.space.endless:  # a space of endless configs declares it too
            self.as_endless("declared")
        elif isinstance(replay, tuple) and replay[0].endless:  # a recorded example of an endless stream
            self.as_endless("found")

    def as_endless(self, how: str) -> None:
        """Check the loader as an endless stream from now on: every config drawn says so."""
        self.endless = how
        self.options = self.options.replace(space=replace(self.options.space, endless=True))

    def emit(self, c: Clause, done: int, total: int, status: Status | None = None, seconds: float = 0.0) -> None:
        raise_lost_ctrl_c()  # after every example, as the waits for a child's answer do
        if self.progress is not None:
            self.progress(Progress(c.id, c.name, done, total, status, seconds))

    def blocked(self, c: Clause) -> Outcome | None:
        """``c``'s outcome when it cannot be judged, None when it can: something it needs does not hold (a gap, or
        what the clause it needs came to), the declared policy excludes it, or an endless stream leaves it out."""
        if self.endless is not None and (why := c.unjudged_on_endless(self.options.declarations)) is not None:
            # Either no trainer of an endless stream makes its calls, or one may and it was not judged.
            return Outcome("not-judged", detail=why, unjudged="endless-only" if c.not_on_endless else "endless")
        if (excluded := c.excluded_by(self.options.checkpoint_alignment)) is not None:
            return Outcome("not-judged", detail=excluded, unjudged="policy")
        for need in c.needs:
            if need == LOAD:
                if self.load_probe == "unusable":
                    return Outcome("not-judged", detail=load_blocks(self.load_detail), unjudged="prerequisite")
                continue
            if isinstance(self.replay, Resumed):  # judged by the save launch, before it saved the examples
                continue
            before = self.results[need]
            if before.status in ("failed", "expected-failure"):
                if ended := unjudged_by(before.expected, before.got, before.killed_by):
                    # Not what the clause states: what ended its example (a factory that raised, say).
                    why = f"{need} could not be judged: {ended}; see {need}"
                else:
                    why = f"{clause(need).blocks or f'{need} failed'}; see {need}"
                return Outcome("not-judged", detail=why, unjudged="prerequisite")
            if before.status == "not-judged":  # as the clause it needs: a waiver waives both, a gap leaves both
                return Outcome("not-judged", detail=before.message, unjudged=before.unjudged)
        return None

    def judge(self, c: Clause) -> Outcome:
        """``c``'s verdict. A clause whose uninterrupted run never ended its first pass is judged again, and
        the loader checked as an endless stream from then on (an undeclared endless loader: `as_endless`)."""
        self.endless_seen = False
        outcome = self.judge_once(c)
        # Not under the epoch-end policy: its trainer would never save, and the clause's failure says so.
        if self.endless_seen and self.endless is None and not epoch_ends_only(self.options.checkpoint_alignment):
            self.as_endless("found")
            blocked = self.blocked(c)
            outcome = blocked if blocked is not None else self.judge_once(c)
        return outcome

    def judge_once(self, c: Clause) -> Outcome:
        if c.probes_load and self.load_failed is not None:
            # The probe was this clause's example: running it again would hang or crash the same way.
            return self.outcome_of_run(c, self.load_failed)
        c = c.declared(self.options.declarations)  # what the user declared of their trainer, for its scenarios on every rank
        if isinstance(self.replay, Resumed):
            return self.resumed(c, self.replay)
        restarted = c.restarted()
        worlds = fresh_worlds(c, self.executor.world_size)
        # On one process the fresh half resumes in a sibling, a new interpreter if it can be: started once
        # the search's first examples held (`PendingSibling.held`), its imports overlap the rest of it.
        pending = (PendingSibling(self.executor) if isinstance(self.executor, Supervised)
                   and restarted is not None and worlds == (None,) else None)
        # What the clause's judgements advised, over every example, rank and fresh process: once each.
        with collecting() as advised:
            passed: list[tuple[LoaderConfig, Any]] = []
            if isinstance(self.replay, tuple) and c.budget != "once":
                # SC18 replays the config alone.
                config, plan = self.replay[0], self.replay[1] if c.has_plan else None
                if self.endless is not None and not config.endless:  # found endless on an earlier clause
                    config = replace(config, endless=True)
                watched = Watched(self.executor)
                failed = replay_one(c, watched, config, plan)
                self.endless_seen = watched.endless
                outcome = (Outcome("passed", examples=1) if failed is None or failed.outcome is None
                           else replace(failed.outcome, reproduction=failed.reproduction, examples=1))
                if outcome.status == "passed":
                    passed.append((config, plan))
            else:
                watched = Watched(self.executor)
                outcome = search(c, watched, space=self.options.space, profile=self.profile,
                                 saves=self.options.save_points, search_seed=self.seed,
                                 database_key=self.database_key, epoch_hook=self.options.epoch_hook,
                                 passed=passed, on_example=lambda done, total: self.on_example(c, done, total,
                                                                                               passed, pending))
                self.endless_seen = watched.endless
            if outcome.status == "passed" and restarted is not None and passed and worlds:
                if getattr(self.executor, "fresh_processes", True):
                    outcome = in_fresh_processes(self.executor, restarted, passed, outcome, worlds, pending)
                else:
                    # In a launcher's world, a later launch resumes them.
                    why = getattr(self.executor, "why_not_fresh",
                                  "the loader ran in the checker's process (isolation='in-process')")
                    outcome.notes.append(f"its {len(passed)} examples were not resumed again in a fresh "
                                         f"process: {why}")
        outcome.notes[:0] = [a for a in advised if a not in outcome.notes]
        return outcome

    def on_example(self, c: Clause, done: int, total: int, passed: list[tuple[LoaderConfig, Any]],
                   pending: PendingSibling | None) -> None:
        """Example ``done`` of ``total`` starts: the progress line, and the fresh half's sibling told when
        every example before it held (each that held is in ``passed``; a failure and its shrinking never are)."""
        self.emit(c, done, total)
        if pending is not None and len(passed) == done - 1:
            pending.held(done - 1, total)

    def resumed(self, c: Clause, saved: Resumed) -> Outcome:
        """``c``'s verdict on the examples an earlier launch saved: their fresh-process half alone."""
        worlds = saved.worlds(c, self.executor.world_size)
        if isinstance(worlds, str):
            return Outcome("not-judged", detail=worlds, unjudged="not-reached")  # another launch judges it
        restarted = c.restarted()
        assert restarted is not None
        examples = saved.examples[c.id]
        return in_fresh_processes(self.executor, restarted, examples, Outcome("passed", examples=len(examples)),
                                  worlds)

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
        prober = load_prober().id
        if self.load_probe == "unusable" and prober not in self.selected:
            # Otherwise every clause selected would be "not judged" and the run would pass.
            self.selected.append(prober)
            self.notes.append(f"{prober} was judged too: load_state_dict cannot take a state, which every clause "
                              "selected needs")

    def run(self) -> None:
        # Not when stopping at the first failure: a broken loader's first failure comes long before SC10.
        order = run_order(self.selected)
        try:
            self.executor.start()
        except StartFailed as e:  # the first loader could not even be built (a hang, a dead rank)
            for c in order:
                self.record(c, self.outcome_of_run(c, e.run), e.run.seconds)
            return
        self.probe()
        at = len(self.notes)
        self.judge_in_order()
        # Not when no clause needing a load was reached (stopped at the load's own failure, exitfirst).
        if self.load_probe == "keyword" and any(LOAD in clause(cid).needs for cid in self.results):
            note = (f"load_state_dict(state) rejects a positional state ({load_prober().id}); the other "
                    "clauses ran through load_state_dict(state_dict=state)")
            self.notes.insert(at, note)
            if (probed := self.results.get(load_prober().id)) is not None:
                probed.notes.append(note)

    def judge_in_order(self) -> None:
        """Each clause after what it needs; those nothing else needs in parallel jobs, with several."""
        order = run_order(self.selected)
        if isinstance(self.replay, Resumed):  # what they need was judged with them, by the save launch
            order = [c for c in order if c.id in self.selected]
        needed = {n for c in order for n in c.needs}
        # Searched clauses nothing else needs can be judged side by side, once what they need is.
        # A declaration says the clause does not apply: shown, not judged. One that does not reach an endless
        # stream (`Clause.judged_on_endless`) is decided when the clause is reached, once an earlier clause
        # may have found the stream endless.
        order = [c for c in order if (self.endless is None and c.judged_on_endless) or not self.waive(c)]
        if not self.options.exitfirst:  # there the likeliest failure first matters more than an idle world
            order = beside_their_worlds(order, self.executor.world_size)
        apart = [c for c in order if c.id not in needed and c.budget != "once"] if self.jobs > 1 else []
        apart = apart if len(apart) > 1 else []  # one clause: a job would only add its start-up
        for at, c in enumerate(order):
            if self.stopped_at is not None:
                return
            if c in apart or self.waive(c):
                continue
            blocked = self.blocked(c)
            started = time.perf_counter()
            if blocked is not None:
                outcome = blocked
            else:
                self.current = c
                self.emit(c, 0, 1)
                outcome = self.judge(c)
                self.current = None
            seconds = time.perf_counter() - started
            if c.probes_load and self.load_failed is not None:
                seconds += self.load_failed.seconds  # its example was the probe's
            self.record(c, outcome, seconds)
            # A world of another size, idle since a fresh-process half, lives only while a later clause may
            # still resume on it (each holds 1 to 3 ranks' memory, a torch import each).
            self.executor.keep_worlds(worlds_still_needed(order[at + 1:], self.executor.world_size))
        if apart and self.stopped_at is None:
            self.judge_apart(apart)

    def waive(self, c: Clause) -> bool:
        """Record ``c`` as not judged when a declaration waives it for this check (`Clause.waived`): the trainer
        never makes the calls it judges, so it neither failed nor passed. Say so when the declaration was given
        but the stream is endless, where it does not reach ``c``."""
        why = c.waived(self.options.declarations, endless=self.endless is not None)
        if why is None:
            if self.endless is not None and c.waived(self.options.declarations) is not None and c.waived_by:
                note = f"{c.id} is judged though {c.waived_by[0]} is declared: {c.judged_on_endless}"
                self.notes += [] if note in self.notes else [note]
            return False
        self.record(c, Outcome("not-judged", detail=why, unjudged="declared"), 0.0)
        self.notes.append(f"{c.id} {why}")
        return True

    def judge_apart(self, clauses: list[Clause]) -> None:
        """Judge ``clauses`` in parallel jobs (`stateful_contract.run.jobs`), each verdict as it comes."""
        from .jobs import judge_apart

        ready = []
        for c in clauses:
            if self.waive(c):
                continue
            blocked = self.blocked(c)
            if blocked is not None:
                self.record(c, blocked, 0.0)
            else:
                ready.append(c)
        if not ready:
            return
        load_form = self.executor.load_form
        assert self.make_executor is not None
        def judge(c: Clause, executor: Executor) -> Outcome:  # in the job: its own executor, no live progress
            executor.load_form = load_form
            self.executor, self.progress = executor, None
            return self.judge(c)

        speed = judge_apart(ready, self.jobs, judge=judge, executor=self.make_executor,
                            started=lambda c: self.emit(c, 0, 1), done=self.record,
                            stop=(lambda: self.stopped_at is not None) if self.options.exitfirst else None)
        self.notes.extend(n for n in speed.notes if n not in self.notes)
        self.notes.append(speed.describe())

    def outcome_of_run(self, c: Clause, failed: ExampleRun) -> Outcome:
        """``c``'s outcome from a run of the engine's own (building the first loader, the load probe)."""
        assert failed.outcome is not None
        # The run's own outcome under this clause's rule (its detail may say what the loader's process was
        # doing, and the Python stack of a crash).
        return replace(failed.outcome, heading=c.heading, world_size=self.executor.world_size,
                       reproduction=failed.reproduction, notes=list(failed.outcome.notes), examples=1)

    def record(self, c: Clause, outcome: Outcome, seconds: float) -> None:
        result = ClauseResult.of(c, outcome, seconds=round(seconds, 3))
        # A declaration holds for a clause run as a prerequisite too.
        if (reason := self.options.expected_failures.get(c.id)) is not None:
            result.declare_expected_failure(reason)
        self.results[c.id] = result
        if result.status == "unexpected-pass" and not self.told(c.id, result):  # else its own row says so
            self.notes.append(f"{c.id} ran because a selected clause needs it and passed, though declared an expected "
                              f"failure ({result.expected_failure_reason!r}): the declaration is stale "
                              f"({Hint('expected_failures', c.id, form='remove')})")
        # Only a failure the report tells stops the run: a prerequisite's stale declaration did, and the verdict
        # was NOT JUDGED, naming a clause the table did not show, where the run without -x judged on.
        if self.options.exitfirst and result.is_failure and self.told(c.id, result) and self.stopped_at is None:
            self.stopped_at = c.id
        # Also for a prerequisite run but not selected (SC18 before a resume clause): the
        # work shows, though the report lists it as skipped.
        self.emit(c, 1, 1, result.status, result.seconds)

    def not_run(self) -> list[str]:
        """The selected clauses left without a verdict because the check stopped at its first failure."""
        return [] if self.stopped_at is None else sorted(s for s in self.selected if s not in self.results)

    def told(self, clause_id: str, result: ClauseResult) -> bool:
        """Whether the report shows ``result``: a selected clause's, or a prerequisite's that failed, which is why
        the clauses selected were not judged (hiding it would let ``--clause SC10`` pass a loader whose every
        stream differs). A prerequisite that held is skipped, a stale declaration of it told in a note."""
        return clause_id in self.selected or result.status in ("failed", "expected-failure")

    def report(self, c: Clause, interrupted: bool = False) -> ClauseResult:
        result = self.results.get(c.id)
        if result is not None and c.id in self.selected:
            return result
        if result is not None and self.told(c.id, result):
            result.notes.append("judged because a selected clause needs it")
            return result
        if interrupted and c in run_order(self.selected):
            why = ("the check was interrupted while this clause ran" if c == self.current
                   else "the check was interrupted before this clause")
            return ClauseResult.of(c, Outcome("not-judged", detail=why, unjudged="not-reached"))
        if c.id in self.not_run():
            return ClauseResult.of(c, Outcome("not-judged", unjudged="not-reached", detail=(
                f"not run: the check stopped at the first failure, {self.stopped_at} ({Hint('exitfirst', True)})")))
        return ClauseResult.of(c, Outcome("skipped", detail=c.skip_reason))


