"""Which worlds a clause's fresh-process half resumes on, and the order that keeps an idle world short-lived."""

from __future__ import annotations

import pytest

from stateful_contract import LoaderConfig
from stateful_contract.clauses import CLAUSES, Clause, clause, default_selection, run_order
from stateful_contract.clauses.registry import LOAD
from stateful_contract.repro.outcome import Outcome
from stateful_contract.run.fresh import (
    beside_their_worlds,
    fresh_worlds,
    in_fresh_processes,
    worlds_still_needed,
)
from stateful_contract.search.example import ExampleRun


def _ids(order: list[Clause]) -> list[str]:
    return [c.id for c in order]


@pytest.mark.parametrize("world_size", [2, 4])
def test_sc32_is_judged_right_after_sc31_whose_world_of_one_more_rank_it_reuses(world_size: int) -> None:
    selected = [c.id for c in default_selection(world_size=world_size)]
    order = _ids(beside_their_worlds(run_order(selected), world_size))
    assert order[order.index("SC31") + 1] == "SC32", order
    assert worlds_still_needed([clause("SC32")], world_size) <= worlds_still_needed([clause("SC31")], world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_order_keeps_every_clause_after_what_it_needs_and_moves_nothing_on_one_rank(world_size: int) -> None:
    every = run_order([c.id for c in CLAUSES])
    order = beside_their_worlds(every, world_size)
    assert sorted(_ids(order)) == sorted(_ids(every))
    for at, c in enumerate(order):
        assert all(need == LOAD or need in _ids(order[:at]) for need in c.needs), (c.id, _ids(order))
    if world_size == 1:  # no fresh half resumes on another size: the priority order stands
        assert order == every
    else:  # SC41 needs SC18, judged later: it is not moved before it
        assert _ids(order).index("SC41") > _ids(order).index("SC18")


def test_sc10_resumes_in_a_fresh_process_on_one_rank_only() -> None:
    assert fresh_worlds(clause("SC10"), 1) == (None,)
    assert fresh_worlds(clause("SC10"), 2) == ()  # SC30 resumes there
    assert fresh_worlds(clause("SC01"), 2) == ()  # no fresh half at all
    assert fresh_worlds(clause("SC31"), 2) == (1, 3)


class _Judged:
    """A clause's fresh half as `in_fresh_processes` drives it: its world judgement says which examples it could
    not judge (SC31 on an endless stream with no epoch to cut it into, say)."""

    id, name = "SC31", "world-size-change-is-exact-or-refused"

    def __init__(self, unjudged: set[int]) -> None:
        self.unjudged = unjudged

    def judge_world(self, values: list[int], config: object, plan: object) -> str | None:
        return f"not judged on an endless stream: example {values[0]}" if values[0] in self.unjudged else None


class _Worlds:
    """An executor whose every example held on every rank, returning the example's number."""

    world_size = 2

    def restart(self, phase: str, world_size: int | None = None) -> None:
        pass

    def run(self, c: object, config: object, plan: int) -> list[ExampleRun]:
        return [ExampleRun(0, value=plan), ExampleRun(1, value=plan)]


@pytest.mark.parametrize(("unjudged", "status"), [({1, 2}, "not-judged"), ({1}, "passed"), (set(), "passed")])
def test_a_fresh_half_that_held_on_every_example_without_judging_one_is_not_judged(unjudged: set[int],
                                                                                     status: str) -> None:
    # A clause that judges only in its fresh half (SC31) and judged none of its examples there judged nothing:
    # "passed" with an advisory would be a pass that covers nothing.
    examples = [(LoaderConfig(dataset_size=n), n) for n in (1, 2)]
    got = in_fresh_processes(_Worlds(), _Judged(unjudged), examples, Outcome("passed"),  # type: ignore[arg-type]
                             worlds=(1, 3))
    assert got.status == status, got
    if status == "not-judged":
        assert got.detail.startswith("not judged on an endless stream: example 1 (so were all 2 examples"), got.detail
