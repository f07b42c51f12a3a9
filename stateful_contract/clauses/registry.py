"""The clause registry: every clause is one decorated function (`clause`), and everything else reads it.

The tiers (`TIERS`), the default selection, the run order, the order of parallel jobs, the load
probe and the skip and "not judged" texts all derive from the registered `Clause` objects; nothing
about a clause is kept anywhere else (docs/contributing.md adds one). IDs are public names that
downstream reports, badges and expected-failure lists refer to: never renumber, only add.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from graphlib import TopologicalSorter
from typing import Any, TypeVar

from ..config import LoaderConfig
from ..repro.epoch_steps import DEFAULT_HOOK
from ..repro.impact import Impact
from ..repro.outcome import ClauseViolation
from ..search.loop import Budget
from ..search.plans import Alignment, SavePoints, epoch_ends_only
from ..spellings import Hint
from ..terms import (  # re-exported: the facts a report is read with
    CONTRACT_VERSION,
    NOT_JUDGED_ON_ENDLESS,
    NOT_ON_ENDLESS,
    TIERS,
    Tier,
)

__all__ = ["CONTRACT_VERSION", "LOAD", "RESUMES", "TIERS", "Clause", "all_clauses", "clause",
           "default_selection", "load_blocks", "load_prober", "lookup", "run_order", "violated"]

#: A prerequisite that is no clause: ``load_state_dict`` accepts a state in some form.
LOAD = "load"
#: What every resume clause needs: the protocol, a usable load, and one stream to compare with.
RESUMES = ("SC01", LOAD, "SC18")

F = TypeVar("F", bound=Callable[..., Any])
PlanDrawer = Callable[[Any, list[int], LoaderConfig, SavePoints], Any]
#: Raises the clause's violation, or returns None, or why it judged nothing on this example (it held).
WorldJudgement = Callable[[Sequence[Any], LoaderConfig, Any], str | None]
#: A clause's explicit examples over a space: each a config and how its plan follows from the
#: uninterrupted run's epoch lengths (and where the trainer saves).
ExplicitExamples = Callable[[Any], Sequence[tuple[LoaderConfig, Callable[[list[int], SavePoints], Any]]]]


@dataclass(frozen=True)
class Clause:
    """One clause of the contract: what it says, how it is searched, what it needs."""

    id: str
    name: str
    tier: Tier
    statement: str
    scenario: Callable[..., Any] = field(compare=False, repr=False)
    #: How many examples it gets (`stateful_contract.search.loop.Budget`).
    budget: Budget = "search"
    #: Draws the example's plan from the uninterrupted run's epoch lengths (None: no plan).
    plan: PlanDrawer | None = field(default=None, compare=False, repr=False)
    #: Clause IDs (and `LOAD`) that must hold before this one can be judged.
    needs: tuple[str, ...] = ()
    #: The config of a ``budget="once"`` clause.
    fixed_config: LoaderConfig | None = None
    #: What a failure of this clause means for the clauses that need it.
    blocks: str = ""
    #: Judges what every rank's scenario returned, together (multi-rank clauses).
    world: WorldJudgement | None = field(default=None, compare=False, repr=False)
    #: A second scenario and its judgement, run on every example once the search passed, in fresh
    #: processes: a state may be good only inside the process that took it.
    after_restart: tuple[Callable[..., Any], WorldJudgement | None] | None = field(
        default=None, compare=False, repr=False)
    #: The world sizes of ``after_restart``'s fresh processes, given the check's (SC31); None: its own.
    restart_worlds: Callable[[int], tuple[int | None, ...]] | None = field(default=None, compare=False, repr=False)
    #: Relative time of its search (docs/performance.md): parallel jobs take the costliest first.
    cost: int = 0
    #: Museum pieces it fails (docs/museum.md; a test keeps the two equal): with ``cost``, its `priority`.
    kills: int = 0
    #: Its one example is the run's load probe (``load_state_dict(state)`` positionally): when
    #: the probe hung or crashed, that is its verdict, and it is judged whenever no form loads.
    probes_load: bool = False
    #: Examples run before the search, as Hypothesis' ``@example``s: what a small search rarely reaches.
    explicit: ExplicitExamples | None = field(default=None, compare=False, repr=False)
    #: What the user declared of their trainer that this clause's scenarios and judgements take as
    #: keywords (`CheckOptions` fields, e.g. ``fixed_global_batch``); bound once per check (`declared`).
    reads: tuple[str, ...] = ()
    #: A declaration (a `CheckOptions` field, or ``field=fact`` for one fact of a declared set such as
    #: ``trainer_shape=loads-fresh``) under which the clause does not apply, and why, in the words of its
    #: reason: e.g. ``("joins_uneven_inputs", "the trainer handles uneven inputs")``.
    waived_by: tuple[str, str] | None = None
    #: Why ``waived_by``'s declaration does not waive the clause on an endless stream ("" when it does), in
    #: words that follow "SC32 is judged though joins_uneven_inputs is declared: ".
    judged_on_endless: str = ""
    #: Why it does not apply to an endless stream (`LoaderConfig.endless`: a pass never ends, and the calls it
    #: judges are ones a trainer of such a stream never makes); "" when it applies there as well (docs/clauses.md,
    #: "Endless streams").
    not_on_endless: str = ""
    #: Why it is not judged on an endless stream though a trainer of one may meet what it judges (a gap in what
    #: the verdict covers, which every face shows); "" when it is judged there. ``endless_with``: a declaration
    #: (a `CheckOptions` field) under which it is judged there after all (SC31 under ``fixed_global_batch``).
    not_judged_on_endless: str = ""
    endless_with: str = ""
    #: Why every checkpoint of this clause is inside a pass ("" when it has others): under the epoch-end
    #: policy it does not apply (`excluded_by`).
    inside_a_pass: str = ""

    def excluded_by(self, alignment: Alignment) -> str | None:
        """Why this clause does not apply under the declared checkpoint policy (None: it does)."""
        if self.inside_a_pass and epoch_ends_only(alignment):
            return (f"does not apply under the declared checkpoint policy (checkpoints only at epoch ends): "
                    f"{self.inside_a_pass}, where such a trainer never saves")
        return None

    @property
    def priority(self) -> float:
        """How likely it is to fail a broken loader per unit of its cost: the run judges the
        highest first (after what it needs), so the first failure comes soon (exitfirst)."""
        return self.kills / (self.cost + 1)

    @property
    def heading(self) -> str:
        return f"{self.id} {self.name}: {self.statement}"

    @property
    def has_plan(self) -> bool:
        return self.plan is not None

    @property
    def skip_reason(self) -> str:
        return TIERS[self.tier].skip_text

    def explicit_examples(self, space: Any) -> Sequence[tuple[LoaderConfig, Callable[[list[int], SavePoints], Any]]]:
        return () if self.explicit is None else self.explicit(space)

    def draw_plan(self, data: Any, lengths: list[int], config: LoaderConfig, saves: SavePoints,
                  space: Any = None, epoch_hook: str = DEFAULT_HOOK) -> Any:
        assert self.plan is not None, "the search draws a plan only for a clause that has one (has_plan)"
        # A plan that reaches beyond the config (the space, the trainer's call at each epoch) names it.
        wanted = inspect.signature(self.plan).parameters
        extra = {name: value for name, value in (("space", space), ("epoch_hook", epoch_hook)) if name in wanted}
        return self.plan(data, lengths, config, saves, **extra)

    def restarted(self) -> Clause | None:
        """The clause as its fresh-process half runs (None when it has none)."""
        if self.after_restart is None:
            return None
        scenario, world = self.after_restart
        return replace(self, scenario=scenario, world=world, after_restart=None, restart_worlds=None)

    def fresh_worlds(self, world_size: int) -> tuple[int | None, ...]:
        """The world sizes the fresh-process half runs on (None: the check's own)."""
        return (None,) if self.restart_worlds is None else self.restart_worlds(world_size)

    def declared(self, facts: Mapping[str, Any]) -> Clause:
        """The clause with the declarations it `reads` (from ``facts``, the check's options) bound to its
        scenarios and judgements, each as the keywords it takes: the rank processes get them with it."""
        given = {name: facts[name] for name in self.reads}
        if not given:
            return self
        restart = self.after_restart
        return replace(self, scenario=_bound(self.scenario, given), world=_bound(self.world, given),
                       after_restart=None if restart is None else (_bound(restart[0], given),
                                                                   _bound(restart[1], given)))

    def waived(self, facts: Mapping[str, Any], *, endless: bool = False) -> str | None:
        """Why the clause does not apply to this check (a declaration says so), or None; on an ``endless``
        stream, None where the declaration does not reach it (`judged_on_endless`)."""
        if self.waived_by is None or not _declares(facts, self.waived_by[0]) or (endless and self.judged_on_endless):
            return None
        return f"does not apply: {self.waived_by[1]} (declared)"

    def unjudged_on_endless(self, facts: Mapping[str, Any]) -> str | None:
        """Why the clause is not judged on an endless stream, given the check's declarations (None: it is)."""
        if self.not_on_endless:
            return f"{NOT_ON_ENDLESS}: {self.not_on_endless}"
        if not self.not_judged_on_endless or (self.endless_with and _declares(facts, self.endless_with)):
            return None
        unless = f"; it is where {Hint(self.endless_with, True)} is declared" if self.endless_with else ""
        return f"{NOT_JUDGED_ON_ENDLESS}: {self.not_judged_on_endless}{unless}"

    def judge_world(self, values: Sequence[Any], config: LoaderConfig, plan: Any) -> str | None:
        """Raises the clause's violation; None where it held, or why it judged nothing on this example."""
        return None if self.world is None else self.world(values, config, plan)


_REGISTRY: dict[str, Clause] = {}


def _declares(facts: Mapping[str, Any], declaration: str) -> bool:
    """Whether ``facts`` (the check's declarations) hold ``declaration``: a field given (true), or with
    ``field=fact``, that fact among the field's."""
    name, _, fact = declaration.partition("=")
    value = facts.get(name)
    return bool(value) if not fact else fact in (value or ())


def _bound(fn: Any, given: Mapping[str, Any]) -> Any:
    """``fn`` with the keywords of ``given`` it takes (None stays None); a partial pickles by reference."""
    if fn is None:
        return None
    takes = inspect.signature(fn).parameters
    mine = {k: v for k, v in given.items() if k in takes}
    return functools.partial(fn, **mine) if mine else fn


def load_blocks(detail: str = "") -> str:
    """Why a clause cannot be judged when no form of ``load_state_dict`` takes a state."""
    return f"load_state_dict cannot be called with a state at all{f' ({detail})' if detail else ''}; see {load_prober().id}"


def clause(clause_id: str, name: str, *, tier: Tier, **facts: Any) -> Callable[[F], F]:
    """Register the decorated scenario as a clause: its docstring's first paragraph is the statement,
    ``facts`` are the other fields of `Clause` (``needs``, ``plan``, ``cost``, ...)."""

    def register(fn: F) -> F:
        doc = inspect.cleandoc(fn.__doc__ or "").split("\n\n", 1)[0]
        if not doc:
            raise ValueError(f"clause {clause_id} needs a docstring: its first paragraph is the statement")
        if clause_id in _REGISTRY:
            raise ValueError(f"clause {clause_id} is registered twice")
        _REGISTRY[clause_id] = Clause(clause_id, name, tier, " ".join(doc.split()), fn, **facts)
        return fn

    return register


def all_clauses() -> tuple[Clause, ...]:
    """Every registered clause, in ID order (the catalogue)."""
    return tuple(_REGISTRY[cid] for cid in sorted(_REGISTRY))


def default_selection(*, strict: bool = False, world_size: int = 1) -> list[Clause]:
    """The clauses a run judges when none is named: every clause of the tiers that apply."""
    return [c for c in all_clauses()
            if (TIERS[c.tier].default or strict) and world_size >= TIERS[c.tier].min_world_size]


def load_prober() -> Clause:
    """The clause whose example is the load probe (``probes_load``)."""
    return next(c for c in all_clauses() if c.probes_load)


def lookup(clause_id: str) -> Clause:
    """The clause with this ID (``SC10``) or name (``resume-continues-the-stream``); `KeyError` names the known IDs."""
    key = clause_id.strip()
    found = _REGISTRY.get(key.upper()) or next((c for c in _REGISTRY.values() if c.name == key.lower()), None)
    if found is None:
        raise KeyError(f"unknown clause {clause_id!r}; known: {', '.join(sorted(_REGISTRY))} (or their names: "
                       "stateful-contract clauses)")
    return found


def run_order(wanted: Iterable[str]) -> list[Clause]:
    """``wanted`` and everything they need, each after its prerequisites; of the clauses whose
    prerequisites have run, the load probe first (whether ``load_state_dict(state)`` works at all
    decides every clause that needs `LOAD`), then the highest `Clause.priority` (then by ID)."""
    graph: TopologicalSorter[str] = TopologicalSorter()
    pending = list(wanted)
    while pending:
        entry = lookup(pending.pop())
        needs = [need for need in entry.needs if need != LOAD]
        graph.add(entry.id, *needs)
        pending += needs
    graph.prepare()
    order: list[Clause] = []
    ready: list[Clause] = []
    while graph.is_active():
        ready += map(lookup, graph.get_ready())
        nxt = min(ready, key=lambda c: (not c.probes_load, -c.priority, c.id))
        ready.remove(nxt)
        order.append(nxt)
        graph.done(nxt.id)
    return order


def violated(clause_id: str, *, expected: str, got: str, context: str = "",
             impact: Impact | None = None) -> ClauseViolation:
    """A violation rendered the same way for every clause: the rule, the context, expected, got, and
    what it does to a training run (``impact``)."""
    entry = lookup(clause_id)
    return ClauseViolation(entry.id, heading=entry.heading, expected=expected, got=got, context=context,
                           impact=impact)
