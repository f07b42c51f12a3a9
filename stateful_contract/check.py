"""`check`: run the contract against a loader factory and return a `Report`.

Order matters. The structure clauses (SC01-SC03) run first, on one fixed config,
without Hypothesis: when the loader lacks a method or rejects a positional state, the
report says so once. When only the keyword form ``load_state_dict(state_dict=...)``
works (the seed's wrapper), the resume clauses still run, through that form, so a
single run reveals every bug. SC18 (same config, same stream) is judged before the
resume clauses, which have nothing to compare with when it fails.
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from .clauses import structure
from .clauses.catalogue import CLAUSES, clause
from .clauses.violation import ClauseViolation
from .config import ConfigSpace, LoaderConfig
from .engine.guard import LoaderHung, current_children, deadline, reap_children
from .engine.plans import Alignment
from .engine.scenarios import SCENARIOS, Context, NotJudgeable
from .engine.steps import LoaderError, Position, checkpoint, fresh, load, state_of
from .profiles import Profile, get_profile, hypothesis_settings
from .report import ClauseResult, Report
from .target import TargetError, describe_factory, import_line, load_target

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


def _reproduction(ctx: Context) -> str:
    return "\n".join(ctx.reproduction)


def _loader_error(e: LoaderError) -> str:
    tb = "".join(traceback.format_exception(type(e.error), e.error, e.error.__traceback__))
    return f"{e}\n\nTraceback of the loader's exception:\n{tb.rstrip()}"


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

    # SC03: the state at every kind of point.
    points = [Position(before_iter=True), Position(0, 1), Position(0, 4), Position(0, 4, after_stop=True)]
    out["SC03"] = _Outcome("passed")
    for pos in points:
        ctx.record(config, f"state = checkpoint(fresh(factory, config), {pos.as_code()})",
                   "assert type(state) is dict and all(isinstance(k, str) for k in state)")
        try:
            structure.state_is_a_str_keyed_dict(checkpoint(fresh(ctx.factory, config), pos), pos.describe())
        except ClauseViolation as v:
            out["SC03"] = _Outcome("failed", v.message, _reproduction(ctx))
            break
        except LoaderError as e:
            out["SC03"] = _Outcome("failed", f"SC03 state-is-a-str-keyed-dict: {_loader_error(e)}",
                                   _reproduction(ctx))
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
    for workers, budget in phases:
        strategy = space.configs(workers=workers)
        if strategy.is_empty or budget == 0:
            continue
        settings = hypothesis_settings(profile, workers=workers)
        settings = type(settings)(settings, max_examples=budget)

        @settings
        @given(config=strategy, data=st.data())
        def example(config: LoaderConfig, data: st.DataObject) -> None:
            nonlocal examples
            examples += 1
            report_progress(min(examples, total), total)
            with deadline(timeout):
                scenario(ctx, config, data)

        try:
            example()
        except ClauseViolation as v:
            return _Outcome("failed", v.message, _reproduction(ctx), examples)
        except NotJudgeable as e:
            return _Outcome("not-judged", str(e), _reproduction(ctx), examples)
        except LoaderHung as h:
            return _Outcome("failed", f"{clause_id} {clause(clause_id).name}: the loader hung: {h} "
                            "(per-example timeout; the run went on with the next clause)",
                            _reproduction(ctx), examples)
        except LoaderError as e:
            return _Outcome("failed", f"{clause_id} {clause(clause_id).name}: {_loader_error(e)}",
                            _reproduction(ctx), examples)
        except Exception as e:  # Hypothesis' own verdicts, e.g. a flaky loader
            return _Outcome("failed", f"{clause_id} {clause(clause_id).name}: {type(e).__name__}: {e}",
                            _reproduction(ctx), examples)
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
        return "window boundaries (every grad_acc_step batches)"
    return f"every {alignment} batches"


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
    if isinstance(factory, str):
        target = target or factory
        factory = load_target(factory)
    target = target or describe_factory(factory)
    if world_size > 1:
        from .distributed import check_world

        return check_world(target, world_size=world_size, profile=profile, clauses=clauses,
                           expected_failures=expected_failures, checkpoint_alignment=checkpoint_alignment,
                           timeout=timeout)
    prof = get_profile(profile)
    space = space or ConfigSpace()
    timeout = prof.timeout if timeout is None else timeout
    expected = {k.upper(): v for k, v in (expected_failures or {}).items()}
    known = {c.id for c in CLAUSES}
    notes = []
    for unknown in sorted(set(expected) - known):
        warnings.warn(f"expected failure {unknown!r} names no clause", stacklevel=2)
        notes.append(f"expected failure {unknown!r} names no clause")
    selected = _selected(clauses, strict, world_size)
    ctx = Context(factory=factory, alignment=checkpoint_alignment, factory_import=import_line(target))
    children = current_children()

    outcomes: dict[str, _Outcome] = {}
    seconds: dict[str, float] = {}

    def emit(cid: str, done: int, total: int, status: str | None = None, took: float = 0.0) -> None:
        if progress is not None:
            progress(Progress(cid, clause(cid).name, done, total, status, took))

    started = time.perf_counter()
    try:
        for cid in ("SC01", "SC02", "SC03"):
            emit(cid, 0, 1)
        structural = _structure(ctx, STRUCTURE_CONFIG)
    finally:
        reap_children(children)
    took = time.perf_counter() - started
    for cid, outcome in structural.items():
        outcomes[cid] = outcome
        seconds[cid] = took / len(structural)
    if "SC01" in outcomes and outcomes["SC01"].status == "failed":
        for c in CLAUSES:
            outcomes.setdefault(c.id, _Outcome("not-judged", "the loader lacks the protocol's methods; see SC01"))
    if ctx.load_form == "keyword":
        notes.append("load_state_dict(state) rejects a positional state (SC02); the other clauses ran "
                     "through load_state_dict(state_dict=state)")
        outcomes["SC02"].notes.append(notes[-1])

    wanted = [c for c in RESUME_ORDER + ("SC40",) if c in selected or (c == "SC18" and set(selected) & NEEDS_LOAD)]
    for cid in wanted:
        if cid in outcomes:
            continue
        if cid in NEEDS_LOAD and ctx.load_form not in ("positional", "keyword"):
            outcomes[cid] = _Outcome("not-judged", "load_state_dict cannot be called with a state at all; see SC02")
            continue
        if cid in NEEDS_LOAD and cid != "SC40" and outcomes.get("SC18", _Outcome("passed")).status == "failed":
            outcomes[cid] = _Outcome("not-judged", "two fresh loaders from one config differ, so there is no "
                                     "uninterrupted run to compare a resume with; see SC18")
            continue
        t0 = time.perf_counter()
        try:
            outcomes[cid] = _hypothesis_clause(
                cid, ctx, space, prof, timeout, lambda done, total, cid=cid: emit(cid, done, total))
        finally:
            reap_children(children)
        seconds[cid] = time.perf_counter() - t0

    results = []
    for c in CLAUSES:
        outcome = outcomes.get(c.id)
        if c.id not in selected or outcome is None:
            why = ("strict tier: run with strict=True / --strict" if c.tier == "strict" else
                   "multi-rank: run with world_size > 1 / --world-size" if c.tier == "distributed" else
                   "not selected")
            results.append(ClauseResult(c.id, c.name, c.tier, "skipped", why))
            continue
        result = ClauseResult(c.id, c.name, c.tier, outcome.status, outcome.message,  # type: ignore[arg-type]
                              outcome.reproduction if outcome.status == "failed" else "",
                              round(seconds.get(c.id, 0.0), 3), outcome.examples, notes=outcome.notes)
        if c.id in expected:
            result.expected_failure_reason = expected[c.id]
            if result.status == "failed":
                result.status = "expected-failure"
            elif result.status == "passed":
                result.status = "unexpected-pass"
                result.message = (f"{c.id} was declared an expected failure ({expected[c.id]!r}) but "
                                  "passed: remove it from the expected failures")
        emit(c.id, 1, 1, result.status, result.seconds)
        results.append(result)
    return Report(target=target, results=results, profile=prof.name, strict=strict or "SC40" in selected,
                  world_size=world_size, checkpoint_alignment=_alignment_text(checkpoint_alignment), notes=notes)
