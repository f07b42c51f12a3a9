"""`check`: run the contract against a loader factory and return a `Report`.

Order matters. The structure clauses (SC01-SC03) run first, on one fixed config,
without Hypothesis: when the loader lacks a method or rejects a positional state, the
report says so once. When only the keyword form ``load_state_dict(state_dict=...)``
works (the seed's wrapper), the resume clauses still run, through that form, so a
single run reveals every bug. SC18 (same config, same stream) is judged before the
resume clauses, which have nothing to compare with when it fails.
"""

from __future__ import annotations

import functools
import gc
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ._storage import no_hypothesis_files
from .clauses import structure
from .clauses.catalogue import CLAUSES, Clause, clause
from .clauses.violation import ClauseViolation, violated
from .config import ConfigSpace, LoaderConfig
from .engine.guard import LoaderHung, current_children, deadline, quick_worker_shutdown, reap_children
from .engine.plans import Alignment
from .engine.scenarios import SCENARIOS, Context, NotJudgeable
from .engine.steps import LoaderError, Position, checkpoint, epoch_lengths, fresh, load, state_of
from .profiles import Profile, get_profile, hypothesis_settings
from .report import ClauseResult, Report, Status
from .target import describe_factory, import_line, load_target

__all__ = ["FactoryError", "Progress", "check"]

#: The config the structure clauses use: 4 batches per epoch (the last one short),
#: shuffled with an explicit generator, two windows of 2 batches.
STRUCTURE_CONFIG = LoaderConfig(dataset_size=7, batch_size=2, shuffle=True, generator="explicit",
                                seed=1, grad_acc_step=2)
#: Resume clauses, in the order they run; SC18 first since the others depend on it.
RESUME_ORDER = ("SC18", "SC10", "SC11", "SC12", "SC13", "SC14", "SC15", "SC16", "SC17")
NEEDS_LOAD = frozenset(RESUME_ORDER[1:]) | {"SC40"}
#: Examples of the strict tier: each feeds seven bad states, and a refusal does not
#: depend much on the config.
STRICT_EXAMPLES = 8


class FactoryError(Exception):
    """The factory cannot build a loader at all (raises, or returns a non-iterable)."""


@dataclass(frozen=True)
class Progress:
    """What `check` is doing, for a face that shows it live."""

    clause_id: str
    name: str
    done: int
    total: int
    status: str | None = None  # set once the clause is finished
    seconds: float = 0.0


@dataclass
class _Outcome:
    status: str
    message: str = ""
    reproduction: str = ""
    examples: int = 0
    notes: list[str] = field(default_factory=list)
    found_after: int | None = None


def _reproduction(ctx: Context) -> str:
    return "\n".join(ctx.reproduction)


def _loader_error(clause_id: str, e: LoaderError) -> str:
    """A loader's exception, in the same shape as a violation, with the loader's traceback."""
    tb = "".join(traceback.format_exception(type(e.error), e.error, e.error.__traceback__))
    return violated(clause_id, expected="every call the contract makes on the loader to succeed",
                    got=str(e)).message + f"\n\nTraceback of the loader's exception:\n{tb.rstrip()}"


def _structure(ctx: Context, config: LoaderConfig) -> dict[str, _Outcome]:
    """SC01-SC03; also decides whether the resume clauses load positionally or by keyword."""
    out: dict[str, _Outcome] = {}
    ctx.record(config, "loader = fresh(factory, config)")
    try:
        loader = fresh(ctx.factory, config)
    except LoaderError as e:
        raise FactoryError(f"the factory raised {type(e.error).__name__}: {e.error}") from e.error
    if not hasattr(loader, "__iter__"):
        raise FactoryError(f"the factory returned {type(loader).__name__} {loader!r:.80}, not a loader "
                           "(it is not iterable)")
    try:
        structure.implements_protocol(loader)
    except ClauseViolation as v:
        out["SC01"] = _Outcome("failed", v.message, _reproduction(ctx))
        return out
    out["SC01"] = _Outcome("passed")

    # SC02: a state to load, then the positional call on a fresh loader.
    ctx.record(config, "state = fresh(factory, config).state_dict()",
               "fresh(factory, config).load_state_dict(state)  # positionally, as trainers call it")
    try:
        state = state_of(fresh(ctx.factory, config))
    except LoaderError:
        state = {}
    target = fresh(ctx.factory, config)
    signature = structure.signature_text(target.load_state_dict)
    try:
        load(target, state, "positional")
        error: BaseException | None = None
    except LoaderError as e:
        error = e.error
    try:
        structure.load_accepts_positional_state(type(target).__name__, signature, error)
        out["SC02"] = _Outcome("passed")
    except ClauseViolation as v:
        out["SC02"] = _Outcome("failed", v.message, _reproduction(ctx))
        try:
            load(fresh(ctx.factory, config), state, "keyword")
        except LoaderError:
            ctx.load_form = "unusable"  # type: ignore[assignment]
        else:
            ctx.load_form = "keyword"

    # SC03: the state at every kind of point, from the epoch length this loader really has
    # (a factory may fix drop_last or its own batch size).
    out["SC03"] = _Outcome("passed")
    ctx.record(config, "lengths = epoch_lengths(fresh(factory, config), epochs=1)[1]")
    try:
        n = epoch_lengths(fresh(ctx.factory, config), 1)[1][0]
    except LoaderError as e:
        out["SC03"] = _Outcome("failed", _loader_error("SC03", e), _reproduction(ctx))
        return out
    points = [Position(before_iter=True), Position(0, min(1, n)), Position(0, n), Position(0, n, after_stop=True)]
    for pos in points:
        ctx.record(config, f"state = checkpoint(fresh(factory, config), {pos.as_code()})",
                   "assert type(state) is dict and all(isinstance(k, str) for k in state)")
        try:
            structure.state_is_a_str_keyed_dict(checkpoint(fresh(ctx.factory, config), pos), pos.describe())
        except ClauseViolation as v:
            out["SC03"] = _Outcome("failed", v.message, _reproduction(ctx))
            break
        except LoaderError as e:
            out["SC03"] = _Outcome("failed", _loader_error("SC03", e), _reproduction(ctx))
            break
    return out


def _hypothesis_clause(clause_id: str, ctx: Context, space: ConfigSpace, profile: Profile,
                       timeout: float, report_progress: Callable[[int, int], None]) -> _Outcome:
    """Search for a counterexample to one clause; the minimal one becomes the reproduction."""
    scenario = SCENARIOS[clause_id]
    strict_tier = clause_id == "SC40"
    phases = [(False, STRICT_EXAMPLES if strict_tier else profile.examples)]
    if not strict_tier:
        phases.append((True, profile.worker_examples))
    total = sum(n for _, n in phases)
    examples = 0
    found_after: int | None = None  # examples run when the first counterexample appeared
    for workers, budget in phases:
        strategy = space.configs(workers=workers)
        if strategy.is_empty or budget == 0:
            continue
        settings = hypothesis_settings(profile, workers=workers)
        settings = type(settings)(settings, max_examples=budget)

        @settings
        @given(config=strategy, data=st.data())
        def example(config: LoaderConfig, data: st.DataObject) -> None:
            nonlocal examples, found_after
            examples += 1
            report_progress(min(examples, total), total)
            try:
                with deadline(timeout):
                    scenario(ctx, config, data)
            except BaseException:
                found_after = found_after or examples
                raise

        try:
            example()
        except ClauseViolation as v:
            return _Outcome("failed", v.message, _reproduction(ctx), examples, found_after=found_after)
        except NotJudgeable as e:
            return _Outcome("not-judged", str(e), _reproduction(ctx), examples, found_after=found_after)
        except LoaderHung as h:
            got = f"the loader hung: {h}; the run went on with the next clause (--timeout sets the limit)"
            return _Outcome("failed", violated(clause_id, expected="each example to finish", got=got).message,
                            _reproduction(ctx), examples, found_after=found_after)
        except LoaderError as e:
            return _Outcome("failed", _loader_error(clause_id, e), _reproduction(ctx), examples, found_after=found_after)
        except Exception as e:  # Hypothesis' own verdicts, e.g. a flaky loader
            got = f"{type(e).__name__}: {e}"
            return _Outcome("failed", violated(clause_id, expected="a verdict that replays", got=got).message,
                            _reproduction(ctx), examples, found_after=found_after)
    return _Outcome("passed", examples=examples)


def _selected(clauses: Iterable[str] | None, strict: bool, world_size: int) -> list[str]:
    if clauses is None:
        tiers = {"structure", "core"} | ({"strict"} if strict else set()) | (
            {"distributed"} if world_size > 1 else set())
        return [c.id for c in CLAUSES if c.tier in tiers]
    return [clause(c).id for c in clauses]


def _alignment_text(alignment: Alignment) -> str | None:
    if alignment is None:
        return None
    if alignment == "window":
        return "window"
    return str(int(alignment))


@dataclass
class _Run:
    """One call of `check`: what to run, how hard, and what has been found so far."""

    ctx: Context
    selected: list[str]
    expected: dict[str, str]
    profile: Profile
    space: ConfigSpace
    timeout: float
    progress: Callable[[Progress], None] | None
    notes: list[str]
    children: set[int] = field(default_factory=current_children)
    outcomes: dict[str, _Outcome] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def emit(self, cid: str, done: int, total: int, status: str | None = None, took: float = 0.0) -> None:
        if self.progress is not None:
            self.progress(Progress(cid, clause(cid).name, done, total, status, took))

    def structure(self) -> None:
        for cid in ("SC01", "SC02", "SC03"):
            self.emit(cid, 0, 1)
        started = time.perf_counter()
        try:
            structural = _structure(self.ctx, STRUCTURE_CONFIG)
        finally:
            reap_children(self.children)
        took = time.perf_counter() - started
        for cid, outcome in structural.items():
            self.outcomes[cid] = outcome
            self.seconds[cid] = took / len(structural)
        if structural["SC01"].status == "failed":
            for c in CLAUSES:
                self.outcomes.setdefault(c.id, _Outcome("not-judged", "the loader lacks the protocol's methods; see SC01"))
        if self.ctx.load_form == "keyword" and set(self.selected) & NEEDS_LOAD:
            note = ("load_state_dict(state) rejects a positional state (SC02); the other clauses ran "
                    "through load_state_dict(state_dict=state)")
            self.notes.append(note)
            self.outcomes["SC02"].notes.append(note)

    def prerequisite_failure(self, cid: str) -> str | None:
        """Why ``cid`` cannot be judged, when a clause it depends on failed."""
        if cid in NEEDS_LOAD and self.ctx.load_form not in ("positional", "keyword"):
            return "load_state_dict cannot be called with a state at all; see SC02"
        sc18 = self.outcomes.get("SC18")
        if cid in NEEDS_LOAD and cid != "SC40" and sc18 is not None and sc18.status == "failed":
            return ("two fresh loaders from one config differ, so there is no uninterrupted run to "
                    "compare a resume with; see SC18")
        return None

    def searches(self) -> None:
        # SC18 runs whenever a resume clause does: they are not judgeable without it.
        wanted = [c for c in (*RESUME_ORDER, "SC40")
                  if c in self.selected or (c == "SC18" and set(self.selected) & NEEDS_LOAD)]
        for cid in wanted:
            if cid in self.outcomes:
                continue
            why = self.prerequisite_failure(cid)
            if why is not None:
                self.outcomes[cid] = _Outcome("not-judged", why)
                continue
            started = time.perf_counter()
            try:
                self.outcomes[cid] = _hypothesis_clause(
                    cid, self.ctx, self.space, self.profile, self.timeout,
                    functools.partial(self.emit, cid))
            finally:
                reap_children(self.children)
            self.seconds[cid] = time.perf_counter() - started

    def result(self, c: Clause) -> ClauseResult:
        outcome = self.outcomes.get(c.id)
        if c.id not in self.selected or outcome is None:
            why = ("strict tier: run with strict=True / --strict" if c.tier == "strict" else
                   "multi-rank: run with world_size > 1 / --world-size" if c.tier == "distributed" else
                   "not selected")
            return ClauseResult(c.id, c.name, c.tier, "skipped", why)
        status: Status = outcome.status  # type: ignore[assignment]
        result = ClauseResult(c.id, c.name, c.tier, status, outcome.message,
                              outcome.reproduction if status == "failed" else "",
                              round(self.seconds.get(c.id, 0.0), 3), outcome.examples, notes=outcome.notes,
                              found_after=outcome.found_after)
        if c.id in self.expected:
            result.declare_expected_failure(self.expected[c.id])
        self.emit(c.id, 1, 1, result.status, result.seconds)
        return result


@no_hypothesis_files()  # the whole call, the ranks of a multi-rank check included
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
) -> Report:
    """Run the StatefulLoader contract against ``factory`` and return one record per clause.

    ``factory(config)`` must return a fresh loader on each call; it may also be given
    as a ``"module:factory"`` / ``"path/file.py:factory"`` string. ``expected_failures``
    maps clause IDs to reasons: such a clause that fails is an expected failure, one
    that passes is reported as an unexpected pass (the list must stay current).
    ``checkpoint_alignment="window"`` (or an int) declares that the loader is exact only
    at window boundaries: checkpoints are then drawn only there, and the report says so.
    Raises `FactoryError` when the factory cannot build a loader at all.
    """
    spec = factory if isinstance(factory, str) else None
    if isinstance(factory, str):
        target = target or factory
        factory = load_target(factory)
    target = target or describe_factory(factory)
    if world_size > 1:
        from .distributed import check_world

        if spec is None:
            raise TypeError("a multi-rank check needs the factory as a 'module:factory' or "
                            "'path/file.py:factory' string: every rank process imports it by name")
        report = check_world(spec, world_size=world_size, profile=profile, clauses=clauses,
                             expected_failures=expected_failures, checkpoint_alignment=checkpoint_alignment,
                             strict=strict, space=space, timeout=timeout)
        report.target = target
        return report
    prof = get_profile(profile)
    expected = {k.upper(): v for k, v in (expected_failures or {}).items()}
    notes = []
    for unknown in sorted(set(expected) - {c.id for c in CLAUSES}):
        warnings.warn(f"expected failure {unknown!r} names no clause", stacklevel=2)
        notes.append(f"expected failure {unknown!r} names no clause")
    selected = _selected(clauses, strict, world_size)
    run = _Run(
        ctx=Context(factory=factory, alignment=checkpoint_alignment, factory_import=import_line(target)),
        selected=selected, expected=expected, profile=prof, space=space or ConfigSpace(),
        timeout=prof.timeout if timeout is None else timeout, progress=progress, notes=notes,
    )
    # Everything alive now (torch, Hypothesis, the user's modules) is left out of the
    # collections the engine runs before each worker loader: a full collection then
    # costs milliseconds instead of ~0.3 s.
    gc.freeze()
    try:
        with quick_worker_shutdown(), warnings.catch_warnings():
            # torchdata 0.11 calls torch.set_vital, deprecated in torch 2.13: noise about
            # the base loader, not the loader under test. Set here so that every face
            # (pytest resets filters per test) is quiet.
            warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
            run.structure()
            run.searches()
    finally:
        gc.unfreeze()
    return Report(target=target, results=[run.result(c) for c in CLAUSES], profile=prof.name,
                  strict=strict or "SC40" in selected, world_size=world_size,
                  checkpoint_alignment=_alignment_text(checkpoint_alignment), notes=notes)
